//! [`Recorder`]: a thread-safe way for tests to record a history while running it.
//!
//! Share one recorder (by reference or in an `Arc`) among the test's threads. Each operation
//! is bracketed by [`Recorder::invoke`] before it starts and one of [`Recorder::complete`],
//! [`Recorder::unknown`] or [`Recorder::failed`] after it ends; the [`Ticket`] ties the two
//! and is consumed, so an operation cannot end twice. Operations still open when the history
//! is taken ([`Recorder::history`]) are recorded as unknown: they may or may not have taken
//! effect.
//!
//! Times: the plain methods read a monotonic clock started when the recorder was created
//! (nanoseconds). Reading it *before* the operation starts and *after* it ends only widens
//! the recorded interval, which is always safe. The `_at` methods take a caller-supplied time
//! instead (a simulated clock); do not mix the two clocks in one recorder.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::Model;
use crate::budget::now;
use crate::history::{Entry, History, Status};

/// An operation in flight, returned by [`Recorder::invoke`].
#[derive(Debug)]
#[must_use = "end the operation with complete, unknown or failed"]
pub struct Ticket(usize);

/// Records a history from many threads.
#[derive(Debug)]
pub struct Recorder<M: Model> {
    start: Instant,
    initial: M::Initial,
    entries: Mutex<Vec<Entry<M::Op, M::Outcome>>>,
}

impl<M: Model> Default for Recorder<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Model> Recorder<M> {
    /// A recorder for a model starting in its default initial state.
    pub fn new() -> Self {
        Self::with_initial(M::Initial::default())
    }

    /// A recorder for a model starting in `initial`.
    pub fn with_initial(initial: M::Initial) -> Self {
        Recorder {
            start: now(),
            initial,
            entries: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry<M::Op, M::Outcome>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Nanoseconds since the recorder was created.
    pub fn now(&self) -> u64 {
        u64::try_from(now().duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records that `client` invokes `op` now.
    pub fn invoke(&self, client: u64, op: M::Op) -> Ticket {
        let time = self.now();
        self.invoke_at(client, op, time)
    }

    /// Records that `client` invokes `op` at `time`.
    pub fn invoke_at(&self, client: u64, op: M::Op, time: u64) -> Ticket {
        let mut entries = self.lock();
        let status = Status::Unknown;
        entries.push(Entry {
            client,
            invoke: time,
            complete: None,
            op,
            status,
        });
        Ticket(entries.len() - 1)
    }

    /// Records that the operation returned `outcome` now.
    pub fn complete(&self, ticket: Ticket, outcome: M::Outcome) {
        let time = self.now();
        self.complete_at(ticket, outcome, time);
    }

    /// Records that the operation returned `outcome` at `time` (not before its invocation:
    /// an earlier time is raised to the invocation time).
    pub fn complete_at(&self, ticket: Ticket, outcome: M::Outcome, time: u64) {
        let mut entries = self.lock();
        let entry = &mut entries[ticket.0];
        entry.complete = Some(time.max(entry.invoke));
        entry.status = Status::Done(outcome);
    }

    /// Records that the operation's outcome is unknown (it may or may not take effect).
    pub fn unknown(&self, ticket: Ticket) {
        self.lock()[ticket.0].status = Status::Unknown;
    }

    /// Records that the operation failed without any effect.
    pub fn failed(&self, ticket: Ticket) {
        self.lock()[ticket.0].status = Status::Failed;
    }

    /// A snapshot of the history so far (operations still in flight are unknown).
    pub fn history(&self) -> History<M> {
        let entries = self.lock().clone();
        History::from_raw(self.initial.clone(), entries)
    }

    /// The history, consuming the recorder.
    pub fn into_history(self) -> History<M> {
        let entries = self
            .entries
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        History::from_raw(self.initial, entries)
    }
}
