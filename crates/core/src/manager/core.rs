//! The manager's policy core, sans-IO: requests, expirations and NIC results in; NIC work,
//! header writes and replies out. It never reads a clock, touches memory or posts verbs.
//!
//! One iteration of a manager thread (the driver) is:
//! 1. [`ManagerCore::begin`] — the leases due at `now` yield lifetime CASes (expected → 0)
//!    that commit an expiry unless the client extended meanwhile (refused permissions and
//!    permissions at their maximum lifetime end without one).
//! 2. [`ManagerCore::plan`] — with the CAS results and the batch of requests: ends expired and
//!    revoked permissions, grants new ones (or queues conflicting ones), and pairs windows
//!    released in this batch with the binds the grants need (MW handover). Returns one chain of
//!    NIC work (binds, unbinds, CASes) and the header words to write after it.
//! 3. [`ManagerCore::finish`] — with the chain's results: replies (rkeys go out only after
//!    their bind completed successfully) and the bookkeeping of failed binds.
//!
//! Invariants (design.md): a buffer is never reached by a new owner while an earlier owner's
//! window is still bound over it (stale windows of reused memory are killed in the same chain,
//! before the reply leaves); every grant ends by its deadline; stale ids change nothing.

use super::pool::{BufferPool, HeaderPool, MwId, Object, SlabConfig, WindowPools};
use super::state::*;
use crate::proto::header::{Header, LIFETIME_OFFSET};
use crate::proto::messages::{Access, Grant, Mode, PermissionId, Reply, Request, Status};
use rnic::{AccessFlags, MemoryKey, Timestamp};
use std::collections::HashMap;

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
    /// Length scale of the header encoding.
    pub len_scale: u64,
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
}

/// What the driver must do after a batch's chain completed: write the new headers (no
/// foreign window reaches them any more, and their owners have no rkey yet), then reply.
#[derive(Debug, Default)]
pub struct Finished {
    /// Header words to write.
    pub header_writes: Vec<(u64, [u64; 4])>,
    /// Replies to send.
    pub replies: Vec<Outgoing>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Cont {
    /// An expiry check of this permission with this expected lifetime.
    Expiry(PermKey, u64),
    /// A grant's window (buffer or header).
    GrantBind(PermKey, bool),
    /// An unbind of a released or stale window.
    Unbind(MwId),
    /// An RPC extend of a permission: (perm, its id, expected, new, client, req_id). The id
    /// guards against the key being reused by a new permission within the batch.
    Extend(PermKey, PermissionId, u64, u64, ClientId, u64),
    /// Zeroing the lifetime to refuse extension: (perm, its id, expected).
    Refuse(PermKey, PermissionId, u64),
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
}

/// The manager's state machine (one shard).
#[derive(Debug)]
pub struct ManagerCore {
    cfg: ManagerConfig,
    buffers: BufferPool,
    headers: HeaderPool,
    mws: WindowPools,
    perms: PermTable,
    objects: HashMap<u64, ObjectState>,
    /// Stale (delayed-unbound) header windows by header address.
    stale_headers: HashMap<u64, MwId>,
    /// Where each stale window sits (object address or header address).
    stale_owner: HashMap<MwId, StaleOwner>,
    deadlines: Deadlines,
    last_start: HashMap<u64, u64>,
    counters: Counters,
    // ---- per-batch scratch ----
    /// Continuations of `begin`'s CASes.
    conts: Vec<Cont>,
    /// NIC work of `plan`, with what to do with each result.
    ops: Vec<(NicOp, Cont)>,
    /// Windows that must stop covering their memory in this batch.
    pub(super) releasing: Vec<(MwId, ClientId)>,
    /// Windows the grants of this batch need: (perm, is buffer window, target, client).
    pub(super) needs: Vec<(PermKey, bool, BindTarget, ClientId)>,
    grants: Vec<PendingGrant>,
    replies: Vec<Outgoing>,
    /// Revoke replies held back until a failed unbind has been retried successfully (a
    /// revoke completes only once the old rkey is dead).
    deferred_revokes: Vec<Outgoing>,
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
            buffers: BufferPool::new(cfg.buffer_base, cfg.buffer_len, cfg.slab.clone()),
            headers: HeaderPool::new(cfg.header_base, cfg.header_count),
            mws: WindowPools::new(cfg.mw_count),
            perms: PermTable::default(),
            objects: HashMap::new(),
            stale_headers: HashMap::new(),
            stale_owner: HashMap::new(),
            deadlines: Deadlines::default(),
            last_start: HashMap::new(),
            counters: Counters::default(),
            conts: Vec::new(),
            ops: Vec::new(),
            releasing: Vec::new(),
            needs: Vec::new(),
            grants: Vec::new(),
            replies: Vec::new(),
            deferred_revokes: Vec::new(),
            cfg,
        }
    }

    /// Gives `client` its own domain (a PD per client) with `windows` windows; returns their
    /// ids, which the driver allocates in the client's PD. Windows never leave their domain.
    pub fn add_client_domain(&mut self, client: ClientId, windows: u32) -> std::ops::Range<MwId> {
        self.mws.add_client_domain(client, windows)
    }

    /// The domain whose PD binds `client`'s windows (0: the shared PD).
    pub fn domain_of_client(&self, client: ClientId) -> u32 {
        self.mws.domain_of_client(client)
    }

    /// Operation counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Whether a batch must run even without requests or due deadlines (unbinds to retry).
    pub fn has_pending_work(&self) -> bool {
        !self.releasing.is_empty() || !self.deferred_revokes.is_empty()
    }

    /// The earliest deadline the driver must wake up for.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.deadlines.next()
    }

    /// Live permissions.
    pub fn active_permissions(&self) -> usize {
        self.perms.len()
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
            tracked_objects: self.objects.values().filter(|o| !o.is_idle()).count(),
            waiters: self.objects.values().map(|o| o.waiters.len()).sum(),
        }
    }

    // ------------------------------------------------------------------ phase 1

    /// Lifetime CASes for the leases due at `now`. Waiters past their deadline fail here too.
    pub fn begin(&mut self, now: Timestamp) -> Vec<NicOp> {
        self.conts.clear();
        let mut ops = Vec::new();
        for (at, timer) in self.deadlines.pop_due(now) {
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
                        self.conts.push(Cont::Expiry(key, u64::MAX));
                        ops.push(NicOp::LifetimeCas {
                            addr: 0,
                            compare: 0,
                            swap: 0,
                        });
                        continue;
                    }
                    let expected = p.lifetime_us;
                    self.counters.lifetime_cas += 1;
                    self.conts.push(Cont::Expiry(key, expected));
                    ops.push(NicOp::LifetimeCas {
                        addr: p.id.header_addr + LIFETIME_OFFSET as u64,
                        compare: expected,
                        swap: 0,
                    });
                }
            }
        }
        // Unconditional expiries need no NIC work: strip their placeholder ops.
        let mut out = Vec::with_capacity(ops.len());
        let mut conts = Vec::with_capacity(self.conts.len());
        for (op, c) in ops.into_iter().zip(self.conts.drain(..)) {
            conts.push(c);
            if !matches!(c, Cont::Expiry(_, u64::MAX)) {
                out.push(op);
            }
        }
        self.conts = conts;
        out
    }

    fn expire_waiters(&mut self, object: u64, now: Timestamp) {
        let Some(obj) = self.objects.get_mut(&object) else {
            return;
        };
        let mut kept = std::collections::VecDeque::new();
        while let Some(w) = obj.waiters.pop_front() {
            if w.deadline <= now {
                self.replies.push(Outgoing {
                    client: w.client,
                    req_id: w.req_id,
                    reply: Reply::Failed(Status::ConflictTimeout),
                });
            } else {
                kept.push_back(w);
            }
        }
        obj.waiters = kept;
        // The head may have changed: grant whoever is now compatible.
        self.wake_waiters(object, now);
    }

    // ------------------------------------------------------------------ phase 2

    /// Decides the batch. `cas_results` answers the ops of [`begin`](Self::begin), in order.
    /// Returns the chain of NIC work to post; pass its results to [`finish`](Self::finish).
    pub fn plan(
        &mut self,
        now: Timestamp,
        cas_results: &[NicResult],
        requests: &[(ClientId, u64, Request)],
    ) -> Vec<NicOp> {
        let mut results = cas_results.iter();
        for c in std::mem::take(&mut self.conts) {
            let Cont::Expiry(key, expected) = c else {
                continue;
            };
            if expected == u64::MAX {
                self.expire(key, now);
                continue;
            }
            match results.next() {
                Some(NicResult::CasOld(old)) if *old == expected => self.expire(key, now),
                Some(NicResult::CasOld(old)) => self.client_extended(key, *old),
                // The CAS could not run (loopback QP broken): the manager is the authority.
                _ => self.expire(key, now),
            }
        }
        for &(client, req_id, req) in requests {
            self.counters.rpcs += 1;
            self.handle_request(now, client, req_id, req);
        }
        self.assign_windows();
        self.ops.iter().map(|(op, _)| *op).collect()
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

    fn handle_request(&mut self, now: Timestamp, client: ClientId, req_id: u64, req: Request) {
        match req {
            Request::Allocate {
                size,
                lease_us,
                mode,
            } => self.allocate(now, client, req_id, size, lease_us, mode),
            Request::Acquire {
                addr,
                size,
                lease_us,
                access,
                mode,
                wait_us,
            } => {
                let Some(obj) = self.buffers.object_with_buffer(addr) else {
                    return self.fail(client, req_id, Status::InvalidArgument);
                };
                if size == 0 || size > obj.buffer().1 || lease_us == 0 {
                    return self.fail(client, req_id, Status::InvalidArgument);
                }
                let state = self.objects.entry(obj.addr).or_default();
                if !state.admits(mode) {
                    if wait_us == 0 {
                        return self.fail(client, req_id, Status::ConflictTimeout);
                    }
                    let deadline = now.plus_us(wait_us);
                    state.waiters.push_back(Waiter {
                        client,
                        req_id,
                        request: req,
                        deadline,
                    });
                    self.deadlines.insert(deadline, Timer::Waiter(obj.addr));
                    self.refuse_holders(obj.addr);
                    return;
                }
                self.grant(now, client, req_id, obj, lease_us, access, mode);
            }
            Request::Extend { id, lease_us } => self.rpc_extend(now, client, req_id, id, lease_us),
            // Identity is the driver's business; a Hello reaching the core is answered blandly.
            Request::Hello | Request::UseQp { .. } => {
                self.fail(client, req_id, Status::InvalidArgument)
            }
            Request::Rebind { id } => self.rebind(client, req_id, id),
            Request::Revoke { id, free } => {
                let Some(key) = self.lookup(client, id) else {
                    return self.fail(client, req_id, Status::NotFound);
                };
                if free {
                    let Some((object, access)) = self.perms.get(key).map(|p| (p.object, p.access))
                    else {
                        return self.fail(client, req_id, Status::NotFound);
                    };
                    if access != Access::ReadWrite {
                        // Freeing ends everyone's permissions: only a writer may do it.
                        return self.fail(client, req_id, Status::InvalidArgument);
                    }
                    self.free_object(object, now);
                } else {
                    self.end_permission(key, false, now);
                }
                self.replies.push(Outgoing {
                    client,
                    req_id,
                    reply: Reply::Revoked,
                });
            }
        }
    }

    fn lookup(&self, client: ClientId, id: PermissionId) -> Option<PermKey> {
        let key = *self.perms.by_header.get(&id.header_addr)?;
        let p = self.perms.get(key)?;
        // The ABA filter: a reused header has a later start time.
        (p.id == id && p.client == client && p.phase == Phase::Active).then_some(key)
    }

    fn fail(&mut self, client: ClientId, req_id: u64, status: Status) {
        self.replies.push(Outgoing {
            client,
            req_id,
            reply: Reply::Failed(status),
        });
    }

    fn allocate(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        size: u64,
        lease_us: u64,
        mode: Mode,
    ) {
        if size == 0 || lease_us == 0 {
            return self.fail(client, req_id, Status::InvalidArgument);
        }
        let Some(obj) = self.buffers.alloc(size) else {
            return self.fail(client, req_id, Status::NoMemory);
        };
        // Reused memory: windows of earlier owners still bound over it die in this chain.
        let state = self.objects.entry(obj.addr).or_default();
        for mw in std::mem::take(&mut state.stale_mws) {
            self.stale_owner.remove(&mw);
            self.mws.remove_stale(mw);
            self.releasing.push((mw, client));
        }
        let pending = self.grants.len();
        self.grant(now, client, req_id, obj, lease_us, Access::ReadWrite, mode);
        let granted = self.grants.len() > pending;
        match self.grants.last_mut() {
            Some(g) if granted => g.allocated = true,
            _ => {
                // Not granted (pools exhausted): the memory goes back instead of leaking.
                self.buffers.free(obj.addr);
                if self
                    .objects
                    .get(&obj.addr)
                    .is_some_and(ObjectState::is_idle)
                {
                    self.objects.remove(&obj.addr);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        obj: Object,
        lease_us: u64,
        access: Access,
        mode: Mode,
    ) {
        let contiguous = self.cfg.techniques.contiguity
            && access == Access::ReadWrite
            && !self.objects.get(&obj.addr).is_some_and(|o| o.embedded_busy);
        let header_addr = if contiguous {
            obj.addr
        } else {
            match self.headers.take() {
                Some(h) => {
                    if let Some(mw) = self.stale_headers.remove(&h) {
                        self.stale_owner.remove(&mw);
                        self.mws.remove_stale(mw);
                        self.releasing.push((mw, client));
                    }
                    h
                }
                None => return self.fail(client, req_id, Status::PoolExhausted),
            }
        };
        let windows_needed = if contiguous { 1 } else { 2 };
        let domain = self.mws.domain_of_client(client);
        let (free, stale, _) = self.mws.counts_in(domain);
        // Windows released in this batch serve grants too: rebound by handover, or (without
        // it) unbound and then bound. Counting them keeps the check a true reservation when a
        // stale window moves to `releasing` (its header or memory is reused) after the check.
        let handover_supply = self
            .releasing
            .iter()
            .filter(|(mw, _)| self.mws.domain_of(*mw) == domain)
            .count();
        let queued = self
            .needs
            .iter()
            .filter(|n| self.mws.domain_of_client(n.3) == domain)
            .count();
        if free + stale + handover_supply < queued + windows_needed {
            if !contiguous {
                self.headers.give(header_addr);
            }
            return self.fail(client, req_id, Status::PoolExhausted);
        }
        let last = self.last_start.get(&header_addr).copied().unwrap_or(0);
        let start = now.0.max(last + 1);
        self.last_start.insert(header_addr, start);
        let lifetime = lease_us.min(self.cfg.max_lifetime_us);
        let (buf_addr, buf_len) = obj.buffer();
        let p = Permission {
            id: PermissionId {
                header_addr,
                start_us: start,
            },
            client,
            object: obj.addr,
            buffer: (buf_addr, buf_len),
            access,
            mode,
            header: if contiguous {
                HeaderSlot::Embedded
            } else {
                HeaderSlot::Pooled
            },
            buffer_mw: None,
            header_mw: None,
            lifetime_us: lifetime,
            deadline: Timestamp(start).plus_us(lifetime),
            hard_deadline: Timestamp(start).plus_us(self.cfg.max_lifetime_us),
            refused: false,
            refuse_pending: false,
            phase: Phase::Granting,
        };
        let key = self.perms.insert(p);
        let state = self.objects.entry(obj.addr).or_default();
        state.perms.push(key);
        state.hold(mode);
        if contiguous {
            state.embedded_busy = true;
        }
        self.push_window_needs(key, client);
        self.grants.push(PendingGrant {
            key,
            client,
            req_id,
            buffer_rkey: None,
            lifetime_rkey: None,
            failed: false,
            allocated: false,
            rebind: false,
        });
    }

    /// The windows a permission needs: one over lifetime field + buffer when contiguous, else
    /// one over the buffer (rights by access) and one over the lifetime field.
    fn push_window_needs(&mut self, key: PermKey, client: ClientId) {
        let Some(p) = self.perms.get(key) else { return };
        let lifetime_field = p.id.header_addr + LIFETIME_OFFSET as u64;
        let (buf_addr, buf_len) = p.buffer;
        if p.header == HeaderSlot::Embedded {
            let end = buf_addr + buf_len;
            self.needs.push((
                key,
                true,
                BindTarget {
                    addr: lifetime_field,
                    len: end - lifetime_field,
                    access: BUFFER_RW,
                },
                client,
            ));
            return;
        }
        let buffer_rights = match p.access {
            Access::Read => AccessFlags::REMOTE_READ,
            Access::ReadWrite => BUFFER_RW,
        };
        self.needs.push((
            key,
            true,
            BindTarget {
                addr: buf_addr,
                len: buf_len,
                access: buffer_rights,
            },
            client,
        ));
        self.needs.push((
            key,
            false,
            BindTarget {
                addr: lifetime_field,
                len: 8,
                access: LIFETIME_RIGHTS,
            },
            client,
        ));
    }

    /// Binds a permission's windows anew (type-2 isolation after the client switched QPs):
    /// the old windows are unbound in this chain, new ones bound to the client's current QP,
    /// and the reply is a grant with the same id and lifetime and the new rkeys.
    fn rebind(&mut self, client: ClientId, req_id: u64, id: PermissionId) {
        let Some(key) = self.lookup(client, id) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        let domain = self.mws.domain_of_client(client);
        let (free, stale, _) = self.mws.counts_in(domain);
        let queued = self
            .needs
            .iter()
            .filter(|n| self.mws.domain_of_client(n.3) == domain)
            .count();
        let Some(p) = self.perms.get_mut(key) else {
            return;
        };
        let wanted = if p.header == HeaderSlot::Embedded {
            1
        } else {
            2
        };
        let old: Vec<MwId> = p
            .buffer_mw
            .take()
            .into_iter()
            .chain(p.header_mw.take())
            .collect();
        if free + stale + old.len() < queued + wanted {
            p.buffer_mw = old.first().copied();
            p.header_mw = old.get(1).copied();
            return self.fail(client, req_id, Status::PoolExhausted);
        }
        for mw in old {
            self.releasing.push((mw, client));
        }
        self.push_window_needs(key, client);
        self.counters.rebinds_for_qp_switch += 1;
        self.grants.push(PendingGrant {
            key,
            client,
            req_id,
            buffer_rkey: None,
            lifetime_rkey: None,
            failed: false,
            allocated: false,
            rebind: true,
        });
    }

    fn rpc_extend(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        id: PermissionId,
        lease_us: u64,
    ) {
        let Some(key) = self.lookup(client, id) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        let Some(p) = self.perms.get(key) else { return };
        let max = self.cfg.max_lifetime_us;
        // A lease already over (its expiry is pending: the check of this batch found a
        // one-sided extension that is itself past) is not revived.
        if p.refused || p.refuse_pending || p.lifetime_us >= max || p.deadline <= now {
            return self.fail(client, req_id, Status::ExtensionRefused);
        }
        let new = p.lifetime_us.saturating_add(lease_us).min(max);
        let expected = p.lifetime_us;
        let addr = p.id.header_addr + LIFETIME_OFFSET as u64;
        let pid = p.id;
        self.counters.lifetime_cas += 1;
        self.ops.push((
            NicOp::LifetimeCas {
                addr,
                compare: expected,
                swap: new,
            },
            Cont::Extend(key, pid, expected, new, client, req_id),
        ));
    }
}

/// Pool occupancy (see [`ManagerCore::occupancy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Objects with permissions, waiters, a busy header slot or stale windows.
    pub tracked_objects: usize,
    /// Queued conflicting requests.
    pub waiters: usize,
}

mod lifecycle;
