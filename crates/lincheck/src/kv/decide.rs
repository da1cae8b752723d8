//! Deciding a key-value history: one register machine per key, and the shrinker's evidence.
//!
//! Invariants: values are interned per partition (`u32` ids, so states are a word);
//! unknown reads and failed operations are dropped before the search (they change nothing);
//! partitions are searched smallest first, so a cheap violation is found before an expensive
//! partition can exhaust the budget.

use std::collections::{BTreeMap, HashSet};

use super::precheck::precheck;
use super::register::{JUNK, Kop, Kres, Register};
use super::{History, Op, Outcome};
use crate::budget::Meter;
use crate::fingerprint::Interner;
use crate::history::Status;
use crate::model::Decision;
use crate::search::{Found, Span, search};

/// The class of an operation: its kind, value and result.
fn class(kind: u64, kop: Kop, res: Option<Kres>) -> u64 {
    let vid = match (kop, res) {
        (_, Some(Kres::Value(v))) | (Kop::Put(v) | Kop::Insert(v) | Kop::Update(v), _) => {
            u64::from(v)
        }
        _ => 0,
    };
    let res = match res {
        None => 0,
        Some(Kres::Inserted) => 1,
        Some(Kres::Updated) => 2,
        Some(Kres::Exists) => 3,
        Some(Kres::Absent) => 4,
        Some(Kres::Deleted) => 5,
        Some(Kres::Value(_)) => 6,
    };
    (kind * 8 + res) << 32 | vid
}

/// A kind of context write (0 put, 1 insert, 2 update, 3 delete) and its value, if observed.
type Slot<'a> = (u8, Option<&'a str>);

/// Builds the register machine of one key: the entries `kept` as recorded, and the entries
/// `context` as repeatable unknown writes (see [`evidence`]).
fn register<'a>(
    history: &'a History,
    key: &str,
    kept: &[usize],
    context: &[usize],
) -> (Register, Vec<Span>) {
    let entries = history.entries();
    // Values some kept read observes; an unknown write of any other value is as good as a
    // write of JUNK (no kept operation can tell them apart), which puts such writes in one
    // class per kind.
    let observed: HashSet<&str> = kept
        .iter()
        .filter_map(|&i| match entries[i].status.done() {
            Some(Outcome::Value { value }) => Some(value.as_str()),
            _ => None,
        })
        .collect();
    let mut ids = Interner::default();
    let mut intern = |s| ids.id(s);
    let initial = history.initial().get(key).map(|v| intern(v));
    let (mut ops, mut spans) = (Vec::new(), Vec::new());
    for &i in kept {
        let entry = &entries[i];
        let known = entry.status.done().is_some();
        let mut value = |v: &'a str| {
            if known || observed.contains(v) {
                intern(v)
            } else {
                JUNK
            }
        };
        let (kop, kind) = match &entry.op {
            Op::Put { value: v, .. } => (Kop::Put(value(v)), 0),
            Op::Insert { value: v, .. } => (Kop::Insert(value(v)), 1),
            Op::Update { value: v, .. } => (Kop::Update(value(v)), 2),
            Op::Delete { .. } => (Kop::Delete, 3),
            Op::Get { .. } => (Kop::Get, 4),
        };
        let res = entry.status.done().map(|o| match o {
            Outcome::Inserted => Kres::Inserted,
            Outcome::Updated => Kres::Updated,
            Outcome::Exists => Kres::Exists,
            Outcome::Absent => Kres::Absent,
            Outcome::Deleted => Kres::Deleted,
            Outcome::Value { value } => Kres::Value(intern(value)),
        });
        ops.push((kop, res));
        spans
            .push(Span::once(entry.invoke, entry.known_complete()).in_class(class(kind, kop, res)));
    }
    // Context writes: per (kind, observed value or JUNK), the union of their intervals, as
    // few disjoint windows as that takes.
    let mut windows: BTreeMap<Slot<'_>, Vec<(u64, u64)>> = BTreeMap::new();
    for &i in context {
        let class = |v: &str| observed.get(v).copied();
        let slot = match &entries[i].op {
            Op::Put { value, .. } => (0, class(value)),
            Op::Insert { value, .. } => (1, class(value)),
            Op::Update { value, .. } => (2, class(value)),
            Op::Delete { .. } => (3, None),
            Op::Get { .. } => continue,
        };
        let e = &entries[i];
        let end = e.known_complete().unwrap_or(u64::MAX);
        windows.entry(slot).or_default().push((e.invoke, end));
    }
    for ((kind, class), mut spans_of) in windows {
        let v = class.map_or(JUNK, &mut intern);
        let kop = match kind {
            0 => Kop::Put(v),
            1 => Kop::Insert(v),
            2 => Kop::Update(v),
            _ => Kop::Delete,
        };
        spans_of.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (start, end) in spans_of {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        for (invoke, end) in merged {
            ops.push((kop, None));
            let complete = (end != u64::MAX).then_some(end);
            spans.push(Span {
                invoke,
                complete,
                repeat: true,
                class: None,
            });
        }
    }
    (Register::new(ops, initial, kept.len()), spans)
}

/// Whether the entries `kept` of a one-key history still fail when every entry of `context`
/// may take effect any number of times (or never) within its interval (after its invocation
/// and, if its result is known, before anything invoked after its completion), with any
/// result.
///
/// That is a weakening of the history (each context operation really took effect once, in its
/// interval, with its result), so a failure here proves the history fails. Context reads
/// change nothing and are left out; context writes of a value no kept read observes are all
/// alike to the kept operations, so they become writes of one stand-in value, and writes of
/// one kind and value merge where their intervals overlap (more permissive again).
pub(super) fn evidence(
    history: &History,
    kept: &[usize],
    context: &[usize],
    meter: &mut Meter,
) -> Found {
    let Some(&first) = kept.first() else {
        return Found::Linearizable;
    };
    let key = history.entries()[first].op.key();
    let (mut machine, spans) = register(history, key, kept, context);
    search(&spans, &mut machine, meter)
}

/// Searches every key's partition; on a violation names that partition.
pub(super) fn decide(history: &History, meter: &mut Meter) -> Decision {
    let mut parts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in history.entries().iter().enumerate() {
        let no_effect = matches!(
            (&e.status, &e.op),
            (Status::Failed, _) | (Status::Unknown, Op::Get { .. })
        );
        if !no_effect {
            parts.entry(e.op.key()).or_default().push(i);
        }
    }
    let mut parts: Vec<(&str, Vec<usize>)> = parts.into_iter().collect();
    parts.sort_by_key(|(_, indices)| indices.len());
    for (key, indices) in parts {
        meter.partitions += 1;
        meter.operations += indices.len();
        if let Some(focus) = precheck(history, &indices) {
            return Decision::Violation {
                part: indices,
                focus: Some(focus),
                minimal: false,
                horizon: None,
            };
        }
        let (mut machine, spans) = register(history, key, &indices, &[]);
        match search(&spans, &mut machine, meter) {
            Found::Linearizable => {}
            Found::Violation(horizon) => {
                return Decision::Violation {
                    part: indices,
                    focus: None,
                    minimal: false,
                    horizon: Some(horizon),
                };
            }
            Found::Exhausted => return Decision::Exhausted,
        }
    }
    Decision::Linearizable
}
