//! One-sided allocation (OneSidedMW) beside Patronus's RPC allocation: allocation latency and
//! throughput as clients grow, and the manager's CPU per allocation, measured in the same run
//! on the same node (type-2 isolation, `NodeConfig::one_sided`).
//!
//! Each client is a thread. A round: every client allocates `burst` chunks of 8 KiB, timing
//! each allocation, then frees them (untimed). One-sided allocation is a SEND answered by the
//! node's pre-posted chains; RPC allocation is `allocate` of 8 KiB, exclusive. Between rounds
//! (untimed) the main thread waits until the manager has taken the frees and refilled every
//! client's queue, so a timed allocation never finds its queue empty. Throughput is the
//! round's allocations over the wall time from the start barrier until the last client
//! finished allocating. The manager's CPU is its time handling requests (`busy_cpu`) over the
//! timed phases, per allocation; the refills run between rounds and are reported apart.

use super::driver::Rig;
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Latency, Panel, PanelKind, PaperRef, Point, Ratio, Row,
    Series,
};
use anyhow::{Context as _, Result, anyhow};
use parking_lot::Mutex;
use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{DeviceRole, EmbeddedCluster};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, OneSidedConfig};
use patronus_core::proto::messages::Mode;
use rnic::soft::SoftProvider;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const CHUNK: u64 = 8 << 10;
const ONE_SIDED: &str = "one-sided";
const RPC: &str = "RPC";

struct Plan {
    clients: Vec<u32>,
    burst: u32,
    rounds: u32,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            clients: vec![1, 4],
            burst: 16,
            rounds: 3,
        }
    } else {
        Plan {
            clients: vec![1, 2, 4, 8],
            burst: 32,
            rounds: 20,
        }
    }
}

/// What one configuration measured.
struct Measured {
    latency: Latency,
    allocations: u64,
    timed: Duration,
    manager_busy: Duration,
}

/// Runs the comparison.
#[allow(clippy::disallowed_methods)] // the experiment's wall time
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = Instant::now();
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("onesided", opts.transport_name(), opts.quick);
    println!(
        "One-sided vs RPC allocation of {} KiB chunks: {} allocations a client a round, {} rounds",
        CHUNK >> 10,
        plan.burst,
        plan.rounds
    );
    println!(
        "{:<10} {:>7} {:>10} {:>9} {:>9} {:>14}",
        "mechanism", "clients", "Kallocs/s", "p50 us", "p99 us", "mgr us/alloc"
    );
    let mut series: Vec<(String, Vec<Point>)> =
        vec![(ONE_SIDED.into(), Vec::new()), (RPC.into(), Vec::new())];
    for &clients in &plan.clients {
        for (k, one_sided) in [(0, true), (1, false)] {
            let m = measure(&rig, &plan, clients, one_sided)
                .with_context(|| format!("{clients} clients, one-sided {one_sided}"))?;
            let secs = m.timed.as_secs_f64().max(1e-9);
            let row = Row {
                throughput_ops: m.allocations as f64 / secs,
                p50_us: m.latency.p50_us(),
                p99_us: m.latency.p99_us(),
                mn_cpu_us_per_op: m.manager_busy.as_secs_f64() * 1e6 / m.allocations.max(1) as f64,
                ..Row::new(series[k].0.clone(), clients)
            }
            .with("allocations", m.allocations);
            println!(
                "{:<10} {:>7} {:>10.1} {:>9.1} {:>9.1} {:>14.2}",
                row.mechanism,
                clients,
                row.throughput_ops / 1e3,
                row.p50_us,
                row.p99_us,
                row.mn_cpu_us_per_op
            );
            series[k]
                .1
                .push(Point::xy(f64::from(clients), row.throughput_ops / 1e3));
            exp.rows.push(row);
        }
    }
    report(&mut exp, &plan, series);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

fn node(clients: u32, burst: u32) -> NodeConfig {
    NodeConfig {
        isolation: Isolation::Type2,
        max_lifetime_us: 60_000_000,
        one_sided: Some(OneSidedConfig {
            chunk_bytes: CHUNK,
            chunks: (clients * burst * 2).max(64),
            per_client: burst,
        }),
        ..NodeConfig::default()
    }
}

/// One configuration in a fresh node.
#[allow(clippy::disallowed_methods)] // timing the measured phases
fn measure(rig: &Rig, plan: &Plan, clients: u32, one_sided: bool) -> Result<Measured> {
    let node_dev = rig.device()?;
    let mut devices = Vec::new();
    for _ in 0..clients {
        devices.push(rig.device()?);
    }
    let cluster = EmbeddedCluster::<SoftProvider>::start_on(
        |role| match role {
            DeviceRole::Node => Ok(node_dev.clone()),
            DeviceRole::Client(i) => Ok(devices[i].clone()),
        },
        node(clients, plan.burst),
        ClientConfig::default(),
        clients as usize,
    )
    .context("starting the cluster")?;
    let EmbeddedCluster {
        node, clients: cs, ..
    } = cluster;
    let node = Arc::new(node);
    let start = Arc::new(Barrier::new(cs.len() + 1));
    let done = Arc::new(Barrier::new(cs.len() + 1));
    let latency = Arc::new(Mutex::new(Latency::new()));
    let (burst, rounds) = (plan.burst, plan.rounds);
    let mut threads = Vec::new();
    for (i, c) in cs.into_iter().enumerate() {
        let (start, done, latency) = (start.clone(), done.clone(), latency.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("onesided client {i}"))
                .spawn(move || client_rounds(c, one_sided, burst, rounds, &start, &done, &latency))
                .context("spawning a client")?,
        );
    }
    let mut timed = Duration::ZERO;
    let mut manager_busy = Duration::ZERO;
    done.wait(); // every client warmed up (its connections open)
    // Allocations made so far: one a client to warm up, then `burst` a client a round.
    let mut made = u64::from(clients);
    for _ in 0..rounds {
        wait_refilled(&node, one_sided, burst, made)?;
        made += u64::from(clients * burst);
        let busy = node.fresh_stats().busy_cpu;
        let t0 = Instant::now();
        start.wait();
        done.wait(); // every client allocated its burst
        timed += t0.elapsed();
        manager_busy += node.fresh_stats().busy_cpu.saturating_sub(busy);
        done.wait(); // and freed it
    }
    for t in threads {
        t.join().map_err(|_| anyhow!("a client panicked"))??;
    }
    let latency = Arc::try_unwrap(latency)
        .map_err(|_| anyhow!("latency still shared"))?
        .into_inner();
    Ok(Measured {
        allocations: latency.count(),
        latency,
        timed,
        manager_busy,
    })
}

/// One client's rounds: allocate `burst` (timed), then free them.
fn client_rounds(
    mut c: Client<SoftProvider>,
    one_sided: bool,
    burst: u32,
    rounds: u32,
    start: &Barrier,
    done: &Barrier,
    latency: &Mutex<Latency>,
) -> Result<()> {
    let mut mine = Latency::new();
    // Warm-up (untimed): the allocation connection (or the control path) opened once.
    let warm = if one_sided {
        c.allocate_one_sided()
    } else {
        c.allocate(CHUNK, Duration::from_secs(30), Mode::Exclusive)
    };
    let warm = warm.map_err(|e| anyhow!("warm-up allocation: {e}"));
    let warmed = warm.and_then(|p| c.free(p).map_err(|e| anyhow!("warm-up free: {e}")));
    done.wait();
    warmed?;
    for _ in 0..rounds {
        start.wait();
        let mut held = Vec::with_capacity(burst as usize);
        let mut failed = None;
        for _ in 0..burst {
            #[allow(clippy::disallowed_methods)] // timing one allocation
            let t = Instant::now();
            let got = if one_sided {
                c.allocate_one_sided()
            } else {
                c.allocate(CHUNK, Duration::from_secs(30), Mode::Exclusive)
            };
            match got {
                Ok(p) => {
                    mine.record(t.elapsed());
                    held.push(p);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        done.wait();
        for p in held {
            c.free(p)?;
        }
        done.wait();
        if let Some(e) = failed {
            return Err(anyhow!("an allocation failed: {e}"));
        }
    }
    latency.lock().merge(&mine);
    Ok(())
}

/// Waits (untimed) until the manager saw the `made` allocations so far and their frees, and
/// refilled every queue.
#[allow(clippy::disallowed_methods)] // a bound on a wait for the manager thread
fn wait_refilled(
    node: &MemoryNode<SoftProvider>,
    one_sided: bool,
    per_client: u32,
    made: u64,
) -> Result<()> {
    if !one_sided {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        node.fresh_stats(); // a manager turn: it takes frees and refills
        let s = node
            .one_sided_stats()
            .ok_or_else(|| anyhow!("the node offers no one-sided allocation"))?;
        let outstanding = s.chains_posted.saturating_sub(s.allocated);
        if s.allocated == made && s.freed == made && outstanding == s.queues * u64::from(per_client)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(anyhow!("the queues were not refilled: {s:?}"));
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

fn report(exp: &mut Experiment, plan: &Plan, series: Vec<(String, Vec<Point>)>) {
    let row = |mech: &str, clients: u32| {
        exp.rows
            .iter()
            .find(|r| r.mechanism == mech && r.clients == clients)
            .cloned()
    };
    let (lo, hi) = (
        plan.clients.first().copied().unwrap_or(1),
        plan.clients.last().copied().unwrap_or(1),
    );
    let mut ratios = Vec::new();
    let mut checks = Vec::new();
    for &n in &[lo, hi] {
        if let (Some(o), Some(r)) = (row(ONE_SIDED, n), row(RPC, n)) {
            ratios.push(Ratio {
                name: format!("one-sided / RPC allocation throughput at {n} client(s)"),
                value: o.throughput_ops / r.throughput_ops.max(1e-9),
            });
            ratios.push(Ratio {
                name: format!("RPC / one-sided allocation p50 at {n} client(s)"),
                value: r.p50_us / o.p50_us.max(1e-9),
            });
        }
    }
    let one: Vec<Row> = exp
        .rows
        .iter()
        .filter(|r| r.mechanism == ONE_SIDED)
        .cloned()
        .collect();
    let rpc: Vec<Row> = exp
        .rows
        .iter()
        .filter(|r| r.mechanism == RPC)
        .cloned()
        .collect();
    let max_one = one.iter().map(|r| r.mn_cpu_us_per_op).fold(0.0, f64::max);
    let min_rpc = rpc
        .iter()
        .map(|r| r.mn_cpu_us_per_op)
        .fold(f64::INFINITY, f64::min);
    checks.push(Check {
        claim: "one-sided allocation takes no manager CPU on its path: the manager's \
                request-handling CPU per one-sided allocation is under 1 % of an RPC \
                allocation's, at every client count"
            .into(),
        holds: max_one <= 0.01 * min_rpc,
        detail: format!(
            "manager busy µs per allocation: one-sided at most {max_one:.3}, RPC at least \
             {min_rpc:.2} (refills, frees and zeroing run between the timed phases)"
        ),
    });
    if let (Some(o), Some(r)) = (row(ONE_SIDED, lo), row(RPC, lo)) {
        checks.push(Check {
            claim: "one-sided allocation is faster than RPC allocation (OneSidedMW: 10.7 \
                    against 170 µs on ConnectX-5)"
                .into(),
            holds: o.p50_us < r.p50_us,
            detail: format!(
                "p50 at {lo} client(s): one-sided {:.1} µs, RPC {:.1} µs",
                o.p50_us, r.p50_us
            ),
        });
        exp.paper.push(PaperRef {
            metric: "one-sided allocation latency".into(),
            ours: Some(o.p50_us),
            paper: Some(10.7),
            unit: "µs".into(),
            source: "OneSidedMW (NSDI '26), evaluation slides".into(),
        });
        exp.paper.push(PaperRef {
            metric: "RPC allocation latency".into(),
            ours: Some(r.p50_us),
            paper: Some(170.0),
            unit: "µs".into(),
            source: "OneSidedMW (NSDI '26), evaluation slides".into(),
        });
    }
    exp.ratios = ratios;
    exp.checks = checks;
    exp.notes.push(
        "The soft NIC runs the chains on a thread of the node's device (one per device): on \
         2 cores it competes with the client threads. The paper's ConnectX-5 runs them in the \
         NIC."
            .into(),
    );
    exp.figure = Figure {
        title: "One-sided vs RPC allocation".into(),
        panels: vec![Panel {
            title: "allocation throughput".into(),
            x_label: "clients".into(),
            y_label: "Kallocs/s".into(),
            kind: PanelKind::Lines,
            x_log: false,
            y_log: false,
            series: series
                .into_iter()
                .map(|(name, points)| Series { name, points })
                .collect(),
        }],
    };
}
