//! Recorded histories: one [`Entry`] per operation, with its real-time interval and result.
//!
//! Invariants (checked by [`History::push`], so every `History` value satisfies them):
//! - an entry with a known result ([`Status::Done`]) has a completion time, and
//!   `invoke <= complete`;
//! - an entry with [`Status::Unknown`] or [`Status::Failed`] may carry a completion time (when
//!   the client gave up or saw the error); it must not precede `invoke`, and the checker
//!   ignores it: an unknown operation may take effect at any point after its invocation, or
//!   never, and a failed one is dropped.
//!
//! Times are integers on one clock for the whole history (nanoseconds or any monotonic unit).
//! Two operations are ordered in real time only if one completes *strictly* before the other is
//! invoked; equal times count as overlapping (the permissive reading).

use crate::Model;
use crate::error::Error;

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Status<R> {
    /// It returned this result (at the entry's `complete` time).
    Done(R),
    /// Its outcome is unknown (timeout, lost link, killed process): it may have taken effect at
    /// any point after its invocation, or never; its result is unconstrained.
    Unknown,
    /// It definitely did not take effect (an error known to have changed nothing); the checker
    /// drops it.
    Failed,
}

impl<R> Status<R> {
    /// The result, if it is known.
    pub fn done(&self) -> Option<&R> {
        match self {
            Status::Done(r) => Some(r),
            _ => None,
        }
    }
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<O, R> {
    /// Which client issued it (informational: only the intervals order operations).
    pub client: u64,
    /// When it was invoked.
    pub invoke: u64,
    /// When it returned (required for [`Status::Done`]; optional and ignored otherwise).
    pub complete: Option<u64>,
    /// The operation and its arguments.
    pub op: O,
    /// Its result, or why there is none.
    pub status: Status<R>,
}

impl<O, R> Entry<O, R> {
    /// Checks the invariants of the module docs.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.status, self.complete) {
            (Status::Done(_), None) => {
                Err("a known result needs a `complete` time (or mark the result unknown)".into())
            }
            (_, Some(c)) if c < self.invoke => Err(format!(
                "completes at {c}, before it was invoked at {}",
                self.invoke
            )),
            _ => Ok(()),
        }
    }

    /// The completion time that matters to the checker: `None` (infinity) unless the result is
    /// known.
    pub fn known_complete(&self) -> Option<u64> {
        match self.status {
            Status::Done(_) => self.complete,
            _ => None,
        }
    }
}

/// A history of operations on one model `M`, with the model's initial state.
#[derive(Clone, Debug, PartialEq)]
pub struct History<M: Model> {
    initial: M::Initial,
    entries: Vec<Entry<M::Op, M::Outcome>>,
}

impl<M: Model> Default for History<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Model> History<M> {
    /// An empty history starting from the model's default initial state.
    pub fn new() -> Self {
        Self::with_initial(M::Initial::default())
    }

    /// An empty history starting from `initial`.
    pub fn with_initial(initial: M::Initial) -> Self {
        History {
            initial,
            entries: Vec::new(),
        }
    }

    /// Builds a history from entries, validating each.
    pub fn from_entries(
        initial: M::Initial,
        entries: impl IntoIterator<Item = Entry<M::Op, M::Outcome>>,
    ) -> Result<Self, Error> {
        let mut history = Self::with_initial(initial);
        for entry in entries {
            history.push(entry)?;
        }
        Ok(history)
    }

    /// A history from entries that satisfy the invariants by construction (a recorder's).
    pub(crate) fn from_raw(initial: M::Initial, entries: Vec<Entry<M::Op, M::Outcome>>) -> Self {
        debug_assert!(entries.iter().all(|e| e.validate().is_ok()));
        History { initial, entries }
    }

    /// Makes every known result that completes after `t` unknown (truncation at `t`).
    pub(crate) fn mark_unknown_after(&mut self, t: u64) {
        for e in &mut self.entries {
            if e.known_complete().is_some_and(|c| c > t) {
                e.status = Status::Unknown;
            }
        }
    }

    /// Appends an entry after validating it; returns its index.
    pub fn push(&mut self, entry: Entry<M::Op, M::Outcome>) -> Result<usize, Error> {
        let index = self.entries.len();
        entry
            .validate()
            .map_err(|message| Error::Invalid { index, message })?;
        self.entries.push(entry);
        Ok(index)
    }

    /// Appends an operation that returned `outcome`.
    pub fn done(
        &mut self,
        client: u64,
        invoke: u64,
        complete: u64,
        op: M::Op,
        outcome: M::Outcome,
    ) -> Result<usize, Error> {
        let status = Status::Done(outcome);
        self.push(Entry {
            client,
            invoke,
            complete: Some(complete),
            op,
            status,
        })
    }

    /// Appends an operation whose outcome is unknown.
    pub fn unknown(&mut self, client: u64, invoke: u64, op: M::Op) -> Result<usize, Error> {
        let status = Status::Unknown;
        self.push(Entry {
            client,
            invoke,
            complete: None,
            op,
            status,
        })
    }

    /// The initial state.
    pub fn initial(&self) -> &M::Initial {
        &self.initial
    }

    /// The entries, in the order they were pushed.
    pub fn entries(&self) -> &[Entry<M::Op, M::Outcome>] {
        &self.entries
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The sub-history of the entries at `indices` (in that order), with the initial state
    /// restricted to what they touch.
    pub fn restrict(&self, indices: &[usize]) -> Self {
        let entries: Vec<_> = indices.iter().map(|&i| self.entries[i].clone()).collect();
        let initial = M::restrict_initial(&self.initial, &mut entries.iter().map(|e| &e.op));
        History { initial, entries }
    }
}
