//! The queue as a search machine.
//!
//! Invariants of [`Fifo`]: `items` holds the queue front first; the item at `items[i]` was the
//! `head + i`-th ever enqueued (initial items first), so `tail = head + items.len()`; `hash` is
//! the XOR of one fingerprint per (item, absolute position) pair in the queue, maintained on
//! every push, pop and undo. Two queues with the same items at the same absolute positions
//! are equal, so `hash` fingerprints the state; equal queues at different offsets count as
//! different states (this only costs some pruning, never correctness).
//!
//! Look-ahead: an item pushed once with one known pop has a *pop window*. Pushing item b behind
//! item a commits to popping a first, which is impossible if b's pop completed before a's pop
//! was invoked, or if a is never popped by a known pop and there is no unknown pop to remove it;
//! such a push is refused at once instead of being found out when the items are popped, maybe
//! hundreds of operations later (the pop's own check would refuse it then anyway). Likewise
//! when some push not yet linearized has a pop that completed before b's pop was invoked: it
//! will be queued behind b, yet must leave first. `pending` holds the pop completions of the
//! pushes not yet linearized, to answer that in O(log n).
//!
//! An *orphan* is an item pushed once that no known pop returns: only an unknown pop can take
//! it, one orphan per unknown pop. So an item with a known pop cannot be queued behind more
//! orphans than there are unknown pops left that were invoked before its pop completed (the
//! search applies unknown pops earliest-invoked first, so those are easy to count), nor an
//! orphan pushed when that would leave too few for an item still to be pushed behind it. With an orphan at the front, an available unknown pop is applied
//! eagerly (see `search`): nothing can happen at the front until it goes, so taking it now
//! loses nothing.

use std::collections::{BTreeMap, VecDeque};

use crate::fingerprint::{DOMAIN_QUEUE, mix128};
use crate::search::Machine;

/// An interned operation and its result.
#[derive(Clone, Copy, Debug)]
pub(super) enum Qop {
    Push(u32),
    PopItem(u32),
    PopEmpty,
    PopUnknown,
    Impossible,
}

/// What undoes an applied operation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Undo {
    Pushed,
    Popped(u32),
    Nothing,
    /// An unknown pop, and what it took.
    Unknown(Option<u32>),
}

/// The queue state with what the look-ahead needs.
#[derive(Debug, Default)]
pub(super) struct Fifo {
    pub(super) ops: Vec<Qop>,
    pub(super) items: VecDeque<u32>,
    pub(super) head: u64,
    pub(super) hash: u128,
    /// Per item id: the (invoke, complete) of its only known pop, for items pushed once.
    pub(super) window: Vec<Option<(u64, u64)>>,
    /// Per item id: pushed once, never popped by a known pop.
    pub(super) orphan: Vec<bool>,
    /// Pop completion times (with multiplicity) of the windowed pushes not yet applied.
    pub(super) pending: BTreeMap<u64, usize>,
    /// Orphans in `items`.
    pub(super) orphans_queued: usize,
    /// The invocation times of the unknown pops, sorted.
    pub(super) unknown_pops: Vec<u64>,
    /// How many unknown pops are applied (always the earliest-invoked ones).
    pub(super) unknown_applied: usize,
}

fn slot(item: u32, position: u64) -> u128 {
    mix128(DOMAIN_QUEUE, u64::from(item), position)
}

impl Fifo {
    fn is_orphan(&self, item: u32) -> bool {
        self.orphan.get(item as usize).copied().unwrap_or(false)
    }

    /// Unknown pops not yet applied that were invoked by `t`.
    fn unknown_by(&self, t: u64) -> usize {
        self.unknown_pops
            .partition_point(|&i| i <= t)
            .saturating_sub(self.unknown_applied)
    }

    /// Whether `b` may be queued behind every item now in the queue (see the module docs).
    fn may_follow(&self, b: u32) -> bool {
        if self.is_orphan(b) {
            return self
                .pending
                .keys()
                .next()
                .is_none_or(|&t| self.orphans_queued < self.unknown_by(t));
        }
        let Some(&Some((b_invoke, b_done))) = self.window.get(b as usize) else {
            return true;
        };
        if self.orphans_queued > self.unknown_by(b_done) {
            return false;
        }
        if self
            .pending
            .keys()
            .next()
            .is_some_and(|&first| first < b_invoke)
        {
            return false;
        }
        self.items
            .iter()
            .all(|&a| match self.window.get(a as usize) {
                Some(Some((a_invoke, _))) => b_done >= *a_invoke,
                _ => true,
            })
    }

    fn tail(&self) -> u64 {
        self.head + self.items.len() as u64
    }

    pub(super) fn push_back(&mut self, item: u32) {
        self.hash ^= slot(item, self.tail());
        self.items.push_back(item);
        self.orphans_queued += usize::from(self.is_orphan(item));
        if let Some(&Some((_, done))) = self.window.get(item as usize) {
            if let Some(n) = self.pending.get_mut(&done) {
                *n -= 1;
                if *n == 0 {
                    self.pending.remove(&done);
                }
            }
        }
    }

    fn pop_front(&mut self) -> Option<u32> {
        let item = self.items.pop_front()?;
        self.hash ^= slot(item, self.head);
        self.head += 1;
        self.orphans_queued -= usize::from(self.is_orphan(item));
        Some(item)
    }

    fn push_front(&mut self, item: u32) {
        self.head -= 1;
        self.hash ^= slot(item, self.head);
        self.items.push_front(item);
        self.orphans_queued += usize::from(self.is_orphan(item));
    }
}

impl Machine for Fifo {
    type Undo = Undo;

    fn apply(&mut self, op: usize) -> Option<Undo> {
        match self.ops[op] {
            Qop::Push(item) if self.may_follow(item) => {
                self.push_back(item);
                Some(Undo::Pushed)
            }
            Qop::PopItem(item) if self.items.front() == Some(&item) => {
                self.pop_front().map(Undo::Popped)
            }
            Qop::PopEmpty if self.items.is_empty() => Some(Undo::Nothing),
            Qop::PopUnknown => {
                self.unknown_applied += 1;
                Some(Undo::Unknown(self.pop_front()))
            }
            _ => None,
        }
    }

    fn is_read(&self, op: usize) -> bool {
        matches!(self.ops[op], Qop::PopEmpty)
    }

    /// Pushing an orphan can wait until it is due: moving it later past the next operation
    /// keeps a linearization valid. Past a pop or another orphan's push, trivially; past a push
    /// of y, any unknown pop that took the orphan moves to just after y's pop; and if an
    /// unknown pop took it at once from an otherwise empty queue, the pair changes nothing and
    /// moves along with it.
    fn deferrable(&self, op: usize) -> bool {
        matches!(self.ops[op], Qop::Push(i) if self.is_orphan(i))
    }

    fn eager(&self, op: usize) -> bool {
        matches!(self.ops[op], Qop::PopUnknown)
            && self.items.front().is_some_and(|&x| self.is_orphan(x))
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Pushed => {
                if let Some(item) = self.items.pop_back() {
                    self.hash ^= slot(item, self.tail());
                    self.orphans_queued -= usize::from(self.is_orphan(item));
                    if let Some(&Some((_, done))) = self.window.get(item as usize) {
                        *self.pending.entry(done).or_insert(0) += 1;
                    }
                }
            }
            Undo::Popped(item) => self.push_front(item),
            Undo::Unknown(item) => {
                self.unknown_applied -= 1;
                if let Some(item) = item {
                    self.push_front(item);
                }
            }
            Undo::Nothing => {}
        }
    }

    fn fingerprint(&self) -> u128 {
        self.hash
    }
}
