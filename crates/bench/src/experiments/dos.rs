//! Denial of service: what one abusive client costs an honest one. For each abuse,
//! in a fresh cluster on the real clock, an honest client runs a steady loop of control and
//! data work (one round: allocate 128 B exclusive, write, read back, free) for a fixed window
//! before the abuse (abuser idle), during it (the abuser runs on its own thread and device)
//! and after it (the abuser stopped and joined). We report the honest rounds per second in
//! each window, the shares during/before and after/before, what the abuser achieved and what
//! the memory node counted.
//!
//! The abuses are those of the denial-of-service tests (`crates/core/tests/denial_of_service`),
//! written again here against the real clock:
//! - **spin** (a baseline): a thread that never blocks and never touches the node. On 2 cores
//!   any busy abuser takes CPU from the honest client and the manager, whatever it does; this
//!   row shows what that alone costs;
//! - **twin** (a baseline): a second client doing the honest rounds, in another tenant: a
//!   fair share of the node;
//! - **churn**: clients connecting, working and disconnecting as fast as they can;
//! - **flood**: raw-verbs control connections posting requests as fast as their send queues
//!   take them (a `Hello`, then a bogus `Extend` over and over, reconnecting when the QP
//!   breaks), once with per-connection credits (flow control, the default) and once with the
//!   paper's one shared receive queue (`limits.control_credits = 0`) — the flooder in the
//!   honest client's tenant (a node without tenants) in both — then from another tenant
//!   (the manager's fair queue shares it between the two) and without ever saying `Hello`
//!   (the unauthenticated connections' small budget);
//! - **hoard**: with two tenants configured, the hog allocates until its quota refuses and
//!   keeps trying (memory, then shared permissions on its own objects);
//! - **faults**: a client writing through a corrupted rkey in a loop, throttled by its
//!   tenant's access-fault budget (the default one);
//! - **storm**: the same in type-2 isolation with the budget raised so nothing throttles it:
//!   every fault is a data reconnection and a rebind of the client's permissions.

mod abusers;
mod flooder;
mod notes;
mod report;

use super::driver::Rig;
use crate::harness::{BenchOpts, Experiment, Latency, process_cpu, thread_cpu};
use abusers::Tally;
use anyhow::{Context as _, Result, anyhow, bail};
use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::cluster::{DeviceRole, EmbeddedCluster};
use patronus_core::manager::{
    Class, ClassCounters, Held, Isolation, MemoryNode, NodeConfig, NodeLimits, NodeStats,
    SlabConfig, TenantSecret,
};
use patronus_core::proto::messages::Mode;
use rnic::soft::{SoftContext, SoftProvider, TcpNode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the honest client writes and reads back in each round.
const MSG: &[u8; 16] = b"honest round 128";
/// The honest client's object size.
const HONEST_SIZE: u64 = 128;
/// Lease the honest client asks for (it frees the object within the round).
const HONEST_LEASE: Duration = Duration::from_millis(100);
/// RPC timeout of every client in this experiment: an RPC starved by an abuse fails inside a
/// window (and is counted) instead of holding the loop for the default 5 s.
const RPC_TIMEOUT: Duration = Duration::from_millis(100);
/// Honest rounds before the first window (connections, caches).
const WARMUP_ROUNDS: usize = 50;
/// Tenants, where the abuse needs them (quotas and fault budgets are per tenant).
const ABUSER: TenantSecret = TenantSecret {
    tenant: 1,
    secret: 0xab05e,
};
const HONEST: TenantSecret = TenantSecret {
    tenant: 2,
    secret: 0x0b0e,
};

/// One abuse (one row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Abuse {
    Spin,
    Twin,
    Churn,
    FloodCredits,
    FloodShared,
    FloodTenant,
    FloodWithinCredits,
    FloodNoHello,
    Hoard,
    Faults,
    Storm,
}

impl Abuse {
    const ALL: [Abuse; 11] = [
        Abuse::Spin,
        Abuse::Twin,
        Abuse::Churn,
        Abuse::FloodCredits,
        Abuse::FloodShared,
        Abuse::FloodTenant,
        Abuse::FloodWithinCredits,
        Abuse::FloodNoHello,
        Abuse::Hoard,
        Abuse::Faults,
        Abuse::Storm,
    ];

    fn name(self) -> &'static str {
        match self {
            Abuse::Spin => "spin (CPU only)",
            Abuse::Twin => "twin (fair share)",
            Abuse::Churn => "churn",
            Abuse::FloodCredits => "flood, credits",
            Abuse::FloodShared => "flood, shared RQ",
            Abuse::FloodTenant => "flood, other tenant",
            Abuse::FloodWithinCredits => "flood within credits",
            Abuse::FloodNoHello => "flood, no Hello",
            Abuse::Hoard => "hoard",
            Abuse::Faults => "faults",
            Abuse::Storm => "storm (type 2)",
        }
    }

    /// Whether the node serves two tenants (the abuser's and the honest client's).
    fn tenants(self) -> bool {
        matches!(
            self,
            Abuse::Twin
                | Abuse::Hoard
                | Abuse::Faults
                | Abuse::FloodTenant
                | Abuse::FloodWithinCredits
                | Abuse::FloodNoHello
        )
    }

    fn node(self) -> NodeConfig {
        let mut cfg = NodeConfig {
            // Leases long enough for the hog's hoard and the faulter's permission.
            max_lifetime_us: 60_000_000,
            isolation: Isolation::SharedPd, // the paper's mode (as in every experiment)
            ..NodeConfig::default()
        };
        match self {
            Abuse::FloodShared => cfg.limits.control_credits = 0,
            Abuse::Storm => {
                cfg.isolation = Isolation::Type2;
                // The storm is allowed: its budget is the faults row's subject.
                cfg.limits = NodeLimits {
                    fault_burst: 1_000_000,
                    ..cfg.limits
                };
            }
            Abuse::Hoard => {
                // A small node (as in the hoard test), so that the hog reaches its quotas
                // early in a window even over TCP: a quarter of 16 MiB less slab rounding
                // (6 MiB, some 23 of the hog's objects) and 128 permissions each.
                cfg.pool_bytes = 16 << 20;
                cfg.slab = SlabConfig {
                    slab_bytes: 256 << 10,
                    ..SlabConfig::default()
                };
                cfg.header_count = 512;
                cfg.mw_count = 512;
            }
            _ => {}
        }
        if self.tenants() {
            cfg.tenants = vec![ABUSER, HONEST];
        }
        cfg
    }

    /// The honest client's class in the manager's fair queue.
    fn honest_class(self) -> Class {
        Class::Tenant(if self.tenants() { HONEST.tenant } else { 0 })
    }

    /// The abuser's.
    fn abuser_class(self) -> Class {
        match self {
            Abuse::FloodNoHello => Class::Unauthenticated,
            _ if self.tenants() => Class::Tenant(ABUSER.tenant),
            _ => Class::Tenant(0),
        }
    }

    /// The configuration of the abuser's clients (of those that use the client library).
    fn abuser_client(self) -> ClientConfig {
        let mut cfg = ClientConfig {
            rpc_timeout: RPC_TIMEOUT,
            ..ClientConfig::default()
        };
        if self.tenants() {
            cfg.tenant = ABUSER.tenant;
            cfg.tenant_secret = ABUSER.secret;
        }
        cfg
    }

    fn honest_client(self) -> ClientConfig {
        let mut cfg = ClientConfig {
            rpc_timeout: RPC_TIMEOUT,
            ..ClientConfig::default()
        };
        if self.tenants() {
            cfg.tenant = HONEST.tenant;
            cfg.tenant_secret = HONEST.secret;
        }
        cfg
    }

    /// Runs the abuse until `stop` (on the abuser's thread, on its own device).
    fn run(
        self,
        ctx: &SoftContext,
        node: &rnic::soft::SoftAddress,
        stop: &AtomicBool,
    ) -> Result<Tally> {
        let cfg = self.abuser_client();
        match self {
            Abuse::Spin => Ok(abusers::spin(stop)),
            Abuse::Twin => abusers::twin(ctx, node, cfg, stop),
            Abuse::Churn => abusers::churn(ctx, node, cfg, stop),
            Abuse::FloodCredits | Abuse::FloodShared => {
                flooder::flood(ctx, node, flooder::Hello::Default, stop)
            }
            Abuse::FloodTenant => flooder::flood(
                ctx,
                node,
                flooder::Hello::Tenant(ABUSER.tenant, ABUSER.secret),
                stop,
            ),
            Abuse::FloodWithinCredits => {
                flooder::flood_within_credits(ctx, node, (ABUSER.tenant, ABUSER.secret), stop)
            }
            Abuse::FloodNoHello => flooder::flood(ctx, node, flooder::Hello::Never, stop),
            Abuse::Hoard => abusers::hoard(ctx, node, cfg, stop),
            Abuse::Faults | Abuse::Storm => abusers::faults(ctx, node, cfg, stop),
        }
    }
}

/// What the honest client did in one window.
#[derive(Debug, Default)]
struct Window {
    rounds: u64,
    secs: f64,
    latency: Latency,
    /// Failed rounds, by the first error of the round.
    errors: BTreeMap<&'static str, u64>,
    /// CPU the whole process used over the window, in cores.
    cores: f64,
    /// CPU the honest client's thread used, in cores.
    honest_cores: f64,
    /// CPU the memory node's manager (and over TCP its engines) used, in cores.
    node_cores: f64,
}

impl Window {
    fn rounds_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.rounds as f64 / self.secs
        } else {
            0.0
        }
    }

    fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The node's counters over the abuse (from its start to the end of the window after it).
#[derive(Debug, Default)]
struct NodeDelta {
    sessions_closed: u64,
    sessions_idle: u64,
    sessions_no_hello: u64,
    data_reconnects: u64,
    reconnects_refused: u64,
    /// Manager and NIC-engine CPU over the window during the abuse.
    cpu_during: Duration,
    /// What the node held before the first window and after the last.
    held_start: Held,
    held_end: Held,
    /// What the manager's fair queue gave the honest tenant and the abuser's class during the
    /// abuse (with two tenants configured; without, both are the default tenant's).
    honest_share: ClassCounters,
    abuser_share: ClassCounters,
}

/// `later`'s counters less `earlier`'s for `class` (the maximum wait is `later`'s).
fn class_delta(earlier: &NodeStats, later: &NodeStats, class: Class) -> ClassCounters {
    let (a, b) = (
        earlier.classes.get(&class).copied().unwrap_or_default(),
        later.classes.get(&class).copied().unwrap_or_default(),
    );
    ClassCounters {
        served: b.served - a.served,
        cost_units: b.cost_units - a.cost_units,
        refused: b.refused - a.refused,
        queue_delay_us: b.queue_delay_us - a.queue_delay_us,
        max_queue_delay_us: b.max_queue_delay_us,
    }
}

/// One abuse, measured.
#[derive(Debug)]
struct Outcome {
    abuse: Abuse,
    before: Window,
    during: Window,
    after: Window,
    tally: Tally,
    node: NodeDelta,
}

/// Runs the experiment on `opts.transport`: ~0.3 s windows with `--quick`, ~2 s otherwise.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = Instant::now();
    let window = if opts.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    println!(
        "DoS: an honest client's rounds (allocate {HONEST_SIZE} B, write, read, free) before / \
         during / after each abuse, {:.1} s windows, over {}",
        window.as_secs_f64(),
        opts.transport_name()
    );
    println!(
        "{:<17} | {:>6} {:>6} {:>6} Kr/s | {:>6} {:>6} | {:>6} | {:<34} | {:>6} {:>6} {:>6}",
        "abuse",
        "before",
        "during",
        "after",
        "dur/b",
        "aft/b",
        "failed",
        "abuser",
        "closed",
        "reconn",
        "refusd"
    );
    let mut outcomes = Vec::new();
    // `PATRONUS_DOS_ROWS=flood,spin` runs only the rows whose name contains one of these (to
    // profile one abuse); the checks then need rows that did not run and are left out.
    let rows = std::env::var("PATRONUS_DOS_ROWS").ok();
    let chosen = |a: Abuse| {
        rows.as_deref()
            .is_none_or(|r| r.split(',').any(|w| a.name().contains(w.trim())))
    };
    for abuse in Abuse::ALL.into_iter().filter(|a| chosen(*a)) {
        let o = measure(opts, abuse, window).with_context(|| abuse.name())?;
        println!(
            "{:<17} | {:>6.1} {:>6.1} {:>6.1}      | {:>6.2} {:>6.2} | {:>6} | {:<34} | {:>6} {:>6} {:>6}",
            abuse.name(),
            o.before.rounds_per_s() / 1e3,
            o.during.rounds_per_s() / 1e3,
            o.after.rounds_per_s() / 1e3,
            report::share(&o.during, &o.before),
            report::share(&o.after, &o.before),
            o.during.failed(),
            o.tally.summary(),
            o.node.sessions_closed,
            o.node.data_reconnects,
            o.node.reconnects_refused
        );
        outcomes.push(o);
    }
    let mut exp = Experiment::new("dos", opts.transport_name(), opts.quick);
    report::report(&mut exp, &outcomes, window, opts);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

/// One abuse in its own cluster: the honest client's three windows around the abuser's run.
fn measure(opts: &BenchOpts, abuse: Abuse, window: Duration) -> Result<Outcome> {
    // The devices of the other experiments (`Rig`): over TCP their engines park as soon as
    // they run out of work (on 2 cores, engines that spin before parking hold a core the
    // honest client or the manager needs), and they speak TLS with `--tls`. The rig (and its
    // in-process fabric) outlives the cluster.
    let rig = Rig::for_bench(opts);
    let node_dev = rig.device()?;
    let client_devs = [rig.device()?, rig.device()?];
    let mut cluster = EmbeddedCluster::<SoftProvider>::start_on(
        |role| match role {
            DeviceRole::Node => Ok(node_dev.clone()),
            DeviceRole::Client(i) => Ok(client_devs[i % client_devs.len()].clone()),
        },
        abuse.node(),
        abuse.honest_client(),
        2,
    )
    .context("starting the cluster")?;
    // The second device is the abuser's compute node; its client is not needed (the abusers
    // open their own connections).
    drop(cluster.clients.pop());
    let abuser_ctx = cluster
        .client_ctxs
        .get(1)
        .cloned()
        .ok_or_else(|| anyhow!("the cluster opened no second device"))?;
    let node_addr = cluster.node.address().clone();
    let node = &cluster.node;
    let node_ctx = cluster.node_ctx.clone();
    let Some(honest) = cluster.clients.first_mut() else {
        bail!("the cluster started no client");
    };
    let mut back = [0u8; MSG.len()];
    for _ in 0..WARMUP_ROUNDS {
        round(honest, &mut back).context("warm-up round")?;
    }
    let s0 = Snapshot::take(node, &node_ctx);
    let mut before = honest_window(honest, window)?;
    let s1 = Snapshot::take(node, &node_ctx);
    let stop = Arc::new(AtomicBool::new(false));
    let abuser = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name(format!("dos {}", abuse.name()))
            .spawn(move || abuse.run(&abuser_ctx, &node_addr, &stop))
            .context("spawning the abuser")?
    };
    let during = honest_window(honest, window);
    stop.store(true, Ordering::SeqCst);
    let tally = abuser
        .join()
        .map_err(|_| anyhow!("the abuser panicked"))?
        .context("the abuser")?;
    let mut during = during?;
    let s2 = Snapshot::take(node, &node_ctx);
    let mut after = honest_window(honest, window)?;
    let s3 = Snapshot::take(node, &node_ctx);
    before.node_cores = s1.cores_since(&s0);
    during.node_cores = s2.cores_since(&s1);
    after.node_cores = s3.cores_since(&s2);
    let (a, b) = (&s1.stats, &s3.stats);
    let counted = NodeDelta {
        sessions_closed: b.sessions_ended.closed - a.sessions_ended.closed,
        sessions_idle: b.sessions_ended.idle - a.sessions_ended.idle,
        sessions_no_hello: b.sessions_ended.no_hello - a.sessions_ended.no_hello,
        data_reconnects: b.data_reconnects - a.data_reconnects,
        reconnects_refused: b.reconnects_refused - a.reconnects_refused,
        cpu_during: s2.cpu.saturating_sub(s1.cpu),
        held_start: s0.stats.held,
        held_end: s3.stats.held,
        honest_share: class_delta(&s1.stats, &s2.stats, abuse.honest_class()),
        abuser_share: class_delta(&s1.stats, &s2.stats, abuse.abuser_class()),
    };
    Ok(Outcome {
        abuse,
        before,
        during,
        after,
        tally,
        node: counted,
    })
}

/// The node's counters and CPU (manager threads, and over TCP its NIC engines) at an instant.
struct Snapshot {
    stats: NodeStats,
    cpu: Duration,
    at: Instant,
}

impl Snapshot {
    #[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
    fn take(node: &MemoryNode<SoftProvider>, ctx: &SoftContext) -> Self {
        let stats = node.fresh_stats();
        // Zero in-process: no engines.
        let engines = TcpNode::engine_cpu_time(ctx).unwrap_or_default();
        Snapshot {
            cpu: stats.manager_cpu + engines,
            stats,
            at: Instant::now(),
        }
    }

    /// The node's CPU since `earlier`, in cores.
    fn cores_since(&self, earlier: &Snapshot) -> f64 {
        let secs = self.at.duration_since(earlier.at).as_secs_f64();
        if secs > 0.0 {
            self.cpu.saturating_sub(earlier.cpu).as_secs_f64() / secs
        } else {
            0.0
        }
    }
}

/// The honest client's rounds for `len` of wall time. A failed round is counted under its
/// error and the loop goes on; data read back wrong ends the experiment (a bug, not a DoS).
#[allow(clippy::disallowed_methods)] // a window is wall time
fn honest_window(c: &mut Client<SoftProvider>, len: Duration) -> Result<Window> {
    let mut w = Window::default();
    let mut back = [0u8; MSG.len()];
    let (cpu0, own0) = (process_cpu(), thread_cpu());
    let t0 = Instant::now();
    while t0.elapsed() < len {
        let r0 = Instant::now();
        match round(c, &mut back) {
            Ok(()) => {
                w.rounds += 1;
                w.latency.record(r0.elapsed());
            }
            Err(e) => *w.errors.entry(error_kind(&e)).or_default() += 1,
        }
    }
    w.secs = t0.elapsed().as_secs_f64();
    w.cores = process_cpu().saturating_sub(cpu0).as_secs_f64() / w.secs;
    w.honest_cores = thread_cpu().saturating_sub(own0).as_secs_f64() / w.secs;
    if w.rounds > 0 && back != *MSG {
        bail!("the honest client read back {back:?}, not what it wrote");
    }
    Ok(w)
}

/// One honest round: allocate, write, read back, free (freed whatever happened in between).
fn round(c: &mut Client<SoftProvider>, back: &mut [u8; MSG.len()]) -> Result<(), ClientError> {
    let p = c.allocate(HONEST_SIZE, HONEST_LEASE, Mode::Exclusive)?;
    back.fill(0);
    let work = c.write(&p, 0, MSG).and_then(|()| c.read(&p, 0, back));
    let freed = c.free(p);
    work?;
    freed
}

/// A short name for what failed a round (or an abuser's operation).
fn error_kind(e: &ClientError) -> &'static str {
    match e {
        ClientError::RpcTimeout => "rpc timeout",
        ClientError::ControlLost(_) => "control lost",
        ClientError::ControlBusy => "control busy",
        ClientError::SessionLost => "session lost",
        ClientError::SessionEnded(_) => "session ended",
        ClientError::Overloaded => "overloaded",
        ClientError::QuotaExceeded => "quota exceeded",
        ClientError::NoMemory | ClientError::PoolExhausted => "no memory",
        ClientError::Denied(_) => "denied",
        ClientError::LeaseExpired => "lease expired",
        ClientError::FailoverFailed(_)
        | ClientError::FailedAfterFailover(_)
        | ClientError::OutcomeUnknown(_) => "data QP failed",
        ClientError::Verbs(_) => "verbs",
        _ => "other",
    }
}
