//! What Figure 8(a)'s report and its checks both read off a run: the per-epoch curves, a lock
//! mode's series name, and durations after the crash, in ms.

use super::Plan;
use super::timeline::{Crash, Timeline};
use patronus_ods::race::LockMode;
use std::time::Duration;

/// The series name of a lock mode.
pub(super) fn name(lock: LockMode) -> &'static str {
    match lock {
        LockMode::Lease => "Patronus",
        LockMode::Word => "vanilla",
    }
}

/// A run's curves, per epoch.
pub(super) struct Curves {
    /// Keys inserted by the end of each epoch.
    pub keys: Vec<u64>,
    /// Keys / slots of the subtables the table has at the end of each epoch.
    pub load: Vec<f64>,
    /// Keys / slots of the table at its maximum depth.
    pub fill: Vec<f64>,
    /// Subtables at the end of each epoch.
    pub subtables: Vec<u64>,
}

pub(super) fn curves(plan: &Plan, t: &Timeline) -> Curves {
    let per = u64::from(plan.table.groups) * 3 * u64::from(plan.table.slots);
    let max_slots = (1u64 << plan.table.max_depth) * per;
    let (mut keys, mut subtables) = (0u64, 1u64 << plan.table.initial_depth);
    let mut c = Curves {
        keys: Vec::new(),
        load: Vec::new(),
        fill: Vec::new(),
        subtables: Vec::new(),
    };
    for (i, s) in t.inserts().into_iter().zip(t.splits()) {
        keys += i;
        subtables += s;
        c.keys.push(keys);
        c.load.push(keys as f64 / (subtables * per) as f64);
        c.fill.push(keys as f64 / max_slots as f64);
        c.subtables.push(subtables);
    }
    c
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(super) fn opt_ms(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1} ms", ms(d)))
}

/// `t` after the crash.
pub(super) fn since(c: Option<Crash>, t: Option<Duration>) -> Option<Duration> {
    Some(t?.saturating_sub(c?.at))
}
