//! A FIFO queue of string items.
//!
//! | op | results |
//! |---|---|
//! | `push(item)` | `ok` |
//! | `pop` | `item(x)` (the front item, removed) · `empty` (the queue was empty) |
//!
//! Any op may also end `unknown` or `failed` ([`crate::Status`]). An unknown `pop` removes
//! the front item if there is one. Items are normally unique; duplicates are handled exactly
//! (at some cost in search). A queue is one object, so it is checked as one partition; cheap
//! pre-checks first reject histories where some item is popped more often than it could have
//! been pushed by then (popped twice, popped but never pushed, popped before its push).

mod decide;
mod explain;
mod machine;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Model;
use crate::budget::{Budget, Meter};
use crate::engine;
use crate::fields::Fields;
use crate::history::Status;
use crate::model::{Decision, Engine};

/// The queue model (a marker type for [`crate::History`], [`crate::Recorder`], …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queue;

/// A history of queue operations.
pub type History = crate::History<Queue>;
/// A recorder of queue operations.
pub type Recorder = crate::Recorder<Queue>;
/// One recorded queue operation.
pub type Entry = crate::Entry<Op, Outcome>;

/// A queue operation. Its serde form is the `op` part of a record:
/// `{"op":"push","item":"a"}` or `{"op":"pop"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Op {
    /// Enqueue at the back.
    Push {
        /** The item. */
        item: String,
    },
    /// Dequeue from the front.
    Pop,
}

impl Op {
    /// `push(item)`.
    pub fn push(item: impl Into<String>) -> Op {
        Op::Push { item: item.into() }
    }
}

/// A known result of a queue operation. Its serde form is the `result` part of a record:
/// `{"result":"ok"}`, `{"result":"item","item":"a"}` or `{"result":"empty"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "lowercase", deny_unknown_fields)]
pub enum Outcome {
    /// `push` enqueued its item.
    Ok,
    /// `pop` dequeued this item.
    Item {
        /** The item. */
        item: String,
    },
    /// `pop` found the queue empty.
    Empty,
}

impl Outcome {
    /// `item(x)`, the result of a pop that dequeued `x`.
    pub fn item(item: impl Into<String>) -> Outcome {
        Outcome::Item { item: item.into() }
    }
}

/// Whether `op` can ever return `outcome`.
fn allows(op: &Op, outcome: &Outcome) -> bool {
    matches!(
        (op, outcome),
        (Op::Push { .. }, Outcome::Ok) | (Op::Pop, Outcome::Item { .. } | Outcome::Empty)
    )
}

impl Model for Queue {
    type Op = Op;
    type Outcome = Outcome;
    type Initial = Vec<String>;
    const NAME: &'static str = "queue";

    fn check(history: &History, budget: Budget) -> crate::Verdict<Queue> {
        engine::run(history, budget)
    }

    fn describe(op: &Op, status: &Status<Outcome>) -> String {
        let call = match op {
            Op::Push { item } => format!("push {item:?}"),
            Op::Pop => "pop".to_string(),
        };
        let result = match status {
            Status::Done(Outcome::Ok) => "ok".to_string(),
            Status::Done(Outcome::Item { item }) => format!("{item:?}"),
            Status::Done(Outcome::Empty) => "empty".to_string(),
            Status::Unknown => "unknown".into(),
            Status::Failed => "failed".into(),
        };
        format!("{call} -> {result}")
    }

    /// The whole initial queue: every pop can observe every initial item.
    fn restrict_initial(initial: &Vec<String>, _ops: &mut dyn Iterator<Item = &Op>) -> Vec<String> {
        initial.clone()
    }

    fn decode_op(fields: &mut Fields) -> Result<Op, String> {
        match fields.take_str("op")?.as_str() {
            "push" => Ok(Op::Push {
                item: fields.take_str("item")?,
            }),
            "pop" => Ok(Op::Pop),
            other => Err(format!("unknown queue op `{other}` (push, pop)")),
        }
    }

    fn decode_outcome(op: &Op, result: &str, fields: &mut Fields) -> Result<Outcome, String> {
        let outcome = match (result, op) {
            ("ok", _) => Outcome::Ok,
            ("item", Op::Pop) => Outcome::item(fields.take_str("item")?),
            ("item", Op::Push { .. }) => return Err("`push` cannot return `item`".into()),
            ("empty", _) => Outcome::Empty,
            (other, _) => return Err(format!("unknown queue result `{other}`")),
        };
        if !allows(op, &outcome) {
            let name = if matches!(op, Op::Pop) { "pop" } else { "push" };
            return Err(format!("`{name}` cannot return `{result}`"));
        }
        Ok(outcome)
    }

    fn initial_to_json(initial: &Vec<String>) -> Option<Value> {
        (!initial.is_empty()).then(|| serde_json::json!(initial))
    }

    fn initial_from_json(value: Value) -> Result<Vec<String>, String> {
        serde_json::from_value(value).map_err(|e| format!("expected an array of strings: {e}"))
    }
}

impl Engine for Queue {
    const CONTEXT: bool = false;

    fn decide(history: &History, meter: &mut Meter) -> Decision {
        decide::decide(history, meter)
    }

    fn units(history: &History) -> Vec<Vec<usize>> {
        decide::units(history)
    }

    /// The removed units provably do not matter, so only the kept entries are searched.
    fn fails(
        history: &History,
        kept: &[usize],
        _removed: &[usize],
        meter: &mut Meter,
    ) -> Option<bool> {
        match decide::decide(&history.restrict(kept), meter) {
            Decision::Violation { .. } => Some(true),
            Decision::Linearizable => Some(false),
            Decision::Exhausted => None,
        }
    }

    fn explain(history: &History, kept: &[usize], _removed: &[usize]) -> String {
        explain::explain(&history.restrict(kept))
    }

    fn key(_history: &History) -> Option<String> {
        None
    }
}
