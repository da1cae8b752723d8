//! A fake NIC + memory for the manager core, and the [`Sim`] driver.
//!
//! The fake executes [`NicOp`]s the way the soft NIC's protection table does for type-1 windows:
//! every bind (including an unbind) bumps the window's key byte, so an rkey handed out earlier
//! dies at once; rkey = (window index ‖ key byte); a one-sided access is allowed only through
//! the window's *current* key, inside its bound range, with the needed right. Lifetime CASes
//! go through the manager's loopback QP (any registered, 8-aligned address). Memory contents
//! are not modelled except the words the manager or clients CAS and the header words.

use super::test_shards;
use patronus_core::manager::{
    BindTarget, ClientId, Counters, ManagerConfig, ManagerCore, MwId, NicOp, NicResult, Occupancy,
    Outgoing, Scrub, SlabConfig, Techniques, TenantQuota,
};
use patronus_core::proto::header::{HEADER_SIZE, LIFETIME_OFFSET};
use patronus_core::proto::messages::{Access, Grant, Mode, PermissionId, Reply, Request, Status};
use patronus_core::proto::shards::{Route, ShardMap};
use rnic::{AccessFlags, MemoryKey, Timestamp};
use std::collections::HashMap;

/// One window of the fake NIC.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// Current binding (`None`: unbound).
    pub target: Option<BindTarget>,
    /// Current key byte (+1 per bind, unbinds included).
    pub key: u8,
    /// The client of the last bind (its PD/QP in stronger isolation modes).
    pub client: ClientId,
    /// Binds so far (unbinds included). The 8-bit key byte repeats after 256 of them (the
    /// type-1 window limitation the design accepts); tests tell such a wrap from a live key.
    pub epoch: u64,
}

/// Operation counts the fake NIC observed (to cross-check the core's own counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Binds with a target (grants, handovers).
    pub binds: u64,
    /// Binds without a target (unbinds).
    pub unbinds: u64,
    /// Lifetime CASes by the manager.
    pub cas: u64,
    /// Ops that failed.
    pub failed: u64,
}

/// The fake NIC and the words of memory-node memory that matter here.
#[derive(Debug)]
pub struct FakeNic {
    windows: Vec<Window>,
    words: HashMap<u64, u64>,
    /// Registered ranges `[start, end)`: the header pool and the buffer pool.
    regions: Vec<(u64, u64)>,
    /// What was executed.
    pub stats: NicStats,
    /// Fault injection: this many of the next binds with a target fail (the window keeps its
    /// old binding and key, as a failed BIND_MW work request leaves it).
    pub fail_next_binds: u32,
    /// Binds with a target that succeed before `fail_next_binds` starts failing them.
    pub skip_binds: u32,
    /// Fault injection: this many of the next unbinds fail (the window stays bound).
    pub fail_next_unbinds: u32,
    /// Verbs semantics of one bind QP: after a bind work request fails, the QP is in error and
    /// every later bind of the same chain is flushed (fails, changes nothing).
    pub flush_after_failure: bool,
    flushing: bool,
}

/// rkey of window `mw` with key byte `key`.
pub fn rkey_of(mw: MwId, key: u8) -> MemoryKey {
    MemoryKey::new(mw, key)
}

impl FakeNic {
    /// A NIC with `mw_count` unbound windows over the configured pools.
    pub fn new(cfg: &ManagerConfig) -> Self {
        FakeNic {
            windows: vec![Window::default(); cfg.mw_count as usize],
            words: HashMap::new(),
            regions: vec![
                (
                    cfg.header_base,
                    cfg.header_base + (cfg.header_count * HEADER_SIZE) as u64,
                ),
                (cfg.buffer_base, cfg.buffer_base + cfg.buffer_len),
            ],
            stats: NicStats::default(),
            fail_next_binds: 0,
            skip_binds: 0,
            fail_next_unbinds: 0,
            flush_after_failure: false,
            flushing: false,
        }
    }

    fn registered(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.regions.iter().any(|&(s, e)| addr >= s && end <= e)
    }

    /// Windows so far.
    pub fn window_count(&self) -> MwId {
        self.windows.len() as MwId
    }

    /// Adds `n` unbound windows (a new client's protection domain).
    pub fn add_windows(&mut self, n: u32) {
        self.windows
            .extend(std::iter::repeat_n(Window::default(), n as usize));
    }

    /// Executes one chain, in order.
    pub fn execute(&mut self, ops: &[NicOp]) -> Vec<NicResult> {
        self.flushing = false;
        ops.iter()
            .map(|op| {
                let r = self.execute_one(op);
                if r == NicResult::Failed && matches!(op, NicOp::Bind { .. }) {
                    self.flushing = self.flush_after_failure;
                }
                r
            })
            .collect()
    }

    fn execute_one(&mut self, op: &NicOp) -> NicResult {
        match *op {
            NicOp::Bind {
                mw,
                client,
                target,
                key,
            } => {
                let target = target.filter(|t| t.len > 0);
                let injected = if target.is_some() {
                    if self.skip_binds > 0 && self.fail_next_binds > 0 && !self.flushing {
                        self.skip_binds -= 1;
                        &mut 0
                    } else {
                        &mut self.fail_next_binds
                    }
                } else {
                    &mut self.fail_next_unbinds
                };
                if self.flushing || *injected > 0 {
                    *injected = injected.saturating_sub(1);
                    self.stats.failed += 1;
                    return NicResult::Failed;
                }
                if let Some(t) = target
                    && (!self.registered(t.addr, t.len)
                        || !AccessFlags::REMOTE_ALL.contains(t.access))
                {
                    self.stats.failed += 1;
                    return NicResult::Failed;
                }
                let Some(w) = self.windows.get_mut(mw as usize) else {
                    self.stats.failed += 1;
                    return NicResult::Failed;
                };
                w.key = key.unwrap_or(w.key.wrapping_add(1));
                w.epoch += 1;
                w.target = target;
                w.client = client;
                if target.is_some() {
                    self.stats.binds += 1;
                } else {
                    self.stats.unbinds += 1;
                }
                NicResult::Bound(rkey_of(mw, w.key))
            }
            NicOp::LifetimeCas {
                addr,
                compare,
                swap,
            } => {
                if addr % 8 != 0 || !self.registered(addr, 8) {
                    self.stats.failed += 1;
                    return NicResult::Failed;
                }
                self.stats.cas += 1;
                let w = self.words.entry(addr).or_insert(0);
                let old = *w;
                if old == compare {
                    *w = swap;
                }
                NicResult::CasOld(old)
            }
        }
    }

    /// The manager's local store of a header (after the chain completed).
    pub fn write_header(&mut self, addr: u64, words: [u64; 4]) {
        for (i, w) in words.iter().enumerate() {
            self.words.insert(addr + 8 * i as u64, *w);
        }
    }

    /// A word of memory (0 if never written).
    pub fn word(&self, addr: u64) -> u64 {
        self.words.get(&addr).copied().unwrap_or(0)
    }

    /// Whether a one-sided READ (`write == false`) or WRITE of `[addr, addr + len)` through
    /// `rkey` would pass the responder's rkey checks.
    pub fn can_access(&self, rkey: MemoryKey, addr: u64, len: u64, write: bool) -> bool {
        let right = if write {
            AccessFlags::REMOTE_WRITE
        } else {
            AccessFlags::REMOTE_READ
        };
        self.check(rkey, addr, len, right)
    }

    /// Whether an 8-byte atomic on `addr` through `rkey` would pass.
    pub fn can_atomic(&self, rkey: MemoryKey, addr: u64) -> bool {
        addr % 8 == 0 && self.check(rkey, addr, 8, AccessFlags::REMOTE_ATOMIC)
    }

    fn check(&self, rkey: MemoryKey, addr: u64, len: u64, right: AccessFlags) -> bool {
        let Some(w) = self.windows.get(rkey.index() as usize) else {
            return false;
        };
        let Some(t) = w.target else { return false };
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        w.key == rkey.key_byte()
            && len > 0
            && addr >= t.addr
            && end <= t.addr + t.len
            && t.access.contains(right)
    }

    /// A client's RDMA CAS through `rkey`: `None` if the NIC rejects it, else the old value.
    pub fn client_cas(
        &mut self,
        rkey: MemoryKey,
        addr: u64,
        compare: u64,
        swap: u64,
    ) -> Option<u64> {
        if !self.can_atomic(rkey, addr) {
            return None;
        }
        let w = self.words.entry(addr).or_insert(0);
        let old = *w;
        if old == compare {
            *w = swap;
        }
        Some(old)
    }

    /// The binding `rkey` currently grants (`None` if the key is dead or unbound).
    pub fn binding(&self, rkey: MemoryKey) -> Option<BindTarget> {
        let w = self.windows.get(rkey.index() as usize)?;
        (w.key == rkey.key_byte()).then_some(w.target).flatten()
    }

    /// A window's state.
    pub fn window(&self, mw: MwId) -> Window {
        self.windows[mw as usize]
    }

    /// Bound windows overlapping `[addr, addr + len)`, with their current rkeys.
    pub fn windows_over(&self, addr: u64, len: u64) -> Vec<(MwId, MemoryKey, BindTarget)> {
        self.windows
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let t = w.target?;
                (t.addr < addr + len && addr < t.addr + t.len).then_some((
                    i as MwId,
                    rkey_of(i as MwId, w.key),
                    t,
                ))
            })
            .collect()
    }

    /// Every bound window.
    pub fn bound_windows(&self) -> Vec<(MwId, MemoryKey, BindTarget)> {
        self.windows_over(0, u64::MAX)
    }
}

/// A small deterministic generator (SplitMix64) for the storm and table workloads.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// A small configuration: 64 KiB-class slabs of 16 KiB, generous pools.
pub fn test_config(techniques: Techniques) -> ManagerConfig {
    ManagerConfig {
        techniques,
        max_lifetime_us: 10_000,
        header_base: 0x10_0000,
        header_count: 256,
        buffer_base: 0x100_0000,
        buffer_len: 1 << 20,
        slab: SlabConfig {
            min_class: 64,
            max_class: 1 << 16,
            slab_bytes: 1 << 14,
        },
        mw_count: 512,
        buffer_watermark: 0,
        scrub: Scrub::OnGrant,
        max_wait_us: u64::MAX,
        key_seed: None,
        lease_floor_us: 0,
        lease_floor_turns: 2,
        quota: TenantQuota::UNLIMITED,
        client_quota: TenantQuota::UNLIMITED,
    }
}

/// What the driver remembers about a request until its reply leaves.
#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    /// Who asked.
    pub client: ClientId,
    /// What.
    pub request: Request,
}

/// A grant as the simulation saw it leave.
#[derive(Clone, Copy, Debug)]
pub struct Issued {
    /// To whom.
    pub client: ClientId,
    /// For what.
    pub request: Request,
    /// The grant.
    pub grant: Grant,
    /// Its rights.
    pub access: Access,
    /// Virtual time of the reply.
    pub at: Timestamp,
}

/// The driver: a virtual clock, the manager's shards (one core each, as the memory node runs
/// them) over one fake NIC, plus invariant checks on every reply.
///
/// With several shards, requests are routed as clients route them ([`ShardMap::route`]): by
/// the address they name, allocations round-robin, per-client state to every shard. Each shard
/// owns a disjoint range of the NIC's windows (its local window ids are translated), so an
/// rkey of one shard is never valid at another. A batch steps every shard in turn.
#[derive(Debug)]
pub struct Sim {
    /// The shards' cores.
    pub cores: Vec<ManagerCore>,
    /// How requests are routed to them.
    pub map: ShardMap,
    /// The fake NIC and memory.
    pub nic: FakeNic,
    /// Its configuration (the whole memory node's).
    pub cfg: ManagerConfig,
    /// Virtual time.
    pub now: Timestamp,
    /// Per shard: the NIC's window behind each local window id.
    windows: Vec<Vec<MwId>>,
    next_req: u64,
    next_any: usize,
    pending: Vec<(ClientId, u64, Request)>,
    in_flight: HashMap<u64, InFlight>,
    /// Replies still owed to a request sent to every shard, beyond the first.
    owed: HashMap<u64, usize>,
    /// Every op of the last [`run`](Self::run) (all its batches, `begin` ones included), with
    /// windows as the NIC numbers them.
    pub last_ops: Vec<NicOp>,
    /// Every grant ever issued, in order.
    pub issued: Vec<Issued>,
    last_start: HashMap<u64, u64>,
    /// Batches run.
    pub batches: u64,
    /// Buffers the driver zeroed, over the whole run, in order.
    pub scrubbed: Vec<(u64, u64)>,
}

/// The largest shard count up to `want` that `cfg`'s pools can be split into (every shard
/// needs a header, a slab and a window).
pub fn feasible_shards(cfg: &ManagerConfig, want: usize) -> usize {
    (1..=want.max(1))
        .rev()
        .find(|&n| cfg.shard_map(n).is_ok() && cfg.mw_count as usize >= n)
        .unwrap_or(1)
}

impl Sim {
    /// A simulation of a fresh manager at time 1000 µs, with [`test_shards`](super::test_shards) shards (as many
    /// as the pools allow).
    pub fn new(cfg: ManagerConfig) -> Self {
        let shards = feasible_shards(&cfg, test_shards());
        Self::with_shards(cfg, shards)
    }

    /// A simulation of a one-shard manager, whatever [`test_shards`](super::test_shards) says: for tests of one
    /// core's exact behaviour (its pool capacities, its batches, its fault positions).
    pub fn one_shard(cfg: ManagerConfig) -> Self {
        Self::with_shards(cfg, 1)
    }

    /// A simulation of a fresh manager split into `shards` shards (panics if the pools are too
    /// small for that many; see [`feasible_shards`]).
    pub fn with_shards(cfg: ManagerConfig, shards: usize) -> Self {
        let map = cfg
            .shard_map(shards)
            .expect("pools too small for the shards");
        let mut cores = Vec::with_capacity(shards);
        let mut windows = Vec::with_capacity(shards);
        let mut next_mw = 0;
        for k in 0..shards {
            let shard = cfg.shard(&map, k);
            windows.push((next_mw..next_mw + shard.mw_count).collect());
            next_mw += shard.mw_count;
            cores.push(ManagerCore::new(shard));
        }
        Sim {
            cores,
            map,
            nic: FakeNic::new(&cfg),
            cfg,
            now: Timestamp(1000),
            windows,
            next_req: 1,
            next_any: 0,
            pending: Vec::new(),
            in_flight: HashMap::new(),
            owed: HashMap::new(),
            last_ops: Vec::new(),
            issued: Vec::new(),
            last_start: HashMap::new(),
            batches: 0,
            scrubbed: Vec::new(),
        }
    }

    /// The core of a one-shard simulation (panics with several shards: say which).
    pub fn core(&self) -> &ManagerCore {
        assert_eq!(
            self.cores.len(),
            1,
            "a sharded simulation has one core per shard"
        );
        &self.cores[0]
    }

    /// The core of a one-shard simulation, mutably.
    pub fn core_mut(&mut self) -> &mut ManagerCore {
        assert_eq!(
            self.cores.len(),
            1,
            "a sharded simulation has one core per shard"
        );
        &mut self.cores[0]
    }

    /// Counters summed over the shards.
    pub fn counters(&self) -> Counters {
        self.cores
            .iter()
            .fold(Counters::default(), |sum, c| sum.plus(&c.counters()))
    }

    /// Gives `client` its own protection domain with `windows` windows in every shard (PD per
    /// client).
    pub fn add_client_domain(&mut self, client: ClientId, windows: u32) {
        for (core, map) in self.cores.iter_mut().zip(&mut self.windows) {
            let local = core.add_client_domain(client, windows);
            if (local.end as usize) <= map.len() {
                // A retired domain's ids, reused: their fake windows are all unbound.
                continue;
            }
            assert_eq!(
                local.start as usize,
                map.len(),
                "local window ids are dense"
            );
            let first = self.nic.window_count();
            self.nic.add_windows(windows);
            map.extend(first..first + windows);
        }
    }

    /// `client` leaves: every shard clears it out in the next batch, which runs now. Returns
    /// that batch's replies (to others) and the window ids (per shard, local) of the domains
    /// that retired.
    pub fn depart(&mut self, client: ClientId) -> (Vec<Outgoing>, Vec<Vec<std::ops::Range<MwId>>>) {
        for core in &mut self.cores {
            core.depart(client);
        }
        let out = self.run();
        assert!(
            out.iter().all(|o| o.client != client),
            "nothing is answered to a departed client: {out:?}"
        );
        let retired = self
            .cores
            .iter_mut()
            .map(|c| c.take_retired().into_iter().map(|(_, ids)| ids).collect())
            .collect();
        (out, retired)
    }

    /// Queues another copy of request `id` (a client's retry), without a new id.
    pub fn resubmit(&mut self, client: ClientId, id: u64, request: Request) {
        self.pending.push((client, id, request));
    }

    /// Moves the virtual clock forward.
    pub fn advance(&mut self, us: u64) {
        self.now = self.now.plus_us(us);
    }

    /// Queues a request for the next [`run`](Self::run); returns its request id.
    pub fn submit(&mut self, client: ClientId, request: Request) -> u64 {
        let id = self.next_req;
        self.next_req += 1;
        self.pending.push((client, id, request));
        self.in_flight.insert(id, InFlight { client, request });
        if self.map.route(&request) == Route::All && self.cores.len() > 1 {
            self.owed.insert(id, self.cores.len() - 1);
        }
        id
    }

    /// Runs the queued requests as one batch at `now`, then keeps running empty batches while
    /// a deadline is due (as the runner does: it loops at once while `next_deadline() <= now`).
    pub fn run(&mut self) -> Vec<Outgoing> {
        self.last_ops.clear();
        let reqs = std::mem::take(&mut self.pending);
        let mut out = self.batch(&reqs);
        for _ in 0..64 {
            let now = self.now;
            if self
                .cores
                .iter()
                .all(|c| c.next_deadline().is_none_or(|d| d > now) && !c.has_pending_work())
            {
                return out;
            }
            out.extend(self.batch(&[]));
        }
        panic!("deadlines keep coming due at {:?}", self.now);
    }

    /// Runs exactly one batch with the submitted requests (no follow-up batches).
    pub fn run_once(&mut self) -> Vec<Outgoing> {
        self.last_ops.clear();
        let reqs = std::mem::take(&mut self.pending);
        self.batch(&reqs)
    }

    /// Submits `reqs` and runs them as one batch.
    pub fn step(&mut self, reqs: &[(ClientId, Request)]) -> Vec<Outgoing> {
        for &(c, r) in reqs {
            self.submit(c, r);
        }
        self.run()
    }

    /// One request as its own batch; its reply (panics if it got none, e.g. it is waiting).
    pub fn call(&mut self, client: ClientId, request: Request) -> Reply {
        let id = self.submit(client, request);
        let out = self.run();
        reply_to(&out, id).unwrap_or_else(|| panic!("no reply to {request:?}"))
    }

    /// One batch: each shard steps on the requests routed to it, in shard order.
    fn batch(&mut self, reqs: &[(ClientId, u64, Request)]) -> Vec<Outgoing> {
        let shards = self.cores.len();
        let mut routed: Vec<Vec<(ClientId, u64, Request)>> = vec![Vec::new(); shards];
        for &(client, id, request) in reqs {
            match self.map.route(&request) {
                Route::Shard(k) => routed[k].push((client, id, request)),
                Route::Any => {
                    routed[self.next_any % shards].push((client, id, request));
                    self.next_any += 1;
                }
                Route::All => routed
                    .iter_mut()
                    .for_each(|r| r.push((client, id, request))),
            }
        }
        let mut out = Vec::new();
        for (k, reqs) in routed.iter().enumerate() {
            out.extend(self.shard_batch(k, reqs));
        }
        out
    }

    fn shard_batch(&mut self, k: usize, reqs: &[(ClientId, u64, Request)]) -> Vec<Outgoing> {
        let (replies, batch_keys) = self.shard_step(k, reqs);
        for o in &replies {
            self.check_reply(o, &batch_keys);
        }
        replies
    }

    /// One batch of shard `k` on requests the caller routed and numbered itself (a driver
    /// with its own request ids, as the cluster simulation's node): the NIC chain, the header
    /// writes and the scrubs (recorded in [`Sim::scrubbed`], checked: no other window covers a
    /// scrubbed range), without this driver's request bookkeeping. Returns the replies and the
    /// rkeys this batch granted (for [`Sim::check_grant`]).
    pub fn shard_step(
        &mut self,
        k: usize,
        reqs: &[(ClientId, u64, Request)],
    ) -> (Vec<Outgoing>, Vec<MemoryKey>) {
        self.batches += 1;
        // The same `step` as the memory node's runner, on the simulated NIC; the shard's window
        // ids are translated to the NIC's.
        let (nic, last_ops, windows) = (&mut self.nic, &mut self.last_ops, &self.windows[k]);
        let mut global = Vec::new();
        let fin = self.cores[k].step(self.now, reqs, &mut |ops: &[NicOp]| {
            global.clear();
            global.extend(ops.iter().map(|op| match *op {
                NicOp::Bind {
                    mw,
                    client,
                    target,
                    key,
                } => NicOp::Bind {
                    mw: windows[mw as usize],
                    client,
                    target,
                    key,
                },
                cas => cas,
            }));
            last_ops.extend_from_slice(&global);
            nic.execute(&global)
        });
        for (addr, words) in &fin.header_writes {
            self.nic.write_header(*addr, *words);
        }
        self.scrubbed.extend_from_slice(&fin.scrubs);
        // Grants of this batch may legitimately share an object (shared holders of memory
        // allocated in the same batch); earlier owners' windows may not.
        let batch_keys: Vec<MemoryKey> = fin
            .replies
            .iter()
            .filter_map(|o| match o.reply {
                Reply::Granted(g) => Some([g.buffer_rkey, g.lifetime_rkey]),
                _ => None,
            })
            .flatten()
            .collect();
        // A scrub runs after the chain: no window but this batch's grants reaches the buffer,
        // so no late write of an earlier owner can land after it.
        for &(addr, len) in &fin.scrubs {
            for (mw, key, t) in self.nic.windows_over(addr, len) {
                assert!(
                    batch_keys.contains(&key),
                    "window {mw} ({t:?}) still covers scrubbed {addr:#x}+{len}"
                );
            }
        }
        (fin.replies, batch_keys)
    }

    /// Invariants every reply must satisfy when it leaves.
    fn check_reply(&mut self, o: &Outgoing, batch_keys: &[MemoryKey]) {
        let req = match self.owed.get_mut(&o.req_id) {
            // A request sent to every shard: each answers it once.
            Some(left) => {
                *left -= 1;
                if *left == 0 {
                    self.owed.remove(&o.req_id);
                }
                self.in_flight.get(&o.req_id).copied()
            }
            None => self.in_flight.remove(&o.req_id),
        };
        let Some(req) = req else {
            panic!("reply to an unknown or already answered request: {o:?}");
        };
        assert!(o.copies >= 1, "a reply for no copy: {o:?}");
        assert_eq!(req.client, o.client, "reply went to the wrong client");
        if let Reply::Granted(g) = o.reply {
            self.check_grant(o.client, req.request, &g, batch_keys);
        }
    }

    /// Invariants a grant to `client` for `request` must satisfy when it leaves: start times
    /// increase per header, the header was written, the rkeys work with exactly the granted
    /// rights, only this grant's windows reach its lifetime word, and no earlier owner's
    /// window is bound over freshly allocated memory (`batch_keys`: the batch's grants).
    pub fn check_grant(
        &mut self,
        client: ClientId,
        request: Request,
        g: &Grant,
        batch_keys: &[MemoryKey],
    ) {
        let g = *g;
        let (access, allocate) = match request {
            Request::Allocate { .. } => (Access::ReadWrite, true),
            Request::Acquire { access, .. } => (access, false),
            // A renewal keeps the rights of the permission it replaces.
            Request::Renew { id, .. } => {
                let old = self.issued.iter().rev().find(|i| i.grant.id == id);
                (old.map_or(Access::Read, |i| i.access), false)
            }
            other => panic!("{other:?} answered with a grant"),
        };
        // ABA filter: start times strictly increase per header.
        let last = self.last_start.insert(g.id.header_addr, g.id.start_us);
        assert!(
            last.is_none_or(|l| l < g.id.start_us),
            "start time of header {:#x} did not increase: {last:?} -> {}",
            g.id.header_addr,
            g.id.start_us
        );
        let lifetime = g.lifetime_addr();
        // The header was written after the chain: the lifetime word holds the grant's lifetime.
        assert_eq!(
            self.nic.word(lifetime),
            g.lifetime_us,
            "lifetime word of {g:?}"
        );
        assert_eq!(
            self.nic.word(g.id.header_addr + 16),
            g.id.start_us,
            "start word"
        );
        // The rkeys work, with exactly the granted rights.
        let write = access == Access::ReadWrite;
        assert!(
            self.nic
                .can_access(g.buffer_rkey, g.buffer_addr, g.buffer_len, false)
        );
        assert_eq!(
            self.nic
                .can_access(g.buffer_rkey, g.buffer_addr, g.buffer_len, true),
            write,
            "buffer write right of {g:?}"
        );
        assert_eq!(
            self.nic.can_atomic(g.buffer_rkey, g.buffer_addr),
            write,
            "buffer atomic right of {g:?}"
        );
        assert!(self.nic.can_atomic(g.lifetime_rkey, lifetime));
        assert!(
            !self.nic.can_access(g.lifetime_rkey, lifetime, 8, true) || g.contiguous,
            "a separate lifetime window must not allow writes"
        );
        // Only this grant's windows reach its lifetime word.
        let own = [g.buffer_rkey, g.lifetime_rkey];
        for (mw, key, t) in self.nic.windows_over(lifetime, 8) {
            assert!(
                own.contains(&key),
                "window {mw} ({t:?}) of someone else covers the lifetime word of {g:?}"
            );
        }
        // A new owner of memory: no earlier owner's window may still be bound over the object.
        if allocate {
            // The header slot in front of the buffer exists only with contiguity.
            let slot = if self.cfg.techniques.contiguity {
                HEADER_SIZE as u64
            } else {
                0
            };
            let object = g.buffer_addr - slot;
            for (mw, key, t) in self.nic.windows_over(object, g.buffer_len + slot) {
                assert!(
                    own.contains(&key) || batch_keys.contains(&key),
                    "window {mw} ({t:?}) is still bound over freshly allocated {g:?}"
                );
            }
        }
        self.issued.push(Issued {
            client,
            request,
            grant: g,
            access,
            at: self.now,
        });
    }

    /// The object behind a grant's buffer, as (first byte, length): the header slot in front
    /// of the buffer exists only with contiguity.
    pub fn object_range(&self, grant: &Grant) -> (u64, u64) {
        let slot = if self.cfg.techniques.contiguity {
            HEADER_SIZE as u64
        } else {
            0
        };
        (grant.buffer_addr - slot, grant.buffer_len + slot)
    }

    /// Requests with no reply yet (queued waiters).
    pub fn unanswered(&self) -> usize {
        self.in_flight.len()
    }

    /// Pool occupancy.
    pub fn occupancy(&self) -> Occupancy {
        self.cores
            .iter()
            .map(|c| c.occupancy())
            .reduce(|a, b| a.plus(&b))
            .expect("at least one shard")
    }

    // ------------------------------------------------------------ client-side helpers

    /// `allocate` as its own batch; panics unless granted.
    pub fn allocate(&mut self, client: ClientId, size: u64, lease_us: u64) -> Grant {
        expect_grant(self.call(
            client,
            Request::Allocate {
                size,
                lease_us,
                mode: Mode::Shared,
            },
        ))
    }

    /// `acquire` (no waiting) as its own batch; the reply.
    pub fn acquire(
        &mut self,
        client: ClientId,
        buffer_addr: u64,
        size: u64,
        lease_us: u64,
        access: Access,
        mode: Mode,
    ) -> Reply {
        self.call(
            client,
            Request::Acquire {
                addr: buffer_addr,
                size,
                lease_us,
                access,
                mode,
                wait_us: 0,
            },
        )
    }

    /// `revoke` as its own batch; the reply.
    pub fn revoke(&mut self, client: ClientId, id: PermissionId, free: bool) -> Reply {
        self.call(client, Request::Revoke { id, free })
    }

    /// CN-collaborated extension: the client CASes the lifetime word through its lifetime
    /// rkey. `None` if the NIC rejected the access; else the old value (== `compare` on success).
    pub fn client_cas_extend(&mut self, grant: &Grant, compare: u64, swap: u64) -> Option<u64> {
        self.nic
            .client_cas(grant.lifetime_rkey, grant.lifetime_addr(), compare, swap)
    }

    /// Whether the buffer of `grant` can be read through its rkey.
    pub fn can_read(&self, grant: &Grant) -> bool {
        self.nic.can_access(
            grant.buffer_rkey,
            grant.buffer_addr,
            grant.buffer_len,
            false,
        )
    }

    /// Whether the buffer of `grant` can be written through its rkey.
    pub fn can_write(&self, grant: &Grant) -> bool {
        self.nic
            .can_access(grant.buffer_rkey, grant.buffer_addr, grant.buffer_len, true)
    }

    /// Whether any of `grant`'s rkeys is currently bound over any byte of `[addr, addr + len)`
    /// (with any right: the strictest notion of "reaches").
    pub fn reaches(&self, grant: &Grant, addr: u64, len: u64) -> bool {
        [grant.buffer_rkey, grant.lifetime_rkey].iter().any(|&k| {
            self.nic.binding(k).is_some_and(|t| {
                !t.access.is_empty() && t.addr < addr.saturating_add(len) && addr < t.addr + t.len
            })
        })
    }

    /// Whether any of `grant`'s rkeys is still bound to anything.
    pub fn any_key_alive(&self, grant: &Grant) -> bool {
        self.nic.binding(grant.buffer_rkey).is_some()
            || self.nic.binding(grant.lifetime_rkey).is_some()
    }

    /// Binds (with target) and unbinds in the last run's chains.
    pub fn last_bind_counts(&self) -> (usize, usize) {
        let binds = self
            .last_ops
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    NicOp::Bind {
                        target: Some(_),
                        ..
                    }
                )
            })
            .count();
        let unbinds = self
            .last_ops
            .iter()
            .filter(|o| matches!(o, NicOp::Bind { target: None, .. }))
            .count();
        (binds, unbinds)
    }
}

/// The reply to request `id` among `out`.
pub fn reply_to(out: &[Outgoing], id: u64) -> Option<Reply> {
    out.iter().find(|o| o.req_id == id).map(|o| o.reply)
}

/// The grant inside `reply`; panics otherwise.
pub fn expect_grant(reply: Reply) -> Grant {
    match reply {
        Reply::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// The failure status inside `reply`; panics otherwise.
pub fn expect_failed(reply: Reply) -> Status {
    match reply {
        Reply::Failed(s) => s,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// The object (header slot) of a grant's buffer.
pub fn object_of(grant: &Grant) -> u64 {
    grant.buffer_addr - HEADER_SIZE as u64
}

/// Offset of the lifetime word in a header, as a u64.
pub const LIFETIME: u64 = LIFETIME_OFFSET as u64;
