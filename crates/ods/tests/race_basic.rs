//! RACE hashing on one client and a few: the operations, splits, scan, both transports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, LockMode, RaceError};
use race_support::{bed, key, opts, small, value};

fn operations_and_splits_on_one_client(t: Link) {
    let (_bed, mut mems) = bed(t, 1);
    let mem = &mut mems[0];
    let root = race::create(mem, small(LockMode::Lease)).unwrap();
    let mut c = race::open(mem, root, opts()).unwrap();
    let n = 200;
    for i in 0..n {
        c.insert(mem, &key(i), &value(i, 0)).unwrap();
    }
    assert!(c.stats().splits >= 4, "{:?}", c.stats());
    assert_eq!(c.insert(mem, &key(3), b"again"), Err(RaceError::KeyExists));
    for i in 0..n {
        assert_eq!(c.get(mem, &key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert_eq!(c.get(mem, b"absent").unwrap(), None);
    for i in (0..n).step_by(3) {
        c.update(mem, &key(i), &value(i, 1)).unwrap();
    }
    for i in (1..n).step_by(3) {
        c.delete(mem, &key(i)).unwrap();
    }
    assert_eq!(c.delete(mem, &key(1)), Err(RaceError::NotFound));
    assert_eq!(c.update(mem, &key(1), b"x"), Err(RaceError::NotFound));
    let mut all = c.scan(mem).unwrap();
    all.sort();
    let mut want: Vec<_> = (0..n)
        .filter(|i| i % 3 != 1)
        .map(|i| (key(i), value(i, u64::from(i % 3 == 0))))
        .collect();
    want.sort();
    assert_eq!(all, want);
    // A second client opens the same table from its root alone.
    let mut d = race::open(mem, root, opts()).unwrap();
    assert_eq!(d.get(mem, &key(0)).unwrap(), Some(value(0, 1)));
    assert_eq!(d.get(mem, &key(1)).unwrap(), None);
    let too_big = vec![0u8; 200];
    assert!(matches!(
        d.insert(mem, b"k", &too_big),
        Err(RaceError::TooLarge { .. })
    ));
}

fn the_table_fills_up_at_its_maximum_depth(t: Link) {
    let (_bed, mut mems) = bed(t, 1);
    let mem = &mut mems[0];
    let cfg = race::RaceConfig {
        max_depth: 2,
        ..small(LockMode::Lease)
    };
    let root = race::create(mem, cfg).unwrap();
    let mut c = race::open(mem, root, opts()).unwrap();
    let mut full = None;
    for i in 0..500 {
        if let Err(e) = c.insert(mem, &key(i), &value(i, 0)) {
            full = Some((i, e));
            break;
        }
    }
    let (i, e) = full.expect("a table of 4 small subtables fills up");
    assert_eq!(e, RaceError::TableFull { depth: 2 });
    assert!(i > 20, "filled after {i}");
    for j in 0..i {
        assert_eq!(c.get(mem, &key(j)).unwrap(), Some(value(j, 0)));
    }
}

patronus_core::both_transports!(
    operations_and_splits_on_one_client,
    the_table_fills_up_at_its_maximum_depth
);
