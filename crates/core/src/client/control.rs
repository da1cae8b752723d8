//! The control path: requests to the manager shards over the session's control channels,
//! blocking ([`Client::rpc`]) or pipelined ([`Client::submit`], [`Client::wait_reply`],
//! [`Client::poll_reply`]), and a new session when the control connection is lost.
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
//! - Every RPC returns by its own deadline (`rpc_timeout`): an operation that reconnects first
//!   spends at most one deadline on the new session's `Hello` and one on its own request.
//! - Pipelined requests in flight when the session is lost get no reply; `poll_reply` and
//!   `wait_reply` report `ControlLost` until the next control operation reconnects.

use super::session::Session;
use super::{Client, ClientError, MAX_OUTSTANDING_RPCS};
use crate::proto::messages::{Reply, Request, Status};
use crate::proto::shards::Route;
use crate::rpc::{RpcClient, RpcError};
use rnic::{CompletionQueue, Provider, WcStatus, WorkCompletion};
use std::time::Duration;

/// Counts of the control channels of sessions that ended.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RetiredCounts {
    pub(super) submitted: u64,
    pub(super) resent: u64,
    pub(super) strays: u64,
}

/// Whether `req` names a permission (which belongs to the session that granted it).
fn names_permission(req: &Request) -> bool {
    matches!(
        req,
        Request::Extend { .. }
            | Request::Revoke { .. }
            | Request::Renew { .. }
            | Request::Rebind { .. }
    )
}

impl<P: Provider> Client<P> {
    /// The channel of the shard `req` goes to (an allocation: the next in turn).
    pub(super) fn channel_for(&mut self, req: &Request) -> usize {
        let n = self.session.ctrl.len();
        match self.session.shards.route(req) {
            Route::Shard(k) => k.min(n - 1),
            Route::Any | Route::All => {
                let k = self.next_alloc % n;
                self.next_alloc = self.next_alloc.wrapping_add(1);
                k
            }
        }
    }

    /// Whether the session is lost: a control QP failed, or the memory node told the client it
    /// no longer knows it.
    pub(super) fn session_lost(&self) -> bool {
        self.lost || self.session.is_broken()
    }

    /// Opens a new session if this one is lost; returns whether it did.
    pub(super) fn ensure_session(&mut self) -> Result<bool, ClientError> {
        if !self.session_lost() {
            return Ok(false);
        }
        self.reconnect()?;
        Ok(true)
    }

    /// Opens a new session with the memory node now and retires the current one: its QPs to
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
    pub fn reconnect(&mut self) -> Result<(), ClientError> {
        self.lost = true; // until a new session is open
        let fresh = Session::open(&self.endpoint, &self.cfg, self.session.number + 1)?;
        let old = std::mem::replace(&mut self.session, fresh);
        for c in &old.ctrl {
            self.retired.submitted += c.submitted();
            self.retired.resent += c.resent();
            self.retired.strays += c.stray_replies();
        }
        old.retire();
        self.drain_data_cq();
        drop(old);
        // Nothing of the old session will complete now: forgotten extensions' slots are free.
        self.posted.release_forgotten();
        self.lost = false;
        self.ended = None;
        self.stats.reconnects += 1;
        self.live.clear();
        self.in_flight.clear();
        // No reply of the old session can come any more.
        self.abandoned.clear();
        self.next_alloc = self.session.client_id as usize;
        self.next_poll = 0;
        Ok(())
    }

    /// Files the completions on the data CQ (posted extensions' flushes; a batch's are
    /// dropped, as none is running).
    fn drain_data_cq(&mut self) {
        let mut wcs = [WorkCompletion::default(); 32];
        // Bounded: a retired session's QPs complete each work request once.
        for _ in 0..1024 {
            let n = self.data_cq.poll(&mut wcs);
            if n == 0 {
                return;
            }
            for wc in &wcs[..n] {
                self.posted.file(wc);
            }
        }
    }

    /// Sends a request on the control channel of the shard it goes to and waits for its
    /// reply, in a new session if this one was lost (see the module docs). Halfway to the
    /// timeout the request is sent once more under the same id: the memory node answers a
    /// retry with the reply it gave (or gives) the original. An allocation that a shard cannot
    /// serve (no memory, no header or window) tries the other shards in turn; a request for
    /// every shard (`UseQp`) goes to each.
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
                self.lost = true;
                self.reconnect()?;
                if names_permission(&req) {
                    return Err(ClientError::SessionLost);
                }
                self.rpc_in_session(req)
            }
            reply => Ok(reply),
        }
    }

    #[allow(clippy::disallowed_methods)] // back-off and the RPC timeout are wall time
    fn rpc_in_session(&mut self, req: Request) -> Result<Reply, ClientError> {
        let deadline = std::time::Instant::now() + self.cfg.rpc_timeout;
        let mut backoff = Duration::from_micros(self.lease.rtt().srtt_us().max(50));
        loop {
            let req = self.with_slack(req);
            let sent = self.clock.now();
            let reply = self.rpc_unmeasured(req)?;
            if measures_round_trip(&req) {
                self.lease.observe(sent, self.clock.now(), &mut self.stats);
            }
            if reply != Reply::Failed(Status::Overloaded) {
                return Ok(reply);
            }
            self.stats.overloaded += 1;
            let pause = backoff.mul_f64(rand::random_range(0.5..1.5));
            if std::time::Instant::now() + pause >= deadline {
                return Ok(reply);
            }
            self.pause(pause);
            backoff = (backoff * 2).min(self.cfg.rpc_timeout / 8);
        }
    }

    /// Blocks the thread for `d` of wall time (parked: no spinning; an early unpark only
    /// parks again for the rest).
    #[allow(clippy::disallowed_methods)] // a back-off is wall time
    fn pause(&self, d: Duration) {
        let until = std::time::Instant::now() + d;
        loop {
            let now = std::time::Instant::now();
            if now >= until {
                return;
            }
            std::thread::park_timeout(until - now);
        }
    }

    /// `req` with the lease policy's slack added to the lease it asks for.
    pub(super) fn with_slack(&mut self, mut req: Request) -> Request {
        match &mut req {
            Request::Allocate { lease_us, .. }
            | Request::Acquire { lease_us, .. }
            | Request::Extend { lease_us, .. }
            | Request::Renew { lease_us, .. } => {
                *lease_us = self.lease.wire_lease_us(*lease_us);
                self.stats.slack_us = self.lease.slack_us();
            }
            _ => {}
        }
        req
    }

    /// A channel's failure: a failed QP loses the session, and so does a channel whose every
    /// slot waits for an answer that does not come (the next operation opens a new one).
    pub(super) fn note(&mut self, e: RpcError) -> ClientError {
        if matches!(e, RpcError::QpFailed(_) | RpcError::Wedged) {
            self.lost = true;
        }
        e.into()
    }

    fn rpc_unmeasured(&mut self, req: Request) -> Result<Reply, ClientError> {
        let timeout = self.cfg.rpc_timeout;
        let reply = match self.session.shards.route(&req) {
            Route::All => {
                let mut last = None;
                for channel in &mut self.session.ctrl {
                    match channel.call(req, timeout, true) {
                        Ok(r @ Reply::Failed(_)) => {
                            last = Some(Ok(r));
                            break;
                        }
                        other => last = Some(other),
                    }
                }
                last.unwrap_or(Err(RpcError::Timeout))
            }
            Route::Any => {
                let first = self.channel_for(&req);
                let ctrl = &mut self.session.ctrl;
                let n = ctrl.len();
                let mut reply = Err(RpcError::Timeout);
                for i in 0..n {
                    reply = ctrl[(first + i) % n].call(req, timeout, true);
                    // Every shard holds a share of the pool and of the tenant's quota.
                    let full = matches!(
                        reply,
                        Ok(Reply::Failed(
                            Status::NoMemory | Status::PoolExhausted | Status::QuotaExceeded
                        ))
                    );
                    if !full {
                        break;
                    }
                }
                reply
            }
            Route::Shard(k) => {
                let ctrl = &mut self.session.ctrl;
                let k = k.min(ctrl.len() - 1);
                ctrl[k].call(req, timeout, true)
            }
        };
        self.hand_back_orphans();
        reply.map_err(|e| self.note(e))
    }

    /// Grants that arrived after their request timed out are ended at once (and what they
    /// allocated freed), so no permission or memory is orphaned; their answers are dropped.
    pub(super) fn hand_back_orphans(&mut self) {
        for k in 0..self.session.ctrl.len() {
            if self.session.ctrl.len() > 1 {
                // A late grant may sit on another shard's channel: look (without waiting).
                // A failed channel reports itself on its next call.
                let _ = self.session.ctrl[k].poll_cq();
            }
            for orphan in self.session.ctrl[k].take_orphans() {
                if let Reply::Granted(g) = orphan.reply {
                    let free = matches!(orphan.request, Request::Allocate { .. });
                    let revoke = Request::Revoke { id: g.id, free };
                    let shard = self.channel_for(&revoke);
                    // Busy: the lease ends it instead.
                    let _ = self.session.ctrl[shard].submit_detached(revoke);
                }
            }
        }
    }

    /// Sends a control request without waiting (pipelined RPCs; at most
    /// [`MAX_OUTSTANDING_RPCS`] unanswered at a time per shard), in a new session if this one
    /// was lost. Returns its request id. Allocations go round the shards (no retry on another
    /// shard).
    pub fn submit(&mut self, req: Request) -> Result<u64, ClientError> {
        self.ensure_session()?;
        let req = self.with_slack(req);
        let k = self.channel_for(&req);
        let id = self.session.ctrl[k].submit(req).map_err(|e| self.note(e))?;
        let extend = matches!(req, Request::Extend { .. });
        // Bounded by the channels' slots: a request whose reply never comes is forgotten
        // with the oldest.
        let n = self.session.ctrl.len();
        if self.in_flight.len() >= 4 * MAX_OUTSTANDING_RPCS as usize * n {
            self.in_flight.remove(0);
        }
        self.in_flight
            .push((id, self.clock.now(), extend, measures_round_trip(&req)));
        Ok(id)
    }

    /// Counts a pipelined reply: its round trip, and what it says about leases.
    fn on_pipelined_reply(&mut self, id: u64, reply: &Reply) {
        let Some(i) = self.in_flight.iter().position(|&(rid, ..)| rid == id) else {
            return;
        };
        let (_, sent, extend, measure) = self.in_flight.swap_remove(i);
        if measure {
            self.lease.observe(sent, self.clock.now(), &mut self.stats);
        }
        match reply {
            Reply::Extended { .. } => self.stats.rpc_extensions += 1,
            Reply::Failed(Status::ExtensionRefused | Status::NotFound) if extend => {
                self.stats.extension_refusals += 1
            }
            _ => {}
        }
    }

    /// Tamper helper: sends `req` again under an earlier id, as a retry (or a replayed
    /// message) would. The memory node answers with the reply the id already got.
    #[cfg(feature = "testing")]
    pub fn replay(&mut self, req_id: u64, req: Request) -> Result<Reply, ClientError> {
        let k = (req_id.saturating_sub(1) % self.session.ctrl.len() as u64) as usize;
        let timeout = self.cfg.rpc_timeout;
        self.session.ctrl[k]
            .replay(req_id, req, timeout)
            .map_err(|e| self.note(e))
    }

    /// Arms the control CQs on the channel given to [`Client::connect_on`]: the next reply
    /// raises an event there. Arm, poll ([`Client::poll_reply`]), and only if nothing came,
    /// wait on the channel.
    pub fn arm(&self) {
        for c in &self.session.ctrl {
            c.arm();
        }
    }

    /// The error `poll_reply` and `wait_reply` report while the session is lost.
    fn lost_error(&self) -> Result<(), ClientError> {
        if self.session_lost() {
            return Err(ClientError::ControlLost(WcStatus::WrFlushError));
        }
        Ok(())
    }

    /// Waits up to `max` for a reply to any pipelined request (sleeping on the control CQ, not
    /// spinning); `None` if none arrived. `ControlLost` once the session is lost (its requests
    /// in flight get no reply; the next control operation opens a new session).
    #[allow(clippy::disallowed_methods)] // a wait's deadline is wall time
    pub fn wait_reply(&mut self, max: Duration) -> Result<Option<(u64, Reply)>, ClientError> {
        if let Some(r) = self.poll_reply()? {
            return Ok(Some(r));
        }
        if self.session.ctrl.len() == 1 {
            // One channel: its own spin-then-sleep wait (the latency path).
            let got = self.session.ctrl[0]
                .wait_any(max)
                .map_err(|e| self.note(e))?;
            if let Some(r) = &got {
                self.hand_back_orphans();
                self.on_pipelined_reply(r.0, &r.1);
            }
            return Ok(got);
        }
        // Several shards' channels: sleep on the completion channel they all report to until
        // any has a reply (armed, then polled once more for a reply that came before).
        let deadline = std::time::Instant::now() + max;
        loop {
            self.arm();
            if let Some(r) = self.poll_reply()? {
                return Ok(Some(r));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            rnic::CompletionChannel::wait(&self.endpoint.channel, deadline - now);
        }
    }

    /// Takes one arrived reply, if any, as (request id, reply). `ControlLost` once the
    /// session is lost (see [`Client::wait_reply`]). Replies parked by
    /// [`Client::poll_acquire`] come first.
    pub fn poll_reply(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        if let Some(&id) = self.parked.keys().next()
            && let Some(reply) = self.parked.remove(&id)
        {
            return Ok(Some((id, reply)));
        }
        self.poll_reply_unparked()
    }

    /// [`Client::poll_reply`] from the channels only; replies to abandoned acquires are
    /// dropped on the way (their grants run out).
    pub(super) fn poll_reply_unparked(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        loop {
            let got = self.poll_channels()?;
            match got {
                Some((id, _)) if self.abandoned.remove(&id) => continue,
                other => return Ok(other),
            }
        }
    }

    fn poll_channels(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        self.lost_error()?;
        let n = self.session.ctrl.len();
        let mut found = None;
        for i in 0..n {
            let k = (self.next_poll + i) % n;
            let got = self.session.ctrl[k].poll().map_err(|e| self.note(e))?;
            if let Some(r) = got {
                self.next_poll = (k + 1) % n;
                found = Some(r);
                break;
            }
        }
        self.hand_back_orphans();
        if let Some((id, reply)) = &found {
            self.on_pipelined_reply(*id, reply);
        }
        Ok(found)
    }

    /// Control requests issued so far, over every session (retries not counted).
    pub fn rpcs(&self) -> u64 {
        self.retired.submitted
            + self
                .session
                .ctrl
                .iter()
                .map(RpcClient::submitted)
                .sum::<u64>()
    }

    /// Retries and stray replies over every session.
    pub(super) fn channel_counts(&self) -> (u64, u64) {
        let ctrl = &self.session.ctrl;
        (
            self.retired.resent + ctrl.iter().map(RpcClient::resent).sum::<u64>(),
            self.retired.strays + ctrl.iter().map(RpcClient::stray_replies).sum::<u64>(),
        )
    }
}

/// Whether `req`'s reply time is a control round trip the lease policy may learn from. An
/// acquire allowed to wait for conflicting holders is not: its reply can come a holder's
/// whole lease later, and a round-trip bound that learned it would lengthen every later lease
/// by as much — which makes holders hold longer and waiters wait longer (a feedback loop that
/// took Figure 8(b)'s exclusive acquisitions from 280 to 0.4 Kops/s).
pub(super) fn measures_round_trip(req: &Request) -> bool {
    !matches!(req, Request::Acquire { wait_us, .. } if *wait_us > 0)
}

impl From<RpcError> for ClientError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Busy => ClientError::ControlBusy,
            // The request was not sent; the session is replaced by the next operation.
            RpcError::Timeout | RpcError::Wedged => ClientError::RpcTimeout,
            RpcError::QpFailed(s) => ClientError::ControlLost(s),
            RpcError::Verbs(v) => ClientError::Verbs(v),
        }
    }
}
