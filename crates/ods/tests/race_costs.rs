//! What each operation costs in permission operations and one-sided operations (§6.1): an
//! insert is one WRITE (the block) and two READs of the buckets behind one doorbell, then one
//! CAS with the re-read behind it — two round trips — plus a quarter of an `allocate` (KV
//! blocks come four per round trip) and no `acquire` once the subtable's right is held (it is
//! reused across operations). A lookup of another client's block adds one `acquire`, which a
//! repeated lookup of the same key saves (the right is kept).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, ClientOptions, RaceConfig};
use race_support::{bed, key, value};

fn costs_per_operation_match_section_6_1(t: Link) {
    let (_bed, mut mems) = bed(t, 2);
    let (a, rest) = mems.split_first_mut().unwrap();
    let b = &mut rest[0];
    // One subtable, large enough that nothing splits; rights lapse instead of being released
    // (the Patronus way: no round trip).
    let cfg = RaceConfig {
        initial_depth: 0,
        ..RaceConfig::default()
    };
    let root = race::create(a, cfg).unwrap();
    let o = ClientOptions::default();
    let mut w = race::open(a, root, o).unwrap();
    let mut r = race::open(b, root, o).unwrap();
    w.insert(a, &key(0), &value(0, 0)).unwrap(); // takes the subtable's right, 4 blocks
    let n = 40;
    let before = w.stats();
    for i in 1..=n {
        w.insert(a, &key(i), &value(i, 0)).unwrap();
    }
    let s = w.stats().since(&before);
    assert_eq!(
        s.allocations,
        n / 4,
        "an allocation per four inserts: {s:?}"
    );
    assert_eq!(s.allocated, n);
    assert_eq!(
        (s.writes, s.cas),
        (n, n),
        "one WRITE and one CAS per insert: {s:?}"
    );
    // Two round trips each; a fingerprint shared with another key costs a block read.
    assert!(s.batches >= 2 * n && s.batches <= 2 * n + 4, "{s:?}");
    assert!(s.acquires <= 2, "the subtable's right is reused: {s:?}");
    assert_eq!(s.rejected, 0);

    // Lookups by another client: its own right over each block, kept for the next lookup.
    r.get(b, &key(0)).unwrap();
    let before = r.stats();
    for i in 1..=n {
        assert_eq!(r.get(b, &key(i)).unwrap(), Some(value(i, 0)));
    }
    let s = r.stats().since(&before);
    assert!(
        s.acquires >= n && s.acquires <= n + 2,
        "one acquire per block: {s:?}"
    );
    assert!(s.batches >= 2 * n && s.batches <= 2 * n + 4, "{s:?}");
    let before = r.stats();
    for i in n - 20..=n {
        r.get(b, &key(i)).unwrap();
    }
    let s = r.stats().since(&before);
    assert_eq!(s.acquires, 0, "kept rights are reused: {s:?}");
    assert_eq!(s.batches, 2 * 21);

    // Update: a quarter allocate, a read-write right over the old block (to free it), the CAS.
    let before = w.stats();
    for i in 1..=8 {
        w.update(a, &key(i), &value(i, 1)).unwrap();
    }
    let s = w.stats().since(&before);
    assert_eq!(
        (s.allocations, s.frees, s.cas, s.writes),
        (2, 8, 8, 8),
        "{s:?}"
    );
    assert!(s.acquires >= 8 && s.acquires <= 10, "{s:?}");
    // Delete: the same without a new block.
    let before = w.stats();
    for i in 1..=8 {
        w.delete(a, &key(i)).unwrap();
    }
    let s = w.stats().since(&before);
    assert_eq!(
        (s.allocations, s.frees, s.cas, s.writes),
        (0, 8, 8, 0),
        "{s:?}"
    );
    eprintln!("costs: insert, lookup, update, delete as asserted");
}

both_transports!(costs_per_operation_match_section_6_1);
