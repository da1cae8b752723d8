//! The client's control path, sans-IO: requests in, wire sends out; replies, channel failures
//! and the time in; outcomes, arrived replies and the next deadline out. It never reads a
//! clock, sleeps, or touches a QP — [`super::Client`] is the driver that moves its sends onto
//! the control channels and its replies back, and a simulation can drive it the same way.
//!
//! What is in flight is one table of calls keyed by the id the application holds (see
//! `table`): blocking calls, pending acquires, pipelined requests, and what they sent. The
//! core decides routing to the manager shards (an allocation goes round them and tries the
//! next when one cannot serve it; a request for every shard goes to each in turn), credits
//! (never more answers owed on a channel than it has receive slots), the retry under the same
//! id halfway to the deadline, the `Overloaded` back-off as a deadline, what a late grant
//! nobody waits for becomes (handed back: revoked, and freed if it allocated), the lease slack
//! added to each lease asked for, and the round trips the lease policy learns from.
//!
//! The data path's decisions are here too (`data_path`): what happens to a one-sided op caught
//! in a data-QP failure (the exactly-once rule: retried, or reported with an unknown outcome,
//! never run twice) and how a long-lived permission is kept (extended, or renewed in one step).
//!
//! Two clocks come in with every event ([`Now`]): the lease clock (leases count on it, as on
//! the memory node's) and the timer clock (RPC deadlines, retries, back-off). A driver on real
//! hardware passes the same time twice; a test may freeze lease time while deadlines run.
//!
//! Invariants:
//! - Every answer that arrives is accounted for exactly once: delivered to its call, handed
//!   back (a late grant), dropped as expected (a hand-back's own answer), or counted as a
//!   stray (a duplicate, an unknown id). A stray changes nothing else.
//! - A request goes out once, plus at most one retry under its own id; a request sent again
//!   after `Overloaded` or to another shard goes under a new id (the memory node answers a
//!   copy of an id with the reply the id got).
//! - Every call with an owner that waits ends by its deadline (`rpc_timeout` after its send,
//!   or after it started for one waiting for a slot or backing off).
//! - When the session is lost, every call still waiting ends with
//!   [`ClientError::ControlLost`]: its outcome is unknown, and it is never sent again.

mod data_path;
mod table;
#[cfg(test)]
mod tests;

pub use data_path::{Fault, NOT_POSTED, Next, Renewal, RetryRounds, next_step, renewal};
pub use table::Owner;

use super::config::ClientConfig;
use super::error::{ClientError, unexpected};
use super::lease::micros;
use super::lease::{ClientStats, LeasePolicy};
use super::perm::Perm;
use crate::proto::messages::{Access, Grant, Mode, Reply, Request, Status};
use crate::proto::shards::{Route, ShardMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnic::{Timestamp, WcStatus};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use table::{Call, CallState, Channel, Send, Target};

/// The time of an event on both of the client's clocks (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The lease clock.
    pub lease: Timestamp,
    /// The timer clock.
    pub timer: Timestamp,
}

impl Now {
    /// The same time on both clocks.
    pub fn both(t: Timestamp) -> Now {
        Now { lease: t, timer: t }
    }
}

/// A request to put on control channel `channel` under wire id `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The channel (manager shard).
    pub channel: usize,
    /// The wire request id.
    pub id: u64,
    /// The request, as it goes on the wire.
    pub request: Request,
}

/// A call's outcome as its owner wants it ([`ClientCore::take`]).
#[derive(Debug)]
pub enum Taken {
    /// The reply.
    Reply(Reply),
    /// The permission the grant became.
    Perm(Perm),
}

/// Counts of the control path over every session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlCounts {
    /// Requests sent (retries not counted; a request sent again under a new id counts again).
    pub submitted: u64,
    /// Copies sent again under their own id (retries).
    pub resent: u64,
    /// Answers nobody was owed (see the module docs).
    pub strays: u64,
}

/// The client's control path (see the module docs).
#[derive(Debug)]
pub struct ClientCore {
    rpc_timeout: Duration,
    lease_margin: Duration,
    /// The session's number, and whether it is lost.
    session: u64,
    lost: bool,
    shards: ShardMap,
    channels: Vec<Channel>,
    slots: u32,
    /// The channel the next allocation goes to first.
    next_alloc: usize,
    calls: HashMap<u64, Call>,
    sends: HashMap<u64, Send>,
    transmits: VecDeque<Transmit>,
    /// Calls that ended, in the order they did (some may have been taken since).
    ended: VecDeque<u64>,
    /// Ids for calls that do not start with a send of their own (queued for a slot, replayed):
    /// from 2^44, above any wire id a session reaches and below a posted extension's ticket.
    next_private_id: u64,
    lease: LeasePolicy,
    stats: ClientStats,
    counts: ControlCounts,
    rng: StdRng,
    /// Test mutation: a late grant is not handed back ([`ClientCore::keep_late_grants`]).
    #[cfg(feature = "testing")]
    keep_late_grants: bool,
    /// Test mutation ([`ClientCore::set_mutation`]).
    #[cfg(feature = "testing")]
    mutation: Option<ClientMutation>,
}

/// Holes of the client's decisions fixed before that a test can switch back on, one at a
/// time, to show that a check catches them ([`ClientCore::set_mutation`]).
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientMutation {
    /// A WRITE, CAS or FAA whose outcome is unknown (flushed or failed after a retry-exceeded
    /// or lost link) is retried as if it had not executed.
    RetryFlushed,
    /// An exclusive permission is renewed by giving it back and acquiring again, which leaves
    /// a gap another client can take the object in.
    RenewWithGap,
}

/// Whether `req` names a permission (which belongs to the session that granted it).
pub(crate) fn names_permission(req: &Request) -> bool {
    matches!(
        req,
        Request::Extend { .. }
            | Request::Revoke { .. }
            | Request::Renew { .. }
            | Request::Rebind { .. }
    )
}

/// Whether `req`'s reply time is a control round trip the lease policy may learn from. An
/// acquire allowed to wait for conflicting holders is not: its reply can come a holder's
/// whole lease later, and a round-trip bound that learned it would lengthen every later lease
/// by as much — which makes holders hold longer and waiters wait longer (a feedback loop that
/// took Figure 8(b)'s exclusive acquisitions from 280 to 0.4 Kops/s). Nor is a `Hello`: it
/// opens a session (a protection domain, a client record), work no later request repeats.
fn measures_round_trip(req: &Request) -> bool {
    !matches!(req, Request::Acquire { wait_us, .. } if *wait_us > 0)
        && !matches!(req, Request::Hello { .. })
}

/// Replies that mean a shard cannot serve an allocation (every shard holds a share of the
/// pool and of the tenant's quota): the next shard is tried.
fn shard_full(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Failed(Status::NoMemory | Status::PoolExhausted | Status::QuotaExceeded)
    )
}

impl ClientCore {
    /// A core with the timeouts and lease policy of `cfg`, its back-off jitter drawn from
    /// `seed`, before any session: [`ClientCore::begin_session`] comes first.
    pub fn new(cfg: &ClientConfig, slots: u32, seed: u64) -> Self {
        ClientCore {
            rpc_timeout: cfg.rpc_timeout,
            lease_margin: cfg.lease_margin,
            session: 0,
            lost: true,
            shards: ShardMap::single(0, 0, 0, 0),
            channels: Vec::new(),
            slots,
            next_alloc: 0,
            calls: HashMap::new(),
            sends: HashMap::new(),
            transmits: VecDeque::new(),
            ended: VecDeque::new(),
            next_private_id: 1 << 44,
            lease: LeasePolicy::new(cfg.lease_slack_rtts),
            stats: ClientStats::default(),
            counts: ControlCounts::default(),
            rng: StdRng::seed_from_u64(seed),
            #[cfg(feature = "testing")]
            keep_late_grants: false,
            #[cfg(feature = "testing")]
            mutation: None,
        }
    }

    /// Test mutation: switches a hole fixed before back on (`None`: off).
    #[cfg(feature = "testing")]
    pub fn set_mutation(&mut self, mutation: Option<ClientMutation>) {
        self.mutation = mutation;
    }

    #[cfg(feature = "testing")]
    fn mutated(&self, m: ClientMutation) -> bool {
        self.mutation == Some(m)
    }

    /// Test mutation (a hole fixed before): a grant that arrives after its call gave up is
    /// dropped instead of handed back, orphaning it until its lease ends.
    #[cfg(feature = "testing")]
    pub fn keep_late_grants(&mut self, on: bool) {
        self.keep_late_grants = on;
    }

    /// Starts session `number` with one channel, to shard 0, for its `Hello`. Everything of
    /// the earlier session ends: its calls still waiting end with `ControlLost` (their outcome
    /// is unknown), and no answer of it is expected any more.
    pub fn begin_session(&mut self, number: u64) {
        self.end_waiting(WcStatus::WrFlushError);
        self.sends.clear();
        self.transmits.clear();
        self.session = number;
        self.lost = false;
        self.channels = vec![Channel::new(self.slots, 1, 1)];
        self.shards = ShardMap::single(0, 0, 0, 0);
    }

    /// The `Welcome` of the session's `Hello` came: one channel per manager shard of `shards`
    /// (channel 0 is the `Hello`'s), with disjoint request ids.
    pub fn session_opened(&mut self, shards: ShardMap, client_id: u32, max_lifetime_us: u64) {
        let n = u64::from(shards.shards.max(1));
        self.channels[0].use_ids(1, n);
        for k in 1..n {
            self.channels.push(Channel::new(self.slots, k + 1, n));
        }
        self.shards = shards;
        self.next_alloc = client_id as usize;
        self.lease.learn_max_lifetime(max_lifetime_us);
    }

    /// The current session's number.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Control channels of the session.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }

    /// The session's shard map.
    pub fn shard_map(&self) -> ShardMap {
        self.shards
    }

    /// Whether the session is lost (a channel failed, a channel wedged, or the memory node no
    /// longer knows the client): the driver opens a new one before the next request.
    pub fn is_lost(&self) -> bool {
        self.lost
    }

    /// The session is lost (e.g. the driver found a control QP in the error state, or the
    /// memory node ended it): every call waiting ends with `ControlLost(status)`.
    pub fn lose_session(&mut self, status: WcStatus) {
        self.lost = true;
        self.end_waiting(status);
    }

    fn end_waiting(&mut self, status: WcStatus) {
        for (&id, c) in &mut self.calls {
            if !matches!(c.state, CallState::Done(_)) {
                c.state = CallState::Done(Err(ClientError::ControlLost(status)));
                self.ended.push_back(id);
            }
        }
        for s in self.sends.values_mut() {
            s.target = Target::Answered;
        }
    }

    /// The lease policy.
    pub fn lease_policy(&self) -> &LeasePolicy {
        &self.lease
    }

    /// What the client counted (the driver adds its data-path counts).
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// What the client counted, to add to.
    pub fn stats_mut(&mut self) -> &mut ClientStats {
        &mut self.stats
    }

    /// Counts of the control path.
    pub fn counts(&self) -> ControlCounts {
        self.counts
    }

    /// The lease, µs, to ask for `requested_us` with: the slack for the round trip added.
    pub fn wire_lease_us(&self, requested_us: u64) -> u64 {
        self.lease.wire_lease_us(requested_us)
    }

    /// `req` with the lease policy's slack added to the lease it asks for.
    fn with_slack(&mut self, mut req: Request) -> Request {
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

    /// The channel `req` goes to first (an allocation: the next in turn).
    fn first_channel(&mut self, req: &Request) -> usize {
        let n = self.channels.len().max(1);
        match self.shards.route(req) {
            Route::Shard(k) => k.min(n - 1),
            Route::All => 0,
            Route::Any => {
                let k = self.next_alloc % n;
                self.next_alloc = self.next_alloc.wrapping_add(1);
                k
            }
        }
    }

    /// Starts `req` for `owner`; returns the call's id (the wire id of its first send).
    ///
    /// Without a free receive slot on its channel, the call queues until one frees (or its
    /// deadline: `ControlBusy`). A channel whose every owed answer is for a request given up on is wedged
    /// (the node stopped answering): the session is lost and the call fails with `RpcTimeout`.
    pub fn start(&mut self, req: Request, owner: Owner, now: Now) -> Result<u64, ClientError> {
        self.start_for(0, req, owner, now)
    }

    /// Starts `req` for `owner` on behalf of `caller`, one of several logical clients sharing
    /// this core (a compute node's clients share one session): only `caller` sees the call in
    /// [`ClientCore::next_ended_by`], [`ClientCore::has_ended_by`] and
    /// [`ClientCore::is_known_by`].
    pub fn start_for(
        &mut self,
        caller: u16,
        req: Request,
        owner: Owner,
        now: Now,
    ) -> Result<u64, ClientError> {
        if self.lost || self.channels.is_empty() {
            return Err(ClientError::ControlLost(WcStatus::WrFlushError));
        }
        let channel = self.first_channel(&req);
        if !self.channels[channel].has_credit() {
            if self.wedged(channel) {
                self.lose_session(WcStatus::WrFlushError);
                return Err(ClientError::RpcTimeout);
            }
            let id = self.private_id();
            let mut call = self.new_call(req, owner, channel, now, CallState::Queued);
            call.caller = caller;
            self.calls.insert(id, call);
            return Ok(id);
        }
        let mut call = self.new_call(req, owner, channel, now, CallState::Queued);
        call.caller = caller;
        let id = self.channels[channel].next_id;
        self.calls.insert(id, call);
        self.send(id, now);
        Ok(id)
    }

    fn new_call(
        &self,
        request: Request,
        owner: Owner,
        channel: usize,
        now: Now,
        state: CallState,
    ) -> Call {
        Call {
            owner,
            caller: 0,
            request,
            state,
            channel,
            tried: 1,
            started: now.timer,
            backoff: Duration::from_micros(self.lease.rtt().srtt_us().max(50)),
        }
    }

    fn private_id(&mut self) -> u64 {
        self.next_private_id += 1;
        self.next_private_id
    }

    /// Whether every answer owed on `channel` is for a request nobody waits for.
    fn wedged(&self, channel: usize) -> bool {
        self.sends
            .values()
            .filter(|s| s.channel == channel && s.owed > 0)
            .all(|s| matches!(s.target, Target::Orphaned | Target::Detached))
    }

    /// Puts call `id`'s request on the wire on its channel (which has a credit).
    fn send(&mut self, id: u64, now: Now) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let (channel, raw) = (call.channel, call.request);
        let request = self.with_slack(raw);
        let timers = Some((
            now.timer.plus(self.rpc_timeout / 2),
            now.timer.plus(self.rpc_timeout),
        ));
        let measures = measures_round_trip(&raw);
        let wire = self.put_on_wire(channel, request, Target::Call(id), timers, measures, now);
        if let Some(call) = self.calls.get_mut(&id) {
            call.state = CallState::Sent(wire);
        }
    }

    /// Sends `request` under the next wire id of `channel` (which has a credit), owing one
    /// answer, for `target`; `timers` are its (retry, deadline). Returns the wire id.
    fn put_on_wire(
        &mut self,
        channel: usize,
        request: Request,
        target: Target,
        timers: Option<(Timestamp, Timestamp)>,
        measures: bool,
        now: Now,
    ) -> u64 {
        let wire = self.channels[channel].take_id();
        self.channels[channel].owed += 1;
        self.counts.submitted += 1;
        self.sends.insert(
            wire,
            Send {
                channel,
                request,
                target,
                replay: None,
                owed: 1,
                sent_lease: now.lease,
                retry_at: timers.map(|t| t.0),
                deadline: timers.map(|t| t.1),
                measures,
            },
        );
        self.transmits.push_back(Transmit {
            channel,
            id: wire,
            request,
        });
        wire
    }

    /// The next request to put on the wire, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// A reply slot on a channel that did not decode: dropped (the request it answers times
    /// out).
    pub fn on_malformed(&mut self) {
        self.counts.strays += 1;
    }

    /// The answer `reply` to wire request `wire` arrived on `channel`.
    pub fn on_reply(&mut self, channel: usize, wire: u64, reply: Reply, now: Now) {
        let Some(send) = self.sends.get_mut(&wire) else {
            self.counts.strays += 1; // nothing owed under this id (forgotten, forged, never sent)
            return;
        };
        if send.channel != channel {
            self.counts.strays += 1; // not where it was sent: forged
            return;
        }
        send.owed = send.owed.saturating_sub(1);
        let next = send.replay.take().map_or(Target::Answered, Target::Call);
        let target = match std::mem::replace(&mut send.target, next) {
            // Only a replayed copy waits (its original was answered).
            Target::Answered if next != Target::Answered => {
                send.target = Target::Answered;
                next
            }
            target => target,
        };
        let (request, sent_lease, measures) = (send.request, send.sent_lease, send.measures);
        if send.owed == 0 {
            self.sends.remove(&wire);
        }
        if let Some(ch) = self.channels.get_mut(channel) {
            ch.owed = ch.owed.saturating_sub(1);
        }
        match target {
            Target::Call(id) => {
                if measures {
                    self.lease.observe(sent_lease, now.lease, &mut self.stats);
                }
                self.answer(id, &request, reply, now);
            }
            Target::Orphaned => self.hand_back(&request, reply, now),
            Target::Detached => {}
            Target::Answered => self.counts.strays += 1, // a duplicate (a retry's second answer)
        }
        self.send_queued(now);
    }

    /// Files the answer to call `id`'s current send.
    fn answer(&mut self, id: u64, sent: &Request, reply: Reply, now: Now) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let n = self.channels.len();
        match reply {
            Reply::Extended { .. } => self.stats.rpc_extensions += 1,
            Reply::Failed(Status::ExtensionRefused | Status::NotFound)
                if matches!(sent, Request::Extend { .. }) =>
            {
                self.stats.extension_refusals += 1
            }
            _ => {}
        }
        if reply == Reply::Failed(Status::Overloaded) {
            self.stats.overloaded += 1;
            let pause = call.backoff.mul_f64(self.rng.random_range(0.5..1.5));
            let until = now.timer.plus(pause);
            if until < call.started.plus(self.rpc_timeout) {
                call.state = CallState::Backoff(until);
                call.backoff = (call.backoff * 2).min(self.rpc_timeout / 8);
                return;
            }
        }
        let route = self.shards.route(&call.request);
        let next = match route {
            Route::Any if shard_full(&reply) && call.tried < n => true,
            Route::All if !matches!(reply, Reply::Failed(_)) && call.tried < n => true,
            _ => false,
        };
        if next {
            call.channel = (call.channel + 1) % n;
            call.tried += 1;
            call.state = CallState::Queued;
            self.try_send(id, now);
            return;
        }
        call.state = CallState::Done(Ok(reply));
        self.ended.push_back(id);
    }

    /// A grant that arrived after its call gave up is ended at once (and what it allocated
    /// freed), so no permission or memory is orphaned; any other late answer is dropped.
    fn hand_back(&mut self, request: &Request, reply: Reply, now: Now) {
        let Reply::Granted(g) = reply else {
            return;
        };
        #[cfg(feature = "testing")]
        if self.keep_late_grants {
            return;
        }
        let free = matches!(request, Request::Allocate { .. });
        let revoke = Request::Revoke { id: g.id, free };
        let channel = self.first_channel(&revoke);
        // Busy: the lease ends it instead.
        if !self.channels[channel].has_credit() {
            return;
        }
        self.put_on_wire(channel, revoke, Target::Detached, None, false, now);
    }

    /// Sends call `id` if its channel has a credit (else it stays queued).
    fn try_send(&mut self, id: u64, now: Now) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        if self.channels[call.channel].has_credit() {
            self.send(id, now);
        }
    }

    /// Sends the queued calls that have a credit now, oldest first.
    fn send_queued(&mut self, now: Now) {
        let mut queued: Vec<(Timestamp, u64)> = self
            .calls
            .iter()
            .filter(|(_, c)| matches!(c.state, CallState::Queued))
            .map(|(&id, c)| (c.started, id))
            .collect();
        if queued.is_empty() {
            return;
        }
        queued.sort_unstable();
        for (_, id) in queued {
            self.try_send(id, now);
        }
    }

    /// The earliest time [`ClientCore::handle_timeout`] has work: a retry, a deadline, the
    /// end of a back-off or of a wait for a slot.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let sends = self.sends.values().filter_map(|s| match s.target {
            Target::Call(_) => match (s.retry_at, s.deadline) {
                (Some(r), Some(d)) => Some(r.min(d)),
                (r, d) => r.or(d),
            },
            _ => None,
        });
        let calls = self.calls.values().filter_map(|c| match c.state {
            CallState::Backoff(until) => Some(until),
            CallState::Queued => Some(c.started.plus(self.rpc_timeout)),
            _ => None,
        });
        sends.chain(calls).min()
    }

    /// Does what is due at `now`: retries (once, under the same id, if a slot is free for the
    /// second answer), deadlines (the call ends with `RpcTimeout`, and a late grant will be
    /// handed back), sends after a back-off, and calls that waited too long for a slot.
    pub fn handle_timeout(&mut self, now: Now) {
        let t = now.timer;
        let mut retries = Vec::new();
        let mut expired = Vec::new();
        for (&wire, s) in &mut self.sends {
            let Target::Call(id) = s.target else {
                continue;
            };
            if s.deadline.is_some_and(|d| t >= d) {
                expired.push((wire, id));
            } else if s.retry_at.is_some_and(|r| t >= r) {
                s.retry_at = None;
                retries.push(wire);
            }
        }
        for wire in retries {
            let Some(s) = self.sends.get_mut(&wire) else {
                continue;
            };
            // No slot for a second answer: the original may still be answered.
            if !self.channels[s.channel].has_credit() {
                continue;
            }
            s.owed += 1;
            self.channels[s.channel].owed += 1;
            self.counts.resent += 1;
            self.stats.rpc_retries += 1;
            self.transmits.push_back(Transmit {
                channel: s.channel,
                id: wire,
                request: s.request,
            });
        }
        for (wire, id) in expired {
            if let Some(s) = self.sends.get_mut(&wire) {
                s.target = Target::Orphaned;
            }
            if let Some(c) = self.calls.get_mut(&id) {
                c.state = CallState::Done(Err(ClientError::RpcTimeout));
                self.ended.push_back(id);
            }
        }
        let mut due = Vec::new();
        for (&id, c) in &mut self.calls {
            match c.state {
                CallState::Backoff(until) if t >= until => {
                    c.state = CallState::Queued;
                    due.push(id);
                }
                CallState::Queued if t >= c.started.plus(self.rpc_timeout) => {
                    c.state = CallState::Done(Err(ClientError::ControlBusy));
                    self.ended.push_back(id);
                }
                _ => {}
            }
        }
        for id in due {
            self.try_send(id, now);
        }
        self.send_queued(now);
    }

    /// Whether call `id` has ended (its outcome can be taken).
    pub fn is_done(&self, id: u64) -> bool {
        matches!(
            self.calls.get(&id).map(|c| &c.state),
            Some(CallState::Done(_))
        )
    }

    /// Calls started and not yet taken (in flight, or ended and waiting to be taken).
    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Whether call `id` is known (in flight, or ended and not taken).
    pub fn is_known(&self, id: u64) -> bool {
        self.calls.contains_key(&id)
    }

    /// Takes call `id`'s outcome once it has ended.
    pub fn take_outcome(&mut self, id: u64) -> Option<Result<Reply, ClientError>> {
        if !self.is_done(id) {
            return None;
        }
        match self.calls.remove(&id)?.state {
            CallState::Done(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// The oldest call that ended and was not taken yet.
    pub fn next_ended(&mut self) -> Option<u64> {
        while let Some(&id) = self.ended.front() {
            if self.is_done(id) {
                return Some(id);
            }
            self.ended.pop_front();
        }
        None
    }

    /// Whether a call ended and was not taken yet.
    pub fn has_ended(&self) -> bool {
        self.ended.iter().any(|&id| self.is_done(id))
    }

    fn is_callers(&self, caller: u16, id: u64) -> bool {
        self.calls.get(&id).is_some_and(|c| c.caller == caller)
    }

    /// Whether call `id` is `caller`'s and known (in flight, or ended and not taken).
    pub fn is_known_by(&self, caller: u16, id: u64) -> bool {
        self.is_callers(caller, id)
    }

    /// The oldest of `caller`'s calls that ended and was not taken yet.
    pub fn next_ended_by(&mut self, caller: u16) -> Option<u64> {
        let calls = &self.calls;
        self.ended.retain(|id| {
            calls
                .get(id)
                .is_some_and(|c| matches!(c.state, CallState::Done(_)))
        });
        self.ended
            .iter()
            .copied()
            .find(|&id| self.is_callers(caller, id))
    }

    /// Whether one of `caller`'s calls ended and was not taken yet.
    pub fn has_ended_by(&self, caller: u16) -> bool {
        self.ended
            .iter()
            .any(|&id| self.is_done(id) && self.is_callers(caller, id))
    }

    /// Gives up call `id`: its outcome is dropped, and a grant it brings is handed back —
    /// one that comes later, or one that came and was not taken.
    pub fn abandon(&mut self, id: u64, now: Now) {
        let Some(call) = self.calls.remove(&id) else {
            return;
        };
        match call.state {
            CallState::Sent(wire) => {
                if let Some(s) = self.sends.get_mut(&wire) {
                    s.target = Target::Orphaned;
                }
            }
            CallState::Done(Ok(reply @ Reply::Granted(_))) => {
                self.hand_back(&call.request, reply, now);
            }
            _ => {}
        }
    }

    /// The owner call `id` was started for.
    pub fn owner(&self, id: u64) -> Option<Owner> {
        self.calls.get(&id).map(|c| c.owner)
    }

    /// Turns a grant to a request sent at `sent` (lease clock) into a permission of the
    /// current session, counting it; `now` is the lease clock's time.
    pub fn grant(
        &mut self,
        grant: Grant,
        access: Access,
        mode: Mode,
        sent: Timestamp,
        now: Timestamp,
    ) -> Perm {
        self.lease
            .learn_max_lifetime(u64::from(grant.max_lifetime_us));
        let margin = micros(self.lease_margin);
        let perm = Perm::new(grant, access, mode, sent, margin, self.session);
        self.stats.grants += 1;
        if now >= perm.expiry() {
            self.stats.dead_on_arrival += 1;
            perm.mark_wasted(&mut self.stats);
        }
        perm
    }

    /// Takes call `id`'s outcome once it has ended, as its owner wants it: the reply, or the
    /// permission a grant becomes (`now`: the lease clock). `None` while it is in flight.
    pub fn take(&mut self, id: u64, now: Timestamp) -> Option<Result<Taken, ClientError>> {
        let owner = self.owner(id)?;
        let outcome = self.take_outcome(id)?;
        Some(match (owner, outcome) {
            (_, Err(e)) => Err(e),
            (Owner::Reply, Ok(reply)) => Ok(Taken::Reply(reply)),
            (Owner::Grant { access, mode, sent }, Ok(Reply::Granted(g))) => {
                Ok(Taken::Perm(self.grant(g, access, mode, sent, now)))
            }
            (Owner::Grant { .. }, Ok(other)) => Err(unexpected(other)),
        })
    }

    /// Tamper helper: sends `req` under wire id `wire` on the channel that id belongs to, as
    /// a retry (or a replayed message) would; returns the call that takes its answer. The
    /// memory node answers with the reply the id already got.
    #[cfg(feature = "testing")]
    pub fn replay(&mut self, wire: u64, req: Request, now: Now) -> Result<u64, ClientError> {
        let n = self.channels.len().max(1) as u64;
        let channel = (wire.saturating_sub(1) % n) as usize;
        if self.lost || !self.channels[channel].has_credit() {
            return Err(ClientError::ControlBusy);
        }
        let id = self.private_id();
        let mut call = self.new_call(req, Owner::Reply, channel, now, CallState::Sent(wire));
        call.tried = self.channels.len();
        self.calls.insert(id, call);
        self.channels[channel].owed += 1;
        let send = self.sends.entry(wire).or_insert(Send {
            channel,
            request: req,
            target: Target::Answered,
            replay: None,
            owed: 0,
            sent_lease: now.lease,
            retry_at: None,
            deadline: None,
            measures: false,
        });
        send.owed += 1;
        if send.target == Target::Answered {
            send.target = Target::Call(id);
        } else {
            send.replay = Some(id);
        }
        send.deadline = Some(now.timer.plus(self.rpc_timeout));
        self.transmits.push_back(Transmit {
            channel,
            id: wire,
            request: req,
        });
        Ok(id)
    }
}
