//! The control path's blocking calls ([`Client::rpc`]; pipelined ones are tickets, see
//! `ticket`), and a new session when the control connection is lost. The decisions are the sans-IO core's
//! ([`super::core`]); this is where the driver ([`super::pump`]) runs them.
//!
//! Invariants:
//! - A request goes out once, plus at most one retry under its own id (the memory node
//!   answers a retry with the original's reply). A request whose control QP failed while it
//!   was in flight reports [`ClientError::ControlLost`]: it may or may not have been carried
//!   out, and it is never sent again, in this session or the next.
//! - The first control operation after the session was lost (a control QP in ERR, an earlier
//!   `ControlLost`, a reconnection the node refused because it ended the session
//!   ([`ClientError::SessionEnded`]), or a memory node that no longer knows the client) opens
//!   a new session before it sends anything: once per operation, and a failure to reconnect
//!   is that operation's error (the next one tries again). A request the memory node refused as
//!   unauthenticated never ran, so it is sent once more in the new session, unless it names a
//!   permission: those ended with the old session ([`ClientError::SessionLost`]).
//! - Every RPC returns by its own deadline (`rpc_timeout` after its send; back-off after
//!   `Overloaded` ends by `rpc_timeout` after the call started).
//! - Operations in flight when the session is lost end with `ControlLost` (their outcome is
//!   unknown); nothing of the old session is sent again.

use super::core::{Owner, names_permission};
use super::driver::Client;
use super::error::ClientError;
use super::pump::Pump;
use super::session::Session;
use crate::proto::messages::{Reply, Request, Status};
use rnic::{Provider, WcStatus};

impl<P: Provider> Client<P> {
    /// The driver over the current session's channels.
    pub(super) fn pump(&mut self) -> Pump<'_, P> {
        Pump {
            core: &mut self.core,
            links: &mut self.session.ctrl,
            clocks: &self.clocks,
            channel: &self.endpoint.channel,
        }
    }

    /// Whether the session is lost: a control QP failed, or the memory node told the client it
    /// no longer knows it.
    pub(super) fn session_lost(&self) -> bool {
        self.core.is_lost() || self.session.is_broken()
    }

    /// Opens a new session if this one is lost; returns whether it did.
    pub(super) fn ensure_session(&mut self) -> Result<bool, ClientError> {
        if !self.session_lost() {
            return Ok(false);
        }
        self.reconnect()?;
        Ok(true)
    }

    /// Opens a new session with the memory node now ([`SessionControl::reconnect`](super::SessionControl::reconnect)) and
    /// retires the current one: its QPs to
    /// ERR (the node ends the session and its permissions), the posted extensions they flush
    /// filed, then closed. Permissions of the old session are refused from now on
    /// ([`ClientError::SessionLost`]).
    ///
    /// Nothing is sent again: pipelined requests of the old session get no reply (their
    /// outcome is unknown), posted extensions report [`ClientError::OutcomeUnknown`] when
    /// polled, and no data op of the old session is repeated. The client does this by itself
    /// at the first control operation after its session was lost or ended
    /// ([`ClientError::ControlLost`], [`ClientError::SessionEnded`]); call it to start the
    /// new session at once. On failure the client stays without a session, and the next
    /// control operation tries again.
    pub(super) fn reconnect(&mut self) -> Result<(), ClientError> {
        self.core.lose_session(WcStatus::WrFlushError); // until a new session is open
        let number = self.session.number + 1;
        let fresh = Session::open(
            &self.endpoint,
            &self.cfg,
            number,
            &mut self.core,
            &self.clocks,
        );
        let fresh = match fresh {
            Ok(s) => s,
            Err(e) => {
                self.core.lose_session(WcStatus::WrFlushError);
                return Err(e);
            }
        };
        let old = std::mem::replace(&mut self.session, fresh);
        old.retire(&self.data_cq);
        self.drain_data_cq();
        drop(old);
        // Nothing of the old session will complete now: forgotten extensions' slots are free.
        self.posted.release_forgotten();
        self.ended = None;
        self.core.stats_mut().reconnects += 1;
        self.live.clear();
        Ok(())
    }

    /// Files the completions on the data CQ (posted extensions' flushes; a batch's are
    /// dropped, as none is running).
    fn drain_data_cq(&mut self) {
        let mut routed = Vec::new();
        // Bounded: a retired session's QPs complete each work request once.
        for _ in 0..1024 {
            routed.clear();
            let n = self.data_cq.poll(self.user, &mut routed);
            for r in &routed {
                self.posted.file(&r.wc);
            }
            if n == 0 {
                return;
            }
        }
    }

    /// Sends a request to the shard it goes to and waits for its reply, in a new session if
    /// this one was lost (see the module docs). Halfway to the timeout the request is sent
    /// once more under the same id: the memory node answers a retry with the reply it gave
    /// (or gives) the original. An allocation that a shard cannot serve (no memory, no header
    /// or window) tries the other shards in turn; a request for every shard (`UseQp`) goes to
    /// each.
    ///
    /// A memory node that refuses as overloaded is asked again after a jittered, doubling
    /// back-off (from the smoothed round trip, at least 50 µs), while the RPC timeout lasts.
    pub(crate) fn rpc(&mut self, req: Request) -> Result<Reply, ClientError> {
        let reconnected = self.ensure_session()?;
        match self.rpc_in_session(req)? {
            Reply::Failed(Status::Unauthorized)
                if !reconnected && !matches!(req, Request::Hello { .. }) =>
            {
                // The memory node no longer knows this client (it ended the session while
                // its QPs stayed up); the request did not run.
                self.reconnect()?;
                if names_permission(&req) {
                    return Err(ClientError::SessionLost);
                }
                self.rpc_in_session(req)
            }
            reply => Ok(reply),
        }
    }

    fn rpc_in_session(&mut self, req: Request) -> Result<Reply, ClientError> {
        let now = self.clocks.now();
        let id = self.core.start(req, Owner::Reply, now)?;
        self.wait_for(id)
    }

    /// Drives the session until call `id` has ended; its outcome.
    pub(super) fn wait_for(&mut self, id: u64) -> Result<Reply, ClientError> {
        self.pump().run(|core| core.is_done(id), None)?;
        self.core
            .take_outcome(id)
            .unwrap_or(Err(ClientError::ControlLost(WcStatus::WrFlushError)))
    }
}

impl From<crate::rpc::RpcError> for ClientError {
    fn from(e: crate::rpc::RpcError) -> Self {
        use crate::rpc::RpcError;
        match e {
            RpcError::Busy => ClientError::ControlBusy,
            // The request was not sent; the session is replaced by the next operation.
            RpcError::Timeout | RpcError::Wedged => ClientError::RpcTimeout,
            RpcError::QpFailed(s) => ClientError::ControlLost(s),
            RpcError::Verbs(v) => ClientError::Verbs(v),
        }
    }
}
