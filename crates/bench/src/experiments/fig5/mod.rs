//! Figure 5: random 64 B accesses in a large region, each permission re-used for three
//! accesses (§7.1); throughput and p50/p99 latency against the number of clients, for every
//! mechanism on the same soft NIC.

mod logical;

use crate::baseline::{BaselineClient, BaselineConfig, BaselineNode};
use crate::experiments::driver::{CLIENT_THREADS, Logical, Rig, drive, engine_cpu, spread};
use crate::experiments::patronus_rig::{PatronusRig, lean_client};
use crate::experiments::{evidence, floor};
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Panel, PanelKind, PaperRef, Point, Ratio, Row, Series,
};
use anyhow::{Context as _, Result};
use logical::{BaselineLogical, Flavor, PatronusLogical};
use patronus_core::manager::{NodeConfig, Techniques};
use rnic::soft::SoftProvider;
use std::sync::Arc;
use std::time::Duration;

/// The paper's QP mechanism needs a QP per client and stops at 32 clients (Figure 5 caption).
pub const QP_MAX_CLIENTS: u32 = 32;
/// Mechanisms in plotting order.
pub const MECHANISMS: [&str; 5] = ["Unprot", "Patronus", "MR", "QP", "RPC"];
/// Lease of the Patronus permissions (they end by expiry).
const LEASE_US: u64 = 1_000;

struct Plan {
    clients: Vec<u32>,
    ops: u64,
    budget: Duration,
    objects: usize,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            clients: vec![1, 8, 32, 64],
            ops: 60_000,
            budget: Duration::from_millis(1_000),
            objects: 4096,
        }
    } else {
        Plan {
            clients: vec![1, 2, 4, 8, 16, 32, 64, 128],
            ops: 200_000,
            budget: Duration::from_secs(6),
            objects: 32_768,
        }
    }
}

/// Runs Figure 5 on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("fig5", opts.transport_name(), opts.quick);
    // Over TCP, what a round trip costs on this machine, beside every number below.
    let round_trip_floor = match opts.transport {
        patronus_core::cluster::Link::Tcp => {
            let f = floor::measure(if opts.quick { 10_000 } else { 50_000 })?;
            f.print();
            exp.rows.extend(f.rows());
            Some(f)
        }
        patronus_core::cluster::Link::InProc => None,
    };
    println!(
        "Figure 5: random {} B accesses, {} per permission",
        logical::ACCESS,
        logical::REUSE
    );
    println!(
        "{:<9} {:>7} {:>12} {:>9} {:>9} {:>13}",
        "mechanism", "clients", "Kops/s", "p50 us", "p99 us", "MN CPU us/op"
    );

    // Patronus: every technique on, leases end by expiry.
    let node_cfg = NodeConfig {
        isolation: opts.isolation,
        ..PatronusRig::throughput_config(Techniques::ALL, 1_000_000)
    };
    let patronus = PatronusRig::start(&rig, node_cfg, CLIENT_THREADS)?;
    let objects = Arc::new(patronus.objects(plan.objects, logical::ACCESS as u64)?);
    // The baselines run on nodes of their own (the same soft NIC, their own devices): one for
    // Unprot, QP and RPC, whose pool is registered once; one for MR, whose pool is not.
    let base_dev = rig.device()?;
    let base_node =
        BaselineNode::<SoftProvider>::start(base_dev.clone(), BaselineConfig::default())
            .context("starting the baseline memory node")?;
    let mr_dev = rig.device()?;
    let mr_node = BaselineNode::<SoftProvider>::start(
        mr_dev.clone(),
        BaselineConfig {
            whole_pool_region: false,
            ..BaselineConfig::default()
        },
    )
    .context("starting the MR memory node")?;
    let base_client_devs = (0..CLIENT_THREADS)
        .map(|_| rig.device())
        .collect::<Result<Vec<_>>>()?;

    for &n in &plan.clients {
        for mech in MECHANISMS {
            if mech == "QP" && n > QP_MAX_CLIENTS {
                continue;
            }
            let (driven, mgr, engine) = if mech == "Patronus" {
                drive_patronus(&patronus, &objects, n, &plan, 5)?
            } else {
                let flavor = match mech {
                    "Unprot" => Flavor::Unprot,
                    "MR" => Flavor::Mr,
                    "QP" => Flavor::Qp,
                    _ => Flavor::Rpc,
                };
                let (node, node_dev) = if flavor == Flavor::Mr {
                    (&mr_node, &mr_dev)
                } else {
                    (&base_node, &base_dev)
                };
                let logicals = (0..n as usize)
                    .map(|i| {
                        let dev = &base_client_devs[i % base_client_devs.len()];
                        let c = BaselineClient::connect(dev, node.address(), flavor.scheme())?;
                        Ok(Box::new(BaselineLogical::new(c, flavor)) as Box<dyn Logical>)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let (m0, e0) = (node.stats().busy_cpu, engine_cpu(node_dev));
                let d = drive(
                    spread(logicals, CLIENT_THREADS),
                    plan.ops,
                    plan.budget,
                    5,
                    &format!("fig5 {mech} x{n}"),
                )?;
                let (m1, e1) = (node.stats().busy_cpu, engine_cpu(node_dev));
                (d, m1.saturating_sub(m0), e1.saturating_sub(e0))
            };
            let row = driven.row(mech, n, mgr, engine);
            println!(
                "{:<9} {:>7} {:>12.1} {:>9.2} {:>9.2} {:>13.3}",
                mech,
                n,
                row.throughput_ops / 1e3,
                row.p50_us,
                row.p99_us,
                row.mn_cpu_us_per_op
            );
            if let Some(l) = evidence::leases(&row) {
                println!("          leases: {l}");
            }
            exp.rows.push(row);
        }
    }
    base_node.shutdown();
    mr_node.shutdown();
    patronus.node.shutdown();
    summarize(&mut exp, &plan);
    if let Some(f) = &round_trip_floor {
        f.checks(&mut exp.checks, &mut exp.ratios);
    }
    // With `--tls`: what TLS costs at the largest client count, against plaintext.
    let max = plan.clients.iter().copied().max().unwrap_or(1);
    crate::experiments::tls::compare_figure(
        opts,
        &mut exp,
        &format!("Figure 5 Patronus at {max} clients"),
        |rig, seed| measure_patronus(rig, opts, max, seed),
    )?;
    Ok(exp)
}

/// `n` Patronus clients of `patronus` accessing `objects` as Figure 5 does, until the plan's
/// operations or time budget.
fn drive_patronus(
    patronus: &PatronusRig,
    objects: &Arc<Vec<u64>>,
    n: u32,
    plan: &Plan,
    seed: u64,
) -> Result<(crate::experiments::driver::Driven, Duration, Duration)> {
    let clients = patronus.clients(n as usize, &lean_client())?;
    let logicals: Vec<Box<dyn Logical>> = clients
        .into_iter()
        .map(|c| Box::new(PatronusLogical::new(c, objects.clone(), LEASE_US)) as Box<dyn Logical>)
        .collect();
    patronus.drive(
        logicals,
        plan.ops,
        plan.budget,
        seed,
        &format!("fig5 Patronus x{n}"),
    )
}

/// Figure 5's Patronus point alone, `clients` clients, on a node of its own on `rig` (as
/// [`run`] measures it; for comparisons such as TLS against plaintext).
pub(crate) fn measure_patronus(
    rig: &Rig,
    opts: &BenchOpts,
    clients: u32,
    seed: u64,
) -> Result<Row> {
    let plan = plan(opts);
    let node_cfg = NodeConfig {
        isolation: opts.isolation,
        ..PatronusRig::throughput_config(Techniques::ALL, 1_000_000)
    };
    let patronus = PatronusRig::start(rig, node_cfg, CLIENT_THREADS)?;
    let objects = Arc::new(patronus.objects(plan.objects, logical::ACCESS as u64)?);
    let (driven, mgr, engine) = drive_patronus(&patronus, &objects, clients, &plan, seed)?;
    patronus.node.shutdown();
    Ok(driven.row("Patronus", clients, mgr, engine))
}

impl Flavor {
    fn scheme(self) -> crate::baseline::Scheme {
        use crate::baseline::Scheme;
        match self {
            Flavor::Unprot => Scheme::Unprot,
            Flavor::Mr => Scheme::Mr,
            Flavor::Qp => Scheme::Qp,
            Flavor::Rpc => Scheme::Rpc,
        }
    }
}

fn summarize(exp: &mut Experiment, plan: &Plan) {
    let max = plan.clients.iter().copied().max().unwrap_or(1);
    let qp_max = plan
        .clients
        .iter()
        .copied()
        .filter(|&c| c <= QP_MAX_CLIENTS)
        .max()
        .unwrap_or(1);
    let tput = |m: &str, n: u32| exp.row(m, n).map(|r| r.throughput_ops);
    let mut ratios = Vec::new();
    let mut checks = Vec::new();
    if let Some(p) = tput("Patronus", max) {
        for (other, at) in [("MR", max), ("RPC", max), ("QP", qp_max), ("Unprot", max)] {
            let Some(o) = tput(other, at) else { continue };
            let pa = tput("Patronus", at).unwrap_or(p);
            ratios.push(Ratio {
                name: format!("Patronus / {other} throughput at {at} clients"),
                value: pa / o.max(1e-9),
            });
            if other != "Unprot" {
                let why = match (exp.row("Patronus", at), exp.row(other, at)) {
                    (Some(pr), Some(or)) if pa <= o => evidence::throughput_gap(pr, or),
                    _ => String::new(),
                };
                checks.push(Check {
                    claim: format!("Patronus is ahead of {other} at {at} clients (§7.1, Figure 5)"),
                    holds: pa > o,
                    detail: format!(
                        "Patronus {:.0} Kops/s vs {other} {:.0} Kops/s ({:.2}×){why}",
                        pa / 1e3,
                        o / 1e3,
                        pa / o.max(1e-9)
                    ),
                });
            }
        }
    }
    // Goodput plateaus instead of collapsing as clients are added.
    let best = exp
        .rows
        .iter()
        .filter(|r| r.mechanism == "Patronus" && r.clients < max)
        .max_by(|a, b| a.throughput_ops.total_cmp(&b.throughput_ops));
    if let (Some(top), Some(last)) = (best, exp.row("Patronus", max)) {
        let ratio = last.throughput_ops / top.throughput_ops.max(1e-9);
        let why = if ratio >= 0.9 {
            String::new()
        } else {
            format!(
                ". Measured at {} clients: {}; {:.1} µs of node CPU per op; at {} clients: {}; {:.1} µs per op",
                top.clients,
                evidence::leases(top).unwrap_or_default(),
                top.mn_cpu_us_per_op,
                max,
                evidence::leases(last).unwrap_or_default(),
                last.mn_cpu_us_per_op
            )
        };
        checks.push(Check {
            claim: format!(
                "Patronus goodput plateaus: at {max} clients at least 0.9× its best at fewer (leases do not collapse as clients are added and the control path slows; docs/evaluation.md, \"Leases under load\")"
            ),
            holds: ratio >= 0.9,
            detail: format!(
                "{:.1} Kops/s at {max} clients vs {:.1} Kops/s at {} ({ratio:.2}×){why}",
                last.throughput_ops / 1e3,
                top.throughput_ops / 1e3,
                top.clients
            ),
        });
    }
    checks.extend(evidence::wasted_check(
        "Patronus",
        exp.rows.iter().filter(|r| r.mechanism == "Patronus"),
    ));
    if let (Some(p), Some(u)) = (exp.row("Patronus", max), exp.row("Unprot", max)) {
        ratios.push(Ratio {
            name: format!("protection overhead: Patronus p50 / Unprot p50 at {max} clients"),
            value: p.p50_us / u.p50_us.max(1e-9),
        });
    }
    exp.ratios = ratios;
    exp.checks = checks;
    exp.paper = vec![
        PaperRef {
            metric: "largest client count QP supports".into(),
            ours: Some(QP_MAX_CLIENTS as f64),
            paper: Some(32.0),
            unit: "clients".into(),
            source: "§7.1, Figure 5 caption".into(),
        },
        PaperRef {
            metric: "Patronus / RPC throughput, most clients".into(),
            ours: ratio_of(exp, "Patronus", "RPC", max),
            paper: None,
            unit: "×".into(),
            source: "§7.1, Figure 5 (figure only)".into(),
        },
        PaperRef {
            metric: "Patronus / MR throughput, most clients".into(),
            ours: ratio_of(exp, "Patronus", "MR", max),
            paper: None,
            unit: "×".into(),
            source: "§7.1, Figure 5 (figure only)".into(),
        },
    ];
    exp.notes = vec![
        format!("Each logical client picks a random 64 B object, obtains a permission, reads it {} times, and ends the permission; every logical client has its own connection, and all of them are multiplexed on {CLIENT_THREADS} client thread(s) (the memory node's thread has the other core). Permission operations are pipelined across logical clients (the paper's coroutines); every data access, the RPC mechanism's included, is synchronous.", logical::REUSE),
        "Latency is per access as the application sees it: the first access of a permission includes obtaining it.".into(),
        format!("Patronus runs every §5.4 technique and lets leases ({LEASE_US} µs) end permissions (no revoke RPC); MR registers and deregisters one region per permission on the memory node's thread; QP opens and closes the client QP's access flags (a real drain barrier on the soft NIC, not the ~100 µs firmware transition of a ConnectX-5); RPC copies every access on the memory node's thread."),
        format!("QP needs one QP per client and, as in the paper, is not run beyond {QP_MAX_CLIENTS} clients."),
        "MN CPU per op is the memory node's manager/server thread (busy time) plus its NIC engine threads. In-process, one-sided operations run the responder on the requester's thread, so they cost the node's CPU nothing by construction; over TCP the engine threads do that work.".into(),
    ];
    exp.figure = Figure {
        title: "Figure 5 analogue: random 64 B accesses, 3 per permission".into(),
        panels: vec![
            panel(exp, "(a) throughput", "throughput (Kops/s)", |r| {
                r.throughput_ops / 1e3
            }),
            panel(exp, "(b) median latency", "p50 latency (µs)", |r| r.p50_us),
        ],
    };
}

fn ratio_of(exp: &Experiment, a: &str, b: &str, n: u32) -> Option<f64> {
    Some(exp.row(a, n)?.throughput_ops / exp.row(b, n)?.throughput_ops.max(1e-9))
}

fn panel(exp: &Experiment, title: &str, y: &str, f: impl Fn(&Row) -> f64) -> Panel {
    Panel {
        title: title.into(),
        x_label: "clients".into(),
        y_label: y.into(),
        x_log: true,
        y_log: true,
        kind: PanelKind::Lines,
        series: MECHANISMS
            .iter()
            .map(|m| Series {
                name: m.to_string(),
                points: exp
                    .rows
                    .iter()
                    .filter(|r| r.mechanism == *m)
                    .map(|r| Point::xy(r.clients as f64, f(r)))
                    .collect(),
            })
            .collect(),
    }
}
