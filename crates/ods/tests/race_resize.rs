//! A resizer that stops mid-split (fail-stop: its connection stays open, it never releases
//! anything) — Fig 8a. With the lease lock, writers to the subtable wait only until its lock's
//! lease ends; then one of them takes the lock and finishes the split from the recorded
//! phase. With the vanilla lock word they wait forever. Readers are never blocked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, Insert, LockMode, Phase, RaceError, Stage, TableClient};
use race_support::faulty::Faulty;
use race_support::{Mem, bed, key, opts, small, value};
use std::time::Duration;

/// Inserts keys from `first` through `r` until one of its inserts starts a split; steps that
/// split into `phase`, then `extra` steps more; returns the stopped insert (never stepped
/// again) and the keys inserted before it.
fn stop_a_split(
    r: &mut TableClient<Mem>,
    mem: &mut Mem,
    first: u64,
    phase: Phase,
    extra: usize,
) -> (Insert<Mem>, Vec<u64>) {
    let mut done = Vec::new();
    for i in first..first + 200 {
        let mut op = Insert::new(r, &key(i), &value(i, 0)).unwrap();
        loop {
            if let Some(s) = op.split() {
                if s.phase() == phase {
                    for _ in 0..extra {
                        assert!(op.step(r, mem).is_pending());
                        race_support::settle(r, mem);
                    }
                    return (op, done);
                }
            }
            if op.step(r, mem).is_ready() {
                done.push(i);
                break;
            }
            race_support::settle(r, mem);
        }
    }
    panic!("no split reached {phase:?}");
}

/// Steps `op` `n` times, expecting it to keep waiting.
fn stays_waiting(op: &mut Insert<Mem>, t: &mut TableClient<Mem>, mem: &mut Mem, n: usize) {
    for _ in 0..n {
        assert!(
            op.step(t, mem).is_pending(),
            "it finished while the lock was held"
        );
        race_support::settle(t, mem);
    }
    assert!(
        matches!(op.stage(), Stage::Waiting | Stage::Splitting),
        "{:?}",
        op.stage()
    );
}

fn a_stopped_resizer_blocks_writers_only_until_its_lease_ends(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let all = [
        (Phase::Freezing, 0),
        (Phase::Freezing, 1),
        (Phase::Copying, 0),
        (Phase::Copying, 2),
        (Phase::Publishing, 0),
        (Phase::Publishing, 1),
        (Phase::Publishing, 3),
        (Phase::Thawing, 0),
        (Phase::Thawing, 1),
    ];
    // Control requests cost milliseconds over the test bed's TCP: a few points there.
    let points: Vec<_> = match t {
        Link::InProc => all.to_vec(),
        Link::Tcp => vec![all[1], all[5], all[7]],
    };
    let more = 30;
    for (n, (phase, extra)) in points.into_iter().enumerate() {
        let root = race::create(rm, small(LockMode::Lease)).unwrap();
        let mut r = race::open(rm, root, o).unwrap();
        let mut w = race::open(wm, root, o).unwrap();
        let first = 10_000 * n as u64;
        let (stopped, before) = stop_a_split(&mut r, rm, first, phase, extra);
        // A writer waits: the stopped resizer's lock is alive.
        let k = first + 5_000;
        let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
        stays_waiting(&mut op, &mut w, wm, 60);
        // Readers are not blocked.
        for &i in &before {
            assert_eq!(
                w.get(wm, &key(i)).unwrap(),
                Some(value(i, 0)),
                "{phase:?}+{extra}: key {i}"
            );
        }
        // The lock's lease runs out; the writer takes the lock and finishes the split.
        bed.clock
            .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
        race_support::run(&mut w, wm, |t, m| op.step(t, m)).unwrap();
        assert_eq!(
            (w.stats().takeovers, w.stats().recoveries),
            (1, 1),
            "{phase:?}+{extra}: {:?}",
            w.stats()
        );
        for i in k + 1..k + more {
            w.insert(wm, &key(i), &value(i, 1)).unwrap();
        }
        for &i in &before {
            assert_eq!(
                w.get(wm, &key(i)).unwrap(),
                Some(value(i, 0)),
                "{phase:?}+{extra}: key {i}"
            );
        }
        for i in k..k + more {
            assert_eq!(
                w.get(wm, &key(i)).unwrap(),
                Some(value(i, 1)),
                "{phase:?}+{extra}: key {i}"
            );
        }
        let audit = w.audit(wm).unwrap();
        assert_eq!(
            audit.keys,
            before.len() as u64 + more,
            "{phase:?}+{extra}: {audit:?}"
        );
        assert_eq!(
            (
                audit.duplicates,
                audit.unclaimed,
                audit.unreadable,
                audit.frozen
            ),
            (0, 0, 0, 0),
            "{phase:?}+{extra}: {audit:?}"
        );
        drop(stopped); // never stepped again: the stopped resizer's handles just go away
    }
}

fn a_stopped_resizer_holding_a_lock_word_stalls_writers_for_good(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Word)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    let (_stopped, before) = stop_a_split(&mut r, rm, 0, Phase::Publishing, 0);
    let mut op = Insert::new(&w, &key(5_000), &value(5_000, 1)).unwrap();
    stays_waiting(&mut op, &mut w, wm, 60);
    // However long it waits, the lock word stays taken.
    for _ in 0..3 {
        bed.clock.advance(Duration::from_millis(50));
        stays_waiting(&mut op, &mut w, wm, 60);
    }
    assert_eq!(w.stats().recoveries, 0);
    assert!(matches!(
        w.insert(wm, &key(5_001), &value(5_001, 1)),
        Err(RaceError::Stalled { .. })
    ));
    // Readers still read.
    for &i in &before {
        assert_eq!(w.get(wm, &key(i)).unwrap(), Some(value(i, 0)));
    }
}

/// A resizer that is only slow: its lock's lease ends mid-split, another client finishes the
/// split, and when the slow one resumes it stops without another write (its next step finds
/// the lease over) and its insert completes in the split table.
fn a_slow_resizer_whose_lease_ended_stops_and_resumes_safely(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Lease)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    let (mut slow, before) = stop_a_split(&mut r, rm, 0, Phase::Publishing, 1);
    let slow_key = before.last().map_or(0, |k| k + 1);
    bed.clock
        .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
    let k = 5_000;
    let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
    race_support::run(&mut w, wm, |t, m| op.step(t, m)).unwrap();
    assert_eq!(w.stats().recoveries, 1);
    // The slow resizer wakes up: its split stops (lock lost), its insert goes on.
    race_support::run(&mut r, rm, |t, m| slow.step(t, m)).unwrap();
    assert_eq!(r.stats().splits, 0, "{:?}", r.stats());
    assert_eq!(w.get(wm, &key(slow_key)).unwrap(), Some(value(slow_key, 0)));
    assert_eq!(w.get(wm, &key(k)).unwrap(), Some(value(k, 1)));
    let audit = w.audit(wm).unwrap();
    assert_eq!(audit.keys, before.len() as u64 + 2, "{audit:?}");
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

/// The key class a stopped split reports names exactly the writers it holds up: inserts of
/// keys in it wait, every other insert completes (splitting other subtables as it needs).
fn a_stopped_splits_key_class_names_the_writers_it_holds_up(t: Link) {
    let (_bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Lease)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    // Enough keys for several subtables, so the stopped split holds up only some keys.
    for i in 0..60 {
        r.insert(rm, &key(i), &value(i, 0)).unwrap();
    }
    let (stopped, _) = stop_a_split(&mut r, rm, 60, Phase::Copying, 1);
    let split = stopped.split().unwrap();
    let class = split.key_class().unwrap();
    assert!(class.depth >= 1, "{class:?}");
    assert_ne!(split.subtable(), 0);
    let (mut held, mut free) = (0, 0);
    for k in 5_000..5_040 {
        let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
        if class.contains(&w, &key(k)) {
            stays_waiting(&mut op, &mut w, wm, 30);
            held += 1;
        } else {
            race_support::run(&mut w, wm, |t, m| op.step(t, m)).unwrap();
            free += 1;
        }
    }
    assert!(held > 0 && free > 0, "held {held}, free {free}");
    drop(stopped);
}

/// A resizer's rights over the blocks it classifies are short (`read_lease`): when they end
/// before it reads the blocks (a slow resizer), it acquires them again — it never takes a block
/// it could not read for a freed one and drops its entry.
fn a_resizer_whose_block_rights_ended_reads_them_again(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Lease)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    // Two classification steps: the block acquires started, then the first answers taken
    // (block rights held, not read yet).
    let (mut slow, before) = stop_a_split(&mut r, rm, 0, Phase::Copying, 2);
    // They end; the lock and the split rights (longer leases) do not.
    bed.clock.advance(o.read_lease + Duration::from_micros(100));
    assert!(o.read_lease + Duration::from_micros(100) + o.margin < o.split_lease);
    race_support::run(&mut r, rm, |t, m| slow.step(t, m)).unwrap();
    assert_eq!(r.stats().splits, 1, "{:?}", r.stats());
    let slow_key = before.last().map_or(0, |k| k + 1);
    for &i in before.iter().chain([&slow_key]) {
        assert_eq!(w.get(wm, &key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    let audit = w.audit(wm).unwrap();
    assert_eq!(audit.keys, before.len() as u64 + 1, "{audit:?}");
    assert_eq!((audit.unclaimed, audit.frozen), (0, 0), "{audit:?}");
}

/// With a lock word, the right over the lock object (the word is written through it) is
/// renewed with the split rights: a resizer that keeps stepping while time passes, more than
/// its split lease in all, finishes its split itself.
fn a_resizer_with_a_lock_word_keeps_its_lock_right_alive(t: Link) {
    let (bed, mut mems) = bed(t, 1);
    let rm = &mut mems[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Word)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let (mut op, before) = stop_a_split(&mut r, rm, 0, Phase::Copying, 1);
    for _ in 0..3 {
        bed.clock.advance(o.split_lease - o.margin / 2);
        assert!(op.step(&mut r, rm).is_pending());
    }
    race_support::run(&mut r, rm, |t, m| op.step(t, m)).unwrap();
    assert_eq!(
        (r.stats().splits, r.stats().recoveries),
        (1, 0),
        "{:?}",
        r.stats()
    );
    let audit = r.audit(rm).unwrap();
    assert_eq!(audit.keys, before.len() as u64 + 1, "{audit:?}");
    assert_eq!((audit.unclaimed, audit.frozen), (0, 0), "{audit:?}");
}

/// With a lock word, a resizer that is only slow — every right of its split ran out, the
/// right over the lock object too — stops when it resumes and gives the word back (through a
/// new right: the word is still its own), so the split gets finished; until then writers wait.
fn a_slow_resizer_gives_its_lock_word_back(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = opts();
    let root = race::create(rm, small(LockMode::Word)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    let (mut slow, before) = stop_a_split(&mut r, rm, 0, Phase::Copying, 1);
    bed.clock
        .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
    let k = 5_000;
    let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
    stays_waiting(&mut op, &mut w, wm, 30);
    // It resumes: its split stops and gives the word back; it finishes the split itself
    // (taking the word again as a waiter), or the writer does.
    race_support::run(&mut r, rm, |t, m| slow.step(t, m)).unwrap();
    race_support::run(&mut w, wm, |t, m| op.step(t, m)).unwrap();
    assert_eq!(r.stats().splits, 0, "{:?}", r.stats());
    assert_eq!(r.stats().recoveries + w.stats().recoveries, 1);
    let slow_key = before.last().map_or(0, |k| k + 1);
    for &i in before.iter().chain([&slow_key]) {
        assert_eq!(w.get(wm, &key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert_eq!(w.get(wm, &key(k)).unwrap(), Some(value(k, 1)));
    let audit = w.audit(wm).unwrap();
    assert_eq!(audit.keys, before.len() as u64 + 2, "{audit:?}");
    assert_eq!((audit.unclaimed, audit.frozen), (0, 0), "{audit:?}");
}

/// A writer whose polls are slow (a loaded machine: a poll is a round trip) tries the lock of
/// a split its resizer left once two lock leases passed, however few polls that was. Failed
/// before: the try came only every `takeover_after` polls — on a loaded machine a minute
/// while the lock was free and every writer of the subtable waited.
fn a_waiting_writer_tries_a_stopped_splits_lock_after_a_time_not_only_polls(t: Link) {
    let (bed, mut mems) = bed(t, 2);
    let (rm, rest) = mems.split_first_mut().unwrap();
    let wm = &mut rest[0];
    let o = race::ClientOptions {
        takeover_after: u32::MAX,
        ..opts()
    };
    let root = race::create(rm, small(LockMode::Lease)).unwrap();
    let mut r = race::open(rm, root, o).unwrap();
    let mut w = race::open(wm, root, o).unwrap();
    let (stopped, _) = stop_a_split(&mut r, rm, 0, Phase::Copying, 0);
    let k = 5_000;
    let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
    stays_waiting(&mut op, &mut w, wm, 20);
    // Two lock leases pass (the resizer's lock ended after one).
    bed.clock
        .advance((o.split_lease + o.fence_gap) * 2 + Duration::from_millis(1));
    let mut done = None;
    for _ in 0..500 {
        if let std::task::Poll::Ready(x) = op.step(&mut w, wm) {
            done = Some(x);
            break;
        }
        race_support::settle(&w, wm);
    }
    assert_eq!(
        done,
        Some(Ok(())),
        "still {:?}: {:?}",
        op.stage(),
        w.stats()
    );
    assert_eq!(w.stats().takeovers, 1, "{:?}", w.stats());
    assert_eq!(w.get(wm, &key(k)).unwrap(), Some(value(k, 1)));
    drop(stopped);
}

/// A writer waiting on a live split only tries its lock, never waits for it: with Patronus, a
/// waiting exclusive acquire makes the node refuse the holder's extensions, and a live split
/// would be taken from its resizer. The resizer then finishes its own split.
fn a_waiting_writer_only_tries_a_live_splits_lock(t: Link) {
    let (_bed, mems) = bed(t, 2);
    let mut mems = mems.into_iter();
    let (mut rm, mut wm) = (mems.next().unwrap(), Faulty::new(mems.next().unwrap()));
    let o = opts();
    let root = race::create(&mut rm, small(LockMode::Lease)).unwrap();
    let mut r = race::open(&mut rm, root, o).unwrap();
    let mut w = race::open(&mut wm, root, o).unwrap();
    let (mut live, before) = stop_a_split(&mut r, &mut rm, 0, Phase::Copying, 0);
    let k = 5_000;
    let mut op = Insert::new(&w, &key(k), &value(k, 1)).unwrap();
    for _ in 0..(8 * o.takeover_after) {
        assert!(
            op.step(&mut w, &mut wm).is_pending(),
            "done under a held lock"
        );
        race_support::settle(&w, &mut wm);
    }
    assert!(wm.exclusive_tries >= 2, "{wm:?}");
    assert_eq!(wm.exclusive_acquires, 0, "a takeover waited for the lock");
    race_support::run(&mut r, &mut rm, |t, m| live.step(t, m)).unwrap();
    race_support::run(&mut w, &mut wm, |t, m| op.step(t, m)).unwrap();
    assert!(r.stats().splits >= 1, "{:?}", r.stats());
    assert_eq!(w.stats().takeovers, 0, "{:?}", w.stats());
    for &i in before.iter().chain([&k]) {
        let v = if i == k { value(k, 1) } else { value(i, 0) };
        assert_eq!(w.get(&mut wm, &key(i)).unwrap(), Some(v), "key {i}");
    }
}

patronus_core::both_transports!(
    a_waiting_writer_tries_a_stopped_splits_lock_after_a_time_not_only_polls,
    a_waiting_writer_only_tries_a_live_splits_lock,
    a_resizer_with_a_lock_word_keeps_its_lock_right_alive,
    a_slow_resizer_gives_its_lock_word_back,
    a_resizer_whose_block_rights_ended_reads_them_again,
    a_stopped_splits_key_class_names_the_writers_it_holds_up,
    a_slow_resizer_whose_lease_ended_stops_and_resumes_safely,
    a_stopped_resizer_blocks_writers_only_until_its_lease_ends,
    a_stopped_resizer_holding_a_lock_word_stalls_writers_for_good
);
