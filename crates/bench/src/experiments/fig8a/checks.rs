//! Figure 8(a)'s verdicts: the checks, the paper's references and the notes.

use super::measures::{curves, ms, name, opt_ms, since};
use super::{
    CRASH_EPOCH, CRASH_PHASE, CRASH_STEPS, LOADERS, MAX_LIFETIME_US, Plan, Run, STUCK, options,
};
use crate::harness::{Check, PaperRef};
use patronus_ods::race::LockMode;
use std::time::Duration;

fn run_of(runs: &[Run], lock: LockMode) -> Option<&Run> {
    runs.iter().find(|r| r.lock == lock)
}

pub(super) fn checks(plan: &Plan, runs: &[Run], lease: Duration) -> Vec<Check> {
    let mut out = Vec::new();
    let none = "no resizer crashed (no split reached the crash phase after the crash epoch)";
    if let Some(r) = run_of(runs, LockMode::Lease) {
        let crash = r.timeline.crash();
        let a = r.timeline.after_crash();
        let takeover = since(crash, a.first_takeover);
        let resume = since(crash, a.first_class_insert);
        let c = curves(plan, &r.timeline);
        let at = crash.and_then(|c| r.timeline.epoch_of(c.at));
        let grew = at.map_or(0, |e| c.keys[plan.epochs - 1].saturating_sub(c.keys[e]));
        // The lease left at the crash, plus the waiters' polling (a try every 8 polls).
        let bound = lease + lease / 4;
        out.push(Check {
            claim: "Patronus: back to loading within one lease after the crash (the orphaned lock re-granted once its lease ends, the split finished, the crashed subtable's keys inserted again)".into(),
            holds: takeover.is_some_and(|d| d <= bound) && resume.is_some(),
            detail: match crash {
                None => none.into(),
                Some(_) => format!(
                    "after the crash: lock re-granted {}, split finished {}, first insert of a key the crashed subtable claims (begun after the crash) {}; lock lease {:.0} ms (bound on the re-grant: 1.25 leases, for the waiters' polling); {} keys loaded after the crash, {} of them the crashed subtable's",
                    opt_ms(takeover),
                    opt_ms(since(crash, a.first_recovery)),
                    opt_ms(resume),
                    ms(lease),
                    grew,
                    a.class_inserts
                ),
            },
        });
    }
    if let Some(r) = run_of(runs, LockMode::Word) {
        let crash = r.timeline.crash();
        let a = r.timeline.after_crash();
        let c = curves(plan, &r.timeline);
        let at = crash.and_then(|c| r.timeline.epoch_of(c.at));
        let tail = plan.epochs / 10;
        let late: u64 = r.timeline.inserts()[plan.epochs - tail..].iter().sum();
        out.push(Check {
            claim: "vanilla: stays stalled (no insert into the crashed subtable completes after the crash)".into(),
            holds: crash.is_some() && a.class_inserts == 0 && a.first_takeover.is_none(),
            detail: match at {
                Some(e) => format!(
                    "{} inserts of its keys begun after the crash completed (plus {} begun before it, linked before the freeze); its lock taken over: {}; the table went from {} keys at the crash (epoch {e}) to {} at the end; {} inserts in the last {tail} epochs; {} of the {} other loaders stuck at the end (an insert waiting {} ms or more)",
                    a.class_inserts,
                    a.class_in_flight,
                    opt_ms(since(crash, a.first_takeover)),
                    c.keys[e],
                    c.keys[plan.epochs - 1],
                    late,
                    r.stuck,
                    LOADERS - 1,
                    STUCK.as_millis()
                ),
                None => none.into(),
            },
        });
    }
    let lost: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{}: {} acknowledged, {} in the table ({} unreadable)",
                name(r.lock),
                r.timeline.acked(),
                r.audit.keys,
                r.audit.unreadable
            )
        })
        .collect();
    out.push(Check {
        claim: "every acknowledged key is in the table after the run (a fresh client's audit)".into(),
        holds: runs
            .iter()
            .all(|r| r.audit.keys >= r.timeline.acked() && r.audit.unreadable == 0),
        detail: format!(
            "{} (the table may hold a few more: inserts linked but not yet acknowledged when the run stopped)",
            lost.join("; ")
        ),
    });
    out
}

pub(super) fn paper(runs: &[Run]) -> Vec<PaperRef> {
    let mut out = Vec::new();
    for r in runs {
        let crash = r.timeline.crash();
        out.push(PaperRef {
            metric: format!("{}: epoch of the resizer's crash", name(r.lock)),
            ours: crash
                .and_then(|c| r.timeline.epoch_of(c.at))
                .map(|e| e as f64),
            paper: Some(CRASH_EPOCH as f64),
            unit: "epoch".into(),
            source: "§7.2.3, Figure 8(a)".into(),
        });
    }
    if let Some(r) = run_of(runs, LockMode::Lease) {
        let a = r.timeline.after_crash();
        out.push(PaperRef {
            metric: "Patronus: crash to the first insert into the crashed subtable (\"resumes after the lease\")".into(),
            ours: since(r.timeline.crash(), a.first_class_insert).map(ms),
            paper: None,
            unit: "ms".into(),
            source: "§7.2.3, Figure 8(a) (figure only)".into(),
        });
    }
    out
}

pub(super) fn notes(plan: &Plan, lease: Duration) -> Vec<String> {
    let t = plan.table;
    let o = options(plan);
    let rate = LOADERS as f64 * plan.per_epoch as f64 / plan.epoch.as_secs_f64();
    vec![
        format!(
            "{LOADERS} logical clients on one thread insert new keys (distinct per loader, {} B blocks) into one RACE table on a Patronus memory node; an insert that finds its subtable full splits it, so every loader is a resizer. Table: {} subtables at first, up to 2^{} ({} bucket groups of three {}-slot buckets each: {} slots at the maximum depth). Epochs are fixed wall-clock intervals of {} ms; a run lasts {} epochs per lock mode.",
            t.block_size,
            1u32 << t.initial_depth,
            t.max_depth,
            t.groups,
            t.slots,
            (1u64 << t.max_depth) * u64::from(t.groups) * 3 * u64::from(t.slots),
            plan.epoch.as_millis(),
            plan.epochs
        ),
        format!(
            "Keys arrive on a schedule: each loader may begin {} keys per epoch ({rate:.0} keys/s in all); one behind it inserts as fast as it can (and catches up after a stall). So the table's growth, and where the crash falls in it, do not depend on the machine's speed — as long as it keeps up. Over TCP on this 2-core machine it does not: a round trip costs about a millisecond and a split one acquire per entry, so loading is far slower and the table stays small.",
            plan.per_epoch
        ),
        format!(
            "The crash: from epoch {CRASH_EPOCH} on, the first loader whose split is in the {CRASH_PHASE:?} phase (T frozen, T' allocated and recorded) takes {CRASH_STEPS} more steps of it and is never stepped again. Its connection stays open and it releases nothing; the others learn of it only through RACE (frozen slots that do not thaw). The harness records the crash (time, the subtable's key class) for measurement only."
        ),
        format!(
            "Patronus (LockMode::Lease): the split's lock is an exclusive permission with a {:.0} ms lease (split rights {:.0} ms + fence gap {:.0} ms), extended while the split runs; the node's maximum lifetime is {} s. Writers of the frozen subtable's keys poll it and try its lock every {} polls (acquisitions do not wait: a try while the lock is held is one refused acquire); once the lease ends one takes it (lock re-granted) and finishes the split from its recorded phase. Vanilla (LockMode::Word): the lock is a word CASed in the lock object, which no lease ends.",
            ms(lease),
            ms(plan.split_lease),
            ms(plan.fence_gap),
            MAX_LIFETIME_US / 1_000_000,
            o.takeover_after
        ),
        "Load factor = keys acknowledged / slots of the subtables the table has (its initial ones plus every finished split, the crashed one once a successor finishes it) — RACE's definition; the fill (keys / slots at the maximum depth) is in the rows. A loader whose insert waits on the frozen subtable waits for good, as a RACE writer does, so in vanilla the loaders get stuck one by one and loading stops; inserts whose subtable is full at the maximum depth are given up (table_full_skips).".into(),
        "takeover_ms, recovery_ms and resume_ms are the times from the crash to the first lock re-grant of a split in progress, to the first split a loader finished for another resizer, and to the first completed insert of a key the crashed subtable claimed among inserts begun after the crash. After each run a fresh client audits the table (audit_*).".into(),
    ]
}
