//! What each operation costs in permission operations and one-sided operations (§6.1): an
//! insert is one WRITE (the block) and two READs of the buckets behind one doorbell, then one
//! CAS with the re-read behind it — two round trips — plus a quarter of an `allocate` (KV
//! blocks come four per round trip) and no `acquire` once the subtable's right is held (it is
//! reused across operations). A lookup of another client's block adds one `acquire`, which a
//! repeated lookup of the same key saves (the right is kept); the writer keeps its right over
//! the block it linked, so its own next lookup or update of the key needs none.
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
    // The writer's rights outlast the test (its own blocks' rights are reused below).
    let long = ClientOptions {
        lease: std::time::Duration::from_millis(900),
        ..o
    };
    let mut w = race::open(a, root, long).unwrap();
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

    // Update of its own blocks: a quarter allocate; the buckets (behind the new block's WRITE),
    // the old block validated and the CAS, a batch each; the free through the read-write right
    // the writer kept when it linked the old block (no acquire).
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
    assert_eq!(s.acquires, 0, "the writer's own rights are reused: {s:?}");
    assert_eq!(s.batches, 3 * 8, "{s:?}");
    // Its own lookups of them: the buckets, then the block through the kept right.
    let before = w.stats();
    for i in 1..=8 {
        assert_eq!(w.get(a, &key(i)).unwrap(), Some(value(i, 1)));
    }
    let s = w.stats().since(&before);
    assert_eq!((s.acquires, s.batches), (0, 16), "{s:?}");
    // Update of another client's blocks: a read-write right over each old block (to free it).
    let before = r.stats();
    for i in 9..=16 {
        r.update(b, &key(i), &value(i, 1)).unwrap();
    }
    let s = r.stats().since(&before);
    assert_eq!((s.frees, s.cas, s.writes), (8, 8, 8), "{s:?}");
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

/// With `free_batch`, the blocks updates unlink are freed together once the batch is full
/// (and the rest at `close`); lookups see the new values throughout.
fn retired_blocks_are_freed_in_batches(t: Link) {
    let (_bed, mut mems) = bed(t, 1);
    let a = &mut mems[0];
    let cfg = RaceConfig {
        initial_depth: 0,
        ..RaceConfig::default()
    };
    let root = race::create(a, cfg).unwrap();
    let o = ClientOptions {
        lease: std::time::Duration::from_millis(900),
        free_batch: 4,
        ..ClientOptions::default()
    };
    let mut w = race::open(a, root, o).unwrap();
    for i in 0..6 {
        w.insert(a, &key(i), &value(i, 0)).unwrap();
    }
    let before = w.stats();
    for i in 0..3 {
        w.update(a, &key(i), &value(i, 1)).unwrap();
        assert_eq!(w.get(a, &key(i)).unwrap(), Some(value(i, 1)));
    }
    assert_eq!(
        w.stats().since(&before).frees,
        0,
        "three wait for the fourth"
    );
    w.update(a, &key(3), &value(3, 1)).unwrap();
    let s = w.stats().since(&before);
    assert_eq!(
        (s.frees, s.acquires),
        (4, 0),
        "a full batch is freed: {s:?}"
    );
    w.update(a, &key(4), &value(4, 1)).unwrap();
    assert_eq!(w.stats().since(&before).frees, 4);
    for i in 0..5 {
        assert_eq!(w.get(a, &key(i)).unwrap(), Some(value(i, 1)));
    }
    w.close(a).unwrap();
}

/// With `speculate`, a client reads a key's block beside its buckets where it last saw the
/// key's entry: a lookup of an unchanged entry is one round trip, an update two. When another
/// client replaced the entry, the guess fails, the lookup validates as before and still
/// answers the new value.
fn guessing_clients_look_up_a_hot_key_in_one_round_trip(t: Link) {
    let (_bed, mut mems) = bed(t, 2);
    let (a, rest) = mems.split_first_mut().unwrap();
    let b = &mut rest[0];
    let cfg = RaceConfig {
        initial_depth: 0,
        ..RaceConfig::default()
    };
    let root = race::create(a, cfg).unwrap();
    let o = ClientOptions {
        lease: std::time::Duration::from_millis(900),
        read_lease: std::time::Duration::from_millis(900),
        speculate: true,
        ..ClientOptions::default()
    };
    let mut w = race::open(a, root, o).unwrap();
    let mut r = race::open(b, root, o).unwrap();
    let n = 8;
    for i in 0..n {
        w.insert(a, &key(i), &value(i, 0)).unwrap();
        w.update(a, &key(i), &value(i, 1)).unwrap(); // sees the entry: guesses from now on
    }
    let before = w.stats();
    for i in 0..n {
        w.update(a, &key(i), &value(i, 2)).unwrap();
        assert_eq!(w.get(a, &key(i)).unwrap(), Some(value(i, 2)));
    }
    let s = w.stats().since(&before);
    assert_eq!(
        (s.batches, s.guesses, s.guesses_right, s.acquires),
        (3 * n, 2 * n, 2 * n, 0),
        "an update in two round trips, a lookup in one: {s:?}"
    );

    // Another client: the first lookup validates (and acquires), the next ones guess.
    for i in 0..n {
        assert_eq!(r.get(b, &key(i)).unwrap(), Some(value(i, 2)));
    }
    let before = r.stats();
    for _ in 0..3 {
        for i in 0..n {
            assert_eq!(r.get(b, &key(i)).unwrap(), Some(value(i, 2)));
        }
    }
    let s = r.stats().since(&before);
    assert_eq!(
        (s.batches, s.guesses_right, s.acquires),
        (3 * n, 3 * n, 0),
        "{s:?}"
    );

    // The writer replaces one key: the reader's guess fails once, its answer does not.
    w.update(a, &key(0), &value(0, 3)).unwrap();
    let before = r.stats();
    assert_eq!(r.get(b, &key(0)).unwrap(), Some(value(0, 3)));
    let s = r.stats().since(&before);
    assert_eq!((s.guesses, s.guesses_right), (1, 0), "{s:?}");
    assert_eq!(s.acquires, 1, "a right over the new block: {s:?}");
    // One wrong guess among many right ones: the new entry is guessed, and right.
    let before = r.stats();
    assert_eq!(r.get(b, &key(0)).unwrap(), Some(value(0, 3)));
    let s = r.stats().since(&before);
    assert_eq!((s.batches, s.guesses_right), (1, 1), "{s:?}");
}

patronus_core::both_transports!(
    costs_per_operation_match_section_6_1,
    retired_blocks_are_freed_in_batches,
    guessing_clients_look_up_a_hot_key_in_one_round_trip
);
