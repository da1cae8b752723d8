//! Shrinking a violation to a small witness that still *proves* the checked history is not
//! linearizable.
//!
//! Removing operations from a non-linearizable history can create a violation of its own (drop
//! the put that a read observed, and the read becomes "a value never written"), so shrinking
//! only makes moves that keep the evidence sound: if the checked history were linearizable,
//! the shrunk one would be too. The moves:
//! 1. the model's decision names a failing part (kv: the key's partition, sound by
//!    P-compositionality; queue: a pre-check's counting argument, already minimal, or the whole
//!    history), maybe with a *focus*: a few of its operations that a pre-check proved fail
//!    with the rest of the part as context (then steps 2 and 3 are skipped);
//! 2. truncation at a completion time T at which it still fails: keep the operations invoked
//!    by T, those still pending at T becoming unknown. Sound, and monotone in T, because an
//!    operation invoked after T follows, in any linearization, every operation completed by
//!    T. T is the search's *horizon* (the latest point where its attempts got stuck) if that
//!    fails, else the earliest failing completion time found by binary search;
//! 3. (kv) shedding the longest prefix, by invocation, into the context while the rest still
//!    fails (galloping from the end, then bisection: violations are usually recent);
//! 4. delta debugging over the model's removable *units*, chunks then single units, until no
//!    single removal keeps it failing (1-minimal). kv: any operation, which then joins the
//!    *context*: it may take effect any number of times or never, each time within its own
//!    interval, with any result (a weakening of what really happened); queue: an `empty` pop,
//!    or a uniquely pushed item with its push and its pop (removals that provably preserve
//!    linearizability).
//!
//! Sub-searches that run out of budget count as "not shown to fail": the unit stays and the
//! witness is marked not minimal. Finally a model may move back a few context operations for
//! readability (kv: the write of each value a kept read returns); that keeps the witness
//! failing, since a context operation put back is only more constrained.

use crate::Model;
use crate::budget::Meter;
use crate::history::History;
use crate::model::{Decision, Engine};

/// How many of `removed` were invoked by the last completion in `kept` (the others cannot
/// matter to it).
pub(crate) fn context_size<M: Model>(sub: &History<M>, kept: &[usize], removed: &[usize]) -> usize {
    let entries = sub.entries();
    let end = kept
        .iter()
        .filter_map(|&i| entries[i].complete)
        .max()
        .unwrap_or(u64::MAX);
    removed
        .iter()
        .filter(|&&i| entries[i].invoke <= end)
        .count()
}

/// The entries of `part` invoked by `t`, those not completed by `t` made unknown; and their
/// indices in `history`.
fn truncate<M: Model>(history: &History<M>, part: &[usize], t: u64) -> (History<M>, Vec<usize>) {
    let map: Vec<usize> = part
        .iter()
        .copied()
        .filter(|&i| history.entries()[i].invoke <= t)
        .collect();
    let mut sub = history.restrict(&map);
    sub.mark_unknown_after(t);
    (sub, map)
}

/// Truncates the failing `part` at the earliest completion time at which it still fails.
pub(crate) fn truncate_fail<M: Engine>(
    history: &History<M>,
    part: &[usize],
    horizon: Option<u64>,
    meter: &mut Meter,
) -> (History<M>, Vec<usize>) {
    // The search's horizon usually is the answer, at the price of one search.
    if let Some(t) = horizon {
        let (sub, map) = truncate(history, part, t);
        let mut child = meter.child();
        let decision = M::decide(&sub, &mut child);
        meter.absorb(&child);
        if matches!(decision, Decision::Violation { .. }) {
            return (sub, map);
        }
    }
    let entries = history.entries();
    let mut times: Vec<u64> = part
        .iter()
        .filter_map(|&i| entries[i].known_complete())
        .collect();
    times.sort_unstable();
    times.dedup();
    if times.is_empty() {
        return truncate(history, part, u64::MAX);
    }
    // `times[hi]` always fails: at the last completion only unknown operations invoked after
    // every known one completed are dropped, and those cannot make anything linearizable.
    let (mut lo, mut hi) = (0, times.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let (sub, _) = truncate(history, part, times[mid]);
        let mut child = meter.child();
        let decision = M::decide(&sub, &mut child);
        meter.absorb(&child);
        match decision {
            Decision::Violation { .. } => hi = mid,
            Decision::Linearizable => lo = mid + 1,
            Decision::Exhausted => break,
        }
    }
    truncate(history, part, times[hi])
}

/// The sub-history of `part`, with `focus` as kept entries and the rest as removed ones, if the
/// model confirms that fails.
pub(crate) fn focused<M: Engine>(
    history: &History<M>,
    part: &[usize],
    focus: Option<Vec<usize>>,
    meter: &mut Meter,
) -> Option<(History<M>, Vec<usize>, Vec<usize>)> {
    let focus = focus?;
    let sub = history.restrict(part);
    let kept: Vec<usize> = focus
        .iter()
        .filter_map(|i| part.binary_search(i).ok())
        .collect();
    let removed: Vec<usize> = (0..part.len())
        .filter(|i| kept.binary_search(i).is_err())
        .collect();
    (M::fails(&sub, &kept, &removed, meter) == Some(true)).then_some((sub, kept, removed))
}

/// For models with a context: moves the longest prefix (by invocation) of `kept` that it can
/// into the context while the rest still fails (binary search; violations are usually recent).
pub(crate) fn shed_prefix<M: Engine>(
    sub: &History<M>,
    kept: Vec<usize>,
    meter: &mut Meter,
) -> (Vec<usize>, Vec<usize>) {
    if !M::CONTEXT || kept.len() < 16 {
        return (kept, Vec::new());
    }
    let mut order = kept;
    order.sort_unstable_by_key(|&i| (sub.entries()[i].invoke, i));
    let split = |n: usize| {
        let (mut gone, mut rest) = (order[..n].to_vec(), order[n..].to_vec());
        gone.sort_unstable();
        rest.sort_unstable();
        (rest, gone)
    };
    // Gallop from the end (small, cheap suffixes first), then bisect.
    let n = order.len();
    let (mut lo, mut hi) = (0, n - 1);
    let mut keep = 8;
    while keep < n {
        let (rest, gone) = split(n - keep);
        match M::fails(sub, &rest, &gone, meter) {
            Some(true) => {
                lo = n - keep;
                break;
            }
            Some(false) => hi = n - keep - 1,
            None => return split(0),
        }
        keep *= 2;
    }
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let (rest, gone) = split(mid);
        match M::fails(sub, &rest, &gone, meter) {
            Some(true) => lo = mid,
            Some(false) => hi = mid - 1,
            None => break,
        }
    }
    split(lo)
}

/// Delta debugging over the model's units within `kept`, the entries `removed` already gone;
/// returns kept and removed entries (ascending) and whether the result is 1-minimal.
pub(crate) fn ddmin<M: Engine>(
    sub: &History<M>,
    kept: Vec<usize>,
    mut removed: Vec<usize>,
    meter: &mut Meter,
) -> (Vec<usize>, Vec<usize>, bool) {
    let mut inside = vec![false; sub.len()];
    kept.iter().for_each(|&i| inside[i] = true);
    let mut units: Vec<Vec<usize>> = M::units(sub)
        .into_iter()
        .filter(|u| u.iter().all(|&i| inside[i]))
        .collect();
    let fixed: Vec<usize> = {
        let mut in_unit = vec![false; sub.len()];
        units.iter().flatten().for_each(|&i| in_unit[i] = true);
        kept.iter().copied().filter(|&i| !in_unit[i]).collect()
    };
    let collect = |units: &[Vec<usize>]| -> Vec<usize> {
        let mut v: Vec<usize> = fixed
            .iter()
            .chain(units.iter().flatten())
            .copied()
            .collect();
        v.sort_unstable();
        v
    };
    let mut chunk = (units.len() / 2).max(1);
    while !units.is_empty() {
        let mut progress = false;
        let mut at = 0;
        while at < units.len() {
            let end = (at + chunk).min(units.len());
            let rest: Vec<Vec<usize>> = units[..at].iter().chain(&units[end..]).cloned().collect();
            let mut out: Vec<usize> = removed
                .iter()
                .chain(units[at..end].iter().flatten())
                .copied()
                .collect();
            out.sort_unstable();
            let kept = collect(&rest);
            match if kept.is_empty() {
                Some(false)
            } else {
                M::fails(sub, &kept, &out, meter)
            } {
                Some(true) => {
                    units = rest;
                    removed = out;
                    progress = true;
                }
                Some(false) => at = end,
                None => return (collect(&units), removed, false),
            }
        }
        if !progress {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    (collect(&units), removed, true)
}
