//! Figure 11's checks (§7.4's claims, on the median runs, with ties called ties), ratios,
//! notes and panels.

use super::{ANALYSIS_TARGET, IMAGE_TARGET, PHOTO_PIXELS, Plan, SIDE};
use crate::experiments::ods_rig::mechanism_panel;
use crate::harness::{Check, Experiment, Figure, Panel, Ratio, Row};

fn find<'a>(exp: &'a Experiment, mech: &str, app: &str, n: u32, px: u64) -> Option<&'a Row> {
    exp.rows.iter().find(|r| {
        r.mechanism == mech
            && r.clients == n
            && app_of(r) == app
            && r.get_f64("image_px") == Some(px as f64)
    })
}

/// A point's chains per second: the median run, the lowest, the highest.
#[derive(Clone, Copy, Debug)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(r: &Row) -> Spread {
        Spread {
            median: r.throughput_ops,
            min: r.get_f64("chains_per_s_min").unwrap_or(r.throughput_ops),
            max: r.get_f64("chains_per_s_max").unwrap_or(r.throughput_ops),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} ({:.1}–{:.1})", self.median, self.min, self.max)
    }
}

/// "Patronus is ahead of `other`": holds when every run of Patronus beat every run of the
/// other; overlapping spreads are a tie, said as such.
fn ahead(app: &str, n: u32, p: Spread, other: &str, o: Spread) -> Check {
    let ratio = p.median / o.median.max(1e-9);
    let (holds, verdict) = if p.min > o.max {
        (true, "ahead in every run")
    } else if p.max < o.min {
        (false, "behind in every run")
    } else {
        (false, "a tie: the runs' spreads overlap")
    };
    Check {
        claim: format!("Patronus is ahead of {other} on the {app} chain ({n} containers; §7.4)"),
        holds,
        detail: format!(
            "{verdict} — Patronus {p} vs {other} {o} chains/s, median (lowest–highest run); medians {ratio:.2}×"
        ),
    }
}

/// "Within `bound` of Unprot", on the medians.
fn within(app: &str, n: u32, p: Spread, u: Spread, bound: f64) -> Check {
    let overhead = 1.0 - p.median / u.median.max(1e-9);
    Check {
        claim: format!(
            "the {app} chain on Patronus is within {:.1} % of Unprot ({n} containers; §7.4)",
            bound * 100.0
        ),
        holds: overhead <= bound,
        detail: format!(
            "Patronus {p} vs Unprot {u} chains/s, median (lowest–highest run): {:.1} % {}",
            overhead.abs() * 100.0,
            if overhead >= 0.0 { "lower" } else { "higher" }
        ),
    }
}

pub(super) fn summarize(exp: &mut Experiment, plan: &Plan) {
    let max = plan.containers.iter().copied().max().unwrap_or(1);
    // §7.4: the analysis chain's gap "shortened with more concurrent clients (≥ 8)".
    let many: Vec<u32> = {
        let at: Vec<u32> = plan
            .containers
            .iter()
            .copied()
            .filter(|&n| n >= 8)
            .collect();
        if at.is_empty() { vec![max] } else { at }
    };
    let mut checks = Vec::new();
    let mut ratios = Vec::new();
    for (app, px, bound, counts) in [
        ("image", PHOTO_PIXELS, IMAGE_TARGET, vec![max]),
        ("analysis", 0, ANALYSIS_TARGET, many),
    ] {
        for n in counts {
            let spread = |m: &str| find(exp, m, app, n, px).map(Spread::of);
            let Some(p) = spread("Patronus") else {
                continue;
            };
            if let Some(u) = spread("Unprot") {
                ratios.push(Ratio {
                    name: format!("Patronus / Unprot chains per second, {app}, {n} containers"),
                    value: p.median / u.median.max(1e-9),
                });
                checks.push(within(app, n, p, u, bound));
            }
            for other in ["MR", "RPC"] {
                if let Some(o) = spread(other) {
                    checks.push(ahead(app, n, p, other, o));
                }
            }
        }
    }
    let perms_ok = exp
        .rows
        .iter()
        .filter(|r| r.mechanism == "Patronus")
        .all(|r| {
            r.get_f64("acquires_per_chain") == Some(1.0)
                && r.get_f64("allocates_per_chain") == Some(1.0)
                && r.get_f64("releases_per_chain") == Some(2.0)
        });
    checks.push(Check {
        claim: "each chain acquires its input once on bootstrap and revokes on exit (§6.2): 1 acquire, 1 allocate (its output), 2 releases".into(),
        holds: perms_ok,
        detail: if perms_ok {
            "on every Patronus run".into()
        } else {
            "some Patronus run counted otherwise (see the rows)".into()
        },
    });
    checks.push(exp.all_completed("failed_chains", "chain"));
    exp.checks = checks;
    exp.ratios = ratios;
    exp.notes = vec![
        "Containers are worker threads, each with its own connection to the mechanism's memory node (connected before the clock starts), pulling from one queue that holds every invocation of the point from the start (saturated). Latency is from submission to the end of the chain's last function, queueing included.".into(),
        format!("Image: the test photograph (640 × 427 JPEG, public domain) and, at the largest count, upscaled copies; a {SIDE}-pixel PNG thumbnail. Analysis: a table of 512 employees; each chain adds one and reads every record."),
        format!("Each point ran {} times, the mechanisms in a rotating order; a row is the median run's chains/s with the lowest and highest (chains_per_s_min/max). 'Ahead' holds only when every run beat every run of the other; overlapping spreads are ties.", plan.repeats),
        "container_cpu_us_per_chain / other_cpu_us_per_chain: CPU of the container threads and of the rest of the process (memory nodes, NIC engines, dispatcher) per chain. On 2 cores the memory node's CPU is taken from the containers; on the paper's testbed it is another machine's.".into(),
    ];
    exp.figure = Figure {
        title: "Figure 11 analogue: FaaS chains".into(),
        panels: vec![
            panel(exp, "(a) image chains/s", |r| {
                (app_of(r) == "image" && r.get_f64("image_px") == Some(PHOTO_PIXELS as f64))
                    .then_some((f64::from(r.clients), r.throughput_ops))
            }),
            panel(exp, "(b) analysis chains/s", |r| {
                (app_of(r) == "analysis").then_some((f64::from(r.clients), r.throughput_ops))
            }),
            mechanism_panel(exp, "(c) image size", "image pixels", "chains/s", |r| {
                (app_of(r) == "image" && r.clients == max)
                    .then(|| (r.get_f64("image_px").unwrap_or(0.0), r.throughput_ops))
            }),
        ],
    };
}

fn app_of(r: &Row) -> &str {
    r.extra.get("app").and_then(|v| v.as_str()).unwrap_or("")
}

fn panel(exp: &Experiment, title: &str, f: impl Fn(&Row) -> Option<(f64, f64)>) -> Panel {
    mechanism_panel(exp, title, "containers", "chains/s", f)
}
