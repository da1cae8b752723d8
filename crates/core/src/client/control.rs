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
use super::node::{Control, Shared};
use crate::proto::messages::{Reply, Request, Status};
use parking_lot::MutexGuard;
use rnic::{Provider, WcStatus};

impl<P: Provider> Client<P> {
    /// Opens a new session if the compute node's is lost; returns whether it did (this
    /// client, or another meanwhile: either way the session this client saw is gone).
    pub(super) fn ensure_session(&mut self) -> Result<bool, ClientError> {
        let seen = self.data.number;
        {
            let mut g = self.node.lock();
            if g.session_lost() {
                self.node.reconnect(&mut g)?;
            }
        }
        self.sync_session();
        Ok(self.data.number != seen)
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
    /// control operation tries again. The compute node's other clients adopt the new session
    /// at their next operation.
    pub(super) fn reconnect(&mut self) -> Result<(), ClientError> {
        let number = self.data.number;
        self.reconnect_unless_replaced(number)
    }

    /// [`Client::reconnect`], unless session `number` was replaced already (by another
    /// client of the compute node, which saw the same loss).
    fn reconnect_unless_replaced(&mut self, number: u64) -> Result<(), ClientError> {
        {
            let mut g = self.node.lock();
            if g.session.number == number {
                self.node.reconnect(&mut g)?;
            }
        }
        self.sync_session();
        Ok(())
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
        let number = self.data.number;
        match self.rpc_in_session(req)? {
            Reply::Failed(Status::Unauthorized)
                if !reconnected && !matches!(req, Request::Hello { .. }) =>
            {
                // The memory node no longer knows this session (it ended it while its QPs
                // stayed up); the request did not run.
                self.reconnect_unless_replaced(number)?;
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
        let mut g = self.node.lock();
        let id = g.core.start_for(self.user, req, Owner::Reply, now)?;
        Self::wait_locked(&self.node, &mut g, id)
    }

    /// Drives the session until call `id` has ended; its outcome (the tamper helpers' wait).
    #[cfg(feature = "testing")]
    pub(super) fn wait_for(&mut self, id: u64) -> Result<Reply, ClientError> {
        let mut g = self.node.lock();
        Self::wait_locked(&self.node, &mut g, id)
    }

    fn wait_locked(
        node: &Shared<P>,
        g: &mut MutexGuard<'_, Control<P>>,
        id: u64,
    ) -> Result<Reply, ClientError> {
        node.drive(g, |core| core.is_done(id), None)?;
        g.core
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
