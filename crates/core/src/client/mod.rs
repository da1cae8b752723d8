//! The client library (CN-lib, paper Table 2): control path over a control QP (RPCs into the
//! memory node's shared receive queue), data path as one-sided verbs through windows on a
//! virtual QP with spares.
//!
//! - `allocate`, `acquire`, `extend` (one-sided CAS on the lifetime field), `extend_rpc`,
//!   `revoke`, `free`;
//! - `read`, `write`, `cas`, `faa`, and [`Batch`] for many ops behind one doorbell.
//!
//! The control QP is separate from the data QPs, so a data-QP fault never disturbs the
//! control plane. The client's expiry is conservative: (send time of the request + granted
//! lifetime − margin) on its own clock; only durations travel.

mod data;
mod error;
mod lease;
mod perm;
mod posted;
mod renew;
mod vqp;

pub use data::{Batch, OpResult};
pub use error::ClientError;
pub use lease::{ClientStats, LeasePolicy, RttEstimator};
pub use perm::Perm;
pub use posted::{MAX_POSTED, PostedExtend};
pub use renew::LongLease;
pub use vqp::SwitchKind;

use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{Access, ControlProtocol, Grant, Mode, Reply, Request, Status};
use crate::proto::shards::{Route, ShardMap};
use crate::rpc::{RpcClient, RpcError};
use rnic::{
    AccessFlags, Clock, Context, MemoryBuffer, ProtectionDomain, Provider, QpInit, QpTiming,
    QueuePair, Timestamp,
};
use std::sync::Arc;
use std::time::Duration;
use vqp::VirtualQp;

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Spare data QPs prepared (0 disables the technique).
    pub spare_qps: usize,
    /// Recover broken QPs on a background thread.
    pub background_recovery: bool,
    /// Safety margin subtracted from the local expiry (clock skew, one-way latency).
    pub lease_margin: Duration,
    /// How long a control RPC may take (wall time).
    pub rpc_timeout: Duration,
    /// How long `acquire` waits for conflicting holders to leave (then it fails with
    /// `ConflictTimeout`). Capped at three quarters of `rpc_timeout`, so the memory node
    /// answers before the client gives up; 0 fails a conflicting acquire at once.
    pub acquire_wait: Duration,
    /// The tenant this client acts for, and the tenant's secret (a memory node with no
    /// tenants configured serves everyone as tenant 0).
    pub tenant: crate::manager::TenantId,
    /// The tenant's secret.
    pub tenant_secret: u64,
    /// Bytes of registered staging memory for the data path.
    pub staging_bytes: usize,
    /// QP timing.
    pub qp_timing: QpTiming,
    /// Refuse data ops on a locally expired lease without issuing them (default). Turning it
    /// off lets tests and demos show what the NIC does with a late access.
    pub check_local_expiry: bool,
    /// Round-trip bounds added to every lease asked for, so the lease asked for is what is
    /// left when the grant arrives ([`LeasePolicy`]; 0 asks for leases as given).
    pub lease_slack_rtts: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            spare_qps: 2,
            background_recovery: true,
            lease_margin: Duration::from_micros(5),
            rpc_timeout: Duration::from_secs(5),
            acquire_wait: Duration::from_secs(1),
            tenant: crate::manager::DEFAULT_TENANT,
            tenant_secret: 0,
            staging_bytes: 1 << 20,
            qp_timing: QpTiming::default(),
            check_local_expiry: true,
            lease_slack_rtts: 2,
        }
    }
}

const RECV_SLOTS: u32 = 16;
/// Control requests a client may have unanswered at once.
pub const MAX_OUTSTANDING_RPCS: u32 = RECV_SLOTS;

/// A client of one memory node.
pub struct Client<P: Provider> {
    clock: Arc<dyn Clock>,
    cfg: ClientConfig,
    _pd: P::Pd,
    /// A control channel to each manager shard (shard 0 first).
    ctrl: Vec<RpcClient<P, ControlProtocol>>,
    /// Which shard owns which address.
    shards: ShardMap,
    /// The shard the next allocation tries first (allocations go round the shards).
    next_alloc: usize,
    /// The channel `poll_reply` looks at first (so none starves).
    next_poll: usize,
    data_cq: P::Cq,
    staging: P::Buffer,
    staging_mr: P::Mr,
    vqp: VirtualQp<P>,
    epoch: u64,
    client_id: u32,
    /// Windows are type 2, bound to the active QP: a QP switch needs `UseQp` + `Rebind`.
    type2: bool,
    /// How long a lease to ask for, from the measured control round trip.
    lease: LeasePolicy,
    /// What the client counted.
    stats: ClientStats,
    /// Pipelined requests in flight: (id, sent at, an extension?), for their round trip.
    in_flight: Vec<(u64, Timestamp, bool)>,
    /// Extensions posted without waiting ([`Client::post_extend`]).
    posted: posted::PostedOps,
    /// Permissions that may be alive, for rebinding after a QP switch (type 2).
    live: Vec<(
        crate::proto::messages::PermissionId,
        std::sync::Weak<std::sync::atomic::AtomicU64>,
    )>,
}

impl<P: Provider> std::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Client<P> {
    /// Connects to the memory node at `address`: a control QP, a `Hello`, then the data QPs.
    pub fn connect(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
    ) -> Result<Self, ClientError> {
        Self::connect_on(ctx, address, cfg, None)
    }

    /// Connects as [`Client::connect`] does, with the control CQs on `channel`: a thread that
    /// drives several clients can [`arm`](Client::arm) them all and sleep on the one channel
    /// until any has a reply ([`rnic::CompletionChannel::wait`]).
    pub fn connect_on(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
        channel: Option<&P::Channel>,
    ) -> Result<Self, ClientError> {
        let control_cq = || match channel {
            Some(ch) => ctx.create_cq_on(64, ch),
            None => ctx.create_cq(64),
        };
        let pd = ctx.alloc_pd()?;
        let ctrl_cq = control_cq()?;
        let data_cq = ctx.create_cq(4096)?;
        fn init<'a, P: Provider>(
            send: &'a P::Cq,
            recv: &'a P::Cq,
            max_recv: u32,
            timing: QpTiming,
        ) -> QpInit<'a, P> {
            QpInit {
                send_cq: send,
                recv_cq: recv,
                srq: None,
                max_send_wr: 1024,
                max_recv_wr: max_recv,
                access: AccessFlags::empty(),
                timing,
            }
        }
        let t = cfg.qp_timing;
        let ctrl_qp = pd.create_qp(init::<P>(&ctrl_cq, &ctrl_cq, RECV_SLOTS + 1, t))?;
        // `staging_bytes` for batches, and the posted extensions' result slots after them.
        let staging = ctx.alloc_buffer(cfg.staging_bytes.max(4096) + posted::POSTED_STAGING)?;
        let staging_mr = pd.reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        let control = Intent {
            role: Role::Control,
            client_id: 0,
            secret: 0,
            slot: 0,
        };
        ctrl_qp.connect(address, &control.encode())?;
        let mut ctrl = RpcClient::new(ctx, &pd, ctrl_qp, ctrl_cq, RECV_SLOTS)?;
        // The Hello gives the data QPs an identity to present.
        let hello = Request::Hello {
            tenant: cfg.tenant,
            secret: cfg.tenant_secret,
        };
        let (client_id, secret, type2, shards) = match ctrl.call(hello, cfg.rpc_timeout, true)? {
            Reply::Welcome {
                client_id,
                secret,
                type2,
                shards,
            } => (client_id, secret, type2, shards),
            other => return Err(unexpected(other)),
        };
        // One control channel per manager shard, with disjoint request ids.
        let n = shards.shards.max(1) as u64;
        ctrl.use_ids(1, n);
        let mut ctrls = vec![ctrl];
        for k in 1..n {
            let cq = control_cq()?;
            let qp = pd.create_qp(init::<P>(&cq, &cq, RECV_SLOTS + 1, t))?;
            let intent = Intent {
                role: Role::Control,
                client_id,
                secret,
                slot: k as u8,
            };
            qp.connect(address, &intent.encode())?;
            let mut channel = RpcClient::new(ctx, &pd, qp, cq, RECV_SLOTS)?;
            channel.use_ids(k + 1, n);
            ctrls.push(channel);
        }
        let intent = Intent {
            role: Role::Data,
            client_id,
            secret,
            slot: 0,
        };
        let mut qps = Vec::with_capacity(cfg.spare_qps + 1);
        for slot in 0..=cfg.spare_qps.min(u8::MAX as usize) as u8 {
            let qp = pd.create_qp(init::<P>(&data_cq, &data_cq, 1, t))?;
            qp.connect(address, &Intent { slot, ..intent }.encode())?;
            qps.push((slot, qp));
        }
        let active = qps.remove(0);
        let vqp = VirtualQp::new(
            active,
            qps,
            address.clone(),
            intent,
            cfg.background_recovery && cfg.spare_qps > 0,
        );
        Ok(Client {
            clock: ctx.clock(),
            _pd: pd,
            ctrl: ctrls,
            shards,
            next_alloc: client_id as usize,
            next_poll: 0,
            data_cq,
            staging,
            staging_mr,
            vqp,
            type2,
            live: Vec::new(),
            epoch: 0,
            client_id,
            lease: LeasePolicy::new(cfg.lease_slack_rtts),
            stats: ClientStats::default(),
            in_flight: Vec::new(),
            posted: posted::PostedOps::default(),
            cfg,
        })
    }

    /// Turns a grant of a request sent at `sent` into a permission, counting it.
    fn take_grant(&mut self, grant: Grant, access: Access, mode: Mode, sent: Timestamp) -> Perm {
        self.lease
            .learn_max_lifetime(u64::from(grant.max_lifetime_us));
        let perm = Perm::new(grant, access, mode, sent, micros(self.cfg.lease_margin));
        self.stats.grants += 1;
        if self.clock.now() >= perm.expiry() {
            self.stats.dead_on_arrival += 1;
            perm.mark_wasted(&mut self.stats);
        }
        self.track(perm)
    }

    fn track(&mut self, perm: Perm) -> Perm {
        if self.type2 {
            self.live.retain(|(_, w)| w.strong_count() > 0);
            self.live
                .push((perm.id(), std::sync::Arc::downgrade(&perm.rkeys)));
        }
        perm
    }

    /// After a QP switch under type-2 isolation: tell the memory node which QP is active and
    /// have every live permission's windows bound to it; the permissions' rkeys are refreshed
    /// in place, so the application keeps using the same `Perm`s.
    pub(crate) fn rebind_after_switch(&mut self) -> Result<(), ClientError> {
        if !self.type2 {
            return Ok(());
        }
        let slot = self.vqp.active_slot();
        match self.rpc(Request::UseQp { slot })? {
            Reply::Welcome { .. } => {}
            other => return Err(unexpected(other)),
        }
        self.live.retain(|(_, w)| w.strong_count() > 0);
        for (id, rkeys) in self.live.clone() {
            match self.rpc(Request::Rebind { id })? {
                Reply::Granted(g) => {
                    if let Some(r) = rkeys.upgrade() {
                        r.store(
                            perm::pack(g.buffer_rkey, g.lifetime_rkey),
                            std::sync::atomic::Ordering::SeqCst,
                        );
                    }
                }
                // Ended meanwhile (revoked, expired): nothing to refresh.
                Reply::Failed(Status::NotFound) => {}
                other => return Err(unexpected(other)),
            }
        }
        Ok(())
    }

    /// This client's id on the memory node.
    pub fn id(&self) -> u32 {
        self.client_id
    }

    /// The clock the client times leases with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// QP switches so far, and the duration of the last one on the application's path.
    pub fn qp_switches(&self) -> (u64, Duration) {
        (self.vqp.switches, self.vqp.last_switch)
    }

    /// Spare QPs ready now.
    pub fn spares_ready(&mut self) -> usize {
        self.vqp.spares_ready()
    }

    /// `allocate(size, lease, mode)`: new memory with a read-write permission over it.
    pub fn allocate(
        &mut self,
        size: u64,
        lease: Duration,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let sent = self.clock.now();
        match self.rpc(Request::Allocate {
            size,
            lease_us: micros(lease),
            mode,
        })? {
            Reply::Granted(g) => Ok(self.take_grant(g, Access::ReadWrite, mode, sent)),
            other => Err(unexpected(other)),
        }
    }

    /// `acquire(addr, size, lease, access, mode)` over an allocated object's buffer.
    pub fn acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let sent = self.clock.now();
        let wait_cap = micros(self.cfg.rpc_timeout * 3 / 4);
        match self.rpc(Request::Acquire {
            addr,
            size,
            lease_us: micros(lease),
            access,
            mode,
            wait_us: micros(self.cfg.acquire_wait).min(wait_cap),
        })? {
            Reply::Granted(g) => Ok(self.take_grant(g, access, mode, sent)),
            other => Err(unexpected(other)),
        }
    }

    /// Turns the `Granted` reply of a pipelined `Allocate`/`Acquire` (sent with
    /// [`Client::submit`] at `sent`, the client clock's time before sending) into a
    /// permission, as [`Client::acquire`] does for a blocking one. The local expiry counts
    /// from `sent`, so a late adoption never overestimates the lease.
    pub fn adopt(&mut self, grant: Grant, access: Access, mode: Mode, sent: Timestamp) -> Perm {
        self.take_grant(grant, access, mode, sent)
    }

    /// RPC-based extension (the baseline CN-collaborated extension is compared against).
    pub fn extend_rpc(&mut self, perm: &Perm, lease: Duration) -> Result<(), ClientError> {
        match self.rpc(Request::Extend {
            id: perm.id(),
            lease_us: micros(lease),
        })? {
            Reply::Extended { lifetime_us } => {
                perm.lifetime_us
                    .store(lifetime_us, std::sync::atomic::Ordering::SeqCst);
                self.stats.rpc_extensions += 1;
                Ok(())
            }
            other => {
                if other == Reply::Failed(Status::ExtensionRefused) {
                    self.stats.extension_refusals += 1;
                }
                Err(unexpected(other))
            }
        }
    }

    /// Lets clients of `tenant` acquire the object whose buffer starts at `addr` with at most
    /// `access` (`None` withdraws; permissions already granted end by their leases). Only a
    /// client of the owner tenant may share; to anyone else the object does not exist.
    pub fn share(
        &mut self,
        addr: u64,
        tenant: crate::manager::TenantId,
        access: Option<Access>,
    ) -> Result<(), ClientError> {
        match self.rpc(Request::Share {
            addr,
            tenant,
            access,
        })? {
            Reply::Shared => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// `revoke(perm)`: ends the permission; its rkeys fail once this returns.
    pub fn revoke(&mut self, perm: Perm) -> Result<(), ClientError> {
        self.end(perm, false)
    }

    /// Ends the permission and frees the memory (every permission on it ends too). If the
    /// memory node refuses to free (`NotOwner`: the object is another tenant's; or a read-only
    /// permission), the permission is still ended, so nothing outlives the handle this call
    /// consumed, and the refusal is returned.
    pub fn free(&mut self, perm: Perm) -> Result<(), ClientError> {
        self.end(perm, true)
    }

    fn end(&mut self, perm: Perm, free: bool) -> Result<(), ClientError> {
        match self.rpc(Request::Revoke {
            id: perm.id(),
            free,
        })? {
            Reply::Revoked => Ok(()),
            Reply::Failed(s @ (Status::NotOwner | Status::InvalidArgument)) if free => {
                // Freeing was refused; the caller gave up the handle, so end the permission.
                match self.rpc(Request::Revoke {
                    id: perm.id(),
                    free: false,
                })? {
                    Reply::Revoked | Reply::Failed(Status::NotFound) => {}
                    other => return Err(unexpected(other)),
                }
                Err(ClientError::from_status(s))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Control requests issued so far (retries not counted).
    pub fn rpcs(&self) -> u64 {
        self.ctrl.iter().map(RpcClient::submitted).sum()
    }

    /// The memory node's manager shards, as it told this client.
    pub fn shard_map(&self) -> ShardMap {
        self.shards
    }

    /// The channel of the shard `req` goes to (an allocation: the next in turn).
    fn channel_for(&mut self, req: &Request) -> usize {
        match self.shards.route(req) {
            Route::Shard(k) => k.min(self.ctrl.len() - 1),
            Route::Any | Route::All => {
                let k = self.next_alloc % self.ctrl.len();
                self.next_alloc = self.next_alloc.wrapping_add(1);
                k
            }
        }
    }

    /// Sends a request on the control channel of the shard it goes to and waits for its
    /// reply. Halfway to the timeout the request is sent once more under the same id: the
    /// memory node answers a retry with the reply it gave (or gives) the original. An
    /// allocation that a shard cannot serve (no memory, no header or window) tries the other
    /// shards in turn; a request for every shard (`UseQp`) goes to each.
    ///
    /// A memory node that refuses as overloaded is asked again after a jittered, doubling
    /// back-off (from the smoothed round trip, at least 50 µs), while the RPC timeout lasts.
    #[allow(clippy::disallowed_methods)] // back-off and the RPC timeout are wall time
    pub(crate) fn rpc(&mut self, req: Request) -> Result<Reply, ClientError> {
        let deadline = std::time::Instant::now() + self.cfg.rpc_timeout;
        let mut backoff = Duration::from_micros(self.lease.rtt().srtt_us().max(50));
        loop {
            let req = self.with_slack(req);
            let sent = self.clock.now();
            let reply = self.rpc_unmeasured(req)?;
            self.lease.observe(sent, self.clock.now(), &mut self.stats);
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

    fn rpc_unmeasured(&mut self, req: Request) -> Result<Reply, ClientError> {
        let timeout = self.cfg.rpc_timeout;
        let reply = match self.shards.route(&req) {
            Route::All => {
                let mut last = None;
                for k in 0..self.ctrl.len() {
                    match self.ctrl[k].call(req, timeout, true) {
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
                let n = self.ctrl.len();
                let mut reply = Err(RpcError::Timeout);
                for i in 0..n {
                    reply = self.ctrl[(first + i) % n].call(req, timeout, true);
                    let full = matches!(
                        reply,
                        Ok(Reply::Failed(Status::NoMemory | Status::PoolExhausted))
                    );
                    if !full {
                        break;
                    }
                }
                reply
            }
            Route::Shard(k) => {
                let k = k.min(self.ctrl.len() - 1);
                self.ctrl[k].call(req, timeout, true)
            }
        };
        self.hand_back_orphans();
        Ok(reply?)
    }

    /// Grants that arrived after their request timed out are ended at once (and what they
    /// allocated freed), so no permission or memory is orphaned; their answers are dropped.
    fn hand_back_orphans(&mut self) {
        for k in 0..self.ctrl.len() {
            if self.ctrl.len() > 1 {
                // A late grant may sit on another shard's channel: look (without waiting).
                // A failed channel reports itself on its next call.
                let _ = self.ctrl[k].poll_cq();
            }
            for orphan in self.ctrl[k].take_orphans() {
                if let Reply::Granted(g) = orphan.reply {
                    let free = matches!(orphan.request, Request::Allocate { .. });
                    let revoke = Request::Revoke { id: g.id, free };
                    let shard = self.channel_for(&revoke);
                    // Busy: the lease ends it instead.
                    let _ = self.ctrl[shard].submit_detached(revoke);
                }
            }
        }
    }

    /// Sends a control request without waiting (pipelined RPCs; at most
    /// [`MAX_OUTSTANDING_RPCS`] unanswered at a time per shard). Returns its request id.
    /// Allocations go round the shards (no retry on another shard).
    pub fn submit(&mut self, req: Request) -> Result<u64, ClientError> {
        let req = self.with_slack(req);
        let k = self.channel_for(&req);
        let id = self.ctrl[k].submit(req)?;
        let extend = matches!(req, Request::Extend { .. });
        // Bounded by the channels' slots: a request whose reply never comes is forgotten
        // with the oldest.
        if self.in_flight.len() >= 4 * MAX_OUTSTANDING_RPCS as usize * self.ctrl.len() {
            self.in_flight.remove(0);
        }
        self.in_flight.push((id, self.clock.now(), extend));
        Ok(id)
    }

    /// Counts a pipelined reply: its round trip, and what it says about leases.
    fn on_pipelined_reply(&mut self, id: u64, reply: &Reply) {
        let Some(i) = self.in_flight.iter().position(|&(rid, _, _)| rid == id) else {
            return;
        };
        let (_, sent, extend) = self.in_flight.swap_remove(i);
        self.lease.observe(sent, self.clock.now(), &mut self.stats);
        match reply {
            Reply::Extended { .. } => self.stats.rpc_extensions += 1,
            Reply::Failed(Status::ExtensionRefused | Status::NotFound) if extend => {
                self.stats.extension_refusals += 1
            }
            _ => {}
        }
    }

    /// What this client counted so far.
    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats.clone();
        s.rpc_retries = self.ctrl.iter().map(RpcClient::resent).sum();
        s.stray_replies = self.ctrl.iter().map(RpcClient::stray_replies).sum();
        s
    }

    /// The lease policy (its round-trip estimate and the slack it adds).
    pub fn lease_policy(&self) -> &LeasePolicy {
        &self.lease
    }

    /// Tamper helper: sends `req` again under an earlier id, as a retry (or a replayed
    /// message) would. The memory node answers with the reply the id already got.
    #[cfg(feature = "testing")]
    pub fn replay(&mut self, req_id: u64, req: Request) -> Result<Reply, ClientError> {
        let k = (req_id.saturating_sub(1) % self.ctrl.len() as u64) as usize;
        Ok(self.ctrl[k].replay(req_id, req, self.cfg.rpc_timeout)?)
    }

    /// Arms the control CQs on the channel given to [`Client::connect_on`]: the next reply
    /// raises an event there. Arm, poll ([`Client::poll_reply`]), and only if nothing came,
    /// wait on the channel.
    pub fn arm(&self) {
        for c in &self.ctrl {
            c.arm();
        }
    }

    /// Waits up to `max` for a reply to any pipelined request (sleeping on the control CQ, not
    /// spinning); `None` if none arrived.
    pub fn wait_reply(&mut self, max: Duration) -> Result<Option<(u64, Reply)>, ClientError> {
        if let Some(r) = self.poll_reply()? {
            return Ok(Some(r));
        }
        let n = self.ctrl.len();
        // Several shards: wait on each channel in turn for a share of the time.
        let slice = max / n as u32;
        for i in 0..n {
            let k = (self.next_poll + i) % n;
            if let Some(r) = self.ctrl[k].wait_any(slice)? {
                self.next_poll = (k + 1) % n;
                self.hand_back_orphans();
                self.on_pipelined_reply(r.0, &r.1);
                return Ok(Some(r));
            }
        }
        self.poll_reply()
    }

    /// Takes one arrived reply, if any, as (request id, reply).
    pub fn poll_reply(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        let n = self.ctrl.len();
        let mut found = None;
        for i in 0..n {
            let k = (self.next_poll + i) % n;
            if let Some(r) = self.ctrl[k].poll()? {
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
}

/// A duration in whole microseconds, as leases travel (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl From<RpcError> for ClientError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Busy => ClientError::ControlBusy,
            RpcError::Timeout => ClientError::RpcTimeout,
            RpcError::QpFailed(s) => ClientError::ControlLost(s),
            RpcError::Verbs(v) => ClientError::Verbs(v),
        }
    }
}

fn unexpected(reply: Reply) -> ClientError {
    match reply {
        Reply::Failed(s) => ClientError::from_status(s),
        other => ClientError::UnexpectedReply(other.kind_name()),
    }
}
