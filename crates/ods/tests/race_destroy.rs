//! Tables by name, and destroying a table: every object freed (the node's pool back where it
//! was), splits a stopped resizer left finished first, a held lock refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, Insert, LockMode, Phase, RaceError};
use patronus_ods::{MemError, NamedRoots};
use race_support::{Mem, bed, key, opts, small, value};
use std::time::Duration;

fn pool_in_use(bed: &support::Bed) -> u64 {
    bed.cluster.node.fresh_stats().pool_bytes_in_use
}

fn named_tables_and_destroy_frees_everything(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (a, rest) = mems.split_first_mut().unwrap();
    let b = &mut rest[0];
    let before = pool_in_use(&bed);
    let o = opts();
    let cfg = small(LockMode::Lease);
    let root = race::create_named(a, "users", cfg).unwrap();
    assert_eq!(
        race::create_named(b, "users", cfg),
        Err(RaceError::Memory(MemError::NameTaken))
    );
    assert!(matches!(
        race::open_named(b, "nobody", o),
        Err(RaceError::NoSuchTable)
    ));
    let mut w = race::open_named(a, "users", o).unwrap();
    assert_eq!((w.root(), w.config().block_size), (root, 128));
    assert_eq!(w.max_value_len(3), Some(128 - 32 - 3));
    let n = 120;
    for i in 0..n {
        w.insert(a, &key(i), &value(i, 0)).unwrap();
    }
    for i in (0..n).step_by(4) {
        w.update(a, &key(i), &value(i, 1)).unwrap();
    }
    for i in (1..n).step_by(4) {
        w.delete(a, &key(i)).unwrap();
    }
    let audit = w.audit(a).unwrap();
    assert!(audit.subtables >= 4, "{audit:?}");
    // Another client reads (and keeps rights over blocks it read), then leaves.
    let mut r = race::open_named(b, "users", o).unwrap();
    assert_eq!(r.get(b, &key(0)).unwrap(), Some(value(0, 1)));
    r.close(b).unwrap();
    w.close(a).unwrap();

    let d = race::destroy_named(a, "users", o).unwrap();
    assert_eq!(
        (d.subtables, d.blocks, d.skipped, d.missing),
        (audit.subtables, audit.keys, 0, 0)
    );
    assert!(matches!(
        race::open_named(b, "users", o),
        Err(RaceError::NoSuchTable)
    ));
    assert!(race::open(b, root, o).is_err(), "the root is freed");
    assert_eq!(pool_in_use(&bed), before, "every object freed");
    // The name is free again.
    race::create_named(b, "users", cfg).unwrap();
    assert!(matches!(
        race::destroy_named(a, "nobody", o),
        Err(RaceError::NoSuchTable)
    ));
}

/// A client's spare blocks are freed when it closes, even once their leases ran out.
fn close_frees_spares_whose_leases_ran_out(t: Link) {
    let (bed, mut mems) = bed(t, 1);
    let mem = &mut mems[0];
    let before = pool_in_use(&bed);
    let o = opts();
    race::create_named(mem, "t", small(LockMode::Lease)).unwrap();
    let mut c = race::open_named(mem, "t", o).unwrap();
    c.insert(mem, b"k", b"v").unwrap();
    assert_eq!(c.spare_blocks().len(), o.preallocate - 1);
    bed.clock.advance(o.lease * 10);
    race_support::wait_expired(&bed, 1);
    c.close(mem).unwrap();
    let d = race::destroy_named(mem, "t", o).unwrap();
    assert_eq!(d.blocks, 1);
    assert_eq!(pool_in_use(&bed), before, "spares freed");
}

/// Inserts through `r` until an insert's split reaches `phase`; returns that insert, stopped.
fn stop_a_split(r: &mut race::TableClient<Mem>, mem: &mut Mem, phase: Phase) -> Insert<Mem> {
    for i in 0..200 {
        let mut op = Insert::new(r, &key(i), &value(i, 0)).unwrap();
        loop {
            if op.split().is_some_and(|s| s.phase() == phase) {
                return op;
            }
            if op.step(r, mem).is_ready() {
                break;
            }
        }
    }
    panic!("no split reached {phase:?}");
}

fn destroy_finishes_an_abandoned_split_and_refuses_a_held_lock(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let dm = &mut rest[0];
    let o = opts();
    race::create_named(rm, "t", small(LockMode::Lease)).unwrap();
    let mut r = race::open_named(rm, "t", o).unwrap();
    let _stopped = stop_a_split(&mut r, rm, Phase::Copying);
    // The resizer's lock is alive: nothing is freed.
    assert_eq!(race::destroy_named(dm, "t", o), Err(RaceError::Busy));
    let mut c = race::open_named(dm, "t", o).unwrap();
    assert_eq!(c.get(dm, &key(0)).unwrap(), Some(value(0, 0)));
    c.close(dm).unwrap();
    // Its lease runs out: destroy finishes the split, then frees the table.
    bed.clock
        .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
    let d = race::destroy_named(dm, "t", o).unwrap();
    assert!(d.subtables >= 2 && d.blocks > 0, "{d:?}");
    assert_eq!((d.skipped, d.missing), (0, 0), "{d:?}");
    assert!(matches!(
        race::open_named(dm, "t", o),
        Err(RaceError::NoSuchTable)
    ));

    // A lock word a stopped resizer keeps is never given back: the table stays.
    race::create_named(rm, "w", small(LockMode::Word)).unwrap();
    let mut r = race::open_named(rm, "w", o).unwrap();
    let _stopped = stop_a_split(&mut r, rm, Phase::Publishing);
    bed.clock
        .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
    assert_eq!(race::destroy_named(dm, "w", o), Err(RaceError::Busy));
    assert!(dm.lookup("w").is_ok());
    let mut c = race::open_named(dm, "w", o).unwrap();
    assert_eq!(c.get(dm, &key(0)).unwrap(), Some(value(0, 0)));
}

patronus_core::both_transports!(
    close_frees_spares_whose_leases_ran_out,
    named_tables_and_destroy_frees_everything,
    destroy_finishes_an_abandoned_split_and_refuses_a_held_lock
);
