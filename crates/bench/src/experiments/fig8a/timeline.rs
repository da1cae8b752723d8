//! What a Figure 8(a) run records, per wall-clock epoch: the inserts that completed and the
//! splits that finished; and around the crash: when it happened, which keys it holds up, and
//! when those keys were first inserted again.
//!
//! The loaders write it as they go; only the harness reads it. In particular the crash record
//! is measurement only: no loader consults it to decide anything (a loader learns of the
//! crash only as RACE makes it: its inserts wait on frozen slots).

use crate::experiments::driver::now;
use parking_lot::Mutex;
use patronus_ods::race::KeyClass;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The crash, as the crashing loader saw it.
#[derive(Clone, Copy, Debug)]
pub struct Crash {
    /// Since the run's start.
    pub at: Duration,
    /// The keys the frozen subtable claims.
    pub class: KeyClass,
    /// The subtable it was splitting.
    pub subtable: u64,
    /// The loader that crashed.
    pub loader: usize,
}

/// What happened after the crash (times since the run's start).
#[derive(Clone, Copy, Debug, Default)]
pub struct AfterCrash {
    /// Inserts of keys in the crashed class that began after the crash and completed.
    pub class_inserts: u64,
    /// The first of them.
    pub first_class_insert: Option<Duration>,
    /// Inserts of keys in the class that began before the crash and completed after it
    /// (their entries were linked before the freeze).
    pub class_in_flight: u64,
    /// The first time a writer of the crashed subtable's keys took the lock of a split in
    /// progress (the crashed one): the orphaned lock re-granted.
    pub first_takeover: Option<Duration>,
    /// The first time such a writer finished a split for another resizer (the crashed one).
    pub first_recovery: Option<Duration>,
}

/// Per-epoch counts and the crash, shared by a run's loaders.
#[derive(Debug)]
pub struct Timeline {
    epoch: Duration,
    start: OnceLock<Instant>,
    inserts: Vec<AtomicU64>,
    splits: Vec<AtomicU64>,
    /// Inserts given up: the key's subtable is at the maximum depth and full.
    full: AtomicU64,
    /// Inserts that failed (and were tried again).
    failed: AtomicU64,
    /// Inserts acknowledged, in the epochs or after the last.
    acked: AtomicU64,
    crash: OnceLock<Crash>,
    after: Mutex<AfterCrash>,
    /// Per loader: when its insert in progress began, µs + 1 (0: none).
    busy: Vec<AtomicU64>,
}

impl Timeline {
    /// `epochs` epochs of `epoch` each, for `loaders` loaders.
    pub fn new(epochs: usize, epoch: Duration, loaders: usize) -> Self {
        Timeline {
            epoch,
            start: OnceLock::new(),
            inserts: (0..epochs).map(|_| AtomicU64::new(0)).collect(),
            splits: (0..epochs).map(|_| AtomicU64::new(0)).collect(),
            full: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            crash: OnceLock::new(),
            after: Mutex::new(AfterCrash::default()),
            busy: (0..loaders).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Time since the run started (the first call starts it).
    pub fn elapsed(&self) -> Duration {
        self.start.get_or_init(now).elapsed()
    }

    /// Whole epochs in `t` (past the last too).
    pub fn epochs_at(&self, t: Duration) -> u64 {
        (t.as_nanos() / self.epoch.as_nanos().max(1)) as u64
    }

    /// The epoch `t` falls in (`None` past the last).
    pub fn epoch_of(&self, t: Duration) -> Option<usize> {
        let i = (t.as_nanos() / self.epoch.as_nanos().max(1)) as usize;
        (i < self.inserts.len()).then_some(i)
    }

    /// Records an insert completed at `t` (begun at `began`) whose key is in the crashed class
    /// (if there was a crash) or not.
    pub fn inserted(&self, t: Duration, began: Duration, in_class: bool) {
        self.acked.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = self.epoch_of(t) {
            self.inserts[i].fetch_add(1, Ordering::Relaxed);
        }
        let Some(c) = self.crash.get() else {
            return;
        };
        if !in_class || t < c.at {
            return;
        }
        let mut a = self.after.lock();
        if began >= c.at {
            a.class_inserts += 1;
            a.first_class_insert.get_or_insert(t);
        } else {
            a.class_in_flight += 1;
        }
    }

    /// Records what a loader's table client counted since its last report, at `t`: splits
    /// finished (`recovered` of them for another resizer), and locks of splits in progress
    /// taken over — while inserting a key of the crashed subtable (`in_class`) or not.
    pub fn progress(
        &self,
        t: Duration,
        splits: u64,
        recovered: u64,
        took_over: u64,
        in_class: bool,
    ) {
        if splits > 0 {
            if let Some(i) = self.epoch_of(t) {
                self.splits[i].fetch_add(splits, Ordering::Relaxed);
            }
        }
        let after = self.crash.get().is_some_and(|c| t >= c.at);
        if in_class && after && (recovered > 0 || took_over > 0) {
            let mut a = self.after.lock();
            if recovered > 0 {
                a.first_recovery.get_or_insert(t);
            }
            if took_over > 0 {
                a.first_takeover.get_or_insert(t);
            }
        }
    }

    /// Records that loader `id` has an insert in progress, begun at `began` (or none).
    pub fn busy(&self, id: usize, began: Option<Duration>) {
        let v = began.map_or(0, |b| b.as_micros() as u64 + 1);
        if let Some(slot) = self.busy.get(id) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// Loaders (the crashed one aside) whose insert in progress at `t` began `age` or more
    /// before it: stuck.
    pub fn stuck(&self, t: Duration, age: Duration) -> usize {
        let crashed = self.crash.get().map(|c| c.loader);
        let (t, age) = (t.as_micros() as u64 + 1, age.as_micros() as u64);
        self.busy
            .iter()
            .enumerate()
            .filter(|(i, b)| {
                let b = b.load(Ordering::Relaxed);
                Some(*i) != crashed && b != 0 && t >= b + age
            })
            .count()
    }

    /// Records an insert given up because the table is full where the key belongs.
    pub fn table_full(&self) {
        self.full.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a failed insert; the failures so far.
    pub fn failed(&self) -> u64 {
        self.failed.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Inserts acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Inserts that failed so far.
    pub fn failures(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Records the crash (the first one only); whether this was it.
    pub fn crashed(&self, c: Crash) -> bool {
        self.crash.set(c).is_ok()
    }

    /// The crash, if one happened.
    pub fn crash(&self) -> Option<Crash> {
        self.crash.get().copied()
    }

    /// Inserts completed per epoch.
    pub fn inserts(&self) -> Vec<u64> {
        self.inserts
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// Splits finished per epoch.
    pub fn splits(&self) -> Vec<u64> {
        self.splits
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// Inserts given up because the table was full.
    pub fn full(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
    }

    /// What happened after the crash.
    pub fn after_crash(&self) -> AfterCrash {
        *self.after.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn counts_per_epoch_and_around_the_crash() {
        let t = Timeline::new(10, ms(5), 3);
        assert_eq!((t.epoch_of(ms(4)), t.epoch_of(ms(5))), (Some(0), Some(1)));
        assert_eq!((t.epoch_of(ms(50)), t.epochs_at(ms(50))), (None, 10));
        t.inserted(ms(1), ms(0), true); // before any crash: no class to be in
        t.progress(ms(2), 2, 0, 0, false);
        let class = KeyClass {
            depth: 1,
            suffix: 0,
        };
        let crash = Crash {
            at: ms(20),
            class,
            subtable: 0x40,
            loader: 1,
        };
        assert!(t.crashed(crash));
        assert!(!t.crashed(crash), "one crash per run");
        t.inserted(ms(21), ms(19), true); // linked before the freeze
        t.inserted(ms(22), ms(21), false); // another subtable's key
        t.progress(ms(23), 1, 1, 1, false); // another split's takeover
        assert_eq!(t.after_crash().first_takeover, None);
        t.progress(ms(30), 1, 1, 1, true);
        t.inserted(ms(31), ms(25), true);
        t.inserted(ms(60), ms(40), true); // past the last epoch: counted, not plotted
        assert_eq!(t.inserts(), vec![1, 0, 0, 0, 2, 0, 1, 0, 0, 0]);
        assert_eq!(t.splits(), vec![2, 0, 0, 0, 1, 0, 1, 0, 0, 0]);
        assert_eq!(t.acked(), 5);
        let a = t.after_crash();
        assert_eq!((a.class_inserts, a.class_in_flight), (2, 1));
        assert_eq!(a.first_class_insert, Some(ms(31)));
        assert_eq!(
            (a.first_takeover, a.first_recovery),
            (Some(ms(30)), Some(ms(30)))
        );
    }

    #[test]
    fn stuck_loaders_leave_out_the_crashed_one() {
        let t = Timeline::new(10, ms(5), 3);
        t.busy(0, Some(ms(1)));
        t.busy(1, Some(ms(1)));
        t.busy(2, Some(ms(40)));
        assert_eq!(t.stuck(ms(50), ms(20)), 2);
        t.crashed(Crash {
            at: ms(2),
            class: KeyClass {
                depth: 0,
                suffix: 0,
            },
            subtable: 0,
            loader: 1,
        });
        assert_eq!(t.stuck(ms(50), ms(20)), 1);
        t.busy(0, None);
        assert_eq!(t.stuck(ms(50), ms(20)), 0);
    }
}
