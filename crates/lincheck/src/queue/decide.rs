//! Deciding a queue history: the pre-check, building the machine, and the shrinking units.

use std::collections::{HashMap, HashSet};

use super::machine::{Fifo, Qop};
use super::{History, Op, Outcome};
use crate::budget::Meter;
use crate::fingerprint::Interner;
use crate::history::Status;
use crate::model::Decision;
use crate::search::{Found, Span, search};

/// Finds an item popped (with a known result) more often than it can have been pushed by the
/// time of its pop's completion; returns those pops and pushes.
fn precheck(history: &History, indices: &[usize]) -> Option<Vec<usize>> {
    struct Uses {
        pops: Vec<(u64, usize)>,
        pushes: Vec<(u64, usize)>,
    }
    let entries = history.entries();
    let mut uses: HashMap<&str, Uses> = HashMap::new();
    for &i in indices {
        let e = &entries[i];
        let (item, push) = match (&e.op, e.status.done()) {
            (Op::Push { item }, _) => (item, true),
            (Op::Pop, Some(Outcome::Item { item })) => (item, false),
            _ => continue,
        };
        let u = uses.entry(item).or_insert_with(|| Uses {
            pops: vec![],
            pushes: vec![],
        });
        if push {
            u.pushes.push((e.invoke, i));
        } else {
            u.pops.push((e.complete.unwrap_or(u64::MAX), i));
        }
    }
    let mut items: Vec<_> = uses.into_iter().collect();
    items.sort_by_key(|(item, _)| *item);
    for (item, mut u) in items {
        u.pops.sort_unstable();
        u.pushes.sort_unstable();
        let initial = history
            .initial()
            .iter()
            .filter(|x| x.as_str() == item)
            .count();
        for (k, &(done, _)) in u.pops.iter().enumerate() {
            let pushed = u.pushes.partition_point(|&(invoke, _)| invoke <= done);
            if initial + pushed < k + 1 {
                let mut part: Vec<usize> = u.pops[..=k].iter().map(|p| p.1).collect();
                part.extend(u.pushes[..pushed].iter().map(|p| p.1));
                part.sort_unstable();
                return Some(part);
            }
        }
    }
    None
}

/// Fills in the pop windows, unknown pops and orphans (all orphans have the id `anon`; ids of
/// initially queued items are in the queue now).
fn look_ahead(fifo: &mut Fifo, spans: &[Span], anon: u32) {
    let ids = fifo.ops.iter().filter_map(|op| match op {
        Qop::Push(i) | Qop::PopItem(i) => Some(*i as usize + 1),
        _ => None,
    });
    let items = ids
        .chain(fifo.items.iter().map(|&i| i as usize + 1))
        .max()
        .unwrap_or(0)
        .max(anon as usize + 1);
    let (mut pushes, mut pops) = (vec![0usize; items], vec![Vec::new(); items]);
    let mut unknown_pops = Vec::new();
    for (op, span) in fifo.ops.iter().zip(spans) {
        match *op {
            Qop::Push(i) => pushes[i as usize] += 1,
            Qop::PopItem(i) => {
                pops[i as usize].push((span.invoke, span.complete.unwrap_or(u64::MAX)))
            }
            Qop::PopUnknown => unknown_pops.push(span.invoke),
            _ => {}
        }
    }
    let mut queued = vec![false; items];
    fifo.items.iter().for_each(|&i| queued[i as usize] = true);
    let unique = |i: usize| pushes[i] == 1 && !queued[i];
    fifo.window = (0..items)
        .map(|i| (unique(i) && pops[i].len() == 1).then(|| pops[i][0]))
        .collect();
    fifo.orphan = (0..items)
        .map(|i| i == anon as usize || (unique(i) && pops[i].is_empty()))
        .collect();
    fifo.orphans_queued = fifo
        .items
        .iter()
        .filter(|&&i| fifo.orphan[i as usize])
        .count();
    unknown_pops.sort_unstable();
    fifo.unknown_pops = unknown_pops;
    for op in &fifo.ops {
        if let Qop::Push(i) = *op {
            if let Some((_, done)) = fifo.window[i as usize] {
                *fifo.pending.entry(done).or_insert(0) += 1;
            }
        }
    }
}

/// Checks the whole queue history (one partition).
pub(super) fn decide(history: &History, meter: &mut Meter) -> Decision {
    let entries = history.entries();
    let indices: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].status != Status::Failed)
        .collect();
    meter.partitions += 1;
    meter.operations += indices.len();
    if let Some(part) = precheck(history, &indices) {
        return Decision::Violation {
            part,
            focus: None,
            minimal: true,
            horizon: None,
        };
    }
    let mut ids = Interner::default();
    let mut fifo = Fifo::default();
    for item in history.initial() {
        let id = ids.id(item);
        fifo.push_back(id);
    }
    // An unknown push of an item no known pop returns never helps (dropping it, and moving an
    // unknown pop that took the item to "never", keeps any linearization valid): leave it out.
    let popped: HashSet<&str> = indices
        .iter()
        .filter_map(|&i| match entries[i].status.done() {
            Some(Outcome::Item { item }) => Some(item.as_str()),
            _ => None,
        })
        .collect();
    // Orphans (items pushed once that no known pop returns) are all alike to every operation:
    // they share one id, so their relative order never tells states apart.
    let mut pushes: HashMap<&str, usize> = HashMap::new();
    for &i in &indices {
        if let Op::Push { item } = &entries[i].op {
            *pushes.entry(item).or_default() += 1;
        }
    }
    let initial: HashSet<&str> = history.initial().iter().map(String::as_str).collect();
    let orphan = |item: &str| {
        pushes.get(item) == Some(&1) && !popped.contains(item) && !initial.contains(item)
    };
    let anon = ids.fresh();
    let mut intern = |s| ids.id(s);
    let mut spans = Vec::with_capacity(indices.len());
    for &i in &indices {
        let e = &entries[i];
        let qop = match (&e.op, e.status.done()) {
            (Op::Push { item }, None) if !popped.contains(item.as_str()) => continue,
            (Op::Push { item }, _) if orphan(item) => Qop::Push(anon),
            (Op::Push { item }, None | Some(Outcome::Ok)) => Qop::Push(intern(item)),
            (Op::Pop, Some(Outcome::Item { item })) => Qop::PopItem(intern(item)),
            (Op::Pop, Some(Outcome::Empty)) => Qop::PopEmpty,
            (Op::Pop, None) => Qop::PopUnknown,
            _ => Qop::Impossible,
        };
        // Classes: the same operation with the same result.
        let class = match qop {
            Qop::Push(item) => Some(1 << 32 | u64::from(item)),
            Qop::PopItem(item) => Some(2 << 32 | u64::from(item)),
            Qop::PopEmpty => Some(3 << 32),
            Qop::PopUnknown => Some(4 << 32),
            Qop::Impossible => None,
        };
        fifo.ops.push(qop);
        let span = Span::once(e.invoke, e.known_complete());
        spans.push(class.map_or(span, |c| span.in_class(c)));
    }
    look_ahead(&mut fifo, &spans, anon);
    match search(&spans, &mut fifo, meter) {
        Found::Linearizable => Decision::Linearizable,
        Found::Violation(horizon) => Decision::Violation {
            part: indices,
            focus: None,
            minimal: false,
            horizon: Some(horizon),
        },
        Found::Exhausted => Decision::Exhausted,
    }
}

/// The groups of entries whose removal provably keeps a linearizable history linearizable:
/// - an `empty` pop (it changes nothing);
/// - an item pushed exactly once (not initially queued) with its known pop, if any: in a
///   linearization without them every other pop still finds the same front (an unknown pop
///   that took the item is moved to "never").
pub(super) fn units(history: &History) -> Vec<Vec<usize>> {
    let entries = history.entries();
    let mut units = Vec::new();
    let mut by_item: HashMap<&str, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        match (&e.op, e.status.done()) {
            (Op::Pop, Some(Outcome::Empty)) => units.push(vec![i]),
            (Op::Push { item }, _) if e.status != Status::Failed => {
                by_item.entry(item).or_default().0.push(i)
            }
            (Op::Pop, Some(Outcome::Item { item })) => by_item.entry(item).or_default().1.push(i),
            _ => {}
        }
    }
    let mut pairs: Vec<Vec<usize>> = by_item
        .into_iter()
        .filter(|(item, (pushes, pops))| {
            pushes.len() == 1 && pops.len() <= 1 && !history.initial().iter().any(|x| x == item)
        })
        .map(|(_, (mut pushes, pops))| {
            pushes.extend(pops);
            pushes.sort_unstable();
            pushes
        })
        .collect();
    units.append(&mut pairs);
    units.sort_unstable();
    units
}
