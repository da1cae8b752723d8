//! `acquire` without waiting: [`Client::start_acquire`] sends the request and returns a
//! [`PendingAcquire`]; [`Client::poll_acquire`] turns its reply into a [`Perm`] once it is
//! here. Many logical clients on one thread (a data structure's operations stepped by a
//! driver) so keep several grants in flight, and the memory node handles them in one batch,
//! instead of each waiting a round trip in turn.
//!
//! Invariants:
//! - A reply that arrives while polling for another request is parked, never lost: the
//!   pending acquire it answers, or [`Client::poll_reply`], takes it later.
//! - A pending acquire ends exactly once: granted, refused (the error the blocking
//!   [`Client::acquire`] would report), timed out ([`ClientError::RpcTimeout`] after the
//!   configured RPC timeout; a grant that comes later is left to run out), or abandoned.
//!   `Overloaded` is not an end: the request is sent again, as the blocking call does.

use super::{Client, ClientError, Perm, micros, unexpected};
use crate::proto::messages::{Access, Mode, Reply, Request, Status};
use rnic::{Provider, Timestamp};
use std::time::Duration;

/// An `acquire` sent and not yet answered (see the module docs).
#[derive(Debug)]
#[must_use = "a pending acquire is polled to its end or abandoned"]
pub struct PendingAcquire {
    id: u64,
    req: Request,
    /// The client clock's time before the first send: the lease counts from here.
    sent: Timestamp,
    access: Access,
    mode: Mode,
}

impl PendingAcquire {
    /// The address asked for.
    pub fn addr(&self) -> u64 {
        match self.req {
            Request::Acquire { addr, .. } => addr,
            _ => 0,
        }
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
        let req = self.acquire_request(addr, size, lease, access, mode);
        let sent = self.clock.now();
        let id = self.submit(req)?;
        Ok(PendingAcquire {
            id,
            req,
            sent,
            access,
            mode,
        })
    }

    /// The permission `p` asked for, once its reply is here: `Ok(Some)`; `Ok(None)` while
    /// it is in flight. Never blocks. After `Ok(Some)` or an error, `p` is spent (polling it
    /// again reports `InvalidArgument`).
    pub fn poll_acquire(&mut self, p: &mut PendingAcquire) -> Result<Option<Perm>, ClientError> {
        if p.id == 0 {
            return Err(ClientError::InvalidArgument(
                "the acquire has ended already",
            ));
        }
        loop {
            if let Some(reply) = self.parked.remove(&p.id) {
                return self.answer(p, reply);
            }
            match self.poll_reply_unparked() {
                Ok(Some((id, reply))) => {
                    self.parked.insert(id, reply);
                }
                Ok(None) => break,
                Err(e) => {
                    p.id = 0;
                    return Err(e);
                }
            }
        }
        if self.clock.now().since(p.sent) > self.cfg.rpc_timeout {
            self.abandoned.insert(p.id);
            p.id = 0;
            return Err(ClientError::RpcTimeout);
        }
        Ok(None)
    }

    /// Waits up to `max` (sleeping, not spinning) for a reply to any pipelined request and
    /// keeps it for its poll ([`Client::poll_acquire`], [`Client::poll_reply`]); whether one
    /// is here.
    pub fn wait_for_reply(&mut self, max: Duration) -> Result<bool, ClientError> {
        if !self.parked.is_empty() {
            return Ok(true);
        }
        match self.wait_reply(max)? {
            Some((id, reply)) => {
                self.parked.insert(id, reply);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Gives up a pending acquire: its grant, if one comes, is never used and runs out.
    pub fn abandon_acquire(&mut self, p: PendingAcquire) {
        if p.id != 0 && self.parked.remove(&p.id).is_none() {
            self.abandoned.insert(p.id);
        }
    }

    fn answer(
        &mut self,
        p: &mut PendingAcquire,
        reply: Reply,
    ) -> Result<Option<Perm>, ClientError> {
        match reply {
            Reply::Granted(g) => {
                p.id = 0;
                Ok(Some(self.adopt(g, p.access, p.mode, p.sent)))
            }
            Reply::Failed(Status::Overloaded) => {
                // As the blocking call does: ask again (the lease still counts from the first
                // send, so it is never overestimated).
                self.stats.overloaded += 1;
                match self.submit(p.req) {
                    Ok(id) => {
                        p.id = id;
                        Ok(None)
                    }
                    Err(e) => {
                        p.id = 0;
                        Err(e)
                    }
                }
            }
            other => {
                p.id = 0;
                Err(unexpected(other))
            }
        }
    }
}
