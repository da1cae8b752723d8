//! The [`Model`] trait: what a sequential specification provides to histories, the JSON-lines
//! codec and the checker.
//!
//! Two models ship with the crate: [`crate::kv::Kv`] (per-key registers, partitioned per key)
//! and [`crate::queue::Queue`] (one FIFO queue). The checking engine itself is crate-private;
//! the trait exposes what generic code (recorders, files, [`crate::verify`]) needs.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::budget::Budget;
use crate::history::{History, Status};
use crate::jsonl::Fields;
use crate::verdict::Verdict;

/// A sequential specification whose histories this crate can record, store and check.
pub trait Model: Sized + Debug + 'static {
    /// An operation with its arguments.
    type Op: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync;
    /// A known result of an operation.
    type Outcome: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync;
    /// The state before the first operation.
    type Initial: Clone + Debug + Default + PartialEq + Send + Sync;
    /// The model's name in history headers: `"kv"` or `"queue"`.
    const NAME: &'static str;

    /// Decides whether `history` is linearizable within `budget`; on a violation, shrinks it to
    /// a minimal witness.
    fn check(history: &History<Self>, budget: Budget) -> Verdict<Self>;

    /// One line of human-readable text for an operation and its status, e.g.
    /// `put k0 "v1" -> inserted`.
    fn describe(op: &Self::Op, status: &Status<Self::Outcome>) -> String;

    /// The part of `initial` that the operations `ops` can observe (for sub-histories).
    fn restrict_initial(
        initial: &Self::Initial,
        ops: &mut dyn Iterator<Item = &Self::Op>,
    ) -> Self::Initial;

    /// Takes an operation (its `op` field and arguments) out of a record's fields.
    fn decode_op(fields: &mut Fields) -> Result<Self::Op, String>;

    /// Takes the known result `result` of `op` (and the fields it carries) out of a record.
    fn decode_outcome(
        op: &Self::Op,
        result: &str,
        fields: &mut Fields,
    ) -> Result<Self::Outcome, String>;

    /// The header's `initial` value, or `None` for the default initial state.
    fn initial_to_json(initial: &Self::Initial) -> Option<Value>;

    /// Parses a header's `initial` value.
    fn initial_from_json(value: Value) -> Result<Self::Initial, String>;
}
