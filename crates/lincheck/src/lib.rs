//! A linearizability checker for recorded histories of concurrent operations.
//!
//! A *history* lists operations, each with the client that issued it, the time it was invoked
//! and either the time it completed with its result, or an *unknown outcome* (a timeout, a
//! lost link, a killed process), in which case it may have taken effect at any point after
//! its invocation, or never. The history is *linearizable* if the operations can be put in one
//! order that respects real time (an operation that completed before another was invoked comes
//! first) and in which every known result is the one the sequential model gives.
//!
//! Two models ship: [`kv`] (per-key registers for a hash table, checked per key) and [`queue`]
//! (one FIFO queue). The search is Lowe's just-in-time refinement of Wing & Gong's algorithm
//! with a memo of visited (linearized set, model state) pairs, as in Porcupine; a violation is
//! shrunk to a minimal non-linearizable sub-history (a [`Witness`]) and explained in one line.
//! `docs/lincheck.md` describes the file format, the models, the algorithm and the budget.
//!
//! ```
//! use lincheck::kv::{self, Op, Outcome};
//! use lincheck::{Budget, Verdict};
//!
//! let mut h = kv::History::new();
//! h.done(1, 0, 10, Op::put("k", "v1"), Outcome::Inserted).unwrap();
//! h.done(2, 20, 30, Op::get("k"), Outcome::Absent).unwrap(); // the put surely happened
//! match lincheck::check_kv(&h, Budget::default()) {
//!     Verdict::Violation(w) => assert_eq!(w.history.len(), 2),
//!     other => panic!("expected a violation, got {other:?}"),
//! }
//! ```
//!
//! In tests, record with a shared [`Recorder`] and call [`assert_linearizable`], which on
//! failure writes the history and the witness as JSON lines ([`jsonl`]) and panics naming the
//! files; the `lincheck` binary re-checks such a file.

#![deny(missing_docs)]

mod budget;
mod dump;
mod engine;
mod error;
mod fields;
mod fingerprint;
mod history;
pub mod jsonl;
pub mod kv;
mod model;
pub mod queue;
mod recorder;
mod search;
mod shrink;
mod verdict;

pub use budget::{Budget, Limit, Stats};
pub use dump::{assert_linearizable, verify};
pub use error::{Dump, Error};
pub use history::{Entry, History, Status};
pub use model::Model;
pub use recorder::{Recorder, Ticket};
pub use verdict::{Verdict, Witness, render_entry};

/// Checks a history of any model (see [`Model::check`]).
pub fn check<M: Model>(history: &History<M>, budget: Budget) -> Verdict<M> {
    M::check(history, budget)
}

/// Checks a key-value history, key by key.
pub fn check_kv(history: &kv::History, budget: Budget) -> Verdict<kv::Kv> {
    check(history, budget)
}

/// Checks a queue history.
pub fn check_queue(history: &queue::History, budget: Budget) -> Verdict<queue::Queue> {
    check(history, budget)
}
