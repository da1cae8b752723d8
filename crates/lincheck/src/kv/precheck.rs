//! Fast pre-checks of one key's operations: proofs of the common violations in O(n log n),
//! before (and instead of) an exhaustive search.
//!
//! Each known result implies a condition on the register just before the operation (*pre*:
//! absent, present, or a given value) and fixes the state just after it (*after*). An
//! operation g is doomed if some known operation w completed before g started and left a state
//! that breaks g's pre, while no operation that could restore it (a write of the value, any
//! write for "present", a delete for "absent"; known or not) can be linearized between them:
//! each one either completed before w started or started after g completed. Taking w as the
//! breaker that started last is enough (any earlier one leaves a wider gap). Without any
//! breaker, g is doomed if the initial state breaks its pre and no restorer started before g
//! completed. The *focus* returned is g, w and the restorers that started before g completed
//! (they are needed to pin them before w): with every other operation of the key as context,
//! it still fails, so the shrinker can start from it.

use std::collections::HashMap;

use super::{History, Op, Outcome};
use crate::history::{Entry, Status};

/// A condition on, or a state of, the register.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cond<'a> {
    Absent,
    Present,
    Is(&'a str),
}

/// The pre and after of a known result.
fn contract<'a>(op: &'a Op, outcome: &'a Outcome) -> (Cond<'a>, Cond<'a>) {
    let value = op.value().map_or(Cond::Present, Cond::Is);
    match outcome {
        Outcome::Inserted => (Cond::Absent, value),
        Outcome::Updated => (Cond::Present, value),
        Outcome::Exists => (Cond::Present, Cond::Present),
        Outcome::Absent => (Cond::Absent, Cond::Absent),
        Outcome::Deleted => (Cond::Present, Cond::Absent),
        Outcome::Value { value } => (Cond::Is(value), Cond::Is(value)),
    }
}

/// Whether a state breaks a condition for sure.
fn breaks(state: Cond<'_>, pre: Cond<'_>) -> bool {
    match (state, pre) {
        (Cond::Is(x), Cond::Is(v)) => x != v,
        (Cond::Is(_) | Cond::Present, Cond::Absent)
        | (Cond::Absent, Cond::Is(_) | Cond::Present) => true,
        _ => false,
    }
}

/// Finds a doomed operation among `part` (one key's entries) and returns its focus.
pub(super) fn precheck(history: &History, part: &[usize]) -> Option<Vec<usize>> {
    let entries = history.entries();
    let live = |i: &usize| entries[*i].status != Status::Failed;
    let part: Vec<usize> = part.iter().copied().filter(live).collect();
    let key = part.first().map(|&i| entries[i].op.key())?;
    let initial = history
        .initial()
        .get(key)
        .map_or(Cond::Absent, |v| Cond::Is(v));
    // Known operations by completion, with the prefix-latest-starting one for each kind of
    // after-state (Is keeps the best two of different values).
    let mut known: Vec<(u64, usize)> = part
        .iter()
        .filter_map(|&i| entries[i].known_complete().map(|c| (c, i)))
        .collect();
    known.sort_unstable();
    let mut latest = Latest::default();
    let mut prefix: Vec<Latest> = Vec::with_capacity(known.len());
    for &(_, i) in &known {
        let e = &entries[i];
        if let Some(outcome) = e.status.done() {
            latest.add(e.invoke, i, contract(&e.op, outcome).1);
        }
        prefix.push(latest);
    }
    let writes = |pred: &dyn Fn(&Op) -> bool| {
        let ops = part
            .iter()
            .copied()
            .filter(|&i| pred(&entries[i].op))
            .collect();
        Restorers::new(ops, entries)
    };
    let deletes = writes(&|op| matches!(op, Op::Delete { .. }));
    let puts = writes(&|op| op.value().is_some());
    let mut by_value: HashMap<&str, Vec<usize>> = HashMap::new();
    for &i in &part {
        if let Some(v) = entries[i].op.value() {
            by_value.entry(v).or_default().push(i);
        }
    }
    let by_value: HashMap<&str, Restorers> = by_value
        .into_iter()
        .map(|(v, ops)| (v, Restorers::new(ops, entries)))
        .collect();
    let none = Restorers::new(Vec::new(), entries);
    for &(_, g) in &known {
        let eg = &entries[g];
        let Some(outcome) = eg.status.done() else {
            continue;
        };
        let pre = contract(&eg.op, outcome).0;
        let g_done = eg.complete.unwrap_or(u64::MAX);
        let n = known.partition_point(|&(c, _)| c < eg.invoke);
        let w = n.checked_sub(1).and_then(|k| prefix[k].breaker(pre));
        let restorers = match pre {
            Cond::Absent => &deletes,
            Cond::Present => &puts,
            Cond::Is(v) => by_value.get(v).unwrap_or(&none),
        };
        let from = w.map(|w| entries[w].invoke);
        if restorers.fits(g_done, from, g) || (w.is_none() && !breaks(initial, pre)) {
            continue;
        }
        // Doomed: the restorers that started in time all completed before w started.
        let pinned = restorers.started(g_done).filter(|&r| r != g);
        let mut focus: Vec<usize> = [g].into_iter().chain(w).chain(pinned).collect();
        focus.sort_unstable();
        focus.dedup();
        return Some(focus);
    }
    None
}

/// The operations that may restore one condition, by invocation, with the two that reach
/// latest (completion, or never if unknown) among each prefix.
struct Restorers {
    ops: Vec<usize>,
    invokes: Vec<u64>,
    best: Vec<[(u64, usize); 2]>,
}

impl Restorers {
    fn new(mut ops: Vec<usize>, entries: &[Entry<Op, Outcome>]) -> Self {
        ops.sort_unstable_by_key(|&i| (entries[i].invoke, i));
        let invokes = ops.iter().map(|&i| entries[i].invoke).collect();
        let mut top = [(0, usize::MAX); 2];
        let best = ops
            .iter()
            .map(|&i| {
                let reach = (entries[i].known_complete().unwrap_or(u64::MAX), i);
                if reach.0 >= top[0].0 || top[0].1 == usize::MAX {
                    top = [reach, top[0]];
                } else if reach.0 >= top[1].0 || top[1].1 == usize::MAX {
                    top[1] = reach;
                }
                top
            })
            .collect();
        Restorers { ops, invokes, best }
    }

    /// Whether one of them other than `g` started by `until` and did not complete before
    /// `from` (or, without `from`, exists at all).
    fn fits(&self, until: u64, from: Option<u64>, g: usize) -> bool {
        let n = self.invokes.partition_point(|&t| t <= until);
        let Some(top) = n.checked_sub(1).map(|k| self.best[k]) else {
            return false;
        };
        let other = if top[0].1 != g { top[0] } else { top[1] };
        other.1 != usize::MAX && from.is_none_or(|from| other.0 >= from)
    }

    /// Those that started by `until`.
    fn started(&self, until: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.invokes.partition_point(|&t| t <= until);
        self.ops[..n].iter().copied()
    }
}

/// The latest-starting known operations so far by after-state: (invoke, index), and for
/// values the latest two of different values.
#[derive(Clone, Copy, Debug, Default)]
struct Latest<'a> {
    absent: Option<(u64, usize)>,
    present: Option<(u64, usize)>,
    is: Option<(u64, usize, &'a str)>,
    /// The latest whose value differs from `is`'s.
    is_other: Option<(u64, usize, &'a str)>,
}

impl<'a> Latest<'a> {
    fn add(&mut self, invoke: u64, i: usize, after: Cond<'a>) {
        let later = |slot: Option<(u64, usize)>| slot.is_none_or(|(t, _)| invoke >= t);
        match after {
            Cond::Absent if later(self.absent) => self.absent = Some((invoke, i)),
            Cond::Present if later(self.present) => self.present = Some((invoke, i)),
            Cond::Is(v) => {
                let new = Some((invoke, i, v));
                match self.is {
                    Some((t, _, x)) if invoke >= t => {
                        if x != v {
                            self.is_other = self.is;
                        }
                        self.is = new;
                    }
                    Some((_, _, x))
                        if x != v && self.is_other.is_none_or(|(t, _, _)| invoke >= t) =>
                    {
                        self.is_other = new;
                    }
                    None => self.is = new,
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// The latest-starting operation whose after-state surely breaks `pre`.
    fn breaker(&self, pre: Cond<'_>) -> Option<usize> {
        let is = |slot: Option<(u64, usize, &str)>| {
            slot.filter(|&(_, _, v)| breaks(Cond::Is(v), pre))
                .map(|(t, i, _)| (t, i))
        };
        let absent = self.absent.filter(|_| breaks(Cond::Absent, pre));
        let present = self.present.filter(|_| breaks(Cond::Present, pre));
        [absent, present, is(self.is), is(self.is_other)]
            .into_iter()
            .flatten()
            .max_by_key(|&(t, _)| t)
            .map(|(_, i)| i)
    }
}
