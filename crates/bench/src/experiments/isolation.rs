//! What the protection users run costs: the memory node in each isolation mode
//! (`Isolation::{SharedPd, PdPerClient, Type2}`) on two workloads of the paper's figures,
//! measured in the same run with the same runners:
//!
//! - **fig6 + Expr**: Figure 6's permission acquisitions with every technique on and leases
//!   ending by expiry (the control path: binds, unbinds, handovers);
//! - **fig9 RO 4 KiB**: Figure 9's read-only RACE lookups over 4 KiB blocks at its largest
//!   client count (the data path, with an acquire per block read unless a right is cached).
//!
//! Each point runs several times, the modes in a rotating order; a row is the median run with
//! the lowest and highest. A mode differs from shared-pd only when every one of its runs is
//! above (or below) every run of shared-pd; overlapping spreads are ties, said as such.

use super::driver::{CLIENT_THREADS, Rig};
use super::fig6;
use super::fig9::RoTable;
use crate::harness::{
    BenchOpts, Change, Check, Experiment, Figure, Panel, PanelKind, PaperRef, Point, Ratio, Row,
    Series, Spread, isolation_name,
};
use anyhow::Result;
use patronus_core::manager::Isolation;
use std::time::Duration;

/// The modes, shared-pd (the baseline of every ratio) first.
const MODES: [Isolation; 3] = [
    Isolation::SharedPd,
    Isolation::PdPerClient,
    Isolation::Type2,
];
/// Figure 6's mix.
const FIG6: &str = "fig6 + Expr";
/// Figure 9's read-only workload.
const FIG9: &str = "fig9 RO 4 KiB";

struct Plan {
    /// Runs per mode and workload.
    rounds: usize,
    /// Figure 6: logical clients, permissions per run, time budget per run.
    fig6: (u32, u64, Duration),
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            rounds: 3,
            fig6: (32, 30_000, Duration::from_millis(600)),
        }
    } else {
        Plan {
            rounds: 5,
            fig6: (64, 300_000, Duration::from_secs(10)),
        }
    }
}

/// Runs the isolation-mode comparison on `opts.transport` (every mode, whatever
/// `opts.isolation` says).
#[allow(clippy::disallowed_methods)] // the experiment's wall time
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = std::time::Instant::now();
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("isolation", opts.transport_name(), opts.quick);
    println!(
        "Isolation modes: {FIG6} ({} clients) and {FIG9}, {} runs each, modes in rotating order",
        plan.fig6.0, plan.rounds
    );
    println!(
        "{:<14} {:<14} {:>4} {:>10} {:>12} {:>9} {:>10}",
        "workload", "mode", "run", "Kops/s", "mgr us/perm", "MW/perm", "connect us"
    );
    // (workload, mode index, run)
    let mut runs: Vec<(&str, usize, Row)> = Vec::new();
    let mut record = |workload: &'static str, m: usize, round: usize, row: Row| {
        // Figure 9's rows count no MW operations and time no connections.
        let (mw, connect) = match row.get_f64("connect_us_per_client") {
            Some(c) => (format!("{:.2}", mw_per_perm(&row)), format!("{c:.0}")),
            None => ("-".to_string(), "-".to_string()),
        };
        println!(
            "{:<14} {:<14} {:>4} {:>10.1} {:>12.3} {:>9} {:>10}",
            workload,
            isolation_name(MODES[m]),
            round + 1,
            row.throughput_ops / 1e3,
            mgr_per_perm(&row),
            mw,
            connect,
        );
        runs.push((workload, m, row));
    };
    for round in 0..plan.rounds {
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            let row = fig6::measure_expr(&rig, MODES[m], plan.fig6, 60 + round as u64)?;
            record(FIG6, m, round, row);
        }
    }
    let mut tables = MODES
        .iter()
        .map(|&mode| RoTable::start(&rig, mode, opts))
        .collect::<Result<Vec<_>>>()?;
    for round in 0..plan.rounds {
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            let what = format!(
                "isolation {FIG9} {} run {}",
                isolation_name(MODES[m]),
                round
            );
            let row = tables[m].measure(&what)?;
            record(FIG9, m, round, row);
        }
    }
    let clients9 = tables.first().map(RoTable::clients).unwrap_or(0);
    for t in tables {
        t.shutdown();
    }
    for workload in [FIG6, FIG9] {
        let of = |m: usize| -> Vec<&Row> {
            runs.iter()
                .filter(|(w, i, _)| *w == workload && *i == m)
                .map(|(_, _, r)| r)
                .collect()
        };
        let base = summary_of(&of(0));
        for (m, &mode) in MODES.iter().enumerate() {
            if let Some(row) = point_row(workload, mode, &of(m), base.as_ref()) {
                exp.rows.push(row);
            }
        }
    }
    summarize(&mut exp, &plan, clients9);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

/// Manager CPU per permission granted: per operation over the permissions an operation
/// acquired (one in Figure 6; a lookup acquires at most one).
fn mgr_per_perm(r: &Row) -> f64 {
    let per_op = r.get_f64("mn_manager_cpu_us_per_op").unwrap_or(f64::NAN);
    match r.get_f64("get_acquires_per_op") {
        Some(a) if a > 0.0 => per_op / a,
        Some(_) => f64::NAN,
        None => per_op,
    }
}

/// MW operations (binds and unbinds, a handover counting one bind) per permission.
fn mw_per_perm(r: &Row) -> f64 {
    r.get_f64("binds_per_perm").unwrap_or(f64::NAN) + r.get_f64("unbinds_per_perm").unwrap_or(0.0)
}

/// Throughput and manager CPU per permission of a point's runs.
struct PointSpread {
    tput: Spread,
    mgr: Spread,
}

fn summary_of(runs: &[&Row]) -> Option<PointSpread> {
    let tput: Vec<f64> = runs.iter().map(|r| r.throughput_ops / 1e3).collect();
    let mgr: Vec<f64> = runs.iter().map(|r| mgr_per_perm(r)).collect();
    Some(PointSpread {
        tput: Spread::of(&tput)?,
        mgr: Spread::of(&mgr)?,
    })
}

/// One row of the table: the median run (by throughput) of `mode` on `workload`, with the
/// spreads and the ratios to shared-pd's medians (`base`).
fn point_row(
    workload: &str,
    mode: Isolation,
    runs: &[&Row],
    base: Option<&PointSpread>,
) -> Option<Row> {
    let s = summary_of(runs)?;
    let median = runs
        .iter()
        .find(|r| r.throughput_ops / 1e3 == s.tput.median)?;
    let mut row = Row {
        throughput_ops: median.throughput_ops,
        p50_us: median.p50_us,
        p99_us: median.p99_us,
        mn_cpu_us_per_op: median.mn_cpu_us_per_op,
        ..Row::new(isolation_name(mode), median.clients)
    }
    .with("workload", workload)
    .with("runs", runs.len() as u64)
    .with("kops_min", s.tput.min)
    .with("kops_max", s.tput.max)
    .with("mgr_us_per_perm", s.mgr.median)
    .with("mgr_us_per_perm_min", s.mgr.min)
    .with("mgr_us_per_perm_max", s.mgr.max);
    if let Some(b) = base {
        row = row
            .with("kops_x_shared_pd", s.tput.median / b.tput.median)
            .with("mgr_x_shared_pd", s.mgr.median / b.mgr.median);
    }
    if workload == FIG6 {
        row = row
            .with("mw_ops_per_perm", mw_per_perm(median))
            .with(
                "handovers_per_perm",
                median.get_f64("handovers_per_perm").unwrap_or(0.0),
            )
            .with(
                "connect_us_per_client",
                median.get_f64("connect_us_per_client").unwrap_or(0.0),
            );
    } else {
        row = row
            .with(
                "acquires_per_lookup",
                median.get_f64("get_acquires_per_op").unwrap_or(0.0),
            )
            .with("failed_ops", median.get_f64("failed_ops").unwrap_or(0.0));
    }
    Some(row)
}

fn find<'a>(exp: &'a Experiment, workload: &str, mode: Isolation) -> Option<&'a Row> {
    exp.rows.iter().find(|r| {
        r.mechanism == isolation_name(mode)
            && r.extra.get("workload").and_then(|v| v.as_str()) == Some(workload)
    })
}

/// A row's spreads, read back from its columns.
fn spreads(r: &Row) -> PointSpread {
    let g = |k: &str| r.get_f64(k).unwrap_or(f64::NAN);
    PointSpread {
        tput: Spread {
            median: r.throughput_ops / 1e3,
            min: g("kops_min"),
            max: g("kops_max"),
        },
        mgr: Spread {
            median: g("mgr_us_per_perm"),
            min: g("mgr_us_per_perm_min"),
            max: g("mgr_us_per_perm_max"),
        },
    }
}

/// The checks of one mode against shared-pd on one workload: it costs no throughput and no
/// manager CPU per permission (each a verdict from the spreads; ties are ties).
fn mode_checks(workload: &str, mode: Isolation, m: &Row, base: &Row) -> Vec<Check> {
    let (name, s, b) = (isolation_name(mode), spreads(m), spreads(base));
    let tput = s.tput.against(&b.tput);
    let mgr = s.mgr.against(&b.mgr);
    vec![
        Check {
            claim: format!(
                "{name} costs no throughput against shared-pd on {workload} (not lower in every run)"
            ),
            holds: tput != Change::Down,
            detail: s.tput.versus(&b.tput, name, "shared-pd", "Kops/s"),
        },
        Check {
            claim: format!(
                "{name} costs the manager no more CPU per permission than shared-pd on {workload} (not higher in every run)"
            ),
            holds: mgr != Change::Up,
            detail: s.mgr.versus(&b.mgr, name, "shared-pd", "µs"),
        },
    ]
}

fn summarize(exp: &mut Experiment, plan: &Plan, clients9: u32) {
    let mut checks = Vec::new();
    let mut ratios = Vec::new();
    for workload in [FIG6, FIG9] {
        let Some(base) = find(exp, workload, Isolation::SharedPd) else {
            continue;
        };
        for &mode in &MODES[1..] {
            let Some(m) = find(exp, workload, mode) else {
                continue;
            };
            let name = isolation_name(mode);
            ratios.push(Ratio {
                name: format!("{name} / shared-pd throughput, {workload}"),
                value: m.get_f64("kops_x_shared_pd").unwrap_or(f64::NAN),
            });
            ratios.push(Ratio {
                name: format!("{name} / shared-pd manager CPU per permission, {workload}"),
                value: m.get_f64("mgr_x_shared_pd").unwrap_or(f64::NAN),
            });
            checks.extend(mode_checks(workload, mode, m, base));
        }
    }
    let handovers = |mode| {
        find(exp, FIG6, mode)
            .and_then(|r| r.get_f64("handovers_per_perm"))
            .unwrap_or(f64::NAN)
    };
    let (h_shared, h_pd, h_t2) = (
        handovers(Isolation::SharedPd),
        handovers(Isolation::PdPerClient),
        handovers(Isolation::Type2),
    );
    checks.push(Check {
        claim: format!(
            "type 2 hands no window over (a type-2 window must be invalidated before it is bound again) ({FIG6})"
        ),
        holds: h_t2 == 0.0,
        detail: format!(
            "handovers per permission (median run): shared-pd {h_shared:.3}, pd-per-client {h_pd:.3}, type2 {h_t2:.3}"
        ),
    });
    checks.push(exp.all_completed("failed_ops", "lookup"));
    exp.checks = checks;
    exp.ratios = ratios;
    exp.paper = MODES
        .iter()
        .filter_map(|&mode| {
            let r = find(exp, FIG6, mode)?;
            Some(PaperRef {
                metric: format!("{}: MW ops per + Expr permission", isolation_name(mode)),
                ours: r.get_f64("mw_ops_per_perm"),
                paper: Some(1.0),
                unit: "ops".into(),
                source: "§5.4, Table 4 (the paper's shared PD only)".into(),
            })
        })
        .collect();
    let (clients6, _, _) = plan.fig6;
    exp.notes = vec![
        format!("{FIG6}: Figure 6's runner, {clients6} logical clients acquiring read-write permissions over random 64 B objects with every technique on and leases ending by expiry, a fresh node per run. {FIG9}: Figure 9's runner, {clients9} logical clients of RACE hashing (Zipfian 0.99), read-only, 4 KiB values, one node and one loaded table per mode. {CLIENT_THREADS} client thread; the same seeds in every mode."),
        format!("Each point ran {} times, the modes in a rotating order; a row is the median run by throughput, with the lowest and highest (kops_min/max) and the manager CPU per permission granted (mgr_us_per_perm: manager-thread CPU over the permissions the operations acquired; its own median, lowest and highest). kops_x_shared_pd and mgr_x_shared_pd are the medians' ratios to shared-pd. A check says a mode differs only when every run of it is above (or below) every run of shared-pd.", plan.rounds),
        "shared-pd (the paper's): one PD for every client, type-1 windows; a window's rkey works from any client's QP and the random key byte is the only barrier against guessing. pd-per-client (what `NodeConfig`, the embedded cluster and `patronus serve` default to): each client has its own PD, its own registration of the pool (MW_BIND only), its own pre-allocated windows and a bind QP, paid at connection time (connect_us_per_client); handover and delayed unbind stay within a client, so fewer releases meet a grant that can reuse their window. type2: a PD per client and type-2 windows bound by BIND_MW work requests on the client's current data QP; handover is off (a type-2 window must be invalidated before it is bound again) and a QP switch rebinds every live permission (not exercised here: no fault is injected).".into(),
        "The paper measured only the shared PD; the MW ops per permission beside Table 4 show how far each mode is from its 1 (+ Expr).".into(),
    ];
    exp.figure = figure(exp);
}

fn figure(exp: &Experiment) -> Figure {
    let bars = |workload: &str, f: &dyn Fn(&Row) -> f64| -> Vec<Point> {
        MODES
            .iter()
            .filter_map(|&m| find(exp, workload, m).map(|r| Point::bar(isolation_name(m), f(r))))
            .collect()
    };
    let panel = |title: &str, y_label: &str, series: Vec<Series>| Panel {
        title: title.into(),
        x_label: "isolation mode".into(),
        y_label: y_label.into(),
        x_log: false,
        y_log: false,
        kind: PanelKind::Bars,
        series,
    };
    let kops = |r: &Row| r.throughput_ops / 1e3;
    let mgr = |r: &Row| r.get_f64("mgr_us_per_perm").unwrap_or(0.0);
    Figure {
        title: "Isolation modes: what the protection users run costs".into(),
        panels: vec![
            panel(
                &format!("(a) {FIG6}"),
                "Kops/s",
                vec![Series {
                    name: "permissions".into(),
                    points: bars(FIG6, &kops),
                }],
            ),
            panel(
                &format!("(b) {FIG9}"),
                "Kops/s",
                vec![Series {
                    name: "lookups".into(),
                    points: bars(FIG9, &kops),
                }],
            ),
            panel(
                "(c) manager CPU per permission",
                "µs",
                vec![
                    Series {
                        name: FIG6.into(),
                        points: bars(FIG6, &mgr),
                    },
                    Series {
                        name: FIG9.into(),
                        points: bars(FIG9, &mgr),
                    },
                ],
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: Isolation, kops: (f64, f64, f64), mgr: (f64, f64, f64)) -> Row {
        Row {
            throughput_ops: kops.0 * 1e3,
            ..Row::new(isolation_name(mode), 32)
        }
        .with("workload", FIG6)
        .with("kops_min", kops.1)
        .with("kops_max", kops.2)
        .with("mgr_us_per_perm", mgr.0)
        .with("mgr_us_per_perm_min", mgr.1)
        .with("mgr_us_per_perm_max", mgr.2)
    }

    #[test]
    fn verdicts_follow_the_spreads() {
        let base = row(Isolation::SharedPd, (100.0, 95.0, 105.0), (2.0, 1.9, 2.1));
        // Overlapping: a tie, and the claims hold.
        let tie = row(
            Isolation::PdPerClient,
            (98.0, 90.0, 101.0),
            (2.05, 2.0, 2.2),
        );
        let c = mode_checks(FIG6, Isolation::PdPerClient, &tie, &base);
        assert!(c.iter().all(|c| c.holds));
        assert!(c.iter().all(|c| c.detail.starts_with("a tie")));
        // Lower in every run, with more manager CPU in every run: both fail, saying so.
        let worse = row(Isolation::Type2, (70.0, 65.0, 80.0), (3.0, 2.8, 3.3));
        let c = mode_checks(FIG6, Isolation::Type2, &worse, &base);
        assert!(c.iter().all(|c| !c.holds));
        assert!(
            c[0].detail.starts_with("30 % lower in every run"),
            "{}",
            c[0].detail
        );
        assert!(
            c[1].detail.starts_with("50 % higher in every run"),
            "{}",
            c[1].detail
        );
        // Higher throughput in every run is no cost.
        let better = row(Isolation::Type2, (120.0, 110.0, 130.0), (1.0, 0.9, 1.1));
        let c = mode_checks(FIG6, Isolation::Type2, &better, &base);
        assert!(c.iter().all(|c| c.holds));
        assert!(c[0].detail.starts_with("20 % higher in every run"));
    }
}
