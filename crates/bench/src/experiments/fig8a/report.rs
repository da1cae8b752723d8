//! Figure 8(a)'s results: the per-epoch curves, the rows, the checks and the notes.

use super::measures::{Curves, curves, ms, name, opt_ms, since};
use super::{CRASH_EPOCH, Plan, Run, checks};
use crate::harness::{Experiment, Figure, Panel, PanelKind, Point, Series};

/// Prints the curves every 20 epochs, both modes side by side.
pub(super) fn print_epochs(plan: &Plan, runs: &[Run]) {
    let all: Vec<Curves> = runs.iter().map(|r| curves(plan, &r.timeline)).collect();
    print!("{:>6}", "epoch");
    for r in runs {
        print!(" {:>10} {:>8}", format!("{} LF", name(r.lock)), "keys");
    }
    println!();
    for e in (0..plan.epochs).step_by(20).chain([plan.epochs - 1]) {
        print!("{e:>6}");
        for c in &all {
            print!(" {:>10.3} {:>8}", c.load[e], c.keys[e]);
        }
        println!();
    }
    for r in runs {
        let c = r.timeline.crash();
        let a = r.timeline.after_crash();
        println!(
            "{:<9} crash at {} (epoch {}); after it: lock re-granted {}, split finished {}, first insert of its keys {}; {} keys acknowledged, {} in the table; {} loaders stuck at the end",
            name(r.lock),
            opt_ms(c.map(|c| c.at)),
            c.and_then(|c| r.timeline.epoch_of(c.at))
                .map_or("—".into(), |e| e.to_string()),
            opt_ms(since(c, a.first_takeover)),
            opt_ms(since(c, a.first_recovery)),
            opt_ms(since(c, a.first_class_insert)),
            r.timeline.acked(),
            r.audit.keys,
            r.stuck,
        );
    }
}

/// Rows, checks, paper references, notes and the figure.
pub(super) fn summarize(exp: &mut Experiment, plan: &Plan, runs: &[Run]) {
    let lease = plan.lock_lease();
    let mut figure_load = Vec::new();
    let mut figure_keys = Vec::new();
    for r in runs {
        let c = curves(plan, &r.timeline);
        let crash = r.timeline.crash();
        let a = r.timeline.after_crash();
        let at = crash.and_then(|c| r.timeline.epoch_of(c.at));
        let last = plan.epochs - 1;
        let at_crash = at.unwrap_or(last);
        let mut row = r
            .row
            .clone()
            .with("lock", format!("{:?}", r.lock))
            .with("epochs", plan.epochs as u64)
            .with("epoch_ms", ms(plan.epoch))
            .with("lock_lease_ms", ms(lease))
            .with("crash_epoch", at.map(|e| e as f64))
            .with("crash_ms", crash.map(|c| ms(c.at)))
            .with("keys_at_crash", c.keys[at_crash])
            .with("keys_final", c.keys[last])
            .with("load_factor_at_crash", c.load[at_crash])
            .with("load_factor_final", c.load[last])
            .with("fill_final", c.fill[last])
            .with("subtables_final", c.subtables[last])
            .with("crashed_class_inserts", a.class_inserts)
            .with("crashed_class_in_flight", a.class_in_flight)
            .with("takeover_ms", since(crash, a.first_takeover).map(ms))
            .with("resume_ms", since(crash, a.first_class_insert).map(ms))
            .with("recovery_ms", since(crash, a.first_recovery).map(ms))
            .with("table_full_skips", r.timeline.full())
            .with("insert_failures", r.timeline.failures())
            .with("acknowledged", r.timeline.acked())
            .with("audit_keys", r.audit.keys)
            .with("audit_duplicates", r.audit.duplicates)
            .with("audit_unreadable", r.audit.unreadable)
            .with("audit_frozen", r.audit.frozen)
            .with("loaders_stuck_at_end", r.stuck as u64);
        if let Some(c) = crash {
            row = row.with("crashed_subtable", format!("{:#x}", c.subtable));
        }
        exp.rows.push(row);
        let pts = |v: &[f64]| -> Vec<Point> {
            v.iter()
                .enumerate()
                .map(|(e, y)| Point::xy(e as f64, *y))
                .collect()
        };
        let keys_k: Vec<f64> = c.keys.iter().map(|k| *k as f64 / 1e3).collect();
        figure_load.push(Series {
            name: name(r.lock).into(),
            points: pts(&c.load),
        });
        figure_keys.push(Series {
            name: name(r.lock).into(),
            points: pts(&keys_k),
        });
    }
    // The crash, as a vertical line in each panel.
    let crashed = runs
        .iter()
        .find_map(|r| r.timeline.crash().and_then(|c| r.timeline.epoch_of(c.at)));
    if let Some(e) = crashed {
        for series in [&mut figure_load, &mut figure_keys] {
            let top = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.y))
                .fold(0.0, f64::max);
            series.push(Series {
                name: "crash".into(),
                points: vec![Point::xy(e as f64, 0.0), Point::xy(e as f64, top)],
            });
        }
    }
    exp.checks = checks::checks(plan, runs, lease);
    exp.paper = checks::paper(runs);
    exp.notes = checks::notes(plan, lease);
    let panel = |title: &str, y: &str, series| Panel {
        title: title.into(),
        x_label: format!("epoch ({} ms)", plan.epoch.as_millis()),
        y_label: y.into(),
        x_log: false,
        y_log: false,
        kind: PanelKind::Lines,
        series,
    };
    exp.figure = Figure {
        title: format!(
            "Figure 8(a) analogue: RACE load factor, resizer crash at epoch {CRASH_EPOCH}"
        ),
        panels: vec![
            panel("(a) load factor", "keys / slots", figure_load),
            panel("(b) keys loaded", "thousand keys", figure_keys),
        ],
    };
}
