//! The checking pipeline shared by the models: decide, then shrink a violation to a small
//! witness (see `shrink`) that still *proves* the checked history is not linearizable, and
//! explain it. Each model drives it through its `Engine` half (in `model`).

use crate::budget::{Budget, Meter, Stats, now};
use crate::history::History;
use crate::model::{Decision, Engine};
use crate::shrink::{context_size, ddmin, focused, shed_prefix, truncate_fail};
use crate::verdict::{Verdict, Witness};

/// Runs the whole pipeline.
pub(crate) fn run<M: Engine>(history: &History<M>, budget: Budget) -> Verdict<M> {
    let start = now();
    let mut meter = Meter::new(budget, start);
    let decision = M::decide(history, &mut meter);
    let mut stats = Stats {
        operations: meter.operations,
        partitions: meter.partitions,
        states: meter.states(),
        shrink_states: 0,
        elapsed: now() - start,
        exhausted: meter.exhausted(),
    };
    let (part, focus, done, horizon) = match decision {
        Decision::Linearizable => return Verdict::Linearizable(stats),
        Decision::Exhausted => return Verdict::Undecided(stats),
        Decision::Violation {
            part,
            focus,
            minimal,
            horizon,
        } => (part, focus, minimal, horizon),
    };
    let mut shrink_meter = Meter::new(budget, start);
    let (sub, map, kept, removed, minimal) = if done {
        let sub = history.restrict(&part);
        let all = (0..part.len()).collect();
        (sub, part, all, Vec::new(), true)
    } else if let Some((sub, kept, removed)) = focused(history, &part, focus, &mut shrink_meter) {
        let (kept, removed, minimal) = ddmin(&sub, kept, removed, &mut shrink_meter);
        (sub, part, kept, removed, minimal)
    } else {
        let (sub, map) = truncate_fail(history, &part, horizon, &mut shrink_meter);
        let (kept, removed) = shed_prefix(&sub, (0..sub.len()).collect(), &mut shrink_meter);
        let (kept, removed, minimal) = ddmin(&sub, kept, removed, &mut shrink_meter);
        (sub, map, kept, removed, minimal)
    };
    let (kept, removed) = M::supplement(&sub, kept, removed);
    let witness = sub.restrict(&kept);
    stats.shrink_states = shrink_meter.states();
    stats.elapsed = now() - start;
    Verdict::Violation(Box::new(Witness {
        explanation: M::explain(&sub, &kept, &removed),
        key: M::key(&witness),
        indices: kept.iter().map(|&i| map[i]).collect(),
        history: witness,
        context: if M::CONTEXT {
            context_size(&sub, &kept, &removed)
        } else {
            0
        },
        minimal,
        checked: history.len(),
        stats,
    }))
}
