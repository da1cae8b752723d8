//! `acquire` without waiting: [`Client::start_acquire`] sends the request and returns a
//! [`PendingAcquire`]; [`Client::poll_acquire`] turns its reply into a [`Perm`] once it is
//! here. Many logical clients on one thread (a data structure's operations stepped by a
//! driver) so keep several grants in flight, and the memory node handles them in one batch,
//! instead of each waiting a round trip in turn.
//!
//! Invariants:
//! - A pending acquire is a call in the core's table ([`super::core`]): its reply is filed
//!   there whoever polls, never lost, and never handed to [`Client::poll_reply`].
//! - A pending acquire ends exactly once: granted, refused (the error the blocking
//!   [`Client::acquire`] would report), timed out ([`ClientError::RpcTimeout`] after the
//!   configured RPC timeout; a grant that comes later is handed back), or abandoned (a grant
//!   that comes later is handed back). `Overloaded` is not an end: the request is sent again
//!   after a back-off, as the blocking call does.

use super::core::Owner;
use super::{Client, ClientError, Perm, micros};
use crate::proto::messages::{Access, Mode, Request};
use rnic::Provider;
use std::time::Duration;

/// An `acquire` sent and not yet answered (see the module docs).
#[derive(Debug)]
#[must_use = "a pending acquire is polled to its end or abandoned"]
pub struct PendingAcquire {
    id: u64,
    addr: u64,
}

impl PendingAcquire {
    /// The address asked for.
    pub fn addr(&self) -> u64 {
        self.addr
    }
}

impl<P: Provider> Client<P> {
    /// The `Acquire` request [`Client::acquire`] sends (its wait capped below the RPC
    /// timeout, so the memory node answers before the client gives up).
    pub(super) fn acquire_request(
        &self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Request {
        let wait_cap = micros(self.cfg.rpc_timeout * 3 / 4);
        Request::Acquire {
            addr,
            size,
            lease_us: micros(lease),
            access,
            mode,
            wait_us: micros(self.cfg.acquire_wait).min(wait_cap),
        }
    }

    /// Sends `acquire(addr, size, lease, access, mode)` without waiting for the grant
    /// ([`Client::poll_acquire`] takes it). `ControlBusy` if the shard has
    /// [`MAX_OUTSTANDING_RPCS`](super::MAX_OUTSTANDING_RPCS) requests unanswered already.
    pub fn start_acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<PendingAcquire, ClientError> {
        self.ensure_session()?;
        let req = self.acquire_request(addr, size, lease, access, mode);
        let now = self.clocks.now();
        let owner = Owner::Acquire {
            access,
            mode,
            sent: now.lease,
        };
        let id = self.core.start(req, owner, now)?;
        self.pump().flush()?;
        Ok(PendingAcquire { id, addr })
    }

    /// The permission `p` asked for, once its reply is here: `Ok(Some)`; `Ok(None)` while
    /// it is in flight. Never blocks. After `Ok(Some)` or an error, `p` is spent (polling it
    /// again reports `InvalidArgument`).
    pub fn poll_acquire(&mut self, p: &mut PendingAcquire) -> Result<Option<Perm>, ClientError> {
        if p.id == 0 || !self.core.is_known(p.id) {
            p.id = 0;
            return Err(ClientError::InvalidArgument(
                "the acquire has ended already",
            ));
        }
        if !self.core.is_done(p.id) {
            self.pump().turn()?;
        }
        let now = self.clocks.lease.now();
        match self.core.take_acquire(p.id, now) {
            Ok(None) => Ok(None),
            Ok(Some(perm)) => {
                p.id = 0;
                Ok(Some(self.track(perm)))
            }
            Err(e) => {
                p.id = 0;
                Err(e)
            }
        }
    }

    /// Waits up to `max` (sleeping, not spinning) for a reply to any pipelined request or
    /// pending acquire, and keeps it for its poll ([`Client::poll_acquire`],
    /// [`Client::poll_reply`]); whether one is here.
    pub fn wait_for_reply(&mut self, max: Duration) -> Result<bool, ClientError> {
        if self.core.has_news() {
            return Ok(true);
        }
        let until = self.clocks.timer.now().plus(max);
        self.pump().run(|core| core.has_news(), Some(until))?;
        if self.session_lost() {
            return Err(ClientError::ControlLost(rnic::WcStatus::WrFlushError));
        }
        Ok(self.core.has_news())
    }

    /// Gives up a pending acquire: its grant, if one comes, is handed back at once.
    pub fn abandon_acquire(&mut self, p: PendingAcquire) {
        if p.id != 0 {
            self.core.abandon(p.id);
        }
    }
}
