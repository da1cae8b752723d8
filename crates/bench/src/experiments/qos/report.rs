//! Rows, figure, ratios, checks and notes of the QoS experiment.

use super::{
    BATCH, HIGH_BACK, HIGH_CLIENTS, HIGH_JOINS, HIGH_LEAVES, HIGH_LOAD_OPS, HIGH_PAUSE, LOW_ALONE,
    LOW_CLIENTS, LOW_RATE_OPS, PAGE, PAUSING, PERIOD, QosMode, RELEASE_OPS, RELEASE_PERIODS, Run,
    SOLO,
};
use crate::harness::{Check, Experiment, Figure, Panel, PanelKind, Point, Ratio, Row, Series};
use std::time::Duration;

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn run_of(runs: &[Run], mode: QosMode) -> Option<&Run> {
    runs.iter().find(|r| r.mode == mode)
}

/// High priority's throughput with low priority running and all its clients in: the median
/// of the "high joins" and "high back" phases' medians, as a share of the same run's solo.
fn high_share(r: &Run) -> (f64, f64) {
    let with_low = (r.phase_ops_s(HIGH_JOINS).1 + r.phase_ops_s(HIGH_BACK).1) / 2.0;
    (with_low, ratio(with_low, r.phase_ops_s(SOLO).1))
}

pub(super) fn report(exp: &mut Experiment, runs: &[Run], window: Duration) {
    for r in runs {
        let solo = r.phase_ops_s(SOLO).1;
        for p in &r.phases {
            let (low, high) = r.phase_ops_s(p.name);
            let clients = if p.low { LOW_CLIENTS } else { 0 } + p.high;
            let after = r.policy_after(p.name);
            let throttled = after.iter().filter(|s| s.throttled).count() as u64;
            let mut row = Row::new(format!("{}: {}", r.mode.name(), p.name), clients as u32)
                .with("mode", r.mode.name())
                .with("phase", p.name)
                .with("low_ops_s", low)
                .with("high_ops_s", high)
                .with("high_share_of_solo", ratio(high, solo))
                .with("rounds_throttled_after", throttled)
                .with("rounds", r.rounds as u64);
            row.throughput_ops = low + high;
            exp.rows.push(row);
        }
        let mut row = Row::new(format!("{}: LITE's recipe", r.mode.name()), 0)
            .with("mode", r.mode.name())
            .with("aggregate_ops_s", r.aggregate_ops_s())
            .with("high_share_of_solo", high_share(r).1)
            .with("low_failed", r.low_failed)
            .with("high_failed", r.high_failed)
            .with("policy_periods", r.policy.periods)
            .with("policy_engaged", r.policy.engaged)
            .with("policy_lifted", r.policy.lifted)
            .with("policy_services_set", r.policy.services_set)
            .with("policy_services_failed", r.policy.services_failed);
        row.throughput_ops = r.aggregate_ops_s();
        exp.rows.push(row);
    }
    let (Some(none), Some(pri), Some(split)) = (
        run_of(runs, QosMode::NoQos),
        run_of(runs, QosMode::SwPri),
        run_of(runs, QosMode::Static),
    ) else {
        return;
    };
    let low = |r: &Run, phase: &str| r.phase_ops_s(phase).0;
    let (pri_high, pri_share) = high_share(pri);
    let (none_high, none_share) = high_share(none);
    let (split_high, split_share) = high_share(split);
    let aggregate = ratio(pri.aggregate_ops_s(), none.aggregate_ops_s());
    let split_aggregate = ratio(split.aggregate_ops_s(), none.aggregate_ops_s());
    let low_alone = ratio(low(pri, LOW_ALONE), low(none, LOW_ALONE));
    let low_left = ratio(low(pri, HIGH_LEAVES), low(none, HIGH_LEAVES));
    let split_alone = ratio(low(split, LOW_ALONE), low(pri, LOW_ALONE));
    exp.ratios = vec![
        Ratio {
            name: "SW-Pri: high priority with low running / solo".into(),
            value: pri_share,
        },
        Ratio {
            name: "SW-Pri / no-QoS aggregate (LITE's recipe)".into(),
            value: aggregate,
        },
        Ratio {
            name: "no QoS: high priority with low running / solo".into(),
            value: none_share,
        },
        Ratio {
            name: "static split: high priority with low running / solo".into(),
            value: split_share,
        },
        Ratio {
            name: "static split / no-QoS aggregate (LITE's recipe)".into(),
            value: split_aggregate,
        },
        Ratio {
            name: "SW-Pri / no-QoS low priority alone".into(),
            value: low_alone,
        },
        Ratio {
            name: "SW-Pri / no-QoS low priority after high leaves".into(),
            value: low_left,
        },
    ];
    let (before, during, left) = (
        pri.policy_after(LOW_ALONE),
        pri.policy_after(HIGH_JOINS),
        pri.policy_after(HIGH_LEAVES),
    );
    let count = |v: &[patronus_core::manager::PriorityStats],
                 f: &dyn Fn(&patronus_core::manager::PriorityStats) -> bool| {
        v.iter().filter(|s| f(s)).count()
    };
    let rounds = pri.rounds;
    let (engaged_early, throttled_busy, throttled_left) = (
        count(&before, &|s| s.engaged > 0),
        count(&during, &|s| s.throttled),
        count(&left, &|s| s.throttled || s.lifted == 0),
    );
    exp.checks = vec![
        Check {
            claim: "SW-Pri: the high-priority tenant keeps >= 90% of its solo throughput while \
                    the low-priority one runs"
                .into(),
            holds: pri_share >= 0.9,
            detail: format!(
                "{:.1} Kops/s with the low-priority clients running (all {HIGH_CLIENTS} \
                 high-priority clients: the mean of the joins and back phases' medians), \
                 {:.1} Kops/s solo in the same node: {pri_share:.2} (without QoS: {:.1} of \
                 {:.1}, {none_share:.2}; static split: {split_share:.2})",
                pri_high / 1e3,
                pri.phase_ops_s(SOLO).1 / 1e3,
                none_high / 1e3,
                none.phase_ops_s(SOLO).1 / 1e3,
            ),
        },
        Check {
            claim: "SW-Pri: the aggregate stays >= 0.9x the no-QoS aggregate".into(),
            holds: aggregate >= 0.9,
            detail: format!(
                "mean over every window of LITE's four phases: {:.1} Kops/s with SW-Pri, {:.1} \
                 without QoS: {aggregate:.2} (static split: {split_aggregate:.2})",
                pri.aggregate_ops_s() / 1e3,
                none.aggregate_ops_s() / 1e3
            ),
        },
        Check {
            claim: "SW-Pri throttles low priority only while high priority is busy (LITE's \
                    policies 1 and 2)"
                .into(),
            holds: rounds > 0
                && engaged_early == 0
                && throttled_busy == rounds
                && throttled_left == 0,
            detail: format!(
                "of {rounds} rounds: throttled before high priority came in {engaged_early}; \
                 throttled at the end of high joins {throttled_busy}; still throttled (or \
                 never lifted) at the end of high leaves {throttled_left}. Low priority alone: {:.1} \
                 Kops/s with SW-Pri, {:.1} without QoS ({low_alone:.2}); after high leaves: \
                 {:.1} and {:.1} ({low_left:.2}); while some high pause: {:.1} (high {:.1})",
                low(pri, LOW_ALONE) / 1e3,
                low(none, LOW_ALONE) / 1e3,
                low(pri, HIGH_LEAVES) / 1e3,
                low(none, HIGH_LEAVES) / 1e3,
                low(pri, HIGH_PAUSE) / 1e3,
                pri.phase_ops_s(HIGH_PAUSE).1 / 1e3,
            ),
        },
        Check {
            claim: "without QoS the high-priority tenant loses a large part of its solo \
                    throughput (LITE: about half)"
                .into(),
            holds: none_share < 0.9,
            detail: format!(
                "{:.1} Kops/s with the low-priority clients running, {:.1} solo: {none_share:.2}",
                none_high / 1e3,
                none.phase_ops_s(SOLO).1 / 1e3
            ),
        },
        Check {
            claim: "the static split (HW-Sep-like) wastes what an idle priority leaves: low \
                    priority alone stays limited (LITE: HW-Sep is worst in aggregate)"
                .into(),
            holds: split_alone < 0.5,
            detail: format!(
                "low priority alone: {:.1} Kops/s with the static split, {:.1} with SW-Pri \
                 ({split_alone:.2}); over LITE's recipe the static split's aggregate is \
                 {split_aggregate:.2}x no QoS's and SW-Pri's {aggregate:.2}x: when high priority \
                 runs, the two limit low priority alike (the same rate), and high priority \
                 alone runs faster than the two together on 2 cores, which can outweigh the \
                 low-alone phase ({split_high:.0} ops/s for high with low running)",
                low(split, LOW_ALONE) / 1e3,
                low(pri, LOW_ALONE) / 1e3,
            ),
        },
        Check {
            claim: "nothing failed".into(),
            holds: runs.iter().all(|r| r.low_failed + r.high_failed == 0),
            detail: runs
                .iter()
                .map(|r| {
                    format!(
                        "{}: {} low, {} high failed",
                        r.mode.name(),
                        r.low_failed,
                        r.high_failed
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        },
    ];
    exp.figure = figure(runs);
    exp.notes = vec![
        format!(
            "Method: LITE's Figure 16 recipe (§4.1) scaled to a 2-core VM. {LOW_CLIENTS} \
             low-priority and {HIGH_CLIENTS} high-priority clients (one thread each; one TCP \
             device per priority, one for the memory node), each doing {PAGE} B one-sided \
             WRITEs and READs on its own object in batches of {BATCH} (half each), as fast as \
             it can. Phases (LITE's): low alone; the high-priority clients join; {PAUSING} \
             of them pause; they come back; then (ours) the high-priority clients leave, and \
             last they run alone (their solo throughput, in the same node). Throughput is \
             sampled every {:.0} ms; a phase's throughput is the median of its windows but \
             the first.",
            window.as_secs_f64() * 1e3
        ),
        format!(
            "SW-Pri: every {} ms of the node's clock, the node reads the NIC's served counters \
             of the high-priority tenant's data QPs (QueuePair::served); at >= {HIGH_LOAD_OPS} \
             ops/s it sets each low-priority data QP to {LOW_RATE_OPS} ops/s, and lifts that \
             after {RELEASE_PERIODS} periods in a row below {RELEASE_OPS} ops/s. Static \
             split: the low-priority tenant's data QPs at {LOW_RATE_OPS} ops/s always \
             (tenant_rates), the same rate, so it differs from SW-Pri only when high \
             priority is absent or light. LITE's third policy (throttle on high-priority \
             round trips) is not implemented: the node does not see the clients' round trips.",
            PERIOD.as_millis()
        ),
        format!(
            "SW-Pri's policy engaged {} time(s) and lifted {} time(s) over {} periods, in {} \
             round(s); the modes' order alternates from round to round (forth, then back).",
            pri.policy.engaged, pri.policy.lifted, pri.policy.periods, pri.rounds
        ),
        "Always over TCP (the in-process soft NIC enforces no QP rates and counts nothing per \
         QP; a node configured with priorities refuses to start on it). On 2 cores the \
         clients, the devices' engines and the manager share the CPU: what throttling low \
         priority gives back to high priority is mostly CPU."
            .into(),
    ];
}

fn figure(runs: &[Run]) -> Figure {
    let panels = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let series = |name: &str, f: &dyn Fn(&super::Sample) -> f64| Series {
                name: name.into(),
                points: r
                    .samples
                    .iter()
                    .filter(|s| s.round == 0)
                    .map(|s| Point::xy(s.t, f(s) / 1e3))
                    .collect(),
            };
            let s = vec![
                series("low priority", &|s| s.low_ops_s),
                series("high priority", &|s| s.high_ops_s),
                series("total", &|s| s.low_ops_s + s.high_ops_s),
            ];
            Panel {
                title: format!("({}) {}", (b'a' + i as u8) as char, r.mode.name()),
                x_label: "time (s)".into(),
                y_label: "Kops/s".into(),
                x_log: false,
                y_log: false,
                kind: PanelKind::Lines,
                series: s,
            }
        })
        .collect();
    Figure {
        title: "QoS: throughput per priority over time (LITE Fig. 16 recipe; first round)".into(),
        panels,
    }
}
