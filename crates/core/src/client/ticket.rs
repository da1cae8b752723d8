//! The one non-blocking face of the client: [`Client::start`] an [`Op`] and get a [`Ticket`];
//! [`Client::poll`] it (never blocks), [`Client::wait`] for it, take whichever ended first
//! ([`Client::poll_any`]), sleep until one has ([`Client::wait_any`]), or [`Client::cancel`] it.
//! Many logical clients on one thread (a data structure's operations stepped by a driver, the
//! paper's coroutines) so keep many operations in flight, and the memory node handles them in
//! one batch, instead of each waiting a round trip in turn.
//!
//! Invariants:
//! - A ticket names one operation until its outcome is taken (polled, waited, or taken by
//!   `poll_any`) or it is cancelled; then it is gone, and using it again is `InvalidArgument`,
//!   never a second outcome.
//! - A control operation is a call in the sans-IO core's table ([`super::core`]): it ends by
//!   its deadline (`rpc_timeout` after it was sent), with its reply, its error, `RpcTimeout`, or
//!   `ControlLost` if the session was lost meanwhile (its outcome unknown; never sent again).
//!   A grant that comes after it ended or was cancelled is handed back (revoked, and freed if
//!   it allocated). `Overloaded` is not an end: the request is sent again after a back-off.
//! - A posted extension ([`Op::Extend`]) is exactly once: never posted again; see `posted`.

use super::core::{Owner, Taken};
use super::driver::Client;
use super::error::ClientError;
use super::lease::micros;
use super::perm::Perm;
use super::posted::POSTED_TICKET;
use crate::proto::messages::{Access, Mode, Reply, Request};
use rnic::Provider;
use std::time::Duration;

/// An operation to start without waiting ([`Client::start`]).
#[derive(Debug)]
pub enum Op<'a> {
    /// A control request as it is; ends with the memory node's reply.
    Request(Request),
    /// `allocate(size, lease, mode)`; ends with the permission.
    Allocate {
        /// Bytes.
        size: u64,
        /// Lease asked for.
        lease: Duration,
        /// Shared or exclusive.
        mode: Mode,
    },
    /// `acquire(addr, size, lease, access, mode)`; ends with the permission. With `wait`, a
    /// conflicting holder is waited for as [`Client::acquire`] does; without, the acquire
    /// fails with `ConflictTimeout` at once and leaves the holders alone (the node refuses
    /// their extensions only while someone waits, §5.3): the way to test whether an exclusive
    /// object (a lock) is free without taking it from a live holder.
    Acquire {
        /// The object's buffer address.
        addr: u64,
        /// Bytes.
        size: u64,
        /// Lease asked for.
        lease: Duration,
        /// Read or read-write.
        access: Access,
        /// Shared or exclusive.
        mode: Mode,
        /// Wait for conflicting holders.
        wait: bool,
    },
    /// A CN-collaborated extension of the permission by `lease` (the one-sided CAS on its
    /// lifetime word, with the lease policy's slack), posted without waiting; ends with
    /// [`Done::Extended`].
    Extend {
        /// The permission.
        perm: &'a Perm,
        /// Lease to add.
        lease: Duration,
    },
}

/// What an operation ended with.
#[derive(Debug)]
pub enum Done {
    /// The reply to an [`Op::Request`].
    Reply(Reply),
    /// The permission an [`Op::Allocate`] or [`Op::Acquire`] was granted.
    Perm(Perm),
    /// A posted extension ran: `true` extended; `false` the lifetime had moved meanwhile (an
    /// RPC extension; the permission adopted it — extend again to go further).
    Extended(bool),
}

impl Done {
    /// The reply, if it is one.
    pub fn into_reply(self) -> Option<Reply> {
        match self {
            Done::Reply(r) => Some(r),
            _ => None,
        }
    }

    /// The permission, if it is one.
    pub fn into_perm(self) -> Option<Perm> {
        match self {
            Done::Perm(p) => Some(p),
            _ => None,
        }
    }
}

/// An operation started with [`Client::start`] (see the module docs). A plain id: the client
/// keeps the operation; a ticket it does not know is refused, never mistaken for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a started operation is polled to its end or cancelled"]
pub struct Ticket(u64);

impl Ticket {
    /// The ticket's id (e.g. to keep it in a structure's own state).
    pub fn id(self) -> u64 {
        self.0
    }

    /// The ticket with id `id`.
    pub fn from_id(id: u64) -> Ticket {
        Ticket(id)
    }

    fn is_posted(self) -> bool {
        self.0 & POSTED_TICKET != 0
    }
}

impl<P: Provider> Client<P> {
    /// Starts `op` without waiting for it, in a new session if this one was lost. A control
    /// operation whose shard has every receive slot owed an answer waits for a slot (it is
    /// sent when one frees, within its deadline).
    pub fn start(&mut self, op: Op<'_>) -> Result<Ticket, ClientError> {
        let (req, owner) = match op {
            Op::Extend { perm, lease } => return self.post_extend(perm, lease).map(Ticket),
            Op::Request(req) => (req, Owner::Reply),
            Op::Allocate { size, lease, mode } => (
                Request::Allocate {
                    size,
                    lease_us: micros(lease),
                    mode,
                },
                Owner::Grant {
                    access: Access::ReadWrite,
                    mode,
                    sent: self.clocks.lease.now(),
                },
            ),
            Op::Acquire {
                addr,
                size,
                lease,
                access,
                mode,
                wait,
            } => {
                let mut req = self.acquire_request(addr, size, lease, access, mode);
                if let Request::Acquire { wait_us, .. } = &mut req
                    && !wait
                {
                    *wait_us = 0u64;
                }
                let sent = self.clocks.lease.now();
                (req, Owner::Grant { access, mode, sent })
            }
        };
        self.ensure_session()?;
        let now = self.clocks.now();
        let mut g = self.node.lock();
        let id = g.core.start_for(self.user, req, owner, now)?;
        self.node.flush(&mut g)?;
        Ok(Ticket(id))
    }

    /// The outcome of `t` if it has ended (`Ok(None)` while it is in flight). Never blocks;
    /// once it returns an outcome (a `Done` or an error), the ticket is spent.
    pub fn poll(&mut self, t: Ticket) -> Result<Option<Done>, ClientError> {
        if t.is_posted() {
            return match self.poll_extend(t.0) {
                None => Ok(None),
                Some(r) => r.map(|b| Some(Done::Extended(b))),
            };
        }
        {
            let mut g = self.node.lock();
            if !g.core.is_known_by(self.user, t.0) {
                return Err(ClientError::InvalidArgument("no such ticket in flight"));
            }
            if !g.core.is_done(t.0) {
                self.node.turn(&mut g)?;
            }
        }
        self.take(t)
    }

    /// Takes `t`'s outcome if it ended (control operations only).
    fn take(&mut self, t: Ticket) -> Result<Option<Done>, ClientError> {
        let now = self.clocks.lease.now();
        let taken = self.node.lock().core.take(t.0, now);
        match taken {
            None => Ok(None),
            Some(Ok(Taken::Reply(r))) => Ok(Some(Done::Reply(r))),
            Some(Ok(Taken::Perm(p))) => Ok(Some(Done::Perm(self.track(p)))),
            Some(Err(e)) => Err(e),
        }
    }

    /// Waits for `t`'s outcome (sleeping, not spinning). A control operation ends by its
    /// deadline; a posted extension by the data path's dead-transport bound.
    pub fn wait(&mut self, t: Ticket) -> Result<Done, ClientError> {
        if t.is_posted() {
            let deadline = self
                .clocks
                .timer
                .now()
                .plus(super::batch_run::DEAD_TRANSPORT);
            loop {
                if let Some(done) = self.poll(t)? {
                    return Ok(done);
                }
                if self.clocks.timer.now() >= deadline {
                    // It may still execute: reported unknown, never posted again.
                    self.forget_extend(t.0);
                    return Err(ClientError::OutcomeUnknown(rnic::WcStatus::RetryExceeded));
                }
                self.wait_data_cq();
            }
        }
        {
            let mut g = self.node.lock();
            if !g.core.is_known_by(self.user, t.0) {
                return Err(ClientError::InvalidArgument("no such ticket in flight"));
            }
            self.node.drive(&mut g, |core| core.is_done(t.0), None)?;
        }
        self.take(t)?
            .ok_or(ClientError::ControlLost(rnic::WcStatus::WrFlushError))
    }

    /// Takes the outcome of an operation that ended, whichever ended first (control
    /// operations in the order they ended, then posted extensions), if any. Never blocks.
    pub fn poll_any(&mut self) -> Option<(Ticket, Result<Done, ClientError>)> {
        let ended = {
            let mut g = self.node.lock();
            if g.core.next_ended_by(self.user).is_none() {
                let _ = self.node.turn(&mut g);
            }
            g.core.next_ended_by(self.user)
        };
        if let Some(id) = ended {
            let t = Ticket(id);
            return match self.take(t) {
                Ok(Some(done)) => Some((t, Ok(done))),
                Ok(None) => None,
                Err(e) => Some((t, Err(e))),
            };
        }
        if self.posted.in_flight() == 0 {
            return None; // nothing posted: the data CQ has nothing for a ticket
        }
        self.poll_data_cq();
        self.sync_session();
        let id = self.posted.any_ended(self.data.number)?;
        let t = Ticket(id);
        match self.poll(t) {
            Ok(Some(done)) => Some((t, Ok(done))),
            Ok(None) => None,
            Err(e) => Some((t, Err(e))),
        }
    }

    /// Waits up to `max` (sleeping, not spinning) until some operation has ended; whether one
    /// has. Its outcome stays for [`Client::poll`] or [`Client::poll_any`]. `ControlLost` once the
    /// session is lost and nothing ended (the next control operation opens a new session).
    pub fn wait_any(&mut self, max: Duration) -> Result<bool, ClientError> {
        self.sync_session();
        let session = self.data.number;
        let user = self.user;
        if self.node.lock().core.has_ended_by(user) || self.posted.any_ended(session).is_some() {
            return Ok(true);
        }
        let until = self.clocks.timer.now().plus(max);
        if self.posted.in_flight() == 0 {
            let mut g = self.node.lock();
            if !g.session_lost() {
                self.node
                    .drive(&mut g, |core| core.has_ended_by(user), Some(until))?;
            }
            if g.core.has_ended_by(user) {
                return Ok(true);
            }
            if g.session_lost() {
                return Err(ClientError::ControlLost(rnic::WcStatus::WrFlushError));
            }
            return Ok(false);
        }
        // Posted extensions too: look at both paths in turn.
        loop {
            let ended = {
                let mut g = self.node.lock();
                self.node.turn(&mut g)?;
                g.core.has_ended_by(user)
            };
            self.poll_data_cq();
            if ended || self.posted.any_ended(session).is_some() {
                return Ok(true);
            }
            if self.clocks.timer.now() >= until {
                return Ok(false);
            }
            self.wait_data_cq();
        }
    }

    /// Gives up `t`: its outcome is never reported. A grant it brings later is handed back; a
    /// posted extension may still execute (its result slot frees when it completes).
    pub fn cancel(&mut self, t: Ticket) {
        if t.is_posted() {
            self.forget_extend(t.0);
        } else {
            let now = self.clocks.now();
            let mut g = self.node.lock();
            if g.core.is_known_by(self.user, t.0) {
                g.core.abandon(t.0, now);
                let _ = self.node.flush(&mut g);
            }
        }
    }

    /// Sleeps briefly on the data CQ (a posted extension's completion).
    fn wait_data_cq(&self) {
        self.node
            .data_cq
            .wait(self.user, Duration::from_micros(200));
    }
}
