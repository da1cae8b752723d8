//! Where this client last saw each key's entry, so a probe can read the key's block in the
//! same batch as its buckets (`ClientOptions::speculate`): a lookup of a key whose entry is
//! unchanged is then one round trip, an update two.
//!
//! A guess is never trusted. It only picks which block to read beside the buckets, and only
//! through a right this client already holds for that very entry (`rights`); the block read
//! counts only if the buckets read in the same batch still hold the guessed entry at the
//! guessed position, as the lowest candidate of the key (`ops::probe`). So a wrong guess
//! costs a READ, never a wrong answer.
//!
//! A wrong guess can cost more than a READ, though: the right it reads through may have
//! ended (another client replaced the key and freed the block, and the address was reused),
//! and a refused READ breaks the QP it was posted on — a reconnection, several round trips.
//! So the client reads a guess only while its guesses have been holding: every probe checks
//! the key's guess against the buckets it read, whether it read the block or not, and keeps a
//! moving average of how often guesses held; below [`READ_ABOVE`], it stops reading them
//! (and keeps checking, so it starts again once entries stay put). Under a workload where
//! other clients keep replacing the keys this client reads, guesses are mostly not read;
//! where its entries stay put (one writer, read-mostly keys), most lookups are one round trip.

use super::layout::SlotAt;
use std::collections::{HashMap, VecDeque};

/// Guesses are read while at least this share of recent ones held: a right guess saves a
/// round trip, a wrong one may cost a broken QP.
pub(crate) const READ_ABOVE: f64 = 0.8;

/// Weight of the latest guess in the moving average.
const WEIGHT: f64 = 1.0 / 16.0;

/// A key's entry as this client last saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Guess {
    /// The subtable it was in.
    pub subtable: u64,
    /// Its slot (position, offset, word).
    pub at: SlotAt,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Guesses {
    /// By the key's primary hash (a collision only costs a guess that does not hold).
    map: HashMap<u64, Guess>,
    order: VecDeque<u64>,
    cap: usize,
    /// Moving average of the share of guesses that held (checked against the buckets).
    held: f64,
}

impl Guesses {
    /// Keeps up to `cap` keys' entries (0: none, guessing is off).
    pub(crate) fn new(cap: usize) -> Self {
        Guesses {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
            held: 1.0,
        }
    }

    /// The guess for the key with primary hash `primary`.
    pub(crate) fn guess(&self, primary: u64) -> Option<Guess> {
        self.map.get(&primary).copied()
    }

    /// Whether guesses have been holding well enough to read them.
    pub(crate) fn worth_reading(&self) -> bool {
        self.held >= READ_ABOVE
    }

    /// Remembers where the key's entry is now.
    pub(crate) fn remember(&mut self, primary: u64, guess: Guess) {
        if self.cap == 0 {
            return;
        }
        if self.map.insert(primary, guess).is_none() {
            self.order.push_back(primary);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    /// Forgets the key's entry (deleted, or the guess proved wrong).
    pub(crate) fn forget(&mut self, primary: u64) {
        if self.map.remove(&primary).is_some() {
            self.order.retain(|k| *k != primary);
        }
    }

    /// A guess checked against the buckets held (`held`: the entry was still there) or not.
    pub(crate) fn checked(&mut self, held: bool) {
        let x = if held { 1.0 } else { 0.0 };
        self.held += WEIGHT * (x - self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::race::layout::Slot;

    fn g(pos: u32) -> Guess {
        Guess {
            subtable: 0x1000,
            at: SlotAt {
                pos,
                offset: 8 * u64::from(pos),
                main: true,
                slot: Slot(0x42),
            },
        }
    }

    #[test]
    fn guesses_are_read_while_most_hold() {
        let mut gs = Guesses::new(8);
        assert!(gs.worth_reading(), "a new client tries its guesses");
        gs.checked(false);
        assert!(gs.worth_reading(), "one wrong guess of many");
        let wrong = (0..20).take_while(|_| {
            gs.checked(false);
            gs.worth_reading()
        });
        assert_eq!(wrong.count(), 2, "three wrong in a row stop the reads");
        let right = |gs: &mut Guesses| {
            (0..100)
                .take_while(|_| {
                    gs.checked(true);
                    !gs.worth_reading()
                })
                .count()
                + 1
        };
        assert!(
            right(&mut gs) <= 3,
            "just below: a few right ones start them again"
        );
        for _ in 0..40 {
            gs.checked(false);
        }
        assert!(
            right(&mut gs) > 20,
            "after many wrong ones, many right ones"
        );
        assert!(gs.worth_reading());
    }

    #[test]
    fn the_oldest_keys_go_past_the_capacity_and_none_are_kept_at_zero() {
        let mut gs = Guesses::new(2);
        gs.remember(1, g(1));
        gs.remember(2, g(2));
        gs.remember(1, g(5)); // an update keeps its place
        gs.remember(3, g(3));
        assert_eq!(gs.guess(1), None);
        assert_eq!(gs.guess(2), Some(g(2)));
        assert_eq!(gs.guess(3), Some(g(3)));
        gs.forget(2);
        assert_eq!(gs.guess(2), None);
        let mut off = Guesses::new(0);
        off.remember(1, g(1));
        assert_eq!(off.guess(1), None);
    }
}
