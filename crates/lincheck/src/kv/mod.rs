//! Key-value registers: the model of a hash table such as RACE hashing.
//!
//! Each key is an independent register holding `Option<String>`, absent unless the history's
//! initial state gives it a value. Operations and their possible results:
//!
//! | op | results |
//! |---|---|
//! | `put(key, value)` (upsert) | `inserted` (the key was absent) · `updated` (it was present) |
//! | `insert(key, value)` | `inserted` · `exists` (present: no change) |
//! | `update(key, value)` | `updated` · `absent` (absent: no change) |
//! | `delete(key)` | `deleted` · `absent` (no change) |
//! | `get(key)` | `value(v)` · `absent` |
//!
//! Any op may also end `unknown` or `failed` ([`crate::Status`]). Because keys are
//! independent, the checker splits a history per key and checks each partition on its own
//! (P-compositionality, Herlihy & Wing): the whole is linearizable iff every key's part is.

mod codec;
mod decide;
mod explain;
mod precheck;
mod register;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Model;
use crate::budget::{Budget, Meter};
use crate::engine;
use crate::fields::Fields;
use crate::history::Status;
use crate::model::{Decision, Engine};
use crate::search::Found;

/// The key-value model (a marker type for [`crate::History`], [`crate::Recorder`], …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kv;

/// A history of key-value operations.
pub type History = crate::History<Kv>;
/// A recorder of key-value operations.
pub type Recorder = crate::Recorder<Kv>;
/// One recorded key-value operation.
pub type Entry = crate::Entry<Op, Outcome>;

/// A key-value operation. Its serde form is the `op` part of a JSON-lines record, e.g.
/// `{"op":"put","key":"k0","value":"v1"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Op {
    /// Upsert.
    Put {
        /** The key. */
        key: String,
        /** The new value. */
        value: String,
    },
    /// Insert if absent.
    Insert {
        /** The key. */
        key: String,
        /** The new value. */
        value: String,
    },
    /// Update if present.
    Update {
        /** The key. */
        key: String,
        /** The new value. */
        value: String,
    },
    /// Delete if present.
    Delete {
        /** The key. */
        key: String,
    },
    /// Read.
    Get {
        /** The key. */
        key: String,
    },
}

impl Op {
    /// `put(key, value)`.
    pub fn put(key: impl Into<String>, value: impl Into<String>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
        }
    }
    /// `insert(key, value)`.
    pub fn insert(key: impl Into<String>, value: impl Into<String>) -> Op {
        Op::Insert {
            key: key.into(),
            value: value.into(),
        }
    }
    /// `update(key, value)`.
    pub fn update(key: impl Into<String>, value: impl Into<String>) -> Op {
        Op::Update {
            key: key.into(),
            value: value.into(),
        }
    }
    /// `delete(key)`.
    pub fn delete(key: impl Into<String>) -> Op {
        Op::Delete { key: key.into() }
    }
    /// `get(key)`.
    pub fn get(key: impl Into<String>) -> Op {
        Op::Get { key: key.into() }
    }

    /// The key it acts on.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. }
            | Op::Insert { key, .. }
            | Op::Update { key, .. }
            | Op::Delete { key }
            | Op::Get { key } => key,
        }
    }

    /// The value it writes, if any.
    pub fn value(&self) -> Option<&str> {
        match self {
            Op::Put { value, .. } | Op::Insert { value, .. } | Op::Update { value, .. } => {
                Some(value)
            }
            Op::Delete { .. } | Op::Get { .. } => None,
        }
    }

    /// Its name in records: `put`, `insert`, `update`, `delete` or `get`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Put { .. } => "put",
            Op::Insert { .. } => "insert",
            Op::Update { .. } => "update",
            Op::Delete { .. } => "delete",
            Op::Get { .. } => "get",
        }
    }

    /// Whether this op can ever return `outcome` (e.g. `put` never returns `exists`).
    pub fn allows(&self, outcome: &Outcome) -> bool {
        use Outcome as R;
        matches!(
            (self, outcome),
            (Op::Put { .. }, R::Inserted | R::Updated)
                | (Op::Insert { .. }, R::Inserted | R::Exists)
                | (Op::Update { .. }, R::Updated | R::Absent)
                | (Op::Delete { .. }, R::Deleted | R::Absent)
                | (Op::Get { .. }, R::Value { .. } | R::Absent)
        )
    }
}

/// A known result of a key-value operation. Its serde form is the `result` part of a
/// record: `{"result":"inserted"}`, or `{"result":"value","value":"v1"}` for a read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "lowercase", deny_unknown_fields)]
pub enum Outcome {
    /// The key was absent; now it holds the op's value.
    Inserted,
    /// The key was present; now it holds the op's value.
    Updated,
    /// `insert` found the key present and changed nothing.
    Exists,
    /// The key was absent (and nothing changed).
    Absent,
    /// `delete` removed the key.
    Deleted,
    /// `get` read this value.
    Value {
        /** The value read. */
        value: String,
    },
}

impl Outcome {
    /// `value(v)`, the result of a read that found `v`.
    pub fn value(value: impl Into<String>) -> Outcome {
        Outcome::Value {
            value: value.into(),
        }
    }
}

impl Model for Kv {
    type Op = Op;
    type Outcome = Outcome;
    type Initial = BTreeMap<String, String>;
    const NAME: &'static str = "kv";

    fn check(history: &History, budget: Budget) -> crate::Verdict<Kv> {
        engine::run(history, budget)
    }

    fn describe(op: &Op, status: &Status<Outcome>) -> String {
        let call = match op.value() {
            Some(v) => format!("{} {} {v:?}", op.name(), op.key()),
            None => format!("{} {}", op.name(), op.key()),
        };
        let result = match status {
            Status::Done(Outcome::Value { value }) => format!("{value:?}"),
            Status::Done(o) => explain::result_name(o).to_string(),
            Status::Unknown => "unknown".into(),
            Status::Failed => "failed".into(),
        };
        format!("{call} -> {result}")
    }

    fn restrict_initial(
        initial: &Self::Initial,
        ops: &mut dyn Iterator<Item = &Op>,
    ) -> Self::Initial {
        ops.filter_map(|op| initial.get_key_value(op.key()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn decode_op(fields: &mut Fields) -> Result<Op, String> {
        codec::decode_op(fields)
    }

    fn decode_outcome(op: &Op, result: &str, fields: &mut Fields) -> Result<Outcome, String> {
        codec::decode_outcome(op, result, fields)
    }

    fn initial_to_json(initial: &Self::Initial) -> Option<Value> {
        (!initial.is_empty()).then(|| serde_json::json!(initial))
    }

    fn initial_from_json(value: Value) -> Result<Self::Initial, String> {
        serde_json::from_value(value).map_err(|e| format!("expected an object of strings: {e}"))
    }
}

impl Engine for Kv {
    const CONTEXT: bool = true;

    fn decide(history: &History, meter: &mut Meter) -> Decision {
        decide::decide(history, meter)
    }

    /// Every operation is its own unit: removed, it joins the context.
    fn units(history: &History) -> Vec<Vec<usize>> {
        (0..history.len()).map(|i| vec![i]).collect()
    }

    fn fails(
        history: &History,
        kept: &[usize],
        removed: &[usize],
        meter: &mut Meter,
    ) -> Option<bool> {
        match decide::evidence(history, kept, removed, meter) {
            Found::Violation(_) => Some(true),
            Found::Linearizable => Some(false),
            Found::Exhausted => None,
        }
    }

    fn explain(history: &History, kept: &[usize], removed: &[usize]) -> String {
        explain::explain(history, kept, removed)
    }

    fn supplement(
        history: &History,
        kept: Vec<usize>,
        removed: Vec<usize>,
    ) -> (Vec<usize>, Vec<usize>) {
        explain::supplement(history, kept, removed)
    }

    fn key(history: &History) -> Option<String> {
        history.entries().first().map(|e| e.op.key().to_string())
    }
}
