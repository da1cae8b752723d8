//! Histories as JSON lines: one JSON object per line, one line per operation.
//!
//! ```text
//! {"model":"kv","initial":{"k1":"v0"}}
//! {"client":3,"invoke":1200,"complete":1850,"op":"put","key":"k0","value":"v3","result":"updated"}
//! {"client":1,"invoke":1300,"complete":1400,"op":"get","key":"k0","result":"value","value":"v3"}
//! {"client":2,"invoke":1500,"op":"delete","key":"k1","result":"unknown"}
//! ```
//!
//! - The optional first line is a header: `model` (`"kv"` or `"queue"`) and an optional
//!   `initial` state (kv: an object of key → value; queue: an array of items, front first).
//! - Every other non-blank line is an operation record: `client` and `invoke` (non-negative
//!   integers), `complete` (required for a known result; optional and ignored for `unknown`
//!   and `failed`), `op` with its arguments, and `result` with the fields it carries. The
//!   models' sections of `docs/lincheck.md` list the ops and results ([`crate::kv`],
//!   [`crate::queue`]).
//! - Unknown fields, missing fields and results an op cannot have are errors naming the line:
//!   a misspelt `complete` must not silently turn a result into an unknown one.
//!
//! Writers always emit the header, then the records in history order.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::Model;
use crate::error::Error;
pub use crate::fields::Fields;
use crate::history::{Entry, History, Status};
use crate::kv::Kv;
use crate::queue::Queue;

/// A history whose model was read from its file.
#[derive(Clone, Debug)]
pub enum AnyHistory {
    /// Key-value registers.
    Kv(History<Kv>),
    /// A FIFO queue.
    Queue(History<Queue>),
}

/// Parses a history of model `M`; `source_name` names the input in errors.
pub fn parse<M: Model>(text: &str, source_name: &str) -> Result<History<M>, Error> {
    let err = |line: usize, message: String| Error::Parse {
        source_name: source_name.to_string(),
        line,
        message,
    };
    let mut history = History::<M>::new();
    let mut first = true;
    for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() {
            continue;
        }
        let map: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| err(n, format!("not a JSON object: {e}")))?;
        let mut fields = Fields(map);
        if fields.has("model") {
            if !first {
                return Err(err(
                    n,
                    "a header (`model`) is only allowed on the first line".into(),
                ));
            }
            let initial = header::<M>(&mut fields).map_err(|m| err(n, m))?;
            history = History::with_initial(initial);
        } else {
            let entry = record::<M>(fields).map_err(|m| err(n, m))?;
            history.push(entry).map_err(|e| match e {
                Error::Invalid { message, .. } => err(n, message),
                other => other,
            })?;
        }
        first = false;
    }
    Ok(history)
}

fn header<M: Model>(fields: &mut Fields) -> Result<M::Initial, String> {
    let model = fields.take_str("model")?;
    if model != M::NAME {
        return Err(format!(
            "the header names model `{model}`, expected `{}`",
            M::NAME
        ));
    }
    let initial = match fields.0.remove("initial") {
        Some(v) => M::initial_from_json(v).map_err(|m| format!("bad `initial`: {m}"))?,
        None => M::Initial::default(),
    };
    std::mem::replace(fields, Fields(Map::new())).finish("the header")?;
    Ok(initial)
}

fn record<M: Model>(mut fields: Fields) -> Result<Entry<M::Op, M::Outcome>, String> {
    let client = fields.take_u64("client")?;
    let invoke = fields.take_u64("invoke")?;
    let complete = fields.take_opt_u64("complete")?;
    let result = fields.take_str("result")?;
    let op = M::decode_op(&mut fields)?;
    let status = match result.as_str() {
        "unknown" => Status::Unknown,
        "failed" => Status::Failed,
        r => Status::Done(M::decode_outcome(&op, r, &mut fields)?),
    };
    fields.finish("this record")?;
    let entry = Entry {
        client,
        invoke,
        complete,
        op,
        status,
    };
    entry.validate()?;
    Ok(entry)
}

/// Parses a history of whichever model its header (or, without one, its first `op`) names;
/// `model` (`"kv"` or `"queue"`) overrides the guess and must agree with a header.
pub fn parse_any(text: &str, source_name: &str, model: Option<&str>) -> Result<AnyHistory, Error> {
    let first = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty());
    let mut named = model.map(str::to_string);
    if let Some((i, line)) = first {
        let err = |message: String| Error::Parse {
            source_name: source_name.to_string(),
            line: i + 1,
            message,
        };
        let map: Map<String, Value> = serde_json::from_str(line.trim())
            .map_err(|e| err(format!("not a JSON object: {e}")))?;
        let in_file = match (map.get("model"), map.get("op")) {
            (Some(Value::String(m)), _) => Some(m.clone()),
            (Some(other), _) => return Err(err(format!("`model` must be a string, not {other}"))),
            (None, Some(Value::String(op))) if named.is_none() => match op.as_str() {
                "put" | "insert" | "update" | "delete" | "get" => Some("kv".into()),
                "push" | "pop" => Some("queue".into()),
                _ => return Err(err(format!("unknown op `{op}`"))),
            },
            _ => None,
        };
        match (&named, in_file) {
            (Some(a), Some(b)) if *a != b => {
                return Err(err(format!(
                    "the header names model `{b}`, but `{a}` was asked for"
                )));
            }
            (None, found) => named = found,
            _ => {}
        }
    }
    match named.as_deref() {
        Some("kv") => parse::<Kv>(text, source_name).map(AnyHistory::Kv),
        Some("queue") => parse::<Queue>(text, source_name).map(AnyHistory::Queue),
        Some(other) => Err(Error::Parse {
            source_name: source_name.to_string(),
            line: first.map_or(1, |(i, _)| i + 1),
            message: format!("unknown model `{other}` (expected `kv` or `queue`)"),
        }),
        None => Err(Error::Parse {
            source_name: source_name.to_string(),
            line: 1,
            message: "no header and no operations: cannot tell the model".into(),
        }),
    }
}

/// Reads a history of model `M` from a file.
pub fn read_jsonl<M: Model>(path: impl AsRef<Path>) -> Result<History<M>, Error> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse(&text, &path.display().to_string())
}

/// Reads a history of either model from a file (see [`parse_any`]).
pub fn read_any(path: impl AsRef<Path>, model: Option<&str>) -> Result<AnyHistory, Error> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_any(&text, &path.display().to_string(), model)
}

/// One line's fields in a fixed, readable order.
struct Line(Vec<(String, Value)>);

impl Serialize for Line {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Appends the fields of a serialized value, `tag` first.
fn push_fields(line: &mut Vec<(String, Value)>, value: impl Serialize, tag: &str) {
    if let Ok(Value::Object(mut map)) = serde_json::to_value(value) {
        if let Some(t) = map.remove(tag) {
            line.push((tag.to_string(), t));
        }
        line.extend(map);
    }
}

/// Renders a history as JSON lines, header first.
pub fn to_jsonl<M: Model>(history: &History<M>) -> String {
    let mut out = String::new();
    let mut header = vec![("model".to_string(), Value::from(M::NAME))];
    if let Some(initial) = M::initial_to_json(history.initial()) {
        header.push(("initial".into(), initial));
    }
    let mut lines = vec![Line(header)];
    for e in history.entries() {
        let mut line = vec![
            ("client".into(), e.client.into()),
            ("invoke".into(), e.invoke.into()),
        ];
        if let Some(c) = e.complete {
            line.push(("complete".into(), c.into()));
        }
        push_fields(&mut line, &e.op, "op");
        match &e.status {
            Status::Done(outcome) => push_fields(&mut line, outcome, "result"),
            Status::Unknown => line.push(("result".into(), "unknown".into())),
            Status::Failed => line.push(("result".into(), "failed".into())),
        }
        lines.push(Line(line));
    }
    for line in lines {
        // Serializing strings and integers into a String cannot fail.
        out.push_str(&serde_json::to_string(&line).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Writes a history as JSON lines (see [`to_jsonl`]).
pub fn write_jsonl<M: Model>(history: &History<M>, path: impl AsRef<Path>) -> Result<(), Error> {
    let path = path.as_ref();
    let file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::new(file);
    w.write_all(to_jsonl(history).as_bytes())
        .and_then(|()| w.flush())
        .map_err(|e| Error::io(path, e))
}

impl<M: Model> History<M> {
    /// Writes the history as JSON lines (see [`crate::jsonl`]).
    pub fn write_jsonl(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        write_jsonl(self, path)
    }

    /// Reads a history of this model from JSON lines (see [`crate::jsonl`]).
    pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Self, Error> {
        read_jsonl(path)
    }
}
