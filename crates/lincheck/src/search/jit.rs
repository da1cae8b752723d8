//! The search loop itself (see the parent module for the algorithm and its invariants).

use std::collections::HashMap;

use super::links::{Links, NIL, earliest_due, is_due};
use super::{Found, Machine, Span};
use crate::budget::Meter;
use crate::fingerprint::{DOMAIN_OP, FpSet, mix128};

/// Where the scan for the next candidate stands.
#[derive(Clone, Copy, Debug)]
enum Cursor {
    /// A read linearized eagerly: nothing else is tried at its level.
    Forced,
    /// On the known list (node `2 * op + 1` is a call, `2 * op + 2` a return).
    Known(usize),
    /// On the unknown list (node `op + 1`), with the frontier time.
    Unknown(usize, u64),
}

/// Searches for a linearization of the operations `spans` (indices shared with `machine`).
pub(crate) fn search<M: Machine>(spans: &[Span], machine: &mut M, meter: &mut Meter) -> Found {
    let n = spans.len();
    let known = spans.iter().filter(|s| s.known()).count();
    let zobrist: Vec<u128> = (0..n)
        .map(|op| mix128(DOMAIN_OP, op as u64, 0x5eed))
        .collect();
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * known);
    let mut unknown: Vec<(u64, usize)> = Vec::new();
    for (op, span) in spans.iter().enumerate() {
        match span.complete {
            Some(complete) if !span.repeat => {
                events.push((span.invoke, 0, 2 * op + 1));
                events.push((complete, 1, 2 * op + 2));
            }
            _ => unknown.push((span.invoke, op)),
        }
    }
    events.sort_unstable();
    unknown.sort_unstable();
    let mut main = Links::new(2 * n + 1, events.iter().map(|e| e.2));
    let mut side = Links::new(n + 1, unknown.iter().map(|u| u.1 + 1));
    // Class members in list order, and how many of each are applied.
    let mut class_of: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut classes: HashMap<u64, usize> = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for &(_, op) in &unknown {
        if let (Some(c), false) = (spans[op].class, spans[op].repeat) {
            let next = classes.len();
            let c = *classes.entry(c).or_insert(next);
            if c == members.len() {
                members.push(Vec::new());
            }
            class_of[op] = Some((c, members[c].len()));
            members[c].push(op);
        }
    }
    let mut applied = vec![0usize; members.len()];
    let mut memo = FpSet::default();
    let mut stack: Vec<(usize, M::Undo, Cursor, u64)> = Vec::new();
    // The latest invocation among the linearized operations (repeatable ones aside): nothing
    // that completed before it can take effect any more.
    let mut clock = 0u64;
    let mut horizon = 0u64;
    let mut set_fp = 0u128;
    let mut linearized_known = 0;
    // `None`: start a new level (after a linearization); otherwise resume the scan there.
    let mut cursor: Option<Cursor> = None;
    loop {
        if linearized_known == known {
            return Found::Linearizable;
        }
        let Some(at) = cursor else {
            // A new level: an enabled read, or an unknown operation the model says may go
            // first, goes first, alone.
            let mut found: Option<(usize, M::Undo)> = None;
            let mut node = main.next[0];
            while node != NIL && node % 2 == 1 {
                let op = (node - 1) / 2;
                if machine.is_read(op) {
                    if let Some(undo) = machine.apply(op) {
                        found = Some((op, undo));
                        break;
                    }
                }
                node = main.next[node];
            }
            if found.is_none() {
                let frontier = if node == NIL {
                    u64::MAX
                } else {
                    spans[(node - 2) / 2].complete.unwrap_or(u64::MAX)
                };
                let mut node = side.next[0];
                while node != NIL && spans[node - 1].invoke <= frontier {
                    let op = node - 1;
                    let eligible = class_of[op].is_none_or(|(c, rank)| applied[c] == rank);
                    if eligible && !spans[op].repeat && machine.eager(op) {
                        if let Some(undo) = machine.apply(op) {
                            found = Some((op, undo));
                            break;
                        }
                    }
                    node = side.next[node];
                }
            }
            cursor = match found {
                None => Some(Cursor::Known(main.next[0])),
                Some((op, undo)) if memo.insert(set_fp ^ zobrist[op] ^ machine.fingerprint()) => {
                    if !meter.tick() {
                        return Found::Exhausted;
                    }
                    set_fp ^= zobrist[op];
                    if spans[op].known() {
                        main.remove(2 * op + 1);
                        main.remove(2 * op + 2);
                        linearized_known += 1;
                    } else {
                        side.remove(op + 1);
                        if let Some((c, _)) = class_of[op] {
                            applied[c] += 1;
                        }
                    }
                    stack.push((op, undo, Cursor::Forced, clock));
                    clock = clock.max(spans[op].invoke);
                    None
                }
                Some((_, undo)) => {
                    // Everything from here was explored from where that move led.
                    machine.undo(undo);
                    Some(Cursor::Unknown(NIL, 0))
                }
            };
            continue;
        };
        // The next candidate, or None to backtrack.
        let candidate = match at {
            Cursor::Known(node) if node != NIL && node % 2 == 1 => Some((node - 1) / 2),
            Cursor::Known(node) => {
                // A return (there always is one while known operations remain): the frontier.
                let frontier = if node == NIL {
                    u64::MAX
                } else {
                    spans[(node - 2) / 2].complete.unwrap_or(u64::MAX)
                };
                cursor = Some(Cursor::Unknown(side.next[0], frontier));
                continue;
            }
            Cursor::Unknown(node, frontier)
                if node != NIL && spans[node - 1].invoke <= frontier =>
            {
                Some(node - 1)
            }
            Cursor::Unknown(node, frontier) => {
                if node == NIL || spans[node - 1].invoke > frontier {
                    horizon = horizon.max(frontier);
                }
                None
            }
            Cursor::Forced => None,
        };
        let Some(op) = candidate else {
            let Some((op, undo, resume, before)) = stack.pop() else {
                return Found::Violation(horizon);
            };
            machine.undo(undo);
            clock = before;
            if spans[op].known() {
                set_fp ^= zobrist[op];
                main.restore(2 * op + 2);
                main.restore(2 * op + 1);
                linearized_known -= 1;
            } else if !spans[op].repeat {
                set_fp ^= zobrist[op];
                side.restore(op + 1);
                if let Some((c, _)) = class_of[op] {
                    applied[c] -= 1;
                }
            }
            cursor = Some(match resume {
                Cursor::Forced => Cursor::Forced,
                Cursor::Known(_) => Cursor::Known(main.next[2 * op + 1]),
                Cursor::Unknown(_, frontier) => Cursor::Unknown(side.next[op + 1], frontier),
            });
            continue;
        };
        let eligible = match at {
            Cursor::Known(_) => {
                spans[op]
                    .class
                    .is_none_or(|c| earliest_due(&main, spans, op, c))
                    && (!machine.deferrable(op) || is_due(&main, op))
            }
            _ => {
                class_of[op].is_none_or(|(c, rank)| applied[c] == rank)
                    && spans[op].complete.is_none_or(|deadline| deadline >= clock)
            }
        };
        let lifts = !spans[op].repeat;
        if eligible {
            if let Some(undo) = machine.apply(op) {
                let op_fp = if lifts { zobrist[op] } else { 0 };
                if memo.insert(set_fp ^ op_fp ^ machine.fingerprint()) {
                    if !meter.tick() {
                        return Found::Exhausted;
                    }
                    set_fp ^= op_fp;
                    match at {
                        Cursor::Known(_) => {
                            main.remove(2 * op + 1);
                            main.remove(2 * op + 2);
                            linearized_known += 1;
                        }
                        Cursor::Unknown(..) if lifts => {
                            side.remove(op + 1);
                            if let Some((c, _)) = class_of[op] {
                                applied[c] += 1;
                            }
                        }
                        Cursor::Unknown(..) | Cursor::Forced => {}
                    }
                    stack.push((op, undo, at, clock));
                    if lifts {
                        clock = clock.max(spans[op].invoke);
                    }
                    cursor = None;
                    continue;
                }
                machine.undo(undo);
            }
        }
        cursor = Some(match at {
            Cursor::Known(node) => Cursor::Known(main.next[node]),
            Cursor::Unknown(node, frontier) => Cursor::Unknown(side.next[node], frontier),
            Cursor::Forced => Cursor::Forced,
        });
    }
}
