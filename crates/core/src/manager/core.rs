//! The manager's policy core, sans-IO: requests, expirations and NIC results in; NIC work,
//! header writes and replies out. It never reads a clock, touches memory or posts verbs.
//!
//! One iteration of a manager thread (the driver) is a batch that advances through consuming
//! stages, so that they cannot be called out of order or skipped ([`ManagerCore::step`] runs
//! all three with a [`NicExecutor`]; the driver and the test simulator both use it):
//! 1. [`ManagerCore::begin`] → [`Checks`]: the leases due at `now` yield lifetime CASes
//!    (expected → 0) that commit an expiry unless the client extended meanwhile (refused
//!    permissions and permissions at their maximum lifetime end without one).
//! 2. [`ManagerCore::plan`] (the `Checks`, their CAS results, the batch of requests) →
//!    [`Chain`]: ends expired and revoked permissions, grants new ones (or queues conflicting
//!    ones), and pairs windows released in this batch with the binds the grants need (MW
//!    handover). The chain is the NIC work (binds, unbinds, CASes) to post, in order.
//! 3. [`ManagerCore::finish`] (the `Chain` and its results) → [`Finished`]: header writes,
//!    scrubs and replies (rkeys go out only after their bind completed successfully), and the
//!    bookkeeping of failed binds.
//!
//! Skipping a stage, or feeding one stage's output to the wrong one, does not compile:
//!
//! ```compile_fail
//! # use patronus_core::manager::ManagerCore;
//! # fn batch(core: &mut ManagerCore, now: rnic::Timestamp) {
//! let checks = core.begin(now);
//! let finished = core.finish(checks, &[]); // `finish` takes the `Chain` of `plan`
//! # }
//! ```
//!
//! Invariants (`docs/architecture.md`, "Invariants and where they are tested"): a buffer is
//! never reached by a new owner while an earlier owner's window is still bound over it (stale
//! windows of reused memory are killed in the same chain, before the reply leaves); memory
//! handed out by `allocate` never holds an earlier tenant's bytes (a dirty object is scrubbed
//! after that chain and before the reply, or in the background while no window covers it);
//! every grant ends by its deadline; stale ids change nothing; an object is acquired only by
//! its owner tenant or a tenant it was shared with, and "no object" and "not yours" get the
//! same answer; a retried request (same client and id) that is still waiting is the same
//! request; a failed bind fails only the grants of the protection domain it happened in.

use super::fast_hash::FastMap;
use super::keys::KeyBytes;
use super::pool::{BufferPool, HeaderPool, MwId, Object, SlabConfig, WindowPools};
use super::state::*;
use super::tenants::{TenantId, TenantQuota, Tenants, Usage};
use crate::proto::header::{Header, LIFETIME_OFFSET};
use crate::proto::messages::{Access, Grant, Mode, PermissionId, Reply, Request, Status};
use crate::proto::shards::{ShardError, ShardMap};
use rnic::{AccessFlags, MemoryKey, Timestamp};
use std::collections::VecDeque;
use std::time::Duration;

/// Manager configuration.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// §5.4 techniques.
    pub techniques: Techniques,
    /// Maximum lifetime of any permission, µs (forced invalidation after it).
    pub max_lifetime_us: u64,
    /// First header of the header pool.
    pub header_base: u64,
    /// Headers in the pool.
    pub header_count: usize,
    /// Buffer pool range.
    pub buffer_base: u64,
    /// Buffer pool length.
    pub buffer_len: u64,
    /// Slab classes.
    pub slab: SlabConfig,
    /// Pre-allocated windows.
    pub mw_count: u32,
    /// Delay unbinding freed buffers only while at least this many bytes are free.
    pub buffer_watermark: u64,
    /// When freed memory is zeroed.
    pub scrub: Scrub,
    /// Longest a conflicting acquire may wait, µs (a request asking for more waits this long).
    pub max_wait_us: u64,
    /// Draw each bind's key byte at random from this seed (never one of the window's recent
    /// ones); `None` leaves key bytes to the NIC (+1 per bind, `ibv_inc_rkey`).
    pub key_seed: Option<u64>,
    /// The shortest lease granted, µs: a shorter request gets this much (within the maximum
    /// lifetime).
    pub lease_floor_us: u64,
    /// The floor also stays above this many of the driver's last turns (see
    /// [`ManagerCore::note_turn`]), so no grant ends before its reply can leave; 0 turns that
    /// off (and with it admission control).
    pub lease_floor_turns: u32,
    /// What each tenant may hold on this manager (see [`TenantQuota::per_shard`] for a node's
    /// quota split over its shards).
    pub quota: TenantQuota,
    /// What each client may hold on this manager, whatever its tenant (a node's quota split
    /// over its shards like `quota`).
    pub client_quota: TenantQuota,
}

impl ManagerConfig {
    /// How this manager's pools split into `shards` shards (each gets at least one slab).
    pub fn shard_map(&self, shards: usize) -> Result<ShardMap, ShardError> {
        ShardMap::split(
            shards,
            self.header_base,
            self.header_count,
            self.buffer_base,
            self.buffer_len,
            self.slab.slab_bytes.min(self.buffer_len),
        )
    }

    /// The configuration of shard `k` of `map` (from [`shard_map`](Self::shard_map)): its
    /// slice of the header and buffer pools, its share of the windows (the last shard takes the
    /// remainder) and of the watermark, and its own key seed.
    pub fn shard(&self, map: &ShardMap, k: usize) -> ManagerConfig {
        let shards = map.shards as usize;
        let slice = map.slice(k, self.header_count, self.buffer_len);
        let mw_per_shard = self.mw_count / shards as u32;
        ManagerConfig {
            header_base: slice.header_base,
            header_count: slice.header_count,
            buffer_base: slice.buffer_base,
            buffer_len: slice.buffer_len,
            mw_count: if k + 1 == shards {
                self.mw_count - mw_per_shard * k as u32
            } else {
                mw_per_shard
            },
            buffer_watermark: self.buffer_watermark / shards as u64,
            key_seed: self.key_seed.map(|s| s.wrapping_add(k as u64)),
            quota: self.quota.per_shard(shards),
            client_quota: self.client_quota.per_shard(shards),
            ..self.clone()
        }
    }
}

/// When the manager zeroes freed memory (a new tenant must never see an earlier tenant's
/// bytes; `docs/architecture.md`, "Freed memory is scrubbed").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scrub {
    /// In the background while idle, for freed objects no window covers any more; whatever is
    /// still dirty when it is allocated again is zeroed on the grant path, after the chain
    /// that unbinds its earlier owners' windows and before the reply.
    #[default]
    Idle,
    /// Only on the grant path.
    OnGrant,
    /// Never. Breaks tenant isolation: for measuring what scrubbing costs, nothing else.
    Off,
}

/// Target of a bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindTarget {
    /// First address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Remote rights.
    pub access: AccessFlags,
}

/// NIC work, posted by the driver as one chain in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicOp {
    /// Bind window `mw` to `target`, or unbind it (`None`). `client` selects the protection
    /// domain or QP in the stronger isolation modes.
    Bind {
        /// Window.
        mw: MwId,
        /// Whose grant (or whose window is being unbound).
        client: ClientId,
        /// New binding.
        target: Option<BindTarget>,
        /// Key byte of the new rkey (`None`: the NIC's choice).
        key: Option<u8>,
    },
    /// RDMA CAS on a lifetime word through the NIC (loopback QP).
    LifetimeCas {
        /// Address of the word.
        addr: u64,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

/// Result of one [`NicOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicResult {
    /// The bind succeeded; the window's new rkey.
    Bound(MemoryKey),
    /// The op failed.
    Failed,
    /// The CAS executed; the word's previous value.
    CasOld(u64),
}

/// A reply to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// To whom.
    pub client: ClientId,
    /// Their request id.
    pub req_id: u64,
    /// The reply.
    pub reply: Reply,
    /// Copies of the request that reached the core (a retry of a waiting request is the same
    /// request): each copy gets the reply once, so the client's receive accounting holds.
    pub copies: u32,
}

impl Outgoing {
    /// A reply to one copy of a request.
    pub fn new(client: ClientId, req_id: u64, reply: Reply) -> Self {
        Outgoing {
            client,
            req_id,
            reply,
            copies: 1,
        }
    }
}

/// What the driver must do after a batch's chain completed: write the new headers and zero the
/// dirty buffers of new allocations (no foreign window reaches them any more, and their owners
/// have no rkey yet), then reply.
#[derive(Debug, Default)]
pub struct Finished {
    /// Header words to write.
    pub header_writes: Vec<(u64, [u64; 4])>,
    /// Buffers to zero, as (address, length).
    pub scrubs: Vec<(u64, u64)>,
    /// Replies to send.
    pub replies: Vec<Outgoing>,
}

/// Which window of a grant a bind is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GrantWindow {
    /// The window over the buffer (and, when contiguous, the header before it).
    Buffer,
    /// The window over the header's lifetime word (non-contiguous grants).
    Lifetime,
}

/// What to do with the result of one op of a [`Chain`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Cont {
    /// A bind for a grant: its rkey, or its failure.
    GrantBind {
        /// The permission being granted.
        perm: PermKey,
        /// Which of its windows.
        window: GrantWindow,
    },
    /// The unbind of a released window: it returns to the pool, or is retried next batch.
    Release {
        /// The window.
        mw: MwId,
    },
    /// The unbind of a stale window that the next op (its rebind for a grant) reuses; the
    /// rebind's result decides.
    UnbindBeforeRebind,
    /// An RPC extension of a permission.
    Extend {
        /// The permission; `id` guards against its key being reused within the batch.
        perm: PermKey,
        /// Its id when the CAS was planned.
        id: PermissionId,
        /// The lifetime the CAS expects.
        expected: u64,
        /// The lifetime it writes.
        lifetime_us: u64,
        /// Who asked (client, request id).
        asker: (ClientId, u64),
    },
    /// Zeroing a permission's lifetime word so that its holder cannot extend it.
    Refuse {
        /// The permission.
        perm: PermKey,
        /// Its id when the CAS was planned.
        id: PermissionId,
        /// The lifetime the CAS expects.
        expected: u64,
    },
}

/// How a lease due in this batch ends.
#[derive(Clone, Copy, Debug)]
enum ExpiryCheck {
    /// Nothing the client can do extends it (refused, or at its maximum lifetime).
    Unconditional(PermKey),
    /// It ends if the CAS finds the lifetime word still at `expected` (the client did not
    /// extend it one-sidedly).
    Cas {
        /// The permission.
        perm: PermKey,
        /// The lifetime the manager last saw.
        expected: u64,
    },
}

/// Stage 1 of a batch (from [`ManagerCore::begin`]): the lifetime CASes that decide the
/// leases due now. Run [`Checks::ops`] on the NIC and pass the results to
/// [`ManagerCore::plan`] with this.
#[derive(Debug)]
#[must_use = "the leases due are decided only by passing the checks on to `plan`"]
pub struct Checks {
    now: Timestamp,
    ops: Vec<NicOp>,
    expiries: Vec<ExpiryCheck>,
}

impl Checks {
    /// The CASes to run, in order.
    pub fn ops(&self) -> &[NicOp] {
        &self.ops
    }
}

/// Stage 2 of a batch (from [`ManagerCore::plan`]): the NIC work to post as one chain, and
/// what each op's result means. Run [`Chain::ops`] and pass the results to
/// [`ManagerCore::finish`] with this.
#[derive(Debug)]
#[must_use = "grants are answered only by passing the chain's results to `finish`"]
pub struct Chain {
    now: Timestamp,
    ops: Vec<NicOp>,
    conts: Vec<Cont>,
}

impl Chain {
    /// The work to post, in order.
    pub fn ops(&self) -> &[NicOp] {
        &self.ops
    }
}

/// Runs a batch's NIC work: the memory node's verbs, or a test's simulated NIC.
pub trait NicExecutor {
    /// Runs `ops` as one chain, in order, and appends one result per op to `results` (which
    /// the caller keeps from turn to turn: no allocation per chain once it has grown).
    fn execute(&mut self, ops: &[NicOp], results: &mut Vec<NicResult>);
}

/// A closure that returns the results (tests' simulated NICs).
impl<F: FnMut(&[NicOp]) -> Vec<NicResult>> NicExecutor for F {
    fn execute(&mut self, ops: &[NicOp], results: &mut Vec<NicResult>) {
        results.extend(self(ops));
    }
}

#[derive(Debug)]
struct PendingGrant {
    key: PermKey,
    client: ClientId,
    req_id: u64,
    buffer_rkey: Option<MemoryKey>,
    lifetime_rkey: Option<MemoryKey>,
    failed: bool,
    /// The grant of an `allocate`: if it fails, the new memory is freed again.
    allocated: bool,
    /// New windows for an existing permission (its header and deadline stay as they are).
    rebind: bool,
    /// The buffer must be zeroed before the reply (reused memory, dirty).
    scrub: Option<(u64, u64)>,
    /// Copies of the request (see [`Outgoing::copies`]).
    copies: u32,
}

/// Who asked: a client's request and how many copies of it arrived (each gets the reply).
#[derive(Clone, Copy, Debug)]
pub(super) struct Asker {
    client: ClientId,
    req_id: u64,
    copies: u32,
}

impl Asker {
    /// One copy of `req_id` from `client`.
    pub(super) fn one(client: ClientId, req_id: u64) -> Self {
        Asker {
            client,
            req_id,
            copies: 1,
        }
    }
    /// A waiting request, with every copy that joined it.
    pub(super) fn of(w: &Waiter) -> Self {
        Asker {
            client: w.client,
            req_id: w.req_id,
            copies: w.copies,
        }
    }
}

impl PendingGrant {
    fn new(key: PermKey, client: ClientId, req_id: u64) -> Self {
        PendingGrant {
            key,
            client,
            req_id,
            buffer_rkey: None,
            lifetime_rkey: None,
            failed: false,
            allocated: false,
            rebind: false,
            scrub: None,
            copies: 1,
        }
    }
}

/// Idle objects' lists kept for reuse, at most.
const SPARE_LISTS: usize = 1024;

/// Gives `list` an allocation kept in `spare` if it has none, before a push (the lists of
/// objects that went idle are reused instead of allocated again).
fn reuse_allocation(list: &mut Vec<u32>, spare: &mut Vec<Vec<u32>>) {
    if list.capacity() == 0
        && let Some(kept) = spare.pop()
    {
        *list = kept;
    }
}

/// The manager's state machine (one shard).
#[derive(Debug)]
pub struct ManagerCore {
    cfg: ManagerConfig,
    buffers: BufferPool,
    headers: HeaderPool,
    mws: WindowPools,
    perms: PermTable,
    objects: FastMap<u64, ObjectState>,
    /// Stale (delayed-unbound) header windows by header address.
    stale_headers: FastMap<u64, MwId>,
    /// Where each stale window sits (object address or header address).
    stale_owner: FastMap<MwId, StaleOwner>,
    /// Freed objects that got stale windows, oldest first (idle unbinding walks it).
    stale_objects: VecDeque<u64>,
    deadlines: Deadlines,
    last_start: FastMap<u64, u64>,
    counters: Counters,
    /// Refusing new permissions (the node is shutting down).
    draining: bool,
    /// Wall time of the driver's last busy turn, µs ([`ManagerCore::note_turn`]).
    turn_us: u64,
    /// Owners of objects, shares, and each client's tenant.
    pub(super) tenants: Tenants,
    /// Named roots kept by this shard.
    pub(super) names: super::names::RootNames,
    /// Key bytes of windows' next binds (random, none of the recent ones).
    keys: Option<KeyBytes>,
    /// Waiting acquires by (client, request id) → object, so a retry joins its original.
    pub(super) waiting: FastMap<(ClientId, u64), u64>,
    /// Clients that left, to be cleared out at the next batch ([`ManagerCore::depart`]).
    departing: Vec<ClientId>,
    /// Departed clients whose domain waits for its windows' unbinds before it retires.
    retiring: Vec<ClientId>,
    /// Retired domains' windows, for the driver to deallocate ([`ManagerCore::take_retired`]).
    retired: Vec<(ClientId, std::ops::Range<MwId>)>,
    // ---- per-batch scratch (between `plan`'s start and the `Chain` it returns) ----
    /// NIC work planned so far, with what to do with each result.
    ops: Vec<(NicOp, Cont)>,
    /// The vectors of the last finished batch's stages, reused by the next (no allocation per
    /// batch once they have grown).
    spare_checks: (Vec<NicOp>, Vec<ExpiryCheck>),
    /// The deadlines due in a turn, kept between turns (no allocation per turn).
    spare_due: Vec<(Timestamp, Timer)>,
    /// The NIC's results of a turn's checks and chain.
    spare_results: Vec<NicResult>,
    /// Windows whose unbind failed in a turn (retried in the next).
    spare_release: Vec<MwId>,
    /// Protection domains in which a bind of a turn failed.
    spare_domains: Vec<u32>,
    /// Lists (holders, stale windows) of objects that went idle, cleared, for the next object
    /// that needs one (at most [`SPARE_LISTS`]): a grant on an idle object, or the
    /// delayed unbinding of a freed one, allocates nothing.
    spare_lists: Vec<Vec<u32>>,
    spare_chain: (Vec<NicOp>, Vec<Cont>),
    /// Windows that must stop covering their memory in this batch.
    pub(super) releasing: Vec<(MwId, ClientId)>,
    /// Windows the grants of this batch need: (perm, is buffer window, target, client).
    pub(super) needs: Vec<(PermKey, bool, BindTarget, ClientId)>,
    grants: Vec<PendingGrant>,
    replies: Vec<Outgoing>,
    /// Revoke replies held back until a failed unbind has been retried successfully (a
    /// revoke completes only once the old rkey is dead).
    deferred_revokes: Vec<Outgoing>,
    /// A hole fixed before, switched back on by a test ([`ManagerCore::set_mutation`]).
    #[cfg(feature = "testing")]
    mutation: Option<Mutation>,
}

/// Holes fixed before that a test can switch back on, one at a time, to show that a
/// simulation catches them (`tests/cluster_sim.rs`). Only with the `testing` feature; off
/// unless [`ManagerCore::set_mutation`] is called.
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Freed memory is handed out again without being scrubbed.
    SkipScrub,
    /// A retried waiting acquire (same client and request id) is a new request, not a copy
    /// of the waiting one: it becomes a second waiter, whose grant nobody holds.
    RetryIsNewRequest,
    /// `acquire` skips the tenant check: another tenant's object is granted.
    SkipTenantCheck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StaleOwner {
    Object(u64),
    Header(u64),
}

const BUFFER_RW: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);
const LIFETIME_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ.union(AccessFlags::REMOTE_ATOMIC);

impl ManagerCore {
    /// A manager over the configured pools.
    pub fn new(cfg: ManagerConfig) -> Self {
        ManagerCore {
            buffers: BufferPool::new(
                cfg.buffer_base,
                cfg.buffer_len,
                cfg.slab.clone(),
                cfg.techniques.contiguity,
            ),
            headers: HeaderPool::new(cfg.header_base, cfg.header_count),
            mws: WindowPools::new(cfg.mw_count),
            perms: PermTable::default(),
            objects: FastMap::default(),
            stale_headers: FastMap::default(),
            stale_owner: FastMap::default(),
            stale_objects: VecDeque::new(),
            deadlines: Deadlines::default(),
            last_start: FastMap::default(),
            counters: Counters::default(),
            draining: false,
            turn_us: 0,
            tenants: Tenants::default(),
            names: Default::default(),
            keys: cfg.key_seed.map(|seed| KeyBytes::new(seed, cfg.mw_count)),
            waiting: FastMap::default(),
            departing: Vec::new(),
            retiring: Vec::new(),
            retired: Vec::new(),
            ops: Vec::new(),
            spare_checks: (Vec::new(), Vec::new()),
            spare_due: Vec::new(),
            spare_results: Vec::new(),
            spare_release: Vec::new(),
            spare_domains: Vec::new(),
            spare_lists: Vec::new(),
            spare_chain: (Vec::new(), Vec::new()),
            releasing: Vec::new(),
            needs: Vec::new(),
            grants: Vec::new(),
            replies: Vec::new(),
            deferred_revokes: Vec::new(),
            #[cfg(feature = "testing")]
            mutation: None,
            cfg,
        }
    }

    /// Switches a fixed hole back on (`None`: the product's behaviour). For tests only.
    #[cfg(feature = "testing")]
    pub fn set_mutation(&mut self, mutation: Option<Mutation>) {
        self.mutation = mutation;
    }

    /// Whether `m` is switched on.
    #[cfg(feature = "testing")]
    pub(super) fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }

    /// The driver reports how long its last busy turn took (receive, step, replies), µs. A
    /// request received now may have waited that long already, and its reply leaves after
    /// this turn: the manager keeps every lease above a few of them
    /// ([`ManagerConfig::lease_floor_turns`], [`ManagerCore::lease_floor_us`])
    /// and, when even the maximum lifetime is below that, refuses new permissions as
    /// [`Status::Overloaded`] instead of granting leases that end before they arrive.
    pub fn note_turn(&mut self, turn_us: u64) {
        self.turn_us = turn_us;
    }

    /// The longest a permission lives, µs (leases asked for are capped at it; the `Welcome`
    /// reply tells clients).
    pub fn max_lifetime_us(&self) -> u64 {
        self.cfg.max_lifetime_us
    }

    /// The shortest lease granted now, µs.
    pub fn lease_floor_us(&self) -> u64 {
        let turns = u64::from(self.cfg.lease_floor_turns).saturating_mul(self.turn_us);
        self.cfg.lease_floor_us.max(turns)
    }

    /// Admission control: whether a new permission could outlive the manager's own delay.
    pub(super) fn overloaded(&self) -> bool {
        self.draining || self.lease_floor_us() > self.cfg.max_lifetime_us
    }

    /// From now on, new permissions (allocate, acquire) are refused as overloaded; the live
    /// ones run on until they end (a node shutting down gracefully).
    pub fn stop_granting(&mut self) {
        self.draining = true;
    }

    /// Whether new permissions are refused ([`ManagerCore::stop_granting`]).
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// A requested lease raised to the floor, within the maximum lifetime.
    pub(super) fn floored_lease(&mut self, lease_us: u64) -> u64 {
        let floor = self.lease_floor_us();
        if lease_us < floor {
            self.counters.leases_floored += 1;
        }
        lease_us.max(floor).min(self.cfg.max_lifetime_us)
    }

    /// Gives `client` its own domain (a PD per client) with `windows` windows; returns their
    /// ids, which the driver allocates in the client's PD. Windows never leave their domain.
    /// The ids of a domain retired by a departed client come back first (see
    /// [`take_retired`](Self::take_retired)), so clients coming and going do not grow the
    /// tables.
    pub fn add_client_domain(&mut self, client: ClientId, windows: u32) -> std::ops::Range<MwId> {
        self.mws.add_client_domain(client, windows).1
    }

    /// `client` is gone (its connection closed, or it went silent). At the next batch (a
    /// batch runs for it: [`has_pending_work`](Self::has_pending_work)) its permissions end
    /// and their windows are unbound, its waiting requests are dropped unanswered, and its
    /// windows left bound over freed memory are unbound too; its objects stay its tenant's.
    /// Once every window of its domain is unbound, the domain retires
    /// ([`take_retired`](Self::take_retired)).
    pub fn depart(&mut self, client: ClientId) {
        if !self.departing.contains(&client) {
            self.departing.push(client);
        }
    }

    /// Domains of departed clients that retired since the last call, with their window ids:
    /// every window is unbound and no permission refers to it, so the driver deallocates them
    /// (and the domain's PD); a later client's domain gets the same ids with new windows.
    pub fn take_retired(&mut self) -> Vec<(ClientId, std::ops::Range<MwId>)> {
        std::mem::take(&mut self.retired)
    }

    /// The domain whose PD binds `client`'s windows (0: the shared PD).
    pub fn domain_of_client(&self, client: ClientId) -> u32 {
        self.mws.domain_of_client(client)
    }

    /// What `tenant` holds on this manager.
    pub fn usage(&self, tenant: TenantId) -> Usage {
        self.tenants.usage(tenant)
    }

    /// Records that `client` authenticated as `tenant` (unregistered clients act for
    /// [`DEFAULT_TENANT`](super::tenants::DEFAULT_TENANT)).
    pub fn set_tenant(&mut self, client: ClientId, tenant: TenantId) {
        self.tenants.set_client(client, tenant);
    }

    /// Idle work, before scrubbing: the delayed-unbound windows over up to `max` freed, dirty
    /// objects are queued for unbinding, so the next batch (it runs without requests, since
    /// [`has_pending_work`](Self::has_pending_work) says so) unbinds them off every grant's
    /// path, and a later idle turn can scrub the memory. Delayed unbinding still saves the
    /// unbind whenever the manager is busy. Returns whether anything was queued.
    pub fn unbind_idle(&mut self, max: usize) -> bool {
        if self.cfg.scrub != Scrub::Idle || self.has_pending_work() {
            return false;
        }
        let mut queued = false;
        let mut taken = 0;
        while taken < max {
            let Some(addr) = self.stale_objects.pop_front() else {
                break;
            };
            // Reallocated since (its windows died then), or its windows were handed over.
            if self.buffers.object_at(addr).is_some() {
                continue;
            }
            let Some(obj) = self.objects.get_mut(&addr) else {
                continue;
            };
            let client = 0; // an unbind needs no client: the window's domain decides
            for mw in obj.stale_mws.drain(..) {
                self.stale_owner.remove(&mw);
                self.mws.remove_stale(mw);
                self.releasing.push((mw, client));
                queued = true;
            }
            if obj.is_idle() {
                self.remove_idle_object(addr);
            }
            taken += 1;
        }
        queued
    }

    /// Idle work: takes up to `max` freed objects that no window covers any more and returns
    /// their buffers, now counted clean; the driver zeroes them before anything else runs.
    /// Nothing while unbinds are pending (a window whose unbind failed may still cover one).
    pub fn scrub_idle(&mut self, max: usize) -> Vec<(u64, u64)> {
        if self.cfg.scrub != Scrub::Idle || self.has_pending_work() {
            return Vec::new();
        }
        let objects = &self.objects;
        self.buffers
            .take_dirty(max, |addr| {
                objects.get(&addr).is_none_or(|o| o.stale_mws.is_empty())
            })
            .iter()
            .map(Object::buffer)
            .collect()
    }

    /// Estimated bytes of the manager's own metadata (tables and pools, by capacity).
    pub fn metadata_bytes(&self) -> u64 {
        use std::mem::size_of;
        let map = |cap: usize, entry: usize| (cap * (entry + 1)) as u64;
        self.perms.metadata_bytes()
            + map(self.objects.capacity(), size_of::<(u64, ObjectState)>())
            // Each tracked object's lists of permissions and stale windows (4 B an entry).
            + 4 * (self.perms.len() + self.mws.counts().1) as u64
            + map(self.stale_headers.capacity(), 12)
            + map(self.stale_owner.capacity(), 4 + size_of::<StaleOwner>())
            + (self.deadlines.len() * (size_of::<(Timestamp, Timer)>() + 8)) as u64
            + map(self.last_start.capacity(), 16)
            + self.buffers.metadata_bytes()
            + self.headers.metadata_bytes()
            + self.mws.metadata_bytes()
            + self.tenants.metadata_bytes()
            + self.names.metadata_bytes()
            + self.keys.as_ref().map_or(0, KeyBytes::metadata_bytes)
    }

    /// Forgets the state of `addr` if nothing references it any more, keeping its lists'
    /// allocations for the next objects.
    pub(super) fn remove_idle_object(&mut self, addr: u64) {
        if !self.objects.get(&addr).is_some_and(ObjectState::is_idle) {
            return;
        }
        if let Some(state) = self.objects.remove(&addr) {
            self.recycle_list(state.perms);
            self.recycle_list(state.stale_mws);
        }
    }

    /// Keeps an object's list (holders or stale windows: both `u32`s) for reuse, if there is
    /// room and it has an allocation.
    pub(super) fn recycle_list(&mut self, mut list: Vec<u32>) {
        if list.capacity() > 0 && self.spare_lists.len() < SPARE_LISTS {
            list.clear();
            self.spare_lists.push(list);
        }
    }

    /// Pool bytes held by live objects plus the header pool's bytes in use.
    pub fn pool_bytes_in_use(&self) -> u64 {
        self.buffers.live_bytes()
            + ((self.headers.capacity() - self.headers.available())
                * crate::proto::header::HEADER_SIZE) as u64
    }

    /// Operation counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether a batch must run even without requests or due deadlines (unbinds to retry).
    pub fn has_pending_work(&self) -> bool {
        !self.releasing.is_empty()
            || !self.deferred_revokes.is_empty()
            || !self.departing.is_empty()
    }

    /// The earliest deadline the driver must wake up for.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.deadlines.next()
    }

    /// Live permissions.
    pub fn active_permissions(&self) -> usize {
        self.perms.len()
    }

    /// The live permissions as an operator sees them (no rkeys: those are the permission),
    /// the soonest to end first, at most `limit`.
    pub fn live_permissions(&self, now: Timestamp, limit: usize) -> Vec<LivePermission> {
        let mut all: Vec<LivePermission> = self
            .perms
            .iter()
            .map(|p| LivePermission {
                client: p.client,
                addr: p.buffer.0,
                len: p.buffer.1,
                access: p.access,
                mode: p.mode,
                lease_left: p.deadline.since(now),
                hard_left: p.hard_deadline.since(now),
                extendable: !p.refused,
            })
            .collect();
        all.sort_by_key(|p| p.lease_left);
        all.truncate(limit);
        all
    }

    /// Pool occupancy, for leak checks: (live objects, free headers / capacity,
    /// (free, stale, capacity) windows, tracked objects).
    pub fn occupancy(&self) -> Occupancy {
        let (mw_free, mw_stale, mw_capacity) = self.mws.counts();
        Occupancy {
            permissions: self.perms.len(),
            live_objects: self.buffers.live_objects(),
            headers_free: self.headers.available(),
            headers_capacity: self.headers.capacity(),
            mw_free,
            mw_stale,
            mw_capacity,
            // Both without walking the objects (published often, whatever their number).
            tracked_objects: self.objects.len(),
            waiters: self.waiting.len(),
            dirty_objects: self.buffers.dirty_objects(),
            names: self.names.len(),
        }
    }

    // ------------------------------------------------------------------ phase 1

    /// Runs one batch: [`begin`](Self::begin), [`plan`](Self::plan) and
    /// [`finish`](Self::finish), with `nic` running the CASes and the chain.
    pub fn step(
        &mut self,
        now: Timestamp,
        requests: &[(ClientId, u64, Request)],
        nic: &mut impl NicExecutor,
    ) -> Finished {
        let mut out = Finished::default();
        self.step_into(now, requests, nic, &mut out);
        out
    }

    /// [`step`](Self::step) into `out` (cleared first). A driver that keeps one [`Finished`]
    /// from turn to turn allocates nothing for a batch's stages once their vectors have grown.
    pub fn step_into(
        &mut self,
        now: Timestamp,
        requests: &[(ClientId, u64, Request)],
        nic: &mut impl NicExecutor,
        out: &mut Finished,
    ) {
        let checks = self.begin(now);
        let mut results = std::mem::take(&mut self.spare_results);
        results.clear();
        nic.execute(checks.ops(), &mut results);
        let chain = self.plan(checks, &results, requests);
        results.clear();
        nic.execute(chain.ops(), &mut results);
        self.finish_into(chain, &results, out);
        self.spare_results = results;
    }

    /// Stage 1: lifetime CASes for the leases due at `now`. Waiters past their deadline fail
    /// here too.
    pub fn begin(&mut self, now: Timestamp) -> Checks {
        let (mut ops, mut expiries) = std::mem::take(&mut self.spare_checks);
        ops.clear();
        expiries.clear();
        let mut checks = Checks { now, ops, expiries };
        let mut due = std::mem::take(&mut self.spare_due);
        due.clear();
        self.deadlines.pop_due_into(now, &mut due);
        for &(at, timer) in &due {
            match timer {
                Timer::Waiter(object) => self.expire_waiters(object, now),
                Timer::Lease(key) => {
                    let Some(p) = self.perms.get(key) else {
                        continue;
                    };
                    if p.phase != Phase::Active || p.deadline != at {
                        continue; // rescheduled or gone: a stale index entry
                    }
                    if p.refused || at >= p.hard_deadline {
                        // Nothing the client can do extends it: end without a CAS.
                        checks.expiries.push(ExpiryCheck::Unconditional(key));
                        continue;
                    }
                    let expected = p.lifetime_us;
                    self.counters.lifetime_cas += 1;
                    checks.expiries.push(ExpiryCheck::Cas {
                        perm: key,
                        expected,
                    });
                    checks.ops.push(NicOp::LifetimeCas {
                        addr: p.id.header_addr + LIFETIME_OFFSET as u64,
                        compare: expected,
                        swap: 0,
                    });
                }
            }
        }
        self.spare_due = due;
        checks
    }

    fn expire_waiters(&mut self, object: u64, now: Timestamp) {
        let Some(obj) = self.objects.get_mut(&object) else {
            return;
        };
        let (late, kept): (VecDeque<Waiter>, VecDeque<Waiter>) = std::mem::take(&mut obj.waiters)
            .into_iter()
            .partition(|w| w.deadline <= now);
        obj.waiters = kept;
        for w in late {
            self.waiting.remove(&(w.client, w.req_id));
            // A departing client's waiters are dropped unanswered (see `depart`).
            if !self.departing.contains(&w.client) {
                self.refuse(Asker::of(&w), Status::ConflictTimeout);
            }
        }
        // The head may have changed: grant whoever is now compatible.
        self.wake_waiters(object, now);
    }

    // ------------------------------------------------------------------ phase 2

    /// Stage 2: decides the batch. `cas_results` answers [`Checks::ops`], in order. Returns
    /// the chain of NIC work to post; pass its results to [`finish`](Self::finish).
    pub fn plan(
        &mut self,
        checks: Checks,
        cas_results: &[NicResult],
        requests: &[(ClientId, u64, Request)],
    ) -> Chain {
        let now = checks.now;
        let mut results = cas_results.iter();
        for &check in &checks.expiries {
            match check {
                ExpiryCheck::Unconditional(key) => self.expire(key, now),
                ExpiryCheck::Cas { perm, expected } => match results.next() {
                    Some(NicResult::CasOld(old)) if *old == expected => self.expire(perm, now),
                    Some(NicResult::CasOld(old)) => self.client_extended(perm, *old),
                    // The CAS could not run (loopback QP broken): the manager is the authority.
                    _ => self.expire(perm, now),
                },
            }
        }
        self.clear_departed(now);
        for &(client, req_id, req) in requests {
            self.counters.rpcs += 1;
            self.handle_request(now, client, req_id, req);
        }
        self.assign_windows();
        self.spare_checks = (checks.ops, checks.expiries);
        let (mut ops, mut conts) = std::mem::take(&mut self.spare_chain);
        ops.clear();
        conts.clear();
        for (op, cont) in self.ops.drain(..) {
            ops.push(op);
            conts.push(cont);
        }
        Chain { now, ops, conts }
    }

    fn client_extended(&mut self, key: PermKey, seen: u64) {
        self.counters.extended_by_client += 1;
        let Some(p) = self.perms.get_mut(key) else {
            return;
        };
        p.lifetime_us = seen;
        let start = Timestamp(p.id.start_us);
        p.deadline = start.plus_us(seen).min(p.hard_deadline);
        if seen == 0 {
            // Zeroed by the client itself: treat as a refusal it asked for; end now.
            p.deadline = Timestamp(p.id.start_us);
        }
        let at = p.deadline;
        self.deadlines.insert(at, Timer::Lease(key));
    }

    fn expire(&mut self, key: PermKey, _now: Timestamp) {
        let forced = self
            .perms
            .get(key)
            .is_some_and(|p| p.deadline >= p.hard_deadline);
        if forced {
            self.counters.forced += 1;
        } else {
            self.counters.expired += 1;
        }
        self.end_permission(key, false, _now);
    }
}

/// A live permission as an operator sees it (see [`ManagerCore::live_permissions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivePermission {
    /// Its holder.
    pub client: ClientId,
    /// The memory it covers.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// Read, or read-write.
    pub access: Access,
    /// Shared or exclusive.
    pub mode: Mode,
    /// Until its lease ends.
    pub lease_left: Duration,
    /// Until its maximum lifetime ends (forced invalidation).
    pub hard_left: Duration,
    /// Whether its holder may still extend it: false once the manager zeroed its lifetime
    /// word because others wait for the object (paper §5.3), so it ends with its lease.
    pub extendable: bool,
}

/// Pool occupancy (see [`ManagerCore::occupancy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Live permissions.
    pub permissions: usize,
    /// Allocated objects.
    pub live_objects: usize,
    /// Free headers.
    pub headers_free: usize,
    /// All headers.
    pub headers_capacity: usize,
    /// Unbound windows.
    pub mw_free: usize,
    /// Delayed-unbound windows.
    pub mw_stale: usize,
    /// All windows.
    pub mw_capacity: usize,
    /// Objects with per-object state (permissions, waiters, a busy header slot or stale
    /// windows; entries are dropped as they become idle).
    pub tracked_objects: usize,
    /// Queued conflicting requests.
    pub waiters: usize,
    /// Freed objects not scrubbed yet.
    pub dirty_objects: usize,
    /// Named roots published.
    pub names: usize,
}

impl Occupancy {
    /// The sum of two occupancies (e.g. of two shards).
    pub fn plus(&self, o: &Occupancy) -> Occupancy {
        Occupancy {
            permissions: self.permissions + o.permissions,
            live_objects: self.live_objects + o.live_objects,
            headers_free: self.headers_free + o.headers_free,
            headers_capacity: self.headers_capacity + o.headers_capacity,
            mw_free: self.mw_free + o.mw_free,
            mw_stale: self.mw_stale + o.mw_stale,
            mw_capacity: self.mw_capacity + o.mw_capacity,
            tracked_objects: self.tracked_objects + o.tracked_objects,
            waiters: self.waiters + o.waiters,
            dirty_objects: self.dirty_objects + o.dirty_objects,
            names: self.names + o.names,
        }
    }
}

mod departure;
mod finish;
mod lifecycle;
mod requests;
