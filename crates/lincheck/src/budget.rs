//! Search budgets, the meter that enforces them, and the statistics a check reports.
//!
//! A *state* is one new (linearized set, model state) pair entered into the memo; it is the
//! unit of work of the search. The check and the witness shrinking each get `max_states` states
//! and both stop at `max_time` (measured from the start of the check). When either limit runs
//! out the check answers [`crate::Verdict::Undecided`] (or, while shrinking, returns the
//! smallest witness found so far, marked not minimal).

use std::time::{Duration, Instant};

/// Bounds on the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// At most this many states per phase (check; shrink).
    pub max_states: u64,
    /// At most this much wall time for the whole call, if set.
    pub max_time: Option<Duration>,
}

impl Default for Budget {
    /// Ten million states, no time limit: enough for histories of tens of thousands of
    /// operations from ~16 clients, and bounded memory (~0.5 GB of memo at worst).
    fn default() -> Self {
        Budget {
            max_states: 10_000_000,
            max_time: None,
        }
    }
}

impl Budget {
    /// A budget of `max_states` states and no time limit.
    pub fn states(max_states: u64) -> Self {
        Budget {
            max_states,
            max_time: None,
        }
    }

    /// The same budget with a wall-time limit.
    pub fn with_time(self, max_time: Duration) -> Self {
        Budget {
            max_time: Some(max_time),
            ..self
        }
    }
}

/// Which limit of a [`Budget`] ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `max_states`.
    States,
    /// `max_time`.
    Time,
}

/// What a check did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Operations checked (after dropping failed ones and unknown reads).
    pub operations: usize,
    /// Independent partitions searched (kv: keys; queue: 1).
    pub partitions: usize,
    /// States explored by the check.
    pub states: u64,
    /// States explored while shrinking a witness.
    pub shrink_states: u64,
    /// Wall time of the whole call.
    pub elapsed: Duration,
    /// The limit that ran out, if one did.
    pub exhausted: Option<Limit>,
}

/// Counts states against a budget.
#[derive(Debug)]
pub(crate) struct Meter {
    max_states: u64,
    states: u64,
    deadline: Option<Instant>,
    exhausted: Option<Limit>,
    /// Partitions searched; operations in them.
    pub(crate) partitions: usize,
    pub(crate) operations: usize,
}

impl Meter {
    pub(crate) fn new(budget: Budget, start: Instant) -> Self {
        Meter {
            max_states: budget.max_states,
            states: 0,
            deadline: budget.max_time.map(|t| start + t),
            exhausted: None,
            partitions: 0,
            operations: 0,
        }
    }

    /// A meter for a sub-check that draws on what is left of this one.
    pub(crate) fn child(&self) -> Meter {
        Meter {
            max_states: self.max_states - self.states,
            states: 0,
            deadline: self.deadline,
            exhausted: self.exhausted,
            partitions: 0,
            operations: 0,
        }
    }

    /// Charges a child's states back to this meter.
    pub(crate) fn absorb(&mut self, child: &Meter) {
        self.states += child.states;
        self.exhausted = self.exhausted.or(child.exhausted);
    }

    /// Counts one state; false once a limit has run out.
    pub(crate) fn tick(&mut self) -> bool {
        if self.exhausted.is_some() {
            return false;
        }
        if self.states >= self.max_states {
            self.exhausted = Some(Limit::States);
            return false;
        }
        self.states += 1;
        if self.states % 1024 == 0 {
            if let Some(deadline) = self.deadline {
                if now() >= deadline {
                    self.exhausted = Some(Limit::Time);
                    return false;
                }
            }
        }
        true
    }

    pub(crate) fn states(&self) -> u64 {
        self.states
    }

    pub(crate) fn exhausted(&self) -> Option<Limit> {
        self.exhausted
    }
}

/// The real clock, for deadlines and elapsed times.
#[allow(
    clippy::disallowed_methods,
    reason = "the budget's wall-time limit is measured"
)]
pub(crate) fn now() -> Instant {
    Instant::now()
}
