//! `create` and `open` on a loaded machine: a right whose lease ends between its grant and
//! its first access (the node caps leases at 10 ms by default) is acquired again, a bounded
//! number of times; rights that keep ending give a clear error, and a failed `create` leaves
//! nothing allocated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::MemError;
use patronus_ods::race::{self, LockMode, RaceError};
use race_support::faulty::Faulty;
use race_support::{bed, key, opts, small, value};

fn rights_that_end_before_their_first_access_are_acquired_again(t: Link) {
    let (bed, mems) = bed(t, 1);
    let mut mem = Faulty::new(mems.into_iter().next().unwrap());
    let in_use = || bed.cluster.node.fresh_stats().pool_bytes_in_use;
    let before = in_use();
    // The first two writes of the layout find their rights ended.
    mem.expire_batches = 2;
    let root = race::create(&mut mem, small(LockMode::Lease)).unwrap();
    assert_eq!(mem.expire_batches, 0, "both refusals were met");
    // So does open's first read of the root.
    mem.expire_batches = 1;
    let mut tc = race::open(&mut mem, root, opts()).unwrap();
    assert_eq!(mem.expire_batches, 0);
    tc.insert(&mut mem, &key(1), &value(1, 0)).unwrap();
    assert_eq!(tc.get(&mut mem, &key(1)).unwrap(), Some(value(1, 0)));
    tc.destroy(&mut mem).unwrap();
    assert_eq!(in_use(), before, "the table is gone");
    // Rights that keep ending: an error, and nothing left allocated.
    mem.expire_batches = 1000;
    assert_eq!(
        race::create(&mut mem, small(LockMode::Lease)),
        Err(RaceError::Memory(MemError::Expired))
    );
    assert_eq!(in_use(), before, "a failed create frees what it allocated");
}

patronus_core::both_transports!(rights_that_end_before_their_first_access_are_acquired_again);
