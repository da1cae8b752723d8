//! The delayed-client property (§6.1, "necessity for protection"): a client that still holds
//! a pointer to a KV block, and a right over it, when another client frees the block never
//! sees another key's bytes through that right and never changes them. Before the block is
//! reused it can at most read the same key's stale value (and the reader's validation
//! rejects it: the slot moved on); once it is reused by another key, the NIC refuses the
//! access and the reader retries from the buckets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::race::{self, Insert, LockMode, Lookup, RaceConfig, Stage, TableClient, Update};
use patronus_ods::{MemError, RemoteMemory};
use race_support::{Mem, bed, key, opts, reusing_bed, run, settle, small, value};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(100);

fn roomy() -> RaceConfig {
    RaceConfig {
        groups: 8,
        ..small(LockMode::Lease)
    }
}

/// Inserts `k` through an `Insert` op; returns the block it linked.
fn insert(t: &mut TableClient<Mem>, mem: &mut Mem, k: &[u8], v: &[u8]) -> u64 {
    let mut op = Insert::new(t, k, v).unwrap();
    let mut block = None;
    run(t, mem, |t, m| {
        let r = op.step(t, m);
        block = block.or(op.block_addr());
        r
    })
    .unwrap();
    block.unwrap()
}

/// Steps a lookup of `k` until it holds a right over the block and the next step is the batch
/// that re-reads the slot and reads the block.
fn lookup_up_to_the_block_read(t: &mut TableClient<Mem>, mem: &mut Mem, k: &[u8]) -> Lookup {
    let mut op = Lookup::new(t, k);
    for _ in 0..100 {
        if op.stage(t) == Stage::Reading {
            return op;
        }
        assert!(op.step(t, mem).is_pending());
        settle(t, mem);
    }
    panic!("the lookup never got to its block read");
}

/// Inserts other keys through `d` until one of them lands in block `x`; returns that key.
fn reuse(d: &mut TableClient<Mem>, mem: &mut Mem, x: u64) -> u64 {
    for i in 1000..1200 {
        if insert(d, mem, &key(i), &value(i, 0)) == x {
            return i;
        }
    }
    panic!("block {x:#x} was never reused");
}

fn before_reuse_a_delayed_reader_sees_at_most_the_same_key(t: Link) {
    let (_bed, mut mems) = bed(t, 3);
    let (a, rest) = mems.split_first_mut().unwrap();
    let (b, rest) = rest.split_first_mut().unwrap();
    let c = &mut rest[0];
    let root = race::create(a, roomy()).unwrap();
    let (mut ta, mut tb, mut tc) = (
        race::open(a, root, opts()).unwrap(),
        race::open(b, root, opts()).unwrap(),
        race::open(c, root, opts()).unwrap(),
    );
    let x = insert(&mut ta, a, &key(1), &value(1, 1));
    // B is delayed just before reading the block, holding a right over it.
    let mut delayed = lookup_up_to_the_block_read(&mut tb, b, &key(1));
    // A raw right over the same block, to see what the NIC does with it after the free.
    let raw = b.acquire(x, 64, LEASE, Access::Read, Mode::Shared).unwrap();
    // C updates the key: a new block, and the old one freed.
    tc.update(c, &key(1), &value(1, 2)).unwrap();
    let before = tb.stats();
    let got = run(&mut tb, b, |t, m| delayed.step(t, m)).unwrap();
    assert_eq!(
        got,
        Some(value(1, 2)),
        "the delayed reader finds the new value"
    );
    assert!(
        tb.stats().since(&before).retries >= 1,
        "its first read was refused or stale"
    );
    // Through the old right: refused, or (freed, not reused: delayed unbinding) at most the
    // same key's old bytes — never another key's.
    match b.read(&raw, 0, 64) {
        Err(MemError::Rejected) => {}
        Ok(bytes) => assert!(
            bytes.windows(9).any(|w| w == &key(1)[..9]) || bytes.iter().all(|&x| x == 0),
            "stale bytes of another key: {bytes:?}"
        ),
        Err(e) => panic!("{e:?}"),
    }
    let _ = b.relinquish(raw);
}

fn after_reuse_a_delayed_reader_is_refused_and_retries(t: Link) {
    let (_bed, mut mems) = reusing_bed(t, 4);
    let (a, rest) = mems.split_first_mut().unwrap();
    let (b, rest) = rest.split_first_mut().unwrap();
    let (c, rest) = rest.split_first_mut().unwrap();
    let d = &mut rest[0];
    let root = race::create(a, roomy()).unwrap();
    let mut ta = race::open(a, root, opts()).unwrap();
    let mut tb = race::open(b, root, opts()).unwrap();
    let mut tc = race::open(c, root, opts()).unwrap();
    let mut td = race::open(d, root, opts()).unwrap();
    let x = insert(&mut ta, a, &key(1), &value(1, 1));
    let mut delayed = lookup_up_to_the_block_read(&mut tb, b, &key(1));
    // Raw rights over the block, read and read-write, held across the free and the reuse.
    let raw_read = b.acquire(x, 64, LEASE, Access::Read, Mode::Shared).unwrap();
    let raw_write = b
        .acquire(x, 64, LEASE, Access::ReadWrite, Mode::Shared)
        .unwrap();
    tc.update(c, &key(1), &value(1, 2)).unwrap();
    // D's inserts reuse the freed block for another key.
    let k2 = reuse(&mut td, d, x);
    let before = tb.stats();
    let got = run(&mut tb, b, |t, m| delayed.step(t, m)).unwrap();
    assert_eq!(got, Some(value(1, 2)));
    let spent = tb.stats().since(&before);
    assert!(
        spent.rejected >= 1,
        "the NIC refused the old right: {spent:?}"
    );
    // The old rights read nothing and change nothing of the block's new key.
    assert_eq!(b.read(&raw_read, 0, 64), Err(MemError::Rejected));
    assert_eq!(b.write(&raw_write, 0, &[0xee; 64]), Err(MemError::Rejected));
    assert_eq!(b.cas(&raw_write, 0, 0, 1).err(), Some(MemError::Rejected));
    let _ = b.relinquish(raw_read);
    let _ = b.relinquish(raw_write);
    assert_eq!(
        ta.get(a, &key(k2)).unwrap(),
        Some(value(k2, 0)),
        "the new key's block is intact"
    );
    assert_eq!(ta.get(a, &key(1)).unwrap(), Some(value(1, 2)));
}

fn a_delayed_updater_never_frees_or_changes_a_reused_block(t: Link) {
    let (_bed, mut mems) = reusing_bed(t, 4);
    let (a, rest) = mems.split_first_mut().unwrap();
    let (u, rest) = rest.split_first_mut().unwrap();
    let (c, rest) = rest.split_first_mut().unwrap();
    let d = &mut rest[0];
    let root = race::create(a, roomy()).unwrap();
    let mut ta = race::open(a, root, opts()).unwrap();
    let mut tu = race::open(u, root, opts()).unwrap();
    let mut tc = race::open(c, root, opts()).unwrap();
    let mut td = race::open(d, root, opts()).unwrap();
    let x = insert(&mut ta, a, &key(1), &value(1, 1));
    // U validated the entry (under its own read-write right over the block) and is about to
    // CAS the slot when it stalls.
    let mut delayed = Update::new(&tu, &key(1), &value(1, 3)).unwrap();
    for _ in 0..100 {
        if delayed.stage() == Stage::Swapping {
            break;
        }
        assert!(delayed.step(&mut tu, u).is_pending());
        settle(&tu, u);
    }
    assert_eq!(delayed.stage(), Stage::Swapping);
    tc.update(c, &key(1), &value(1, 2)).unwrap();
    let k2 = reuse(&mut td, d, x);
    // U resumes: its CAS finds the slot changed; it starts over and updates the key for real.
    run(&mut tu, u, |t, m| delayed.step(t, m)).unwrap();
    assert_eq!(ta.get(a, &key(1)).unwrap(), Some(value(1, 3)));
    assert_eq!(
        ta.get(a, &key(k2)).unwrap(),
        Some(value(k2, 0)),
        "block {x:#x} kept its new key"
    );
    let audit = ta.audit(a).unwrap();
    assert_eq!(
        (audit.duplicates, audit.unreadable, audit.unclaimed),
        (0, 0, 0),
        "{audit:?}"
    );
}

/// A reader keeps its right over a block it read. The block is freed and its address reused
/// by a later write of the *same* key, so the slot holds the very same word again (ABA): the
/// kept right is refused (the address was reused), and the reader acquires the address again
/// and finds the key — it does not take the slot for a stale copy and report the key absent.
fn a_reader_whose_kept_right_is_refused_finds_its_key_rewritten_at_the_same_address(t: Link) {
    let (_bed, mut mems) = reusing_bed(t, 3);
    let (a, rest) = mems.split_first_mut().unwrap();
    let (b, rest) = rest.split_first_mut().unwrap();
    let c = &mut rest[0];
    let root = race::create(a, roomy()).unwrap();
    let mut ta = race::open(a, root, opts()).unwrap();
    let mut tb = race::open(b, root, opts()).unwrap();
    let mut tc = race::open(c, root, opts()).unwrap();
    let x = insert(&mut ta, a, &key(1), &value(1, 1));
    assert_eq!(tb.get(b, &key(1)).unwrap(), Some(value(1, 1)));
    // C updates the key until one of its new blocks lands at x again.
    let mut latest = None;
    for v in 2..200 {
        let mut op = Update::new(&tc, &key(1), &value(1, v)).unwrap();
        let mut block = None;
        run(&mut tc, c, |t, m| {
            let r = op.step(t, m);
            block = block.or(op.block_addr());
            r
        })
        .unwrap();
        if block == Some(x) {
            latest = Some(v);
            break;
        }
    }
    let v = latest.unwrap_or_else(|| panic!("block {x:#x} was never reused for the key"));
    let before = tb.stats();
    assert_eq!(
        tb.get(b, &key(1)).unwrap(),
        Some(value(1, v)),
        "the key, rewritten at the address the reader kept a right over"
    );
    assert!(
        tb.stats().since(&before).rejected >= 1,
        "the kept right was refused: {:?}",
        tb.stats().since(&before)
    );
}

patronus_core::both_transports!(
    a_reader_whose_kept_right_is_refused_finds_its_key_rewritten_at_the_same_address,
    before_reuse_a_delayed_reader_sees_at_most_the_same_key,
    after_reuse_a_delayed_reader_is_refused_and_retries,
    a_delayed_updater_never_frees_or_changes_a_reused_block
);
