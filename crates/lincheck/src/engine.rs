//! The checking pipeline shared by the models: decide, then shrink a violation to a small
//! witness (see `shrink`) that still *proves* the checked history is not linearizable, and
//! explain it.

use crate::Model;
use crate::budget::{Budget, Meter, Stats, now};
use crate::history::History;
use crate::shrink::{context_size, ddmin, focused, shed_prefix, truncate_fail};
use crate::verdict::{Verdict, Witness};

/// What a model's search decided.
#[derive(Debug)]
pub(crate) enum Decision {
    Linearizable,
    /// Not linearizable: so is the part at these indices (ascending), which is worth shrinking
    /// unless `minimal`; `focus` (a subset) may fail on its own with the rest as context.
    Violation {
        part: Vec<usize>,
        focus: Option<Vec<usize>>,
        minimal: bool,
        /// A completion time at which the part truncated still fails, if the search knows one.
        horizon: Option<u64>,
    },
    Exhausted,
}

/// The crate-private half of a model: its search, shrinking moves and explanations.
pub(crate) trait Engine: Model {
    /// Whether removed units join a context that the evidence still considers (kv), rather
    /// than being irrelevant (queue).
    const CONTEXT: bool;
    /// Decides `history`, charging states to `meter`.
    fn decide(history: &History<Self>, meter: &mut Meter) -> Decision;
    /// The groups of entries that may be removed together from a failing `history`.
    fn units(history: &History<Self>) -> Vec<Vec<usize>>;
    /// Whether the entries `kept` of `history`, with the entries `removed` as context, still
    /// fail (`None`: out of budget).
    fn fails(
        history: &History<Self>,
        kept: &[usize],
        removed: &[usize],
        meter: &mut Meter,
    ) -> Option<bool>;
    /// Explains why `kept` (with `removed` as context) is not linearizable, in one line.
    fn explain(history: &History<Self>, kept: &[usize], removed: &[usize]) -> String;
    /// The key a witness is about, if the model has keys.
    fn key(history: &History<Self>) -> Option<String>;
    /// Moves back from the context what makes a shrunk witness easier to read (kv: the writes
    /// of the values its reads return). Must keep it failing: moving an operation from the
    /// context back to the witness only constrains it more.
    fn supplement(
        _history: &History<Self>,
        kept: Vec<usize>,
        removed: Vec<usize>,
    ) -> (Vec<usize>, Vec<usize>) {
        (kept, removed)
    }
}

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
