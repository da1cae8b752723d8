//! The memory node: the driver that pumps [`ManagerCore`]s with verbs.
//!
//! It owns the memory pool (headers, then slab buffers) registered twice: in the clients'
//! protection domain with MW_BIND only (windows are the sole way in), and in a manager-only
//! domain with remote atomics for the loopback QPs through which the manager CASes lifetime
//! words (ConnectX atomics are not atomic with CPU atomics, so the NIC does it).
//!
//! The manager runs as `shards` threads (a memory node's few weak cores). Shard `k` owns a
//! slice of the headers, of the buffers and of the windows, its own deadlines, its own shared
//! receive queue and its own loopback QPs; it runs batches: `begin` → CASes → `plan` → binds
//! → `finish` → header writes → replies. Clients connect a control QP to every shard (the
//! connection intent names the shard) and route each request by the address it names
//! ([`ShardMap`]); shard 0 authenticates clients and tells them the map. Each thread's CPU
//! time is measured with a per-thread CPU clock.
//!
//! Invariants: a shard touches only its own slice of memory and windows, so shards never
//! coordinate on the grant path; what they share (the client table, per-client protection
//! domains, the data CQ of type-2 binds) sits behind locks taken off the batch's hot path,
//! except the data CQ, which a type-2 batch polls through a per-shard mailbox.

mod accept;
mod addresses;
mod config;
mod fair;
mod faults;
mod gate;
mod ids;
mod mailbox;
mod nic;
mod nic_sample;
mod one_sided;
mod priority;
mod recent;
mod runner;
mod service;
mod session_rate;
mod sessions;
mod status;
mod token_bucket;

pub use config::{
    Held, Isolation, NodeConfig, NodeError, NodeLimits, NodeStats, OneSidedConfig, Priority,
    PriorityPolicy, PriorityStats, TenantCertificate, TenantPriority, TenantRate, TenantSecret,
    TenantWeight,
};
pub use fair::{Class, ClassCounters};
pub use nic_sample::NIC_SAMPLE_EVERY;
use nic_sample::NicSample;
pub use one_sided::OneSidedStats;
pub use sessions::SessionEnds;
pub use status::{
    NodeStatus, PermissionStatus, SERVICE_BUCKETS, STATUS_PERMISSIONS, ServiceTimes, SessionStatus,
};

use super::core::{ManagerConfig, ManagerCore};
use super::fast_hash::FastMap;
use super::state::ClientId;
use super::tenants::{DEFAULT_TENANT, TenantId, TenantQuota};
use crate::proto::connect::{Intent, Role};
use crate::proto::header::HEADER_SIZE;
use crate::proto::messages::{ControlProtocol, Reply, Request, Status};
use crate::proto::shards::ShardMap;
use crate::rpc::{Incoming, RpcServer};
use parking_lot::{Condvar, Mutex};
use rand::Rng;
use rnic::{
    AccessFlags, Context, MemoryBuffer, MwType, ProtectionDomain, Provider, QpInit, QpNumber,
    QpState, QpTiming, QueuePair, VerbsError,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Connections accepted and not yet adopted by a shard's thread (a control connection with
/// its block of receive slots, under flow control).
type Pending<P> = mailbox::Mailbox<Accepted<P>>;

/// A connection the accept policy established, for its shard to take up.
struct Accepted<P: Provider> {
    intent: Intent,
    qp: P::Qp,
    /// Its block of control receive slots (flow control).
    block: Option<u32>,
    /// Where a client's first control connection came from (counted per address).
    from: Option<std::net::IpAddr>,
    /// The tenant a client's first control connection's certificate names (mutual TLS).
    certified: Option<TenantId>,
}
/// A client's protection domain and its registration of the pool.
type ClientDomain<P> = (<P as Provider>::Pd, Arc<<P as Provider>::Mr>);

/// What the shards and the accept policy share.
struct Shared<P: Provider> {
    stop: AtomicBool,
    map: ShardMap,
    /// Per shard: set by `fresh_stats`; the shard publishes and clears it.
    publish: Vec<AtomicBool>,
    /// Per shard: the last published snapshot.
    stats: Mutex<Vec<NodeStats>>,
    /// Per shard: its manager thread's CPU clock, read by whoever asks for stats (the manager
    /// does not pay a system call per publication to account for its own time).
    manager_clocks: Vec<std::sync::OnceLock<rnic::ThreadCpuClock>>,
    /// Notified (with `stats` locked and released) when a shard published a requested snapshot.
    published: Condvar,
    /// Set by `drain`: every shard stops granting new permissions.
    draining: AtomicBool,
    /// Per shard: set by `status`; the shard publishes its status with its next snapshot.
    want_status: Vec<AtomicBool>,
    /// Per shard: the last published status.
    status: Mutex<Vec<NodeStatus>>,
    /// Per shard: connections accepted and not yet adopted by the shard's thread.
    incoming: Vec<Pending<P>>,
    /// Clients' secrets (their data and non-first control connections present them).
    secrets: Mutex<HashMap<ClientId, u64>>,
    /// The client ids this run issued, and the sessions it ended lately (why a connection
    /// naming a client is refused).
    ids: Mutex<ids::ClientIds>,
    /// Authenticated clients and their tenants (shard 0 records them before its `Welcome`).
    tenants_of: Mutex<HashMap<ClientId, TenantId>>,
    /// Per-client protection domains and their registration of the pool (isolation by PD):
    /// data QPs of a client are created in it, and every shard binds windows in it.
    client_domains: Mutex<HashMap<ClientId, ClientDomain<P>>>,
    /// When each authenticated client was last heard on any shard's control path, µs.
    heard: Mutex<HashMap<ClientId, Arc<AtomicU64>>>,
    /// Per shard: clients whose session another shard ended.
    ended: Vec<mailbox::Mailbox<ClientId>>,
    /// Each tenant's access-fault budget (data reconnections), and the slots clients used.
    faults: Mutex<faults::FaultBudget>,
    /// Live sessions per source address.
    addresses: Mutex<addresses::AddressSessions>,
    /// How fast new sessions may open (node-wide and per tenant).
    session_rate: Mutex<session_rate::SessionRate>,
    /// How the NIC serves each connection (weights and rate limits).
    services: service::Services,
    /// Per shard: QPs the device reported broken (shard 0 reads the device's asynchronous
    /// events and tells every shard, with how each ended; a shard ends the session whose
    /// control QP it is).
    broken: Vec<mailbox::Mailbox<(QpNumber, sessions::QpEnd)>>,
    loop_secret: u64,
    /// Per shard: where its manager thread can be held (a testing hook, `gate.rs`).
    gates: Vec<gate::Gate>,
    /// One-sided allocation, if the node offers it (`one_sided.rs`).
    one_sided: Option<one_sided::OneSided<P>>,
}

/// A running memory node.
pub struct MemoryNode<P: Provider> {
    address: P::Address,
    shared: Arc<Shared<P>>,
    threads: Vec<JoinHandle<()>>,
    /// Taking connections (`None` once draining).
    listener: Mutex<Option<P::Listener>>,
    pool_addr: u64,
    nic: Arc<crate::nic_check::NicReport>,
    unenforced_window_bounds: bool,
}

impl<P: Provider> std::fmt::Debug for MemoryNode<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNode")
            .field("address", &self.address)
            .field("shards", &self.threads.len())
            .finish_non_exhaustive()
    }
}

/// A protection domain the manager binds windows in: its PD, its registration of the pool,
/// and a loopback QP in it to post BIND_MW work requests on.
struct Domain<P: Provider> {
    pd: P::Pd,
    mr: Arc<P::Mr>,
    bind_qp: P::Qp,
}

const CAS_SLOTS: usize = 512;
/// Freed objects zeroed per idle turn of the manager loop (it checks for requests between).
const IDLE_SCRUB_OBJECTS: usize = 16;

/// One manager shard's thread state.
struct Runner<P: Provider> {
    ctx: P::Context,
    shard: usize,
    shared: Arc<Shared<P>>,
    core: ManagerCore,
    pool: P::Buffer,
    /// What runs the batches' NIC work.
    nic: nic::NodeNic<P>,
    windows_per_client: u32,
    /// The last turn's outcome, kept so that its vectors are reused.
    finished: super::Finished,
    /// Tenants and secrets (empty: everyone is the default tenant).
    tenants: HashMap<TenantId, u64>,
    /// Client sessions on this shard, and the client of each control QP.
    sessions: FastMap<ClientId, sessions::Session<P>>,
    by_qpn: FastMap<QpNumber, ClientId>,
    /// Sessions ended (counted by the shard that ended them).
    ended: SessionEnds,
    limits: NodeLimits,
    /// Shard 0: each tenant's authenticated clients, and how many it may have.
    tenant_sessions: HashMap<TenantId, u32>,
    sessions_per_tenant: u32,
    /// When sessions were last swept for broken QPs and timeouts.
    last_sweep: rnic::Timestamp,
    /// Extra copies of requests of the current batch (a retry arriving with its original).
    batch_copies: FastMap<(ClientId, u64), u32>,
    /// The control channel's server end: request slots in an SRQ, reply slots.
    rpc: RpcServer<P, ControlProtocol>,
    /// A control send failed: sweep the sessions for broken QPs.
    sweep: bool,
    others: Vec<P::Qp>,
    max_batch: usize,
    expiry_slack_us: u64,
    batches: u64,
    busy_cpu: Duration,
    /// NIC calls timed on a sample of the busy streaks' iterations (see [`NicSample`]).
    nic_sample: NicSample,
    /// How long its turns took to answer requests.
    service: ServiceTimes,
    /// Shard 0, with tenant priorities configured: the software priority policy.
    priority: Option<priority::SwPri>,
    /// Control messages received and not yet handled, by class (see [`fair`]).
    fair: fair::FairQueue<Incoming<Request>>,
    /// The messages of the turn's batch, drawn from `fair` (kept: it allocates once).
    drawn: Vec<Incoming<Request>>,
}

impl<P: Provider> MemoryNode<P> {
    /// Starts a memory node on `ctx`: allocates and registers the pool, pre-allocates windows,
    /// listens, and runs the manager threads.
    pub fn start(ctx: P::Context, cfg: NodeConfig) -> Result<Self, NodeError> {
        if cfg.header_count == 0 || cfg.mw_count == 0 || cfg.pool_bytes == 0 {
            return Err(NodeError::Config("pools must not be empty"));
        }
        let shards = cfg.shards.max(1);
        if (cfg.mw_count as usize) < shards {
            return Err(NodeError::Config("fewer windows than shards"));
        }
        let device = ctx.query_device();
        if !device.mw_type1 {
            return Err(NodeError::Config("the device has no type-1 memory windows"));
        }
        if cfg
            .tenant_certificates
            .iter()
            .any(|c| !cfg.tenants.iter().any(|t| t.tenant == c.tenant))
        {
            return Err(NodeError::Config(
                "a tenant certificate names a tenant that is not configured",
            ));
        }
        if cfg.tenant_weights.iter().any(|w| {
            w.weight == 0
                || !(cfg.tenants.iter().any(|t| t.tenant == w.tenant)
                    || (cfg.tenants.is_empty() && w.tenant == DEFAULT_TENANT))
        }) {
            return Err(NodeError::Config(
                "a tenant weight is 0 or names a tenant that is not configured",
            ));
        }
        if !cfg.tenant_rates.is_empty() && !device.qp_rate_limit {
            // A configured rate is never silently dropped.
            return Err(NodeError::Config(
                "tenant rate limits need a device that enforces QP rate limits (the soft NIC over TCP)",
            ));
        }
        if cfg.tenant_priorities.iter().any(|p| {
            !(cfg.tenants.iter().any(|t| t.tenant == p.tenant)
                || (cfg.tenants.is_empty() && p.tenant == DEFAULT_TENANT))
        }) {
            return Err(NodeError::Config(
                "a tenant priority names a tenant that is not configured",
            ));
        }
        if !cfg.tenant_priorities.is_empty() {
            cfg.priority_policy.validate()?;
            if !device.qp_rate_limit {
                // A priority that is not enforced is never silently dropped.
                return Err(NodeError::Config(
                    "tenant priorities need a device that enforces QP rate limits and counts what \
                     it served per QP (the soft NIC over TCP)",
                ));
            }
        }
        if let Some(os) = &cfg.one_sided {
            if cfg.isolation != Isolation::Type2 {
                return Err(NodeError::Config(
                    "one-sided allocation needs type-2 isolation (a chunk's window works on its \
                     client's data QP only)",
                ));
            }
            if !device.cross_channel || !device.mw_bind_target_qp {
                return Err(NodeError::Config(
                    "one-sided allocation needs a device with cross-channel work requests and \
                     binds for a named QP (the soft NIC)",
                ));
            }
            if os.chunks == 0 || os.chunk_bytes == 0 || os.per_client == 0 {
                return Err(NodeError::Config(
                    "one-sided allocation needs chunks, of some bytes, and slots per client",
                ));
            }
        }
        if cfg.isolation == Isolation::Type2 && !device.mw_type2 {
            // Never a silent fall-back to a weaker isolation.
            return Err(NodeError::Config(
                "type-2 isolation needs type-2 memory windows, which the device lacks",
            ));
        }
        // Before anything listens: the check connects to itself through a listener of its own.
        let nic = crate::nic_check::check::<P>(&ctx);
        let type2 = cfg.isolation == Isolation::Type2;
        if let Some(why) = nic.refusal(type2, cfg.allow_unenforced_window_bounds) {
            return Err(NodeError::UnsafeNic(why));
        }
        let unenforced_window_bounds = !nic.enforces(crate::nic_check::Check::WindowBounds);
        if unenforced_window_bounds {
            tracing::warn!(
                "serving with window bounds the NIC does not enforce \
                 (allow_unenforced_window_bounds): a client can reach the whole pool region"
            );
        }
        let header_bytes = (cfg.header_count * HEADER_SIZE) as u64;
        let total = header_bytes + cfg.pool_bytes;
        let pool = ctx.alloc_buffer(total as usize)?;
        let pool_addr = pool.addr();
        let mut techniques = cfg.techniques;
        if cfg.isolation == Isolation::Type2 {
            techniques.handover = false;
        }
        let whole = ManagerConfig {
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
            lease_floor_us: cfg.lease_floor_us,
            lease_floor_turns: cfg.lease_floor_turns,
            quota: cfg.tenant_quota()?,
            client_quota: cfg.limits.client_quota.unwrap_or(TenantQuota::UNLIMITED),
        };
        let map = whole.shard_map(shards)?;
        let client_pd = ctx.alloc_pd()?;
        let manager_pd = ctx.alloc_pd()?;
        // Clients' domain: no remote rights on the region itself — windows are the only way in.
        let client_mr = Arc::new(client_pd.reg_mr(
            &pool,
            0,
            total as usize,
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )?);
        let manager_mr = Arc::new(manager_pd.reg_mr(
            &pool,
            0,
            total as usize,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
        )?);
        let depth = cfg.srq_depth.max(16);
        let credits = cfg.limits.control_credits;
        if credits > 0 && credits < crate::proto::messages::MAX_OUTSTANDING_RPCS {
            return Err(NodeError::Config(
                "control credits below the requests the client library keeps in flight",
            ));
        }
        // A session's messages waiting in the fair queue: its credits (a well-behaved client
        // never has more unanswered), or the library's bound with one shared receive queue.
        let per_session_queue = if credits > 0 {
            credits
        } else {
            crate::proto::messages::MAX_OUTSTANDING_RPCS
        };
        // Every connection's slots complete on one queue per shard: fit the connections to the
        // device's completion-queue size (Soft-RoCE allows 32,767 entries, one short of the
        // default 1,024 connections x 32 credits); beyond them a connection is refused.
        let max_connections = match ctx.query_device().max_cqe.checked_div(credits) {
            None => cfg.limits.max_connections, // no credits: one shared receive queue
            Some(fit) => {
                if fit < cfg.limits.max_connections {
                    tracing::warn!(
                        configured = cfg.limits.max_connections,
                        served = fit,
                        "the device's completion queues hold the control slots of fewer \
                         connections than configured"
                    );
                }
                cfg.limits.max_connections.min(fit)
            }
        };
        // Completions of work posted on clients' data QPs (type-2 binds), shared by the shards.
        let data_cq = nic::SharedCq::<P>::new(ctx.create_cq(4096)?, shards);
        let mut rpcs = Vec::with_capacity(shards);
        for _ in 0..shards {
            // Request and reply slots, in the clients' domain (control QPs live there).
            let batch = cfg.max_batch.max(1);
            let mut rpc = if credits == 0 {
                RpcServer::<P, ControlProtocol>::new(&ctx, &client_pd, depth, batch)?
            } else {
                RpcServer::<P, ControlProtocol>::with_credits(
                    &ctx,
                    &client_pd,
                    max_connections,
                    credits,
                    batch,
                )?
            };
            rpc.set_idle_spin(Duration::from_micros(cfg.idle_spin_us));
            rpcs.push(rpc);
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            map,
            publish: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            manager_clocks: (0..shards).map(|_| std::sync::OnceLock::new()).collect(),
            want_status: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            draining: AtomicBool::new(false),
            status: Mutex::new(vec![NodeStatus::default(); shards]),
            stats: Mutex::new(vec![NodeStats::default(); shards]),
            published: Condvar::new(),
            incoming: (0..shards).map(|_| Default::default()).collect(),
            secrets: Mutex::new(HashMap::new()),
            // A start of its own per run: an id of an earlier run reads as one (`ids.rs`).
            ids: Mutex::new(ids::ClientIds::new(rand::rng().random())),
            tenants_of: Mutex::new(HashMap::new()),
            client_domains: Mutex::new(HashMap::new()),
            heard: Mutex::new(HashMap::new()),
            ended: (0..shards).map(|_| Default::default()).collect(),
            broken: (0..shards).map(|_| Default::default()).collect(),
            faults: Mutex::new(faults::FaultBudget::new(
                cfg.limits.fault_burst,
                cfg.limits.faults_per_s,
            )),
            addresses: Mutex::new(addresses::AddressSessions::new(
                cfg.limits.sessions_per_address,
                cfg.limits.address_prefix_v4,
                cfg.limits.address_prefix_v6,
                cfg.limits.loopback_hosts,
            )),
            services: service::Services::new(
                device.qp_rate_limit,
                per_session_queue,
                cfg.limits.unauthenticated_ops_per_s,
                &cfg.tenant_weights,
                &cfg.tenant_rates,
            )
            .with_priority(&cfg.priority_policy),
            session_rate: Mutex::new(session_rate::SessionRate::new(
                session_rate::Rate {
                    burst: cfg.limits.new_session_burst.max(1),
                    per_s: cfg.limits.new_sessions_per_s,
                },
                session_rate::Rate {
                    burst: cfg.tenant_new_sessions_per_s().saturating_mul(2),
                    per_s: cfg.tenant_new_sessions_per_s(),
                },
            )),
            loop_secret: rand::rng().random::<u64>() | 1,
            gates: (0..shards).map(|_| Default::default()).collect(),
            one_sided: cfg
                .one_sided
                .map(|os| one_sided::OneSided::new(&ctx, os, cfg.qp_timing))
                .transpose()?,
        });
        let policy = Arc::new(accept::Policy::<P> {
            shared: shared.clone(),
            client_pd: client_pd.clone(),
            manager_pd: manager_pd.clone(),
            control: rpcs
                .iter()
                .map(|r| accept::ControlQueues {
                    srq: r.srq().cloned(),
                    slots: r.connection_slots().cloned(),
                    send_cq: r.send_cq().clone(),
                    recv_cq: r.recv_cq().clone(),
                })
                .collect(),
            data_cq: data_cq.cq().clone(),
            timing: cfg.qp_timing,
            clock: ctx.clock(),
            certificates: cfg
                .tenant_certificates
                .iter()
                .map(|c| (c.name.clone(), c.tenant))
                .collect(),
        });
        let listener = ctx.listen(policy)?;
        let address = ctx.listener_address(&listener);
        let mut runners = Vec::with_capacity(shards);
        for (k, rpc) in rpcs.into_iter().enumerate() {
            let shard_cfg = whole.shard(&map, k);
            let mws = (0..shard_cfg.mw_count)
                .map(|_| client_pd.alloc_mw(MwType::Type1).map(Some))
                .collect::<Result<Vec<_>, _>>()?;
            let op_cq = ctx.create_cq(8192)?;
            let loop_intent = Intent {
                role: Role::Loopback,
                client_id: 0,
                secret: shared.loop_secret,
                slot: k as u8,
            }
            .encode();
            let bind_qp = loopback_qp::<P>(&client_pd, &op_cq, cfg.qp_timing)?;
            let cas_qp = loopback_qp::<P>(&manager_pd, &op_cq, cfg.qp_timing)?;
            bind_qp.connect(&address, &loop_intent)?;
            cas_qp.connect(&address, &loop_intent)?;
            let scratch = ctx.alloc_buffer(CAS_SLOTS * 8)?;
            let scratch_mr =
                manager_pd.reg_mr(&scratch, 0, scratch.len(), AccessFlags::LOCAL_WRITE)?;
            let core = ManagerCore::new(shard_cfg);
            let mw_domain = vec![0; mws.len()];
            let live_windows = mws.len();
            runners.push(Runner::<P> {
                ctx: ctx.clone(),
                shard: k,
                shared: shared.clone(),
                core,
                pool: pool.clone(),
                nic: nic::NodeNic {
                    shard: k,
                    address: address.clone(),
                    loop_secret: shared.loop_secret,
                    timing: cfg.qp_timing,
                    manager_mr: manager_mr.clone(),
                    mws,
                    mw_domain,
                    live_windows,
                    domains: vec![Some(Domain {
                        pd: client_pd.clone(),
                        mr: client_mr.clone(),
                        bind_qp,
                    })],
                    manager_pd: manager_pd.clone(),
                    cas_qp,
                    isolation: cfg.isolation,
                    data_cq: data_cq.clone(),
                    data_qps: HashMap::new(),
                    active_slot: HashMap::new(),
                    mw_qp: HashMap::new(),
                    op_cq,
                    scratch,
                    scratch_mr,
                    nic_calls: crate::rpc::Stopwatch::default(),
                },
                windows_per_client: cfg.windows_per_client.max(2),
                finished: super::Finished::default(),
                tenants: cfg.tenants.iter().map(|t| (t.tenant, t.secret)).collect(),
                sessions: FastMap::default(),
                by_qpn: FastMap::default(),
                ended: SessionEnds::default(),
                limits: NodeLimits {
                    idle_timeout_us: cfg
                        .limits
                        .idle_timeout_us
                        .max(cfg.max_lifetime_us.saturating_mul(2)),
                    ..cfg.limits
                },
                tenant_sessions: HashMap::new(),
                sessions_per_tenant: cfg.sessions_per_tenant(),
                last_sweep: rnic::Timestamp::ZERO,
                batch_copies: FastMap::default(),
                rpc,
                sweep: false,
                others: Vec::new(),
                max_batch: cfg.max_batch.max(1),
                expiry_slack_us: cfg.expiry_slack_us,
                batches: 0,
                busy_cpu: Duration::ZERO,
                nic_sample: NicSample::default(),
                service: ServiceTimes::default(),
                priority: if k == 0 {
                    priority::SwPri::new(cfg.priority_policy, &cfg.tenant_priorities)
                } else {
                    None
                },
                fair: fair::FairQueue::new(
                    per_session_queue,
                    cfg.limits.unauthenticated_quantum,
                    cfg.tenant_weights.iter().map(|w| (w.tenant, w.weight)),
                ),
                drawn: Vec::with_capacity(cfg.max_batch.max(1)),
            });
        }
        let mut threads = Vec::with_capacity(shards);
        for mut runner in runners {
            let name = if shards == 1 {
                "patronus-manager".to_string()
            } else {
                format!("patronus-manager-{}", runner.shard)
            };
            #[allow(clippy::disallowed_methods)]
            // the manager threads are this driver's reason to be
            let spawned = std::thread::Builder::new()
                .name(name)
                .spawn(move || runner.run());
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    shared.stop.store(true, Ordering::SeqCst);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(NodeError::Verbs(VerbsError::Io(e)));
                }
            }
        }
        Ok(MemoryNode {
            address,
            shared,
            threads,
            listener: Mutex::new(Some(listener)),
            pool_addr,
            nic,
            unenforced_window_bounds,
        })
    }

    /// What the NIC protection self-check found at start.
    pub fn nic_check(&self) -> &crate::nic_check::NicReport {
        &self.nic
    }

    /// Whether the node serves although its NIC does not enforce window bounds (started with
    /// `allow_unenforced_window_bounds` on such a NIC).
    pub fn unenforced_window_bounds(&self) -> bool {
        self.unenforced_window_bounds
    }

    /// Where clients connect.
    pub fn address(&self) -> &P::Address {
        &self.address
    }

    /// Address of the first header (for diagnostics).
    pub fn pool_addr(&self) -> u64 {
        self.pool_addr
    }

    /// How the manager is split into shards.
    pub fn shard_map(&self) -> ShardMap {
        self.shared.map
    }

    /// The last published snapshots, summed over the shards (each shard publishes when idle
    /// and every 64 batches).
    pub fn stats(&self) -> NodeStats {
        let mut stats = self.shared.stats.lock();
        self.read_manager_clocks(&mut stats);
        sum(&stats)
    }

    /// Each live manager's CPU time, read from its clock now (a stopped one keeps the time it
    /// published last).
    fn read_manager_clocks(&self, stats: &mut [NodeStats]) {
        for (s, clock) in stats.iter_mut().zip(&self.shared.manager_clocks) {
            if let Some(t) = clock.get().and_then(rnic::ThreadCpuClock::read) {
                s.manager_cpu = t;
            }
        }
    }

    /// A snapshot every shard published after this call (waits for each shard's next
    /// iteration; a stopped shard's last snapshot counts).
    pub fn fresh_stats(&self) -> NodeStats {
        let mut stats = self.shared.stats.lock();
        for flag in &self.shared.publish {
            flag.store(true, Ordering::SeqCst);
        }
        // Each manager looks at its flag at least every `IDLE_LOOK_EVERY` (10 ms); a stopped
        // one never will, so the wait re-checks that every few milliseconds (and gives up
        // after ~10 s).
        for _ in 0..2_000 {
            let pending = self
                .shared
                .publish
                .iter()
                .zip(&self.threads)
                .any(|(f, t)| f.load(Ordering::SeqCst) && !t.is_finished());
            if !pending {
                break;
            }
            self.shared
                .published
                .wait_for(&mut stats, Duration::from_millis(5));
        }
        self.read_manager_clocks(&mut stats);
        sum(&stats)
    }

    /// What an operator may see of the node now (see [`NodeStatus`]: no rkeys, no secrets):
    /// every shard publishes its status with a fresh snapshot, which is returned too.
    pub fn status(&self) -> (NodeStatus, NodeStats) {
        for flag in &self.shared.want_status {
            flag.store(true, Ordering::SeqCst);
        }
        let stats = self.fresh_stats();
        let per_shard = self.shared.status.lock();
        let mut all = NodeStatus::default();
        for s in per_shard.iter() {
            all.permissions.extend(s.permissions.iter().cloned());
            all.permissions_total += s.permissions_total;
            all.sessions.extend(s.sessions.iter().cloned());
        }
        all.permissions.sort_by_key(|p| p.permission.lease_left);
        all.permissions.truncate(STATUS_PERMISSIONS);
        all.sessions.sort_by_key(|s| (s.client, s.shard));
        (all, stats)
    }

    /// Begins a graceful shutdown: no new connections are taken and every shard refuses new
    /// permissions (as overloaded: clients back off), while the live ones run on until they
    /// are revoked or their leases end (at most the maximum lifetime). Watch
    /// [`MemoryNode::status`] for them to end, then [`MemoryNode::shutdown`].
    pub fn drain(&self) {
        drop(self.listener.lock().take());
        self.shared.draining.store(true, Ordering::SeqCst);
        for flag in &self.shared.publish {
            // Wakes an idle shard (it looks at its flags at least every 10 ms).
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// Testing hook: holds every shard's manager thread at the top of its loop (each has
    /// published its statistics) until the returned hold is dropped; [`ManagerHold::step`]
    /// runs one turn of a shard. Meanwhile what clients send waits in the NIC's receive
    /// queues, and the paths that need no manager (one-sided verbs) go on.
    ///
    /// # Panics
    /// If a manager thread does not reach its gate within 30 s (it died or hangs).
    #[cfg(feature = "testing")]
    pub fn hold_managers(&self) -> ManagerHold<'_, P> {
        for (shard, gate) in self.shared.gates.iter().enumerate() {
            assert!(
                gate.hold(),
                "manager shard {shard} did not stop at its gate"
            );
        }
        ManagerHold { node: self }
    }

    /// What one-sided allocation did so far (`None`: the node does not offer it).
    pub fn one_sided_stats(&self) -> Option<OneSidedStats> {
        self.shared.one_sided.as_ref().map(|os| os.stats())
    }

    /// Stops the manager threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for gate in &self.shared.gates {
            gate.release();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The manager threads of a node, held (see [`MemoryNode::hold_managers`]); dropping it lets
/// them run again.
#[cfg(feature = "testing")]
#[derive(Debug)]
pub struct ManagerHold<'a, P: Provider> {
    node: &'a MemoryNode<P>,
}

#[cfg(feature = "testing")]
impl<P: Provider> ManagerHold<'_, P> {
    /// Runs one turn of `shard`'s manager loop — one poll of its receive queues, one batch
    /// drawn from its fair queue and served — and returns once the thread is held again and
    /// has published its statistics ([`MemoryNode::stats`] then shows the turn).
    ///
    /// # Panics
    /// If there is no such shard, or its thread does not come back within 30 s.
    pub fn step(&self, shard: usize) {
        assert!(
            self.node.shared.gates[shard].step(),
            "manager shard {shard} did not come back to its gate"
        );
    }
}

#[cfg(feature = "testing")]
impl<P: Provider> Drop for ManagerHold<'_, P> {
    fn drop(&mut self) {
        for gate in &self.node.shared.gates {
            gate.release();
        }
    }
}

impl<P: Provider> Drop for MemoryNode<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

fn sum(per_shard: &[NodeStats]) -> NodeStats {
    per_shard
        .iter()
        .fold(NodeStats::default(), |acc, s| acc.plus(s))
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
