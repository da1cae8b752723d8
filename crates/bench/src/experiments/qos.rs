//! QoS: LITE's Figure 16 (§4.1) scaled to a 2-core VM, on the memory node's priorities
//! (`NodeConfig::tenant_priorities`, the software priority policy in
//! `manager::node::priority`). Over TCP only, whatever `--transport` says: the policy needs a
//! device that enforces QP rate limits and counts what it served per QP, which the
//! in-process soft NIC does not (a node with priorities refuses to start there).
//!
//! Two tenants: a low-priority one with four clients and a high-priority one with four; each
//! client is a thread doing 4 KiB one-sided WRITEs and READs (batches of four, half each) on
//! its own object as fast as it can. The recipe (LITE's, scaled down): low priority alone
//! from t = 0; the high-priority clients join; two of them pause and come back; then (ours)
//! the high-priority clients leave, and last run alone (their solo throughput, the reference
//! of the first check, in the same node). Throughput per priority is sampled in short
//! windows. It runs three ways, each in a fresh node, in
//! rounds that alternate the order of the three:
//! - **no QoS**: no priorities, no rates;
//! - **SW-Pri**: the tenants' priorities and the node's policy (LITE's policies 1 and 2: the
//!   low-priority data QPs are throttled while the high-priority load is high, and not when
//!   it is light or absent);
//! - **static split** (HW-Sep-like): the low-priority tenant's data QPs always at the
//!   throttled rate (`NodeConfig::tenant_rates`), whatever the high-priority load.

mod report;

use super::driver::Rig;
use crate::harness::{BenchOpts, Experiment};
use anyhow::{Context as _, Result, anyhow, bail};
use parking_lot::{Condvar, Mutex};
use patronus_core::client::{Client, ClientConfig, OpResult};
use patronus_core::cluster::Link;
use patronus_core::manager::{
    Isolation, MemoryNode, NodeConfig, Priority, PriorityPolicy, PriorityStats, TenantPriority,
    TenantRate, TenantSecret,
};
use patronus_core::proto::messages::Mode;
use rnic::soft::{SoftContext, SoftProvider};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes of each READ and WRITE.
const PAGE: usize = 4096;
/// Ops per doorbell (half WRITEs, half READs).
const BATCH: usize = 4;
/// Clients (threads) of each priority, and the high-priority ones that pause.
const LOW_CLIENTS: usize = 4;
const HIGH_CLIENTS: usize = 4;
const PAUSING: usize = 2;
const LOW: TenantSecret = TenantSecret {
    tenant: 1,
    secret: 0x10_0001,
};
const HIGH: TenantSecret = TenantSecret {
    tenant: 2,
    secret: 0x20_0002,
};
/// The rate of a throttled (SW-Pri) or statically limited (static split) low-priority data
/// QP, operations a second.
const LOW_RATE_OPS: u64 = 250;
/// SW-Pri: low priority is throttled once the high-priority tenant's one-sided operations
/// reach this many a second, and released after [`RELEASE_PERIODS`] periods below
/// [`RELEASE_OPS`].
const HIGH_LOAD_OPS: u64 = 2_000;
const RELEASE_OPS: u64 = 1_000;
const RELEASE_PERIODS: u32 = 4;
const PERIOD: Duration = Duration::from_millis(50);

/// How the node treats the two tenants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QosMode {
    NoQos,
    SwPri,
    Static,
}

impl QosMode {
    const ALL: [QosMode; 3] = [QosMode::NoQos, QosMode::SwPri, QosMode::Static];

    fn name(self) -> &'static str {
        match self {
            QosMode::NoQos => "no QoS",
            QosMode::SwPri => "SW-Pri",
            QosMode::Static => "static split",
        }
    }

    fn node(self) -> NodeConfig {
        let mut cfg = NodeConfig {
            tenants: vec![LOW, HIGH],
            // Each client holds one object for the whole run.
            max_lifetime_us: 120_000_000,
            isolation: Isolation::SharedPd, // the paper's mode (as in every experiment)
            ..NodeConfig::default()
        };
        match self {
            QosMode::NoQos => {}
            QosMode::SwPri => {
                cfg.tenant_priorities = vec![
                    TenantPriority {
                        tenant: HIGH.tenant,
                        priority: Priority::High,
                    },
                    TenantPriority {
                        tenant: LOW.tenant,
                        priority: Priority::Low,
                    },
                ];
                cfg.priority_policy = PriorityPolicy {
                    period_us: PERIOD.as_micros() as u64,
                    high_load_ops_per_s: HIGH_LOAD_OPS,
                    release_ops_per_s: RELEASE_OPS,
                    release_periods: RELEASE_PERIODS,
                    throttled_ops_per_s: Some(LOW_RATE_OPS),
                    throttled_bytes_per_s: None,
                };
            }
            QosMode::Static => {
                cfg.tenant_rates = vec![TenantRate {
                    tenant: LOW.tenant,
                    ops_per_s: Some(LOW_RATE_OPS),
                    bytes_per_s: None,
                }];
            }
        }
        cfg
    }
}

/// One phase of a schedule: how long, whether the low-priority clients run, and how many
/// high-priority clients run.
#[derive(Clone, Copy, Debug)]
struct Phase {
    name: &'static str,
    windows: usize,
    low: bool,
    high: usize,
}

/// The recipe (LITE's Figure 16, scaled): low alone, then with the high-priority clients,
/// some of which pause and come back; then two phases of our own: the high-priority clients
/// leave (low priority alone again: does the limit lift?) and the high-priority clients run
/// alone (their solo throughput, in the same node, just after).
fn recipe(quick: bool) -> Vec<Phase> {
    let k = if quick { 2 } else { 5 };
    let phase = |name, windows: usize, low, high| Phase {
        name,
        windows: windows * k,
        low,
        high,
    };
    vec![
        phase(LOW_ALONE, 3, true, 0),
        phase(HIGH_JOINS, 5, true, HIGH_CLIENTS),
        phase(HIGH_PAUSE, 3, true, HIGH_CLIENTS - PAUSING),
        phase(HIGH_BACK, 3, true, HIGH_CLIENTS),
        phase(HIGH_LEAVES, 3, true, 0),
        phase(SOLO, 3, false, HIGH_CLIENTS),
    ]
}

/// The phases' names.
const LOW_ALONE: &str = "low alone";
const HIGH_JOINS: &str = "high joins";
const HIGH_PAUSE: &str = "some high pause";
const HIGH_BACK: &str = "high back";
const HIGH_LEAVES: &str = "high leaves";
const SOLO: &str = "high alone (solo)";

/// Throughput of one window, per priority.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// The round it was taken in.
    round: usize,
    /// End of the window, seconds since the round's schedule started.
    t: f64,
    phase: usize,
    low_ops_s: f64,
    high_ops_s: f64,
}

/// One mode's rounds of the schedule, each in a fresh node.
#[derive(Debug)]
struct Run {
    mode: QosMode,
    phases: Vec<Phase>,
    rounds: usize,
    /// Every round's windows.
    samples: Vec<Sample>,
    /// Per round, the policy's counters at the end of each phase.
    policy_at: Vec<Vec<PriorityStats>>,
    /// Failed ops (all kinds), per priority.
    low_failed: u64,
    high_failed: u64,
    /// The policy's counters at the end, summed over the rounds.
    policy: PriorityStats,
}

impl Run {
    /// Adds the rounds of `other` (of the same mode and schedule).
    fn absorb(&mut self, other: Run) {
        let base = self.rounds;
        self.samples
            .extend(other.samples.into_iter().map(|s| Sample {
                round: base + s.round,
                ..s
            }));
        self.policy_at.extend(other.policy_at);
        self.rounds += other.rounds;
        self.low_failed += other.low_failed;
        self.high_failed += other.high_failed;
        self.policy = self.policy.plus(&other.policy);
    }

    /// The index of the phase called `name`.
    fn phase(&self, name: &str) -> Option<usize> {
        self.phases.iter().position(|p| p.name == name)
    }

    /// Median throughput (low, high) over the windows of the phase called `name` in every
    /// round, leaving out each round's first window of it (the policy's reaction, threads
    /// waking up). Medians: on a shared 2-core machine a window now and then loses the CPU
    /// to something else.
    fn phase_ops_s(&self, name: &str) -> (f64, f64) {
        let Some(k) = self.phase(name) else {
            return (0.0, 0.0);
        };
        let w: Vec<&Sample> = (0..self.rounds)
            .flat_map(|r| {
                self.samples
                    .iter()
                    .filter(move |s| s.round == r && s.phase == k)
                    .skip(1)
            })
            .collect();
        (
            median(w.iter().map(|s| s.low_ops_s)),
            median(w.iter().map(|s| s.high_ops_s)),
        )
    }

    /// Mean aggregate throughput over LITE's recipe (every window of its four phases in every
    /// round: the reactions count).
    fn aggregate_ops_s(&self) -> f64 {
        let recipe: Vec<usize> = [LOW_ALONE, HIGH_JOINS, HIGH_PAUSE, HIGH_BACK]
            .iter()
            .filter_map(|n| self.phase(n))
            .collect();
        let w: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| recipe.contains(&s.phase))
            .map(|s| s.low_ops_s + s.high_ops_s)
            .collect();
        if w.is_empty() {
            0.0
        } else {
            w.iter().sum::<f64>() / w.len() as f64
        }
    }

    /// The policy's counters at the end of the phase called `name`, per round.
    fn policy_after(&self, name: &str) -> Vec<PriorityStats> {
        let Some(k) = self.phase(name) else {
            return Vec::new();
        };
        self.policy_at
            .iter()
            .filter_map(|round| round.get(k).copied())
            .collect()
    }
}

/// The median of `values` (0 for none).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Whether a client runs: the schedule opens and closes it; a closed client waits on the
/// condition variable (it never spins).
#[derive(Debug, Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn set(&self, open: bool) {
        *self.open.lock() = open;
        self.changed.notify_all();
    }

    /// Waits until the gate is open (`true`) or `stop` is set (`false`).
    fn wait_open(&self, stop: &AtomicBool) -> bool {
        let mut open = self.open.lock();
        while !*open && !stop.load(Ordering::SeqCst) {
            self.changed.wait(&mut open);
        }
        !stop.load(Ordering::SeqCst)
    }
}

/// What a client thread shares with the schedule.
#[derive(Debug, Default)]
struct Lane {
    gate: Gate,
    ops: AtomicU64,
    failed: AtomicU64,
}

/// Runs the experiment over TCP: 0.1 s windows, two rounds of ~4 s per mode with `--quick`
/// (~30 s in all); three rounds of phases 2.5 times longer otherwise.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = Instant::now();
    let window = Duration::from_millis(100);
    if opts.transport != Link::Tcp {
        println!(
            "qos: the node's priorities need QP rate limits and per-QP served counters, which \
             only the soft NIC over TCP has: running over TCP (not in-process)"
        );
    }
    println!(
        "QoS (LITE Fig. 16, scaled): {LOW_CLIENTS} low- and {HIGH_CLIENTS} high-priority \
         clients, {PAGE} B READ/WRITE in batches of {BATCH}, {:.1} s windows, over TCP",
        window.as_secs_f64()
    );
    let rig = Rig::tcp_for_bench(opts);
    println!(
        "{:<13} | {:<17} | {:>8} {:>8} {:>8} Kops/s (medians of windows)",
        "mode", "phase", "low", "high", "total"
    );
    // `PATRONUS_QOS_MODES=sw,no` runs only the modes whose name starts with one of these, in
    // that order (to profile one, or to see what the order does); the checks then need modes
    // that did not run and are left out.
    let modes: Vec<QosMode> = match std::env::var("PATRONUS_QOS_MODES") {
        Ok(list) => list
            .split(',')
            .filter_map(|w| {
                let w = w.trim().to_lowercase();
                QosMode::ALL
                    .into_iter()
                    .find(|m| m.name().to_lowercase().starts_with(&w))
            })
            .collect(),
        Err(_) => QosMode::ALL.to_vec(),
    };
    // Rounds alternate the modes' order (forth, then back), so a machine that gets slower or
    // faster during the run moves every mode alike.
    let rounds = if opts.quick { 2 } else { 3 };
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..rounds {
        let order: Vec<QosMode> = if round % 2 == 0 {
            modes.clone()
        } else {
            modes.iter().rev().copied().collect()
        };
        for mode in order {
            let r = measure(&rig, mode, &recipe(opts.quick), window)
                .with_context(|| format!("{}, round {}", mode.name(), round + 1))?;
            match runs.iter_mut().find(|x| x.mode == mode) {
                Some(x) => x.absorb(r),
                None => runs.push(r),
            }
        }
    }
    for r in &runs {
        for p in &r.phases {
            let (low, high) = r.phase_ops_s(p.name);
            println!(
                "{:<13} | {:<17} | {:>8.1} {:>8.1} {:>8.1}",
                r.mode.name(),
                p.name,
                low / 1e3,
                high / 1e3,
                (low + high) / 1e3
            );
        }
    }
    let mut exp = Experiment::new("qos", "tcp", opts.quick);
    report::report(&mut exp, &runs, window);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

/// One schedule in a fresh node: every client connects and allocates its object first, then
/// the phases open and close their gates while the counters are sampled each window.
#[allow(clippy::disallowed_methods)] // windows are wall time; the sampler waits them out
fn measure(rig: &Rig, mode: QosMode, phases: &[Phase], window: Duration) -> Result<Run> {
    let node_ctx = rig.device()?;
    let node = MemoryNode::<SoftProvider>::start(node_ctx.clone(), mode.node())
        .context("starting the memory node")?;
    // One compute-node device per priority.
    let (low_dev, high_dev) = (rig.device()?, rig.device()?);
    let stop = Arc::new(AtomicBool::new(false));
    let lanes: Vec<Arc<Lane>> = (0..LOW_CLIENTS + HIGH_CLIENTS)
        .map(|_| Arc::new(Lane::default()))
        .collect();
    let mut threads = Vec::new();
    let mut ready = Vec::new();
    for (i, lane) in lanes.iter().enumerate() {
        let high = i >= LOW_CLIENTS;
        let (ctx, tenant) = if high {
            (high_dev.clone(), HIGH)
        } else {
            (low_dev.clone(), LOW)
        };
        let (tx, rx) = std::sync::mpsc::channel();
        ready.push(rx);
        let (lane, stop, addr) = (lane.clone(), stop.clone(), node.address().clone());
        let handle = std::thread::Builder::new()
            .name(format!("qos {} {i}", if high { "high" } else { "low" }))
            .spawn(move || client_loop(&ctx, &addr, tenant, &lane, &stop, tx))
            .context("spawning a client")?;
        threads.push(handle);
    }
    for rx in ready {
        rx.recv()
            .map_err(|_| anyhow!("a client ended before it was ready"))?
            .context("a client's set-up")?;
    }
    let counts = |range: std::ops::Range<usize>| -> u64 {
        lanes[range]
            .iter()
            .map(|l| l.ops.load(Ordering::Relaxed))
            .sum()
    };
    let mut samples = Vec::new();
    let mut policy_at = Vec::new();
    let t0 = Instant::now();
    let mut last = (t0, 0u64, 0u64);
    let mut next = t0;
    for (k, p) in phases.iter().enumerate() {
        for (i, lane) in lanes.iter().enumerate() {
            let on = if i < LOW_CLIENTS {
                p.low
            } else {
                i - LOW_CLIENTS < p.high
            };
            lane.gate.set(on);
        }
        for _ in 0..p.windows {
            next += window;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let now = Instant::now();
            let (low, high) = (
                counts(0..LOW_CLIENTS),
                counts(LOW_CLIENTS..LOW_CLIENTS + HIGH_CLIENTS),
            );
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-9);
            samples.push(Sample {
                round: 0,
                t: now.duration_since(t0).as_secs_f64(),
                phase: k,
                low_ops_s: (low - last.1) as f64 / secs,
                high_ops_s: (high - last.2) as f64 / secs,
            });
            last = (now, low, high);
        }
        policy_at.push(node.fresh_stats().priority);
    }
    let policy = policy_at.last().copied().unwrap_or_default();
    stop.store(true, Ordering::SeqCst);
    for lane in &lanes {
        lane.gate.set(false); // wakes the waiting ones: they see `stop`
    }
    for t in threads {
        t.join()
            .map_err(|_| anyhow!("a client panicked"))?
            .context("a client")?;
    }
    let failed = |range: std::ops::Range<usize>| -> u64 {
        lanes[range]
            .iter()
            .map(|l| l.failed.load(Ordering::Relaxed))
            .sum()
    };
    drop(node);
    drop(node_ctx);
    Ok(Run {
        mode,
        phases: phases.to_vec(),
        rounds: 1,
        samples,
        policy_at: vec![policy_at],
        low_failed: failed(0..LOW_CLIENTS),
        high_failed: failed(LOW_CLIENTS..LOW_CLIENTS + HIGH_CLIENTS),
        policy,
    })
}

/// One client: connects as `tenant`, allocates its object, says it is ready, then runs
/// batches while its gate is open until `stop`. What it wrote is checked when it reads it
/// back (a wrong page ends the experiment: a bug, not a QoS effect).
fn client_loop(
    ctx: &SoftContext,
    addr: &rnic::soft::SoftAddress,
    tenant: TenantSecret,
    lane: &Lane,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<()>>,
) -> Result<()> {
    let cfg = ClientConfig {
        tenant: tenant.tenant,
        tenant_secret: tenant.secret,
        ..ClientConfig::default()
    };
    let set_up = Client::<SoftProvider>::connect(ctx, addr, cfg)
        .map_err(anyhow::Error::from)
        .and_then(|mut c| {
            let p = c
                .allocate(
                    (BATCH * PAGE) as u64,
                    Duration::from_secs(100),
                    Mode::Exclusive,
                )
                .map_err(anyhow::Error::from)?;
            Ok((c, p))
        });
    let (mut c, perm) = match set_up {
        Ok(v) => {
            let _ = ready.send(Ok(()));
            v
        }
        Err(e) => {
            let _ = ready.send(Err(anyhow!("{e:#}")));
            return Err(e);
        }
    };
    let page = [tenant.tenant as u8; PAGE];
    while lane.gate.wait_open(stop) {
        let mut b = c.batch();
        for i in 0..BATCH {
            let off = (i / 2 * 2 * PAGE) as u64;
            if i % 2 == 0 {
                b.write(&perm, off, &page);
            } else {
                b.read(&perm, off, PAGE as u32);
            }
        }
        let results = b.execute();
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        // Each READ follows the WRITE of its page on the same QP: with every op done, it
        // reads what was written.
        let wrong = ok == BATCH as u64
            && results.iter().any(
                |r| matches!(r, Ok(OpResult::Read(data)) if data.iter().any(|&x| x != page[0])),
            );
        if wrong {
            bail!("a client read back a page other than the one it wrote");
        }
        lane.failed.fetch_add(BATCH as u64 - ok, Ordering::Relaxed);
        lane.ops.fetch_add(ok, Ordering::Relaxed);
    }
    Ok(())
}
