//! The [`Model`] trait: what a sequential specification provides to histories, the JSON-lines
//! codec and the checker.
//!
//! Two models ship with the crate: [`crate::kv::Kv`] (per-key registers, partitioned per key)
//! and [`crate::queue::Queue`] (one FIFO queue). The checking engine itself is crate-private;
//! the trait exposes what generic code (recorders, files, [`crate::verify`]) needs. A model's
//! crate-private half, `Engine` (its search, shrinking moves and explanations), is here too:
//! the pipeline (`engine`) and the shrinking (`shrink`) both drive it.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::budget::{Budget, Meter};
use crate::fields::Fields;
use crate::history::{History, Status};
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

/// What a model's search decided.
#[derive(Debug)]
pub(crate) enum Decision {
    Linearizable,
    /// Not linearizable: so is the part at these indices (ascending), which is worth shrinking
    /// unless `minimal`; `focus` (a subset) may fail on its own with the rest as context.
    Violation {
        part: Vec<usize>,
        focus: Option<Vec<usize>>,
        minimal: bool,
        /// A completion time at which the part truncated still fails, if the search knows one.
        horizon: Option<u64>,
    },
    Exhausted,
}

/// The crate-private half of a model: its search, shrinking moves and explanations.
pub(crate) trait Engine: Model {
    /// Whether removed units join a context that the evidence still considers (kv), rather
    /// than being irrelevant (queue).
    const CONTEXT: bool;
    /// Decides `history`, charging states to `meter`.
    fn decide(history: &History<Self>, meter: &mut Meter) -> Decision;
    /// The groups of entries that may be removed together from a failing `history`.
    fn units(history: &History<Self>) -> Vec<Vec<usize>>;
    /// Whether the entries `kept` of `history`, with the entries `removed` as context, still
    /// fail (`None`: out of budget).
    fn fails(
        history: &History<Self>,
        kept: &[usize],
        removed: &[usize],
        meter: &mut Meter,
    ) -> Option<bool>;
    /// Explains why `kept` (with `removed` as context) is not linearizable, in one line.
    fn explain(history: &History<Self>, kept: &[usize], removed: &[usize]) -> String;
    /// The key a witness is about, if the model has keys.
    fn key(history: &History<Self>) -> Option<String>;
    /// Moves back from the context what makes a shrunk witness easier to read (kv: the writes
    /// of the values its reads return). Must keep it failing: moving an operation from the
    /// context back to the witness only constrains it more.
    fn supplement(
        _history: &History<Self>,
        kept: Vec<usize>,
        removed: Vec<usize>,
    ) -> (Vec<usize>, Vec<usize>) {
        (kept, removed)
    }
}
