//! The memory node: the driver that pumps a [`ManagerCore`] with verbs.
//!
//! It owns the memory pool (headers, then slab buffers) registered twice: in the clients'
//! protection domain with MW_BIND only (windows are the sole way in), and in a manager-only
//! domain with remote atomics for the loopback QP through which the manager CASes lifetime
//! words (ConnectX atomics are not atomic with CPU atomics, so the NIC does it). Binds go on a
//! loopback QP of the clients' domain. Requests arrive in a shared receive queue; one manager
//! thread (a memory node's weak core) runs batches: `begin` → CASes → `plan` → binds →
//! `finish` → header writes → replies. Its CPU time is measured with a per-thread CPU clock.

use super::core::{ManagerConfig, ManagerCore, Occupancy, Scrub};
use super::pool::SlabConfig;
use super::state::{ClientId, Counters, Techniques};
use super::tenants::{DEFAULT_TENANT, TenantId};
use crate::proto::connect::{Intent, Role};
use crate::proto::header::HEADER_SIZE;
use crate::proto::messages::{ControlProtocol, Reply, Request, Status};
use crate::rpc::{Incoming, RpcServer};
use parking_lot::Mutex;
use rand::Rng;
use rnic::{
    AcceptPolicy, AccessFlags, Context, MemoryBuffer, MwType, ProtectionDomain, Provider, QpInit,
    QpNumber, QpState, QpTiming, QueuePair, VerbsError,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Memory-node configuration.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Bytes of buffer pool.
    pub pool_bytes: u64,
    /// Headers in the header pool.
    pub header_count: usize,
    /// Pre-allocated memory windows.
    pub mw_count: u32,
    /// §5.4 techniques.
    pub techniques: Techniques,
    /// Maximum lifetime of a permission, µs.
    pub max_lifetime_us: u64,
    /// Delay unbinding freed buffers only while this many bytes are free.
    pub buffer_watermark: u64,
    /// Receive slots in the shared receive queue.
    pub srq_depth: u32,
    /// Most requests handled in one batch.
    pub max_batch: usize,
    /// How late, µs, the manager may collect an expired lease when no request arrives to batch
    /// it with (the paper's manager polls for expired permissions periodically, §4.2). A lease
    /// is never collected early; a later collection lets expiries share a batch with grants
    /// (so their windows are handed over) instead of waking the manager once per expiry.
    pub expiry_slack_us: u64,
    /// Timing of the node's QPs.
    pub qp_timing: QpTiming,
    /// Slab classes.
    pub slab: SlabConfig,
    /// How clients are isolated from each other.
    pub isolation: Isolation,
    /// Windows pre-allocated per client when each client has its own PD.
    pub windows_per_client: u32,
    /// When freed memory is zeroed ([`Scrub::Off`] only to measure what scrubbing costs).
    pub scrub: Scrub,
    /// Longest a conflicting acquire may wait for the holders to leave, µs.
    pub max_wait_us: u64,
    /// Tenants and their secrets. Empty: every client acts for the one default tenant (a
    /// single application); otherwise a client must present one of these to be served.
    pub tenants: Vec<TenantSecret>,
    /// The manager draws each bind's key byte at random (none of the window's recent ones)
    /// instead of leaving the NIC to step it by one; see `manager::keys`.
    pub random_key_bytes: bool,
    /// Seed of those draws (`None`: from the OS; tests set one to replay exactly).
    pub key_seed: Option<u64>,
}

/// A tenant the memory node serves, and the secret its clients authenticate with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TenantSecret {
    /// The tenant.
    pub tenant: TenantId,
    /// Its secret.
    pub secret: u64,
}

impl std::fmt::Debug for TenantSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantSecret")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive() // the secret stays out of logs
    }
}

/// How clients are isolated from each other on the memory node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// One PD for every client, type-1 windows (the paper's design). Any client holding a
    /// window's rkey can use it from any of its QPs; a guessed key byte is the only barrier
    /// (a sweep of the 256 values finds it, at the cost of a QP fault per wrong guess).
    SharedPd,
    /// A PD (with its own registration of the pool and its own windows) per client: a window
    /// of client A fails on client B's QPs even with the right rkey (PD mismatch at the NIC).
    /// The default.
    #[default]
    PdPerClient,
    /// A PD per client and type-2 windows bound to the client's current QP: a window fails on
    /// any other QP, even the same client's. When the client switches to a spare QP it tells
    /// the manager (`UseQp`) and has its permissions' windows bound again (`Rebind`). MW
    /// handover is off in this mode (a type-2 window must be invalidated before a rebind).
    Type2,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            pool_bytes: 64 << 20,
            header_count: 1 << 14,
            mw_count: 1 << 14,
            techniques: Techniques::ALL,
            max_lifetime_us: 10_000,
            buffer_watermark: 8 << 20,
            srq_depth: 1024,
            max_batch: 64,
            expiry_slack_us: 50,
            qp_timing: QpTiming::default(),
            slab: SlabConfig::default(),
            isolation: Isolation::PdPerClient,
            windows_per_client: 1024,
            scrub: Scrub::Idle,
            max_wait_us: 1_000_000,
            tenants: Vec::new(),
            random_key_bytes: true,
            key_seed: None,
        }
    }
}

/// Errors starting a memory node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A verb failed.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
    /// Configuration is inconsistent.
    #[error("configuration: {0}")]
    Config(&'static str),
}

/// What the node reports about itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeStats {
    /// Operation counters.
    pub counters: Counters,
    /// Pool occupancy.
    pub occupancy: Option<Occupancy>,
    /// CPU time of the manager thread (idle polling included).
    pub manager_cpu: Duration,
    /// CPU time of the manager thread spent handling batches.
    pub busy_cpu: Duration,
    /// Batches run.
    pub batches: u64,
    /// Connected clients.
    pub clients: usize,
    /// Pool bytes held by live objects and headers in use.
    pub pool_bytes_in_use: u64,
    /// Estimated bytes of the manager's tables (see [`ManagerCore::metadata_bytes`]).
    pub metadata_bytes: u64,
}

struct Shared<P: Provider> {
    stop: AtomicBool,
    /// Set by `fresh_stats`; the manager thread publishes and clears it.
    publish: AtomicBool,
    stats: Mutex<NodeStats>,
    /// Notified (with `stats` locked and released) when a requested snapshot is published.
    published: parking_lot::Condvar,
    incoming: Mutex<Vec<(Intent, P::Qp)>>,
    secrets: Mutex<HashMap<u32, u64>>,
    /// Per-client PDs (isolation by PD): data QPs of a client are created in it.
    client_pds: Mutex<HashMap<u32, P::Pd>>,
    loop_secret: u64,
}

/// A running memory node.
pub struct MemoryNode<P: Provider> {
    address: P::Address,
    shared: Arc<Shared<P>>,
    thread: Option<JoinHandle<()>>,
    _listener: P::Listener,
    pool_addr: u64,
}

impl<P: Provider> std::fmt::Debug for MemoryNode<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNode")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

struct Policy<P: Provider> {
    shared: Arc<Shared<P>>,
    client_pd: P::Pd,
    manager_pd: P::Pd,
    srq: P::Srq,
    ctrl_send_cq: P::Cq,
    ctrl_recv_cq: P::Cq,
    data_cq: P::Cq,
    timing: QpTiming,
}

impl<P: Provider> AcceptPolicy<P> for Policy<P> {
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String> {
        let intent = Intent::decode(private_data).ok_or("malformed connection intent")?;
        let init = |pd: &P::Pd, send: &P::Cq, recv: &P::Cq, srq, access| {
            pd.create_qp(QpInit {
                send_cq: send,
                recv_cq: recv,
                srq,
                max_send_wr: 1024,
                max_recv_wr: 16,
                access,
                timing: self.timing,
            })
            .map_err(|e| e.to_string())
        };
        match intent.role {
            Role::Control => init(
                &self.client_pd,
                &self.ctrl_send_cq,
                &self.ctrl_recv_cq,
                Some(&self.srq),
                AccessFlags::empty(),
            ),
            Role::Data => {
                let known = self.shared.secrets.lock().get(&intent.client_id).copied();
                if known != Some(intent.secret) || intent.secret == 0 {
                    return Err("unknown client or wrong secret".into());
                }
                let own = self
                    .shared
                    .client_pds
                    .lock()
                    .get(&intent.client_id)
                    .cloned();
                init(
                    own.as_ref().unwrap_or(&self.client_pd),
                    &self.data_cq,
                    &self.data_cq,
                    None,
                    AccessFlags::REMOTE_ALL,
                )
            }
            Role::Loopback => {
                if intent.secret != self.shared.loop_secret {
                    return Err("loopback intent with a wrong secret".into());
                }
                init(
                    &self.manager_pd,
                    &self.data_cq,
                    &self.data_cq,
                    None,
                    AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
                )
            }
        }
    }

    fn established(&self, qp: P::Qp, private_data: &[u8]) {
        if let Some(intent) = Intent::decode(private_data) {
            self.shared.incoming.lock().push((intent, qp));
        }
    }
}

/// A protection domain the manager binds windows in: its PD, its registration of the pool,
/// and a loopback QP in it to post BIND_MW work requests on.
struct Domain<P: Provider> {
    pd: P::Pd,
    mr: P::Mr,
    bind_qp: P::Qp,
}

const CAS_SLOTS: usize = 512;
/// Freed objects zeroed per idle turn of the manager loop (it checks for requests between).
const IDLE_SCRUB_OBJECTS: usize = 16;

struct Runner<P: Provider> {
    ctx: P::Context,
    shared: Arc<Shared<P>>,
    core: ManagerCore,
    pool: P::Buffer,
    /// What runs the batches' NIC work.
    nic: nic::NodeNic<P>,
    windows_per_client: u32,
    /// Recent requests per client, by id, with their replies (retries get the same reply).
    recent: HashMap<ClientId, recent::RecentRequests>,
    /// Tenants and secrets (empty: everyone is the default tenant).
    tenants: HashMap<TenantId, u64>,
    /// Clients that authenticated (their `Hello` was accepted), with their tenant.
    authenticated: HashMap<ClientId, TenantId>,
    /// Extra copies of requests of the current batch (a retry arriving with its original).
    batch_copies: HashMap<(ClientId, u64), u32>,
    /// The control channel's server end: request slots in an SRQ, reply slots.
    rpc: RpcServer<P, ControlProtocol>,
    control: HashMap<QpNumber, (ClientId, P::Qp)>,
    /// Each client's control QP, for replies (the same QPs as `control`, by client).
    reply_qp: HashMap<ClientId, P::Qp>,
    /// A control send failed: sweep `control` for broken QPs.
    sweep: bool,
    others: Vec<P::Qp>,
    next_client: u32,
    max_batch: usize,
    expiry_slack_us: u64,
    batches: u64,
    busy_cpu: Duration,
}

impl<P: Provider> MemoryNode<P> {
    /// Starts a memory node on `ctx`: allocates and registers the pool, pre-allocates windows,
    /// listens, and runs the manager thread.
    pub fn start(ctx: P::Context, cfg: NodeConfig) -> Result<Self, NodeError> {
        if cfg.header_count == 0 || cfg.mw_count == 0 || cfg.pool_bytes == 0 {
            return Err(NodeError::Config("pools must not be empty"));
        }
        let header_bytes = (cfg.header_count * HEADER_SIZE) as u64;
        let total = header_bytes + cfg.pool_bytes;
        let pool = ctx.alloc_buffer(total as usize)?;
        let client_pd = ctx.alloc_pd()?;
        let manager_pd = ctx.alloc_pd()?;
        // Clients' domain: no remote rights on the region itself — windows are the only way in.
        let client_mr = client_pd.reg_mr(
            &pool,
            0,
            total as usize,
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )?;
        let manager_mr = manager_pd.reg_mr(
            &pool,
            0,
            total as usize,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
        )?;
        let mws = (0..cfg.mw_count)
            .map(|_| client_pd.alloc_mw(MwType::Type1))
            .collect::<Result<Vec<_>, _>>()?;
        let depth = cfg.srq_depth.max(16);
        let op_cq = ctx.create_cq(8192)?;
        let data_cq = ctx.create_cq(4096)?;
        // Request and reply slots, in the clients' domain (control QPs live there).
        let rpc =
            RpcServer::<P, ControlProtocol>::new(&ctx, &client_pd, depth, cfg.max_batch.max(1))?;
        let scratch = ctx.alloc_buffer(CAS_SLOTS * 8)?;
        let scratch_mr = manager_pd.reg_mr(&scratch, 0, scratch.len(), AccessFlags::LOCAL_WRITE)?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            publish: AtomicBool::new(false),
            stats: Mutex::new(NodeStats::default()),
            published: parking_lot::Condvar::new(),
            incoming: Mutex::new(Vec::new()),
            secrets: Mutex::new(HashMap::new()),
            client_pds: Mutex::new(HashMap::new()),
            loop_secret: rand::rng().random::<u64>() | 1,
        });
        let policy = Arc::new(Policy::<P> {
            shared: shared.clone(),
            client_pd: client_pd.clone(),
            manager_pd: manager_pd.clone(),
            srq: rpc.srq().clone(),
            ctrl_send_cq: rpc.send_cq().clone(),
            ctrl_recv_cq: rpc.recv_cq().clone(),
            data_cq: data_cq.clone(),
            timing: cfg.qp_timing,
        });
        let listener = ctx.listen(policy)?;
        let address = ctx.listener_address(&listener);
        let bind_qp = loopback_qp::<P>(&client_pd, &op_cq, cfg.qp_timing)?;
        let cas_qp = loopback_qp::<P>(&manager_pd, &op_cq, cfg.qp_timing)?;
        let loop_intent = Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: shared.loop_secret,
            slot: 0,
        }
        .encode();
        bind_qp.connect(&address, &loop_intent)?;
        cas_qp.connect(&address, &loop_intent)?;
        let pool_addr = pool.addr();
        let mut techniques = cfg.techniques;
        if cfg.isolation == Isolation::Type2 {
            techniques.handover = false;
        }
        let core = ManagerCore::new(ManagerConfig {
            techniques,
            max_lifetime_us: cfg.max_lifetime_us,
            header_base: pool_addr,
            header_count: cfg.header_count,
            buffer_base: pool_addr + header_bytes,
            buffer_len: cfg.pool_bytes,
            slab: cfg.slab.clone(),
            mw_count: cfg.mw_count,
            buffer_watermark: cfg.buffer_watermark,
            scrub: cfg.scrub,
            max_wait_us: cfg.max_wait_us,
            key_seed: cfg
                .random_key_bytes
                .then(|| cfg.key_seed.unwrap_or_else(|| rand::rng().random())),
        });
        let mw_domain = vec![0; mws.len()];
        let mut runner = Runner::<P> {
            ctx,
            shared: shared.clone(),
            core,
            pool,
            nic: nic::NodeNic {
                address: address.clone(),
                loop_secret: shared.loop_secret,
                timing: cfg.qp_timing,
                manager_mr,
                mws,
                mw_domain,
                domains: vec![Domain {
                    pd: client_pd,
                    mr: client_mr,
                    bind_qp,
                }],
                manager_pd,
                cas_qp,
                isolation: cfg.isolation,
                data_cq,
                data_qps: HashMap::new(),
                active_slot: HashMap::new(),
                mw_qp: HashMap::new(),
                op_cq,
                scratch,
                scratch_mr,
            },
            windows_per_client: cfg.windows_per_client.max(2),
            recent: HashMap::new(),
            tenants: cfg.tenants.iter().map(|t| (t.tenant, t.secret)).collect(),
            authenticated: HashMap::new(),
            batch_copies: HashMap::new(),
            rpc,
            control: HashMap::new(),
            reply_qp: HashMap::new(),
            sweep: false,
            others: Vec::new(),
            next_client: 1,
            max_batch: cfg.max_batch.max(1),
            expiry_slack_us: cfg.expiry_slack_us,
            batches: 0,
            busy_cpu: Duration::ZERO,
        };
        #[allow(clippy::disallowed_methods)] // the manager thread is this driver's reason to be
        let thread = std::thread::Builder::new()
            .name("patronus-manager".into())
            .spawn(move || runner.run())
            .map_err(|e| NodeError::Verbs(VerbsError::Io(e)))?;
        Ok(MemoryNode {
            address,
            shared,
            thread: Some(thread),
            _listener: listener,
            pool_addr,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> &P::Address {
        &self.address
    }

    /// Address of the first header (for diagnostics).
    pub fn pool_addr(&self) -> u64 {
        self.pool_addr
    }

    /// The last published snapshot of counters, occupancy and CPU time (the manager thread
    /// publishes when idle and every 64 batches).
    pub fn stats(&self) -> NodeStats {
        *self.shared.stats.lock()
    }

    /// A snapshot published after this call (waits for the manager thread's next iteration;
    /// falls back to the last one if the thread has stopped).
    pub fn fresh_stats(&self) -> NodeStats {
        let mut stats = self.shared.stats.lock();
        self.shared.publish.store(true, Ordering::SeqCst);
        // The manager looks at the flag at least every 500 µs; a stopped thread never will,
        // so the wait re-checks that every few milliseconds (and gives up after ~10 s).
        for _ in 0..2_000 {
            if !self.shared.publish.load(Ordering::SeqCst)
                || self.thread.as_ref().is_none_or(|t| t.is_finished())
            {
                break;
            }
            self.shared
                .published
                .wait_for(&mut stats, Duration::from_millis(5));
        }
        *stats
    }

    /// Stops the manager thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<P: Provider> Drop for MemoryNode<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn loopback_qp<P: Provider>(pd: &P::Pd, cq: &P::Cq, timing: QpTiming) -> Result<P::Qp, VerbsError> {
    pd.create_qp(QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 4096,
        max_recv_wr: 1,
        access: AccessFlags::empty(),
        timing,
    })
}

/// Manager thread CPU time so far.
use rnic::thread_cpu_time as thread_cpu;

mod nic;
mod recent;
mod runner;
