//! How a resizer classifies the entries of the subtable it splits: it keeps the acquires of
//! rights over their blocks in flight together (started without blocking, as readers do), at
//! most a bounded number at once, and reads each block once its right is here. Only the node's
//! answer to an acquire, `NotFound`, drops an entry (its block was freed); a READ refused
//! because the right ended does not — wherever in the pipelined classification either comes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, Insert, LockMode, Phase, RaceConfig, TableClient};
use race_support::faulty::Faulty;
use race_support::{Mem, bed, key, opts, settle, value};

type FMem = Faulty<Mem>;

/// Acquires a resizer keeps in flight while it classifies (`split::CLASSIFY_IN_FLIGHT`).
const IN_FLIGHT: usize = 8;

/// Subtables of 48 slots (4 groups of three 4-slot buckets): a split classifies more entries
/// than the acquires it keeps in flight.
fn wide() -> RaceConfig {
    RaceConfig {
        groups: 4,
        ..race_support::small(LockMode::Lease)
    }
}

/// Inserts keys through `r` until one of its inserts has a split that recorded `Copying`
/// (classification next); returns that insert and the keys inserted before it.
fn stop_at_copying(r: &mut TableClient<FMem>, mem: &mut FMem) -> (Insert<FMem>, Vec<u64>) {
    let mut done = Vec::new();
    for i in 0..500 {
        let mut op = Insert::new(r, &key(i), &value(i, 0)).unwrap();
        loop {
            if op.split().is_some_and(|s| s.phase() == Phase::Copying) {
                return (op, done);
            }
            if op.step(r, mem).is_ready() {
                done.push(i);
                break;
            }
            settle(r, mem);
        }
    }
    panic!("no split reached Copying");
}

/// Every key of `keys` reads its value, and the audit finds `keys.len()` keys, none frozen,
/// unclaimed or unreadable.
fn all_there(t: &mut TableClient<FMem>, mem: &mut FMem, keys: &[u64]) {
    for &i in keys {
        assert_eq!(t.get(mem, &key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    let audit = t.audit(mem).unwrap();
    assert_eq!(audit.keys, keys.len() as u64, "{audit:?}");
    assert_eq!(
        (
            audit.duplicates,
            audit.unclaimed,
            audit.unreadable,
            audit.frozen
        ),
        (0, 0, 0, 0),
        "{audit:?}"
    );
}

/// Answers come a poll after the acquires start (a node a round trip away): the resizer
/// starts as many as its bound allows before any answer, and never more.
fn a_resizer_keeps_a_bounded_number_of_acquires_in_flight(t: Link) {
    let (_bed, mems) = bed(t, 1);
    let mut rm = Faulty::new(mems.into_iter().next().unwrap());
    let root = race::create(&mut rm, wide()).unwrap();
    let mut r = race::open(&mut rm, root, opts()).unwrap();
    let (mut op, before) = stop_at_copying(&mut r, &mut rm);
    assert!(before.len() > 2 * IN_FLIGHT, "{} keys", before.len());
    rm.defer_acquires = true;
    let started = rm.started_acquires;
    race_support::run(&mut r, &mut rm, |t, m| op.step(t, m)).unwrap();
    assert_eq!(r.stats().splits, 1, "{:?}", r.stats());
    assert!(
        rm.started_acquires - started > IN_FLIGHT,
        "{} acquires started",
        rm.started_acquires - started
    );
    assert_eq!(rm.max_in_flight, IN_FLIGHT);
    rm.defer_acquires = false;
    let last = before.last().map_or(0, |k| k + 1);
    let keys: Vec<u64> = before.iter().copied().chain([last]).collect();
    all_there(&mut r, &mut rm, &keys);
}

/// In the middle of a pipelined classification, the node answers one acquire `NotFound` and
/// the first READs of blocks are refused (their rights ended on the way, as on a loaded
/// machine): the entry whose block the node says is freed is dropped, the ones whose READs
/// were refused are acquired again and kept.
fn only_not_found_drops_an_entry_during_a_pipelined_classification(t: Link) {
    let (_bed, mems) = bed(t, 1);
    let mut rm = Faulty::new(mems.into_iter().next().unwrap());
    let root = race::create(&mut rm, wide()).unwrap();
    let mut r = race::open(&mut rm, root, opts()).unwrap();
    let (mut op, before) = stop_at_copying(&mut r, &mut rm);
    rm.defer_acquires = true;
    // The 11th acquire from here: started after the first answers came.
    rm.not_found_at = Some(rm.started_acquires + IN_FLIGHT + 2);
    rm.block_len = u64::from(wide().block_size);
    rm.refuse_block_reads = 2;
    race_support::run(&mut r, &mut rm, |t, m| op.step(t, m)).unwrap();
    assert_eq!(r.stats().splits, 1, "{:?}", r.stats());
    assert_eq!(rm.refuse_block_reads, 0, "no block READ was refused");
    assert!(rm.refused > 0);
    assert!(rm.max_in_flight <= IN_FLIGHT, "{}", rm.max_in_flight);
    rm.defer_acquires = false;
    rm.not_found_at = None;
    // Exactly one key is gone: the one whose block the node said was freed.
    let last = before.last().map_or(0, |k| k + 1);
    let mut keys: Vec<u64> = before.iter().copied().chain([last]).collect();
    let gone: Vec<u64> = keys
        .iter()
        .copied()
        .filter(|&i| r.get(&mut rm, &key(i)).unwrap().is_none())
        .collect();
    assert_eq!(gone.len(), 1, "keys gone: {gone:?}");
    keys.retain(|k| !gone.contains(k));
    all_there(&mut r, &mut rm, &keys);
}

patronus_core::both_transports!(
    a_resizer_keeps_a_bounded_number_of_acquires_in_flight,
    only_not_found_drops_an_entry_during_a_pipelined_classification
);
