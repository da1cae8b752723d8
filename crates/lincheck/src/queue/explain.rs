//! One-line explanations of small non-linearizable queue histories.
//!
//! As for key-value histories, an explanation is only given when it is a proof (an item
//! popped more often than pushed, or popped though not pushed before the pop completed; an
//! `empty` pop while a pushed item could not have been removed; a later-pushed item popped
//! while an earlier one could not have been); otherwise it says only that no order works.

use super::{History, Op, Outcome, Queue};
use crate::Model;
use crate::history::{Entry, Status};

type E = Entry<Op, Outcome>;

fn who(e: &E) -> String {
    let end = e
        .known_complete()
        .map_or("inf)".to_string(), |c| format!("{c}]"));
    format!(
        "`{}` (client {}, [{}, {end})",
        Queue::describe(&e.op, &e.status),
        e.client,
        e.invoke
    )
}

fn before(a: &E, b: &E) -> bool {
    a.known_complete().is_some_and(|c| c < b.invoke)
}

fn pushed(e: &E) -> Option<&str> {
    match (&e.op, &e.status) {
        (Op::Push { item }, Status::Done(_) | Status::Unknown) => Some(item),
        _ => None,
    }
}

fn popped(e: &E) -> Option<&str> {
    match e.status.done() {
        Some(Outcome::Item { item }) => Some(item),
        _ => None,
    }
}

/// The pushes (known or unknown) of `item`.
fn pushes_of<'a>(entries: &'a [E], item: &'a str) -> impl Iterator<Item = &'a E> + 'a {
    entries.iter().filter(move |e| pushed(e) == Some(item))
}

/// Whether `y` is a pop that may have removed `item` (an unknown pop, or one that returned it).
fn may_pop(y: &E, item: &str) -> bool {
    matches!(y.op, Op::Pop) && (y.status == Status::Unknown || popped(y) == Some(item))
}

/// Explains why `history` (small) is not linearizable.
pub(super) fn explain(history: &History) -> String {
    let entries = history.entries();
    let initial = history.initial();
    let count = |pred: &dyn Fn(&E) -> bool| entries.iter().filter(|e| pred(e)).count();
    for x in entries {
        if let Some(outcome) = x.status.done() {
            let ok = matches!(
                (&x.op, outcome),
                (Op::Push { .. }, Outcome::Ok) | (Op::Pop, Outcome::Item { .. } | Outcome::Empty)
            );
            if !ok {
                return format!("{} is not a possible result", who(x));
            }
        }
        let Some(item) = popped(x) else { continue };
        let in_initial = initial.iter().filter(|i| *i == item).count();
        let pushes = count(&|e| pushed(e) == Some(item));
        let pops = count(&|e| popped(e) == Some(item));
        if in_initial == 0 && count(&|e| pushed(e) == Some(item) && !before(x, e)) == 0 {
            return format!(
                "{} popped {item:?}, but no push of it started before the pop completed",
                who(x)
            );
        }
        if pops > pushes + in_initial {
            let times = |n: usize| {
                if n == 1 {
                    "once".to_string()
                } else {
                    format!("{n} times")
                }
            };
            return format!(
                "{item:?} was popped {} but pushed only {}",
                times(pops),
                times(pushes + in_initial)
            );
        }
    }
    for x in entries {
        // An `empty` pop while an item surely was in the queue.
        if x.status == Status::Done(Outcome::Empty) {
            for p in entries.iter().filter(|p| before(p, x)) {
                let Some(item) = pushed(p) else { continue };
                let removable = entries.iter().any(|y| may_pop(y, item) && !before(x, y));
                if !removable {
                    return format!(
                        "{} found the queue empty, but {} completed before it started and no pop that could remove {item:?} started before it completed",
                        who(x),
                        who(p)
                    );
                }
            }
        }
        // A later item popped while an earlier one surely was still in front of it.
        let Some(b) = popped(x) else { continue };
        if pushes_of(entries, b).count() != 1 || initial.iter().any(|i| i == b) {
            continue;
        }
        let Some(pb) = pushes_of(entries, b).next() else {
            continue;
        };
        for pa in entries.iter().filter(|pa| before(pa, pb)) {
            let Some(a) = pushed(pa) else { continue };
            if a == b || pushes_of(entries, a).count() != 1 {
                continue;
            }
            if !entries.iter().any(|y| may_pop(y, a) && !before(x, y)) {
                return format!(
                    "{a:?} was pushed before {b:?} ({} completed before {} started), but {} popped {b:?} and no pop that could remove {a:?} started before it completed",
                    who(pa),
                    who(pb),
                    who(x)
                );
            }
        }
    }
    format!(
        "no order of these {} operations agrees with both their results and their real-time order",
        entries.len()
    )
}
