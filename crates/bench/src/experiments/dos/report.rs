//! Rows, figure, ratios, checks and notes of the denial-of-service experiment.

use super::{Abuse, Outcome, RPC_TIMEOUT, Window};
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Panel, PanelKind, Point, Ratio, Row, Series,
};
use std::time::Duration;

/// `w`'s throughput as a fraction of `base`'s.
pub(super) fn share(w: &Window, base: &Window) -> f64 {
    let b = base.rounds_per_s();
    if b > 0.0 { w.rounds_per_s() / b } else { 0.0 }
}

fn errors(w: &Window) -> String {
    w.errors
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn report(
    exp: &mut Experiment,
    outcomes: &[Outcome],
    window: Duration,
    opts: &BenchOpts,
) {
    for o in outcomes {
        exp.rows.push(row(o));
    }
    let find = |a: Abuse| outcomes.iter().find(|o| o.abuse == a);
    exp.ratios = outcomes
        .iter()
        .map(|o| Ratio {
            name: format!("{}: honest during / before", o.abuse.name()),
            value: share(&o.during, &o.before),
        })
        .collect();
    // The flood rows first: the summary shows the first three ratios.
    exp.ratios
        .sort_by_key(|r| !(r.name.starts_with("flood") || r.name.starts_with("twin")));
    exp.figure = figure(outcomes);
    if let (Some(twin), Some(credits), Some(shared), Some(hoard), Some(faults), Some(storm)) = (
        find(Abuse::Twin),
        find(Abuse::FloodCredits),
        find(Abuse::FloodShared),
        find(Abuse::Hoard),
        find(Abuse::Faults),
        find(Abuse::Storm),
    ) {
        exp.checks = checks(outcomes, twin, credits, shared, hoard, faults, storm);
    }
    exp.notes = notes(window, opts);
}

fn row(o: &Outcome) -> Row {
    let mut r = Row::new(o.abuse.name(), 2);
    r.throughput_ops = o.during.rounds_per_s();
    r.p50_us = o.during.latency.p50_us();
    r.p99_us = o.during.latency.p99_us();
    r.mn_cpu_us_per_op = if o.during.rounds > 0 {
        o.node.cpu_during.as_secs_f64() * 1e6 / o.during.rounds as f64
    } else {
        0.0
    };
    let mut r = r
        .with("before_ops_s", o.before.rounds_per_s())
        .with("during_ops_s", o.during.rounds_per_s())
        .with("after_ops_s", o.after.rounds_per_s())
        .with("share_during", share(&o.during, &o.before))
        .with("share_after", share(&o.after, &o.before))
        .with("before_p99_us", o.before.latency.p99_us())
        .with("after_p99_us", o.after.latency.p99_us())
        .with("honest_failed_before", o.before.failed())
        .with("honest_failed_during", o.during.failed())
        .with("honest_failed_after", o.after.failed())
        .with("honest_errors_during", errors(&o.during))
        .with("honest_errors_after", errors(&o.after))
        .with("cores_before", o.before.cores)
        .with("cores_during", o.during.cores)
        .with("cores_after", o.after.cores)
        .with("window_s", o.during.secs)
        .with("abuser_unit", o.tally.unit)
        .with("abuser_done", o.tally.done)
        .with("abuser_refused", o.tally.refused)
        .with("abuser_failed", o.tally.failures())
        .with("mn_cpu_during_ms", o.node.cpu_during.as_secs_f64() * 1e3)
        .with("node_sessions_closed", o.node.sessions_closed)
        .with("node_sessions_idle", o.node.sessions_idle)
        .with("node_sessions_no_hello", o.node.sessions_no_hello)
        .with("node_data_reconnects", o.node.data_reconnects)
        .with("node_reconnects_refused", o.node.reconnects_refused)
        .with("held_sessions_start", o.node.held_start.sessions as u64)
        .with("held_sessions_end", o.node.held_end.sessions as u64)
        .with("held_data_qps_start", o.node.held_start.data_qps as u64)
        .with("held_data_qps_end", o.node.held_end.data_qps as u64);
    for (k, v) in &o.tally.extra {
        r = r.with(&format!("abuser_{k}"), *v);
    }
    for (k, v) in &o.tally.failed {
        r = r.with(&format!("abuser_failed_{}", k.replace(' ', "_")), *v);
    }
    r
}

fn figure(outcomes: &[Outcome]) -> Figure {
    let bars = |f: &dyn Fn(&Outcome) -> f64| -> Vec<Point> {
        outcomes
            .iter()
            .map(|o| Point::bar(o.abuse.name(), f(o)))
            .collect()
    };
    let panel = |title: &str, y_label: &str, series: Vec<Series>| Panel {
        title: title.into(),
        x_label: "abuse".into(),
        y_label: y_label.into(),
        x_log: false,
        y_log: false,
        kind: PanelKind::Bars,
        series,
    };
    let series = |name: &str, f: &dyn Fn(&Outcome) -> f64| Series {
        name: name.into(),
        points: bars(f),
    };
    Figure {
        title: "Denial of service: the honest client's throughput around each abuse".into(),
        panels: vec![
            panel(
                "(a) honest rounds per second",
                "Krounds/s",
                vec![
                    series("before", &|o| o.before.rounds_per_s() / 1e3),
                    series("during", &|o| o.during.rounds_per_s() / 1e3),
                    series("after", &|o| o.after.rounds_per_s() / 1e3),
                ],
            ),
            panel(
                "(b) share of its throughput before",
                "fraction",
                vec![
                    series("during / before", &|o| share(&o.during, &o.before)),
                    series("after / before", &|o| share(&o.after, &o.before)),
                ],
            ),
        ],
    }
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

#[allow(clippy::too_many_arguments)]
fn checks(
    all: &[Outcome],
    twin: &Outcome,
    credits: &Outcome,
    shared: &Outcome,
    hoard: &Outcome,
    faults: &Outcome,
    storm: &Outcome,
) -> Vec<Check> {
    let sh = |o: &Outcome| share(&o.during, &o.before);
    let failed = |o: &Outcome| o.during.failed();
    let mut checks = Vec::new();
    checks.push(Check {
        claim: "with flow control, a control-path flood leaves the honest client ≥ 50 % of its \
                throughput and no failed round"
            .into(),
        holds: sh(credits) >= 0.5 && failed(credits) == 0,
        detail: format!(
            "{} during the flood ({} failed rounds; the flooder posted {} requests over {} \
             connections); the CPU-only twin leaves {}",
            pct(sh(credits)),
            failed(credits),
            credits.tally.done,
            extra(credits, "connections"),
            pct(sh(twin)),
        ),
    });
    checks.push(Check {
        claim: "credits are what protects the honest client: with the paper's one shared \
                receive queue the same flood starves it"
            .into(),
        holds: sh(shared) < 0.5 * sh(credits) || failed(shared) > failed(credits),
        detail: format!(
            "shared receive queue: {} of its throughput, {} failed rounds ({}); credits: {}, \
             {} failed (RPC timeout {} ms)",
            pct(sh(shared)),
            failed(shared),
            errors(&shared.during),
            pct(sh(credits)),
            failed(credits),
            RPC_TIMEOUT.as_millis()
        ),
    });
    checks.push(Check {
        claim: "a hoarding tenant is stopped by its quota and the honest tenant keeps its \
                throughput (within 80 % of the twin's share)"
            .into(),
        holds: hoard.tally.refused > 0 && failed(hoard) == 0 && sh(hoard) >= 0.8 * sh(twin),
        detail: format!(
            "the hog holds {} MiB and {} permissions after {} refusals; honest share {} \
             ({} failed rounds) vs the twin's {}",
            extra(hoard, "bytes") >> 20,
            extra(hoard, "permissions"),
            hoard.tally.refused,
            pct(sh(hoard)),
            failed(hoard),
            pct(sh(twin))
        ),
    });
    checks.push(Check {
        claim: "a client that keeps faulting is throttled by its tenant's fault budget".into(),
        holds: faults.node.reconnects_refused > 0 && faults.tally.refused > 0,
        detail: format!(
            "{} faults, then {} writes refused (the node refused {} data reconnections and \
             took {}); honest share {} with {} failed rounds",
            faults.tally.done,
            faults.tally.refused,
            faults.node.reconnects_refused,
            faults.node.data_reconnects,
            pct(sh(faults)),
            failed(faults)
        ),
    });
    checks.push(Check {
        claim: "a type-2 reconnect storm leaves the honest client served (no failed round)".into(),
        holds: failed(storm) == 0 && storm.during.rounds > 0 && storm.tally.done > 0,
        detail: format!(
            "{} faults, {} data reconnections, {} refused; honest share {} with {} failed \
             rounds (the twin's share {})",
            storm.tally.done,
            storm.node.data_reconnects,
            storm.node.reconnects_refused,
            pct(sh(storm)),
            failed(storm),
            pct(sh(twin))
        ),
    });
    let worst_after = all
        .iter()
        .min_by(|a, b| share(&a.after, &a.before).total_cmp(&share(&b.after, &b.before)));
    if let Some(w) = worst_after {
        checks.push(Check {
            claim: "after every abuse the honest client is back to ≥ 80 % of its throughput".into(),
            holds: share(&w.after, &w.before) >= 0.8,
            detail: format!(
                "lowest after/before: {} ({}); failed rounds after: {}",
                pct(share(&w.after, &w.before)),
                w.abuse.name(),
                all.iter().map(|o| o.after.failed()).sum::<u64>()
            ),
        });
    }
    let leaks: Vec<String> = all
        .iter()
        .filter(|o| {
            o.node.held_end.sessions != o.node.held_start.sessions
                || o.node.held_end.data_qps != o.node.held_start.data_qps
        })
        .map(|o| {
            format!(
                "{}: sessions {} → {}, data QPs {} → {}",
                o.abuse.name(),
                o.node.held_start.sessions,
                o.node.held_end.sessions,
                o.node.held_start.data_qps,
                o.node.held_end.data_qps
            )
        })
        .collect();
    checks.push(Check {
        claim: "the abuser's sessions and data QPs are reclaimed by the end of the window after"
            .into(),
        holds: leaks.is_empty(),
        detail: if leaks.is_empty() {
            "sessions and data QPs held by the node back to their counts before the abuse, \
             for every abuse"
                .into()
        } else {
            format!("still held: {}", leaks.join("; "))
        },
    });
    checks
}

fn extra(o: &Outcome, key: &str) -> u64 {
    o.tally
        .extra
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .unwrap_or(0)
}

fn notes(window: Duration, opts: &BenchOpts) -> Vec<String> {
    let mut notes = vec![
        format!(
            "One honest round: allocate 128 B exclusive, write 16 B, read them back, free. \
             Windows of {:.1} s before, during and after each abuse, each abuse in a fresh \
             cluster; the abuser runs on its own thread and device and is stopped and joined \
             before the window after. Every client's RPC timeout is {} ms, so a starved \
             round fails (and is counted by its error) inside a window.",
            window.as_secs_f64(),
            RPC_TIMEOUT.as_millis()
        ),
        "The honest client, the abuser, the manager thread (and over TCP the NIC engines) \
         share 2 cores, so any busy abuser costs the honest client CPU. The twin row — a \
         second client doing the honest rounds — measures that cost alone: compare an abuse's \
         share with the twin's, not with 1."
            .into(),
        "MN CPU/op is the manager's (and over TCP the engines') CPU during the abuse divided by \
         the honest rounds in that window: it includes the work the abuser caused."
            .into(),
        "Isolation: the paper's shared PD with type-1 windows, except the storm, which needs \
         type-2 windows (its fault budget raised to 10⁶ so nothing throttles it). Hoard and \
         faults run with two tenants configured (abuser and honest), each with the default \
         equal share and the default fault budget (1024 at once, 100 a second)."
            .into(),
        "The paper has no denial-of-service evaluation; there are no paper numbers to compare."
            .into(),
    ];
    if opts.transport == patronus_core::cluster::Transport::Tcp {
        notes.push(
            "Over TCP each of the three devices has an engine thread: five busy threads on 2 \
             cores."
                .into(),
        );
    }
    notes
}
