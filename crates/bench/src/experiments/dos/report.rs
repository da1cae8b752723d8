//! Rows, figure, ratios, checks and notes of the denial-of-service experiment.

use super::{Abuse, Outcome, RPC_TIMEOUT, Window, flooder};
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Panel, PanelKind, Point, Ratio, Row, Series,
};
use patronus_core::cluster::Link;
use patronus_core::manager::{ClassCounters, NodeLimits};
use std::time::Duration;

/// `w`'s throughput as a fraction of `base`'s.
/// Mean time a class's served requests waited in the manager's fair queue, µs.
fn mean_wait_us(c: &ClassCounters) -> f64 {
    c.queue_delay_us as f64 / c.served.max(1) as f64
}

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
    exp.ratios = outcomes
        .iter()
        .map(|o| Ratio {
            name: format!("{}: honest during / before", o.abuse.name()),
            value: share(&o.during, &o.before),
        })
        .collect();
    // The summary shows the first three: the floods and the CPU-only baseline.
    let rank = |name: &str| match name {
        n if n.starts_with("flood") => 0,
        n if n.starts_with("spin") => 1,
        _ => 2,
    };
    exp.ratios.sort_by_key(|r| rank(&r.name));
    exp.figure = figure(outcomes);
    exp.checks = checks(outcomes, opts.transport);
    exp.notes = super::notes::notes(outcomes, window, opts);
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
        .with("honest_cores_before", o.before.honest_cores)
        .with("honest_cores_during", o.during.honest_cores)
        .with("honest_cores_after", o.after.honest_cores)
        .with("node_cores_before", o.before.node_cores)
        .with("node_cores_during", o.during.node_cores)
        .with("node_cores_after", o.after.node_cores)
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

/// The claims, each against the baselines measured in the same run: the spinner (what a
/// compute-bound neighbour costs, nothing else) and the twin (a fair share).
fn checks(all: &[Outcome], transport: Link) -> Vec<Check> {
    let get = |a: Abuse| all.iter().find(|o| o.abuse == a);
    let (
        Some(spin),
        Some(twin),
        Some(churn),
        Some(credits),
        Some(shared),
        Some(hoard),
        Some(faults),
        Some(storm),
    ) = (
        get(Abuse::Spin),
        get(Abuse::Twin),
        get(Abuse::Churn),
        get(Abuse::FloodCredits),
        get(Abuse::FloodShared),
        get(Abuse::Hoard),
        get(Abuse::Faults),
        get(Abuse::Storm),
    )
    else {
        return Vec::new();
    };
    let sh = |o: &Outcome| share(&o.during, &o.before);
    let failed = |o: &Outcome| o.during.failed();
    let per_s = |o: &Outcome, n: u64| n as f64 / o.during.secs.max(1e-9);
    let baselines = format!(
        "the spinner leaves {}, the twin {}",
        pct(sh(spin)),
        pct(sh(twin))
    );
    let no_worse_than_cpu = |o: &Outcome| failed(o) == 0 && sh(o) >= sh(spin);
    let mut checks = Vec::new();
    checks.push(Check {
        claim: "connection churn fails no honest round and costs the honest client no more \
                than a compute-bound neighbour (its share ≥ the spinner's)"
            .into(),
        holds: no_worse_than_cpu(churn),
        detail: format!(
            "{} sessions opened, used and closed ({:.0}/s; the node ended {}); honest share \
             {} with {} failed rounds; {baselines}",
            churn.tally.done,
            per_s(churn, churn.tally.done),
            churn.node.sessions_closed,
            pct(sh(churn)),
            failed(churn),
        ),
    });
    let flood_why = if no_worse_than_cpu(credits) {
        String::new()
    } else {
        format!(
            ". Why (a perf profile taken when this experiment was written, not of this run; \
             both transports): the manager thread spent most of its samples \
             (about 70 % in-process, over half over TCP) in its CQ polls' QpInner::progress, \
             and about 4 % handling requests (ManagerCore::step). The soft NIC runs QP timers \
             in CQ polls, and every node QP with a reply outstanding is checked on every poll: \
             the flooder never posts receives, so the replies on its connections wait out \
             receiver-not-ready retries (on an RNIC that would be the NIC's work). The \
             credits also admit {} requests per connection: the flooder's {} connections have \
             that many each in flight against the honest client's one",
            NodeLimits::default().control_credits,
            flooder::CONNECTIONS
        )
    };
    checks.push(Check {
        claim: "with flow control, a control-path flood fails no honest round and costs the \
                honest client no more than a compute-bound neighbour (its share ≥ the spinner's)"
            .into(),
        holds: no_worse_than_cpu(credits),
        detail: format!(
            "the flooder posted {} requests ({:.0}/s) over {} connections; honest share {} with \
             {} failed rounds; {baselines}{flood_why}",
            credits.tally.done,
            per_s(credits, credits.tally.done),
            extra(credits, "connections"),
            pct(sh(credits)),
            failed(credits),
        ),
    });
    checks.push(Check {
        claim: "credits are what protects the honest client: with the paper's one shared \
                receive queue the same flood leaves it less than half the share it keeps with \
                credits"
            .into(),
        holds: sh(shared) < 0.5 * sh(credits),
        detail: format!(
            "shared receive queue: {} of its throughput, {} failed rounds{}; credits: {}, {} \
             failed; the spinner leaves {} (RPC timeout {} ms)",
            pct(sh(shared)),
            failed(shared),
            match errors(&shared.during) {
                e if e.is_empty() => String::new(),
                e => format!(" ({e})"),
            },
            pct(sh(credits)),
            failed(credits),
            pct(sh(spin)),
            RPC_TIMEOUT.as_millis()
        ),
    });
    if let (Some(tenant), Some(no_hello)) = (get(Abuse::FloodTenant), get(Abuse::FloodNoHello)) {
        let (h, a) = (&tenant.node.honest_share, &tenant.node.abuser_share);
        checks.push(Check {
            claim: "a control-path flood from another tenant fails no honest round and costs \
                    the honest tenant no more than a compute-bound neighbour (its share ≥ the \
                    spinner's), its requests waiting in the manager's fair queue no longer on \
                    average than the flooder's"
                .into(),
            holds: no_worse_than_cpu(tenant) && mean_wait_us(h) <= mean_wait_us(a),
            detail: format!(
                "the flooder posted {} requests ({:.0}/s) over {} connections; honest share \
                 {} with {} failed rounds; {baselines}. The fair queue during the flood: the \
                 honest tenant {} requests ({} cost units, mean wait {:.1} µs), the flooder's \
                 {} ({} units, mean wait {:.1} µs, {} dropped over its credits)",
                tenant.tally.done,
                per_s(tenant, tenant.tally.done),
                extra(tenant, "connections"),
                pct(sh(tenant)),
                failed(tenant),
                h.served,
                h.cost_units,
                mean_wait_us(h),
                a.served,
                a.cost_units,
                mean_wait_us(a),
                a.refused,
            ),
        });
        checks.push(Check {
            claim: "connections that never say Hello, flooding the control path, fail no \
                    honest round and cost the honest client no more than a compute-bound \
                    neighbour (its share ≥ the spinner's)"
                .into(),
            holds: no_worse_than_cpu(no_hello),
            detail: format!(
                "they posted {} requests ({:.0}/s) over {} connections ({} broke); honest \
                 share {} with {} failed rounds; {baselines}",
                no_hello.tally.done,
                per_s(no_hello, no_hello.tally.done),
                extra(no_hello, "connections"),
                extra(no_hello, "broken"),
                pct(sh(no_hello)),
                failed(no_hello),
            ),
        });
    }
    if let Some(within) = get(Abuse::FloodWithinCredits) {
        let (h, a) = (&within.node.honest_share, &within.node.abuser_share);
        checks.push(Check {
            claim: "a tenant keeping its credits full of requests that bind windows (within \
                    every rule) fails no honest round, the honest tenant's requests wait in \
                    the manager's fair queue no longer on average than the flooder's, and it \
                    costs the honest tenant no more than a compute-bound neighbour (its share \
                    ≥ the spinner's)"
                .into(),
            holds: no_worse_than_cpu(within) && mean_wait_us(h) <= mean_wait_us(a),
            detail: format!(
                "the flooder was answered {} times ({:.0}/s) on {} connections; honest share \
                 {} with {} failed rounds; {baselines}. The fair queue during the flood: the \
                 honest tenant {} requests ({} cost units, mean wait {:.1} µs), the \
                 flooder's {} ({} units, mean wait {:.1} µs); the node used {:.2} cores \
                 (before: {:.2})",
                within.tally.done,
                per_s(within, within.tally.done),
                extra(within, "connections"),
                pct(sh(within)),
                failed(within),
                h.served,
                h.cost_units,
                mean_wait_us(h),
                a.served,
                a.cost_units,
                mean_wait_us(a),
                within.during.node_cores,
                within.before.node_cores,
            ),
        });
    }
    let quotas_reached =
        extra(hoard, "memory_refused") > 0 && extra(hoard, "permissions_refused") > 0;
    let fair = sh(hoard) >= 0.8 * sh(twin);
    // Control RPCs a second: the honest client makes two a round.
    let honest_rpcs = |o: &Outcome| 2.0 * o.during.rounds_per_s();
    checks.push(Check {
        claim: "a hoarding tenant is stopped by its quotas and the honest tenant keeps ≥ 80 % \
                of a fair share (the twin's)"
            .into(),
        holds: quotas_reached && failed(hoard) == 0 && fair,
        detail: format!(
            "the hog holds {} KiB in {} objects and {} permissions, refused {} times for \
             memory and {} for permissions; honest share {} with {} failed rounds; \
             {baselines}. Control RPCs a second during the abuse: the hog {:.1} K against the \
             honest client's {:.1} K; the twin {:.1} K against the honest client's {:.1} K{}{}",
            extra(hoard, "bytes") >> 10,
            extra(hoard, "objects"),
            extra(hoard, "permissions"),
            extra(hoard, "memory_refused"),
            extra(hoard, "permissions_refused"),
            pct(sh(hoard)),
            failed(hoard),
            per_s(hoard, extra(hoard, "rpcs")) / 1e3,
            honest_rpcs(hoard) / 1e3,
            per_s(twin, extra(twin, "rpcs")) / 1e3,
            honest_rpcs(twin) / 1e3,
            if quotas_reached {
                ""
            } else {
                ". The hog did not reach both quotas within the window: this run did not \
                 test them"
            },
            if fair || !quotas_reached {
                ""
            } else {
                ". A refused request is cheap to repeat, and the hog repeats it at once: the \
                 quotas bound what it holds, not how often it asks, and the manager shares its \
                 time by request, not by client (from these counts; not profiled)"
            }
        ),
    });
    checks.push(Check {
        claim: "a client that keeps faulting is throttled by its tenant's fault budget, and no \
                honest round fails"
            .into(),
        holds: faults.node.reconnects_refused > 0
            && faults.tally.refused > 0
            && failed(faults) == 0,
        detail: format!(
            "{} faults, then {} writes refused (the node counted {} reconnections and refused \
             {}); honest share {} with {} failed rounds; {baselines}{}",
            faults.tally.done,
            faults.tally.refused,
            faults.node.data_reconnects,
            faults.node.reconnects_refused,
            pct(sh(faults)),
            failed(faults),
            match transport {
                _ if faults.tally.refused == 0 => "",
                Link::InProc => {
                    ". The throttled faulter retries at once, in a loop: in-process the refusal \
                     runs the node's accept policy on the faulter's own thread (a perf profile \
                     taken when this experiment was written, not of this run, had \
                     InProcTransport::connect, Policy::create_qp and FaultBudget::admit among \
                     its samples), so it can take as much CPU as the spinner"
                }
                Link::Tcp => {
                    ". The throttled faulter retries at once, in a loop; over TCP each refused \
                     reconnection is a new TCP connection to the node's engine, so it retries \
                     orders of magnitude less often than in-process"
                }
            }
        ),
    });
    let storm_why = if no_worse_than_cpu(storm) {
        String::new()
    } else {
        ". Why (a perf profile taken in-process when this experiment was written, not of \
         this run): the reconnections themselves (accepting the QP, resetting the old one, \
         invalidating the windows bound to it) were under 1 % of the manager's samples; the storm costs the honest client through its RPCs — after each switch the \
         client library tells the manager its new QP and has each live permission rebound \
         (UseQp, then a Rebind per permission), and the manager serves requests, not clients"
            .to_string()
    };
    checks.push(Check {
        claim: "a type-2 reconnect storm (every fault a reconnection and a rebind; nothing \
                throttles it) fails no honest round and costs the honest client no more than a \
                compute-bound neighbour"
            .into(),
        holds: no_worse_than_cpu(storm) && storm.tally.done > 0,
        detail: format!(
            "{} faults ({:.0}/s), {} data reconnections, {} refused, {} RPCs ({:.1} a fault); \
             honest share {} with {} failed rounds; {baselines}{storm_why}",
            storm.tally.done,
            per_s(storm, storm.tally.done),
            storm.node.data_reconnects,
            storm.node.reconnects_refused,
            extra(storm, "rpcs"),
            extra(storm, "rpcs") as f64 / storm.tally.done.max(1) as f64,
            pct(sh(storm)),
            failed(storm),
        ),
    });
    let after = |o: &Outcome| share(&o.after, &o.before);
    // The spinner leaves nothing at the node: its after/before is the machine's noise.
    let abuses = all.iter().filter(|o| o.abuse != Abuse::Spin);
    if let Some(w) = abuses.min_by(|a, b| after(a).total_cmp(&after(b))) {
        let noisy = (after(spin) - 1.0).abs() > 0.2;
        // The honest client's rate alone, in the windows before each abuse of this run.
        let alone = all.iter().map(|o| o.before.rounds_per_s() / 1e3);
        let (lo, hi) = alone.fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(r), hi.max(r))
        });
        checks.push(Check {
            claim: "after every abuse the honest client is back to ≥ 80 % of its throughput".into(),
            holds: after(w) >= 0.8,
            detail: format!(
                "lowest after/before: {} ({}); failed rounds after: {}; the spinner, which \
                 leaves nothing at the node, shows the noise of these windows: after/before \
                 {}{}",
                pct(after(w)),
                w.abuse.name(),
                all.iter().map(|o| o.after.failed()).sum::<u64>(),
                pct(after(spin)),
                match (after(w) >= 0.8, noisy) {
                    (true, _) => String::new(),
                    (false, true) => format!(
                        ". The honest client's rate alone changed within this run (between \
                         {lo:.1} and {hi:.1} K rounds/s in the windows before the abuses; the \
                         cause is not established), so this run cannot tell"
                    ),
                    (false, false) => ". Not profiled: why the honest client was slower after \
                                       this abuse is not explained"
                        .to_string(),
                }
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
            "for every abuse, the sessions and data QPs the node holds are back to their \
             counts before it"
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

#[cfg(test)]
mod tests {
    use super::super::{NodeDelta, Window};
    use super::*;
    use crate::experiments::dos::abusers::Tally;

    fn window(rounds: u64, failed: u64) -> Window {
        let mut w = Window {
            rounds,
            secs: 1.0,
            ..Window::default()
        };
        if failed > 0 {
            w.errors.insert("rpc timeout", failed);
        }
        w
    }

    /// Every abuse at `during` rounds (of 100 before and after), the shared-RQ flood at
    /// `shared`.
    fn outcomes(during: u64, shared: u64) -> Vec<Outcome> {
        Abuse::ALL
            .iter()
            .map(|&abuse| Outcome {
                abuse,
                before: window(100, 0),
                during: match abuse {
                    Abuse::Spin => window(10, 0),
                    Abuse::Twin => window(50, 0),
                    Abuse::FloodShared => window(shared, 3),
                    _ => window(during, 0),
                },
                after: window(100, 0),
                tally: Tally {
                    done: 1,
                    refused: 1,
                    extra: vec![("memory_refused", 1), ("permissions_refused", 1)],
                    ..Tally::new("things")
                },
                node: NodeDelta {
                    reconnects_refused: 1,
                    ..NodeDelta::default()
                },
            })
            .collect()
    }

    fn run(outcomes: &[Outcome]) -> Experiment {
        let opts = BenchOpts {
            quick: true,
            transport: Link::InProc,
            out: std::env::temp_dir(),
            isolation: patronus_core::manager::Isolation::SharedPd,
            provider: crate::harness::ProviderChoice::Soft,
            max_region: None,
            tls: None,
        };
        let mut exp = Experiment::new("dos", "inproc", true);
        report(&mut exp, outcomes, Duration::from_millis(300), &opts);
        exp
    }

    #[test]
    fn a_row_and_a_bar_per_abuse_and_every_claim_checked() {
        let exp = run(&outcomes(45, 2));
        assert_eq!(exp.rows.len(), Abuse::ALL.len());
        assert_eq!(exp.figure.panels.len(), 2);
        for p in &exp.figure.panels {
            for s in &p.series {
                assert_eq!(s.points.len(), Abuse::ALL.len(), "{}", s.name);
            }
        }
        assert_eq!(exp.checks.len(), 11);
        assert!(exp.checks.iter().all(|c| c.holds), "{:#?}", exp.checks);
        assert!(exp.ratios[0].name.starts_with("flood"));
        let shared = exp.row("flood, shared RQ", 2).expect("a row");
        assert_eq!(shared.get_f64("honest_failed_during"), Some(3.0));
        assert_eq!(shared.get_f64("share_during"), Some(0.02));
    }

    #[test]
    fn claims_fail_when_the_numbers_say_so() {
        // Every abuse below the spinner's share; the shared RQ no worse than credits.
        let exp = run(&outcomes(5, 5));
        let failing: Vec<&str> = exp
            .checks
            .iter()
            .filter(|c| !c.holds)
            .map(|c| c.claim.as_str())
            .collect();
        assert_eq!(failing.len(), 8, "{failing:#?}");
        let flood = exp
            .checks
            .iter()
            .find(|c| c.claim.starts_with("with flow control"))
            .expect("the flood's check");
        assert!(flood.detail.contains("Why"), "{}", flood.detail);
    }
}
