//! A client: the real `ClientCore` (control path) plus what its driver and the application
//! do around it, from the seed: the session opening (`Hello` through the core, then
//! `session_opened`), a random workload (allocate, acquire in every mode with and without
//! waiting, RPC and CAS extension, revoke and free, batches of one-sided READ/WRITE/CAS/FAA,
//! renewal of exclusive permissions, giving up on a call), and its own lease clock (node
//! clock × (1 + skew) + offset).
//!
//! A data batch or a CAS goes out only while the permission's local expiry (`Perm::expiry`
//! on the lease clock) is ahead; the batch runs over the data link (`cluster_sim/data.rs`,
//! through the core's exactly-once decision) at once, or — when the client freezes right
//! after the check — when it resumes, as a paused thread would.
//!
//! Renewal, as a `LongLease` does it: the core decides (`ClientCore::renewal`) between
//! keeping an exclusive permission, extending it one-sidedly, and renewing it in one step
//! (`Request::Renew`); under the `RenewWithGap` mutation it decides to give the permission
//! back and acquire again, which the client then does. Every renewal it takes is reported to
//! the oracle (no other client may be granted the object in between).
//!
//! Checked here, per answer the core takes: every `Granted` the node sent is either held (a
//! call took it), handed back (a `Revoke` of it went out), a duplicate of one seen before
//! (a retry's second answer), or left to its lease only when the channel had no receive slot
//! for the hand-back. And every call the application started ends exactly once, by its
//! deadline unless the client was frozen.

use super::data::{DataLink, DataOp, OpKind, run_batch};
use super::support::Rng;
use patronus_core::client::core::{ClientCore, Now, Owner, Renewal};
use patronus_core::client::{ClientConfig, ClientError, Perm};
use patronus_core::manager::{ClientId, TenantId};
use patronus_core::proto::messages::{Access, Mode, PermissionId, Reply, Request, Status};
use patronus_core::proto::shards::Route;
use rnic::{MemoryKey, Timestamp, WcStatus};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Receive slots per control channel.
pub const SLOTS: u32 = 4;

/// What a call was for.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Hello,
    Allocate(Mode),
    Acquire(Access, Mode),
    Extend(PermissionId),
    Revoke(PermissionId),
    /// A renewal in one step of the exclusive permission.
    Renew(PermissionId, Access),
    /// The mutated renewal's first half: give the permission back (then acquire again).
    RenewRevoke {
        old: PermissionId,
        addr: u64,
        size: u64,
        access: Access,
    },
    /// The mutated renewal's second half.
    RenewAcquire(PermissionId, Access),
}

#[derive(Clone, Copy, Debug)]
struct Call {
    kind: Kind,
    /// Lease clock when started (a grant's expiry counts from here).
    sent: Timestamp,
    /// Node clock when started.
    started: u64,
}

/// A permission the application holds.
pub struct Held {
    pub perm: Perm,
    /// The buffer window's bind count at the grant (to tell a wrapped key byte).
    pub epoch: u64,
}

/// What the world must do after a client's turn.
#[derive(Debug)]
pub enum Effect {
    Send {
        shard: usize,
        wire: u64,
        req: Request,
    },
    /// Connect a new session (shard 0 first).
    Connect,
    /// The client gave up its session (lost or wedged): the node sees its QPs break.
    Disconnect(ClientId),
}

pub struct Client {
    pub slot: usize,
    pub tenant: TenantId,
    pub core: ClientCore,
    pub rng: Rng,
    skew_ppm: i64,
    offset: u64,
    /// Connection number (a new one per session).
    pub conn: u64,
    /// The session's id at the node, once welcomed.
    pub id: Option<ClientId>,
    calls: BTreeMap<u64, Call>,
    pub held: Vec<Held>,
    /// Answers owed per channel, as the core counts them (sent copies − answers taken).
    owed: Vec<u32>,
    /// Grants this client saw arrive (a retry's duplicate answer repeats one).
    seen: VecDeque<PermissionId>,
    pub next_op: u64,
    pub reconnect_at: Option<u64>,
    pub frozen_until: Option<u64>,
    /// When it last resumed from a freeze.
    resumed: u64,
    /// A data batch decided under a live lease, executed later (the client froze in between).
    pub pending: Option<Vec<DataOp>>,
    pub rpc_timeout: u64,
    /// The next data op's tag (unique over the run: the world gives each client its base).
    next_tag: u64,
    /// Calls to start at the next turn (the mutated renewal's acquire).
    follow_ups: Vec<(Kind, Request)>,
    /// Renewals taken, for the oracle: (session, old permission, new permission).
    pub renewals: Vec<(ClientId, PermissionId, PermissionId)>,
    /// Counts.
    pub ops: u64,
    pub handed_back: u64,
    pub left_to_lease: u64,
    pub outcomes: u64,
    pub unknown: u64,
}

/// The client configuration every simulated client runs with.
pub fn client_config(rpc_timeout_us: u64, margin_us: u64) -> ClientConfig {
    ClientConfig {
        rpc_timeout: Duration::from_micros(rpc_timeout_us),
        lease_margin: Duration::from_micros(margin_us),
        ..ClientConfig::default()
    }
}

impl Client {
    pub fn new(
        slot: usize,
        tenant: TenantId,
        cfg: &ClientConfig,
        seed: u64,
        skew_ppm: i64,
        now: u64,
        tag_base: u64,
    ) -> Self {
        let mut rng = Rng::new(seed);
        Client {
            slot,
            tenant,
            core: ClientCore::new(cfg, SLOTS, rng.next_u64()),
            offset: rng.below(1 << 30),
            rng,
            skew_ppm,
            conn: 0,
            id: None,
            calls: BTreeMap::new(),
            held: Vec::new(),
            owed: Vec::new(),
            seen: VecDeque::new(),
            next_op: now,
            reconnect_at: Some(now),
            frozen_until: None,
            resumed: 0,
            pending: None,
            rpc_timeout: cfg.rpc_timeout.as_micros() as u64,
            next_tag: tag_base,
            follow_ups: Vec::new(),
            renewals: Vec::new(),
            ops: 0,
            handed_back: 0,
            left_to_lease: 0,
            outcomes: 0,
            unknown: 0,
        }
    }

    /// The lease (and timer) clock at node time `t`.
    pub fn clock(&self, t: u64) -> Timestamp {
        let skewed = t as i128 + t as i128 * self.skew_ppm as i128 / 1_000_000;
        Timestamp(skewed as u64 + self.offset)
    }

    /// The node time at which the client's clock reads `c` (the first µs at or after it).
    pub fn node_time(&self, c: Timestamp) -> u64 {
        let local = c.0.saturating_sub(self.offset) as i128;
        let t = local * 1_000_000 / (1_000_000 + self.skew_ppm as i128);
        let mut t = t.max(0) as u64;
        while self.clock(t) < c {
            t += 1;
        }
        t
    }

    fn now(&self, t: u64) -> Now {
        Now::both(self.clock(t))
    }

    /// When the client next has something to do (node time).
    pub fn wake(&self) -> u64 {
        if let Some(f) = self.frozen_until {
            return f;
        }
        let mut w = self.next_op;
        if let Some(r) = self.reconnect_at {
            w = w.min(r);
        }
        if let Some(c) = self.core.poll_timeout() {
            w = w.min(self.node_time(c));
        }
        w
    }

    pub fn active(&self, t: u64) -> bool {
        self.frozen_until.is_none_or(|f| t >= f)
    }

    /// The session is gone (lost, or the node told so by breaking the connection).
    pub fn lose(&mut self, t: u64) {
        if !self.core.is_lost() {
            self.core.lose_session(WcStatus::RetryExceeded);
        }
        self.session_ended(t);
    }

    fn session_ended(&mut self, t: u64) {
        self.id = None;
        // Permissions end with their session (the client library refuses them).
        self.held.clear();
        self.pending = None;
        self.follow_ups.clear();
        if self.reconnect_at.is_none() {
            self.reconnect_at = Some(t + 100 + self.rng.below(900));
        }
    }

    /// Opens a new session: the world connects it, then the `Hello` goes out.
    pub fn connect(&mut self, t: u64, out: &mut Vec<Effect>) {
        self.reconnect_at = None;
        self.conn += 1;
        self.core.begin_session(self.conn);
        self.owed = vec![0];
        self.take_outcomes(t, None); // calls of the old session ended (ControlLost)
        out.push(Effect::Connect);
        let hello = Request::Hello {
            tenant: self.tenant,
            secret: 0,
        };
        let id = self
            .core
            .start(hello, Owner::Reply, self.now(t))
            .expect("a fresh session has a slot");
        self.calls.insert(
            id,
            Call {
                kind: Kind::Hello,
                sent: self.clock(t),
                started: t,
            },
        );
        self.drain(out);
    }

    fn drain(&mut self, out: &mut Vec<Effect>) {
        while let Some(tx) = self.core.poll_transmit() {
            if self.owed.len() <= tx.channel {
                self.owed.resize(tx.channel + 1, 0);
            }
            self.owed[tx.channel] += 1;
            if self.id.is_some_and(|id| super::node::trace(id, tx.id)) {
                eprintln!("client sends {} on {}: {:?}", tx.id, tx.channel, tx.request);
            }
            out.push(Effect::Send {
                shard: tx.channel,
                wire: tx.id,
                req: tx.request,
            });
        }
    }

    /// An answer arrived on `channel`.
    pub fn on_reply(
        &mut self,
        t: u64,
        channel: usize,
        wire: u64,
        reply: Reply,
        nic_epoch: &dyn Fn(MemoryKey) -> u64,
        out: &mut Vec<Effect>,
    ) -> Result<(), String> {
        if self.id.is_some_and(|id| super::node::trace(id, wire)) {
            eprintln!("t {t} client gets {wire} on {channel}: {reply:?}");
        }
        if self.core.is_lost() {
            // The driver closed the session's channels: nothing more is read from them (the
            // node ends the session, and with it whatever this answer granted).
            return Ok(());
        }
        let strays = self.core.counts().strays;
        let owed = self.owed.get(channel).copied().unwrap_or(0);
        self.core.on_reply(channel, wire, reply, self.now(t));
        if let Some(o) = self.owed.get_mut(channel) {
            *o = o.saturating_sub(1);
        }
        let mut sent = Vec::new();
        self.drain(&mut sent);
        let took = self.take_outcomes(t, Some(nic_epoch));
        if let Reply::Granted(g) = reply {
            let handed_back = sent.iter().any(|e| {
                matches!(e, Effect::Send { req: Request::Revoke { id, .. }, .. } if *id == g.id)
            });
            if took.contains(&g.id) {
            } else if handed_back {
                self.handed_back += 1;
            } else if self.core.counts().strays > strays {
                if !self.seen.contains(&g.id) {
                    return Err(format!(
                        "client {:?}: a grant nobody holds: {g:?} answered wire id {wire} \
                         again with another permission",
                        self.id
                    ));
                }
            } else {
                // Not taken, not handed back: only when no slot was free for the hand-back.
                let map = self.core.shard_map();
                let revoke = Request::Revoke {
                    id: g.id,
                    free: false,
                };
                let ch = match map.route(&revoke) {
                    Route::Shard(k) => k,
                    _ => 0,
                };
                let owed_then = if ch == channel {
                    owed.saturating_sub(1)
                } else {
                    self.owed.get(ch).copied().unwrap_or(0)
                };
                if owed_then < SLOTS && !self.core.is_lost() {
                    return Err(format!(
                        "client {:?}: late grant {g:?} neither held nor handed back (channel \
                         {ch} owed {owed_then} < {SLOTS} answers)",
                        self.id
                    ));
                }
                self.left_to_lease += 1;
            }
            if self.seen.len() == 256 {
                self.seen.pop_front();
            }
            self.seen.push_back(g.id);
        }
        out.extend(sent);
        Ok(())
    }

    /// Takes every ended call's outcome; returns the grants taken.
    fn take_outcomes(
        &mut self,
        t: u64,
        nic_epoch: Option<&dyn Fn(MemoryKey) -> u64>,
    ) -> Vec<PermissionId> {
        let done: Vec<u64> = self
            .calls
            .keys()
            .copied()
            .filter(|&id| self.core.is_done(id))
            .collect();
        let mut taken = Vec::new();
        for id in done {
            let call = self.calls.remove(&id).expect("call");
            let outcome = self.core.take_outcome(id).expect("done");
            assert!(!self.core.is_known(id), "an outcome taken twice");
            self.outcomes += 1;
            match (call.kind, outcome) {
                (
                    Kind::Hello,
                    Ok(Reply::Welcome {
                        client_id,
                        shards,
                        max_lifetime_us,
                        ..
                    }),
                ) => {
                    self.core.session_opened(shards, client_id, max_lifetime_us);
                    self.owed.resize(self.core.channels(), 0);
                    self.id = Some(client_id);
                }
                (Kind::Hello, _) => {} // no session: lost, the driver reconnects
                (Kind::Allocate(mode), Ok(Reply::Granted(g)))
                | (Kind::Acquire(_, mode), Ok(Reply::Granted(g))) => {
                    let access = match call.kind {
                        Kind::Acquire(a, _) => a,
                        _ => Access::ReadWrite,
                    };
                    let perm = self.core.grant(g, access, mode, call.sent, self.clock(t));
                    let epoch = nic_epoch.map_or(0, |f| f(g.buffer_rkey));
                    self.held.push(Held { perm, epoch });
                    taken.push(g.id);
                }
                (Kind::Renew(old, access), Ok(Reply::Granted(g)))
                | (Kind::RenewAcquire(old, access), Ok(Reply::Granted(g))) => {
                    let perm =
                        self.core
                            .grant(g, access, Mode::Exclusive, call.sent, self.clock(t));
                    let epoch = nic_epoch.map_or(0, |f| f(g.buffer_rkey));
                    self.held.retain(|h| h.perm.id() != old);
                    self.held.push(Held { perm, epoch });
                    taken.push(g.id);
                    if let Some(id) = self.id {
                        self.renewals.push((id, old, g.id));
                    }
                }
                (Kind::Renew(old, _), Ok(Reply::Failed(Status::NotFound))) => {
                    self.held.retain(|h| h.perm.id() != old); // it ended meanwhile
                }
                (
                    Kind::RenewRevoke {
                        old,
                        addr,
                        size,
                        access,
                    },
                    outcome,
                ) => {
                    self.held.retain(|h| h.perm.id() != old);
                    if !matches!(outcome, Err(ClientError::ControlLost(_))) {
                        let req = Request::Acquire {
                            addr,
                            size,
                            lease_us: 200 + self.rng.below(6_000),
                            access,
                            mode: Mode::Exclusive,
                            wait_us: self.rng.below(self.rpc_timeout * 3 / 4),
                        };
                        self.follow_ups.push((Kind::RenewAcquire(old, access), req));
                    }
                }
                (Kind::Extend(id), Ok(Reply::Extended { lifetime_us })) => {
                    if let Some(h) = self.held.iter().find(|h| h.perm.id() == id) {
                        h.perm.note_extended(lifetime_us);
                    }
                }
                (Kind::Revoke(id), _) => {
                    // Revoked, refused (already ended) or unknown: not ours any more.
                    self.held.retain(|h| h.perm.id() != id);
                }
                (_, Err(ClientError::RpcTimeout | ClientError::ControlLost(_))) => {
                    self.unknown += 1
                }
                _ => {}
            }
        }
        taken
    }

    /// A turn at node time `t`: timers, outcomes, reconnecting, then maybe one workload op.
    pub fn turn(
        &mut self,
        t: u64,
        world: &mut dyn Data,
        out: &mut Vec<Effect>,
    ) -> Result<(), String> {
        if let Some(f) = self.frozen_until {
            if t < f {
                return Ok(());
            }
            self.frozen_until = None;
            self.resumed = t;
            if let Some(ops) = self.pending.take()
                && let Some(id) = self.id
            {
                run_batch(&self.core, world, id, self.tenant, &ops)?;
            }
        }
        let now = self.now(t);
        if self.core.poll_timeout().is_some_and(|d| d <= now.timer) {
            self.core.handle_timeout(now);
        }
        self.take_outcomes(t, Some(&|k| world.epoch(k)));
        self.drain(out);
        // Every call ends by its deadline: rpc_timeout after its send, which may wait up to
        // rpc_timeout for a slot or a back-off; an allocation is sent again to each other
        // shard that cannot serve it (plus the clock's skew; a freeze postpones it all).
        let bound = (1 + self.core.channels() as u64) * self.rpc_timeout + self.rpc_timeout / 10;
        for (id, c) in &self.calls {
            if t > c.started.max(self.resumed) + bound {
                return Err(format!(
                    "client {:?}: call {id} ({:?}) started at {} has not ended by {t}",
                    self.id, c.kind, c.started
                ));
            }
        }
        if self.core.is_lost() {
            if let Some(id) = self.id.take() {
                out.push(Effect::Disconnect(id));
                self.session_ended(t);
            } else if self.reconnect_at.is_none()
                && !self.calls.values().any(|c| matches!(c.kind, Kind::Hello))
            {
                self.session_ended(t);
            }
            if self.reconnect_at.is_some_and(|r| t >= r) {
                self.connect(t, out);
            }
            return Ok(());
        }
        let clock = self.clock(t);
        self.held.retain(|h| clock < h.perm.expiry());
        for (kind, req) in std::mem::take(&mut self.follow_ups) {
            self.start(t, kind, req, Owner::Reply, out);
        }
        if t >= self.next_op {
            self.next_op = t + 10 + self.rng.below(300);
            if self.id.is_some() {
                self.op(t, world, out)?;
            }
        }
        if self.core.is_lost()
            && let Some(id) = self.id.take()
        {
            // A wedged channel: the session is replaced.
            out.push(Effect::Disconnect(id));
            self.session_ended(t);
        }
        Ok(())
    }

    fn start(&mut self, t: u64, kind: Kind, req: Request, owner: Owner, out: &mut Vec<Effect>) {
        self.ops += 1;
        if let Ok(id) = self.core.start(req, owner, self.now(t)) {
            self.calls.insert(
                id,
                Call {
                    kind,
                    sent: self.clock(t),
                    started: t,
                },
            );
        }
        self.drain(out);
    }

    /// One random workload operation.
    fn op(&mut self, t: u64, world: &mut dyn Data, out: &mut Vec<Effect>) -> Result<(), String> {
        let lease = 200 + self.rng.below(6_000);
        let mode = |r: &mut Rng| {
            if r.chance(1, 3) {
                Mode::Exclusive
            } else {
                Mode::Shared
            }
        };
        let in_flight = self.calls.len();
        match self.rng.below(100) {
            // Control requests, a few in flight at most (several application threads).
            0..=14 if in_flight < 6 => {
                let m = mode(&mut self.rng);
                let size = [64, 100, 256, 1000, 4096][self.rng.below(5) as usize];
                let req = Request::Allocate {
                    size,
                    lease_us: lease,
                    mode: m,
                };
                self.start(t, Kind::Allocate(m), req, Owner::Reply, out);
            }
            15..=32 if in_flight < 6 => {
                let Some((addr, len)) = world.pick_object(&mut self.rng, self.tenant) else {
                    return Ok(());
                };
                let access = if self.rng.chance(1, 2) {
                    Access::ReadWrite
                } else {
                    Access::Read
                };
                let m = mode(&mut self.rng);
                let wait_us = if self.rng.chance(1, 2) {
                    0
                } else {
                    self.rng.below(self.rpc_timeout * 3 / 4)
                };
                let req = Request::Acquire {
                    addr,
                    size: 1 + self.rng.below(len),
                    lease_us: lease,
                    access,
                    mode: m,
                    wait_us,
                };
                self.start(t, Kind::Acquire(access, m), req, Owner::Reply, out);
            }
            33..=38 if in_flight < 6 && !self.held.is_empty() => {
                let h = &self.held[self.rng.below(self.held.len() as u64) as usize];
                let id = h.perm.id();
                let req = Request::Extend {
                    id,
                    lease_us: lease,
                };
                self.start(t, Kind::Extend(id), req, Owner::Reply, out);
            }
            39..=46 if in_flight < 6 && !self.held.is_empty() => {
                let i = self.rng.below(self.held.len() as u64) as usize;
                let h = &self.held[i];
                let id = h.perm.id();
                let free = h.perm.access() == Access::ReadWrite && self.rng.chance(1, 2);
                let req = Request::Revoke { id, free };
                self.start(t, Kind::Revoke(id), req, Owner::Reply, out);
            }
            // CN-collaborated extension: a CAS on the lifetime word.
            47..=52 if !self.held.is_empty() => {
                self.ops += 1;
                let i = self.rng.below(self.held.len() as u64) as usize;
                self.cas_extend(i, lease, world);
            }
            // Renewal of an exclusive permission (as a `LongLease` keeps one).
            53..=54 if in_flight < 6 => {
                self.ops += 1;
                self.renew(t, lease, world, out);
            }
            // Give up on a call (a late grant is then handed back).
            55..=56 if in_flight > 0 => {
                let ids: Vec<u64> = self
                    .calls
                    .iter()
                    .filter(|(_, c)| !matches!(c.kind, Kind::Hello))
                    .map(|(&id, _)| id)
                    .collect();
                if !ids.is_empty() {
                    let id = ids[self.rng.below(ids.len() as u64) as usize];
                    self.core.abandon(id, self.now(t));
                    self.calls.remove(&id);
                }
            }
            // A batch of one-sided ops.
            _ if !self.held.is_empty() => {
                if let Some(ops) = self.decide_access() {
                    self.ops += 1;
                    let id = self.id.expect("session");
                    run_batch(&self.core, world, id, self.tenant, &ops)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A CN-collaborated extension of held permission `i` by `lease` µs: a CAS on its
    /// lifetime word. Returns whether it extended it (a refused CAS drops it: it ended).
    fn cas_extend(&mut self, i: usize, lease: u64, world: &mut dyn Data) -> bool {
        let add = self.core.wire_lease_us(lease);
        let h = &self.held[i];
        let current = h.perm.lifetime_us();
        if current >= h.perm.max_lifetime_us() {
            return false;
        }
        let g = h.perm.grant();
        match world.cas(g.lifetime_rkey, g.lifetime_addr(), current, current + add) {
            None => {
                self.held.swap_remove(i); // the NIC refused: it ended
                false
            }
            Some(old) if old == current => {
                h.perm.note_extended(current + add);
                true
            }
            Some(0) => false,
            Some(old) => {
                h.perm.note_extended(old);
                false
            }
        }
    }

    /// Keeps a random exclusive permission valid for a random margin more, as the core
    /// decides: nothing, a one-sided extension, a renewal in one step (or, mutated, a
    /// hand-back and a fresh acquire).
    fn renew(&mut self, t: u64, lease: u64, world: &mut dyn Data, out: &mut Vec<Effect>) {
        let exclusive: Vec<usize> = (0..self.held.len())
            .filter(|&i| self.held[i].perm.mode() == Mode::Exclusive)
            .collect();
        if exclusive.is_empty() {
            return;
        }
        let i = exclusive[self.rng.below(exclusive.len() as u64) as usize];
        let margin = 500 + self.rng.below(4_000);
        let clock = self.clock(t);
        let (id, expiry) = (self.held[i].perm.id(), self.held[i].perm.expiry());
        let mut step = self.core.renewal(Some(expiry), clock, margin, false);
        if step == Renewal::Extend {
            let extended = self.cas_extend(i, lease, world);
            let Some(h) = self.held.iter().find(|h| h.perm.id() == id) else {
                return; // it ended
            };
            let expiry = h.perm.expiry();
            step = if extended && expiry.0 >= clock.0 + margin {
                Renewal::Keep
            } else {
                self.core.renewal(Some(expiry), clock, margin, true)
            };
        }
        let Some(h) = self.held.iter().find(|h| h.perm.id() == id) else {
            return;
        };
        let access = h.perm.access();
        match step {
            Renewal::Keep | Renewal::Extend | Renewal::Acquire => {}
            Renewal::Renew => {
                let req = Request::Renew {
                    id,
                    lease_us: lease,
                };
                self.start(t, Kind::Renew(id, access), req, Owner::Reply, out);
            }
            Renewal::RevokeThenAcquire => {
                let kind = Kind::RenewRevoke {
                    old: id,
                    addr: h.perm.addr(),
                    size: h.perm.len(),
                    access,
                };
                let req = Request::Revoke { id, free: false };
                self.start(t, kind, req, Owner::Reply, out);
            }
        }
    }

    /// A batch of one to three one-sided ops on random held permissions (live locally:
    /// expired ones were dropped). WRITEs, CASes and FAAs on read-write permissions, now and
    /// then one on a read-only permission (the NIC refuses it).
    pub fn decide_access(&mut self) -> Option<Vec<DataOp>> {
        if self.held.is_empty() {
            return None;
        }
        let n = 1 + self.rng.below(3) as usize;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            let h = &self.held[self.rng.below(self.held.len() as u64) as usize];
            let (addr, len) = (h.perm.addr(), h.perm.len());
            let rw = h.perm.access() == Access::ReadWrite || self.rng.chance(1, 16);
            let kind = match self.rng.below(8) {
                _ if !rw => OpKind::Read,
                0..=3 => OpKind::Read,
                4..=5 => OpKind::Write,
                6 => OpKind::Cas,
                _ => OpKind::Faa,
            };
            let off = self.rng.below(len.max(8) / 8) * 8;
            let n = match kind {
                OpKind::Cas | OpKind::Faa => 8,
                _ => (8 * (1 + self.rng.below(8))).min(len - off.min(len)).max(1),
            };
            self.next_tag += 1;
            ops.push(DataOp {
                kind,
                rkey: h.perm.rkey(),
                addr: addr + off.min(len.saturating_sub(1)),
                len: n,
                epoch: h.epoch,
                tag: self.next_tag,
            });
        }
        Some(ops)
    }

    /// Calls in flight.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }
}

/// What a client reaches of the world during its turn (the data link, and more).
pub trait Data: DataLink {
    /// A CAS through the fake NIC (`None`: refused).
    fn cas(&mut self, rkey: MemoryKey, addr: u64, compare: u64, swap: u64) -> Option<u64>;
    /// The bind count of the window behind `rkey`.
    fn epoch(&self, rkey: MemoryKey) -> u64;
    /// A live object to acquire (any tenant's, mostly the client's own).
    fn pick_object(&mut self, rng: &mut Rng, tenant: TenantId) -> Option<(u64, u64)>;
}
