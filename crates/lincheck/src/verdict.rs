//! What a check answers: [`Verdict`], and for violations a minimal [`Witness`].
//!
//! A witness is a standalone history (initial state included) that is itself not
//! linearizable, so it can be written out and checked again (`lincheck check FILE`), and that
//! proves the checked history is not linearizable either (see `shrink` for why removing
//! operations keeps it a proof). When the shrinking finished within its budget the witness is
//! *1-minimal* with respect to the shrinking moves (no single further removal keeps it a
//! failing proof); kv witnesses then get back the writes of the values their reads return, for
//! readability.

use std::fmt;

use crate::Model;
use crate::budget::Stats;
use crate::error::Error;
use crate::history::{Entry, History, Status};

/// The answer of a check.
#[derive(Clone, Debug)]
pub enum Verdict<M: Model> {
    /// Some order of the operations respects their real-time order and the model.
    Linearizable(Stats),
    /// No such order exists; here is a small sub-history that shows it.
    Violation(Box<Witness<M>>),
    /// The budget ran out first. Callers must treat this as a failure.
    Undecided(Stats),
}

impl<M: Model> Verdict<M> {
    /// Whether the history was found linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable(_))
    }

    /// The witness of a violation.
    pub fn witness(&self) -> Option<&Witness<M>> {
        match self {
            Verdict::Violation(w) => Some(w),
            _ => None,
        }
    }

    /// What the check did.
    pub fn stats(&self) -> &Stats {
        match self {
            Verdict::Linearizable(s) | Verdict::Undecided(s) => s,
            Verdict::Violation(w) => &w.stats,
        }
    }

    /// `Ok` with the statistics if linearizable; otherwise an error carrying the rendered
    /// witness (or the exhausted limit). Writes no files: see [`crate::verify`] for that.
    pub fn into_result(self) -> Result<Stats, Error> {
        match self {
            Verdict::Linearizable(stats) => Ok(stats),
            Verdict::Violation(w) => Err(Error::NotLinearizable {
                report: w.to_string(),
                dump: None,
            }),
            Verdict::Undecided(stats) => Err(Error::Undecided {
                report: undecided(&stats),
                dump: None,
            }),
        }
    }
}

/// One line saying which limit ran out and how far the search got.
pub(crate) fn undecided(stats: &Stats) -> String {
    let limit = match stats.exhausted {
        Some(crate::Limit::Time) => "the time limit",
        _ => "the state limit",
    };
    format!(
        "{limit} ran out after {} states over {} partitions ({} operations, {:.1?})",
        stats.states, stats.partitions, stats.operations, stats.elapsed
    )
}

/// A small non-linearizable sub-history.
#[derive(Clone, Debug)]
pub struct Witness<M: Model> {
    /// The sub-history, standalone (its initial state is the part of the checked history's
    /// initial state that it observes).
    pub history: History<M>,
    /// For each of its entries, the index of that entry in the checked history.
    pub indices: Vec<usize>,
    /// The key the violation is about (kv only).
    pub key: Option<String>,
    /// How many other operations (kv: of the same key, invoked before the witness's last
    /// completion) the witness lets take effect any number of times, or never, each within its
    /// interval and with any result: the violation holds whatever they did. Always 0 for
    /// queues, whose shrinking removes only operations that cannot matter.
    pub context: usize,
    /// Whether shrinking finished within the budget (the witness is 1-minimal, see the module
    /// docs).
    pub minimal: bool,
    /// A one-line explanation of the violation.
    pub explanation: String,
    /// The number of entries in the checked history.
    pub checked: usize,
    /// What the check did.
    pub stats: Stats,
}

/// One line for an entry: index, client, interval, operation and result.
pub fn render_entry<M: Model>(index: usize, entry: &Entry<M::Op, M::Outcome>) -> String {
    let end = match (&entry.status, entry.complete) {
        (Status::Done(_), Some(c)) => format!("{c}]"),
        _ => "inf)".to_string(),
    };
    let interval = format!("[{}, {end}", entry.invoke);
    format!(
        "#{index:<6} client {:<4} {interval:<24} {}",
        entry.client,
        M::describe(&entry.op, &entry.status)
    )
}

impl<M: Model> fmt::Display for Witness<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self
            .key
            .as_ref()
            .map(|k| format!("key {k:?}: "))
            .unwrap_or_default();
        let minimal = if self.minimal {
            "minimal"
        } else {
            "shrinking stopped early"
        };
        writeln!(
            f,
            "{key}{} of {} operations cannot be linearized ({minimal}):",
            self.history.len(),
            self.checked
        )?;
        for (entry, &index) in self.history.entries().iter().zip(&self.indices) {
            writeln!(f, "  {}", render_entry::<M>(index, entry))?;
        }
        if self.context > 0 {
            let n = self.context;
            let ops = if n == 1 { "operation" } else { "operations" };
            writeln!(
                f,
                "  (whatever the {n} other {ops} on this key did, each within its interval)"
            )?;
        }
        write!(f, "why: {}", self.explanation)
    }
}
