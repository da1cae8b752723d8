//! Reading key-value records: the `op` part (`op`, `key`, `value`) and the `result` part
//! (`result`, and `value` for a read), with errors that say what is wrong.

use super::{Op, Outcome};
use crate::fields::Fields;

/// Takes an operation out of a record.
pub(super) fn decode_op(fields: &mut Fields) -> Result<Op, String> {
    let name = fields.take_str("op")?;
    let writes = matches!(name.as_str(), "put" | "insert" | "update");
    if !writes && !matches!(name.as_str(), "delete" | "get") {
        return Err(format!(
            "unknown kv op `{name}` (put, insert, update, delete, get)"
        ));
    }
    let key = fields.take_str("key")?;
    let value = if writes {
        fields.take_str("value")?
    } else {
        String::new()
    };
    Ok(match name.as_str() {
        "put" => Op::Put { key, value },
        "insert" => Op::Insert { key, value },
        "update" => Op::Update { key, value },
        "delete" => Op::Delete { key },
        _ => Op::Get { key },
    })
}

/// Takes the known result `result` of `op` out of a record.
pub(super) fn decode_outcome(
    op: &Op,
    result: &str,
    fields: &mut Fields,
) -> Result<Outcome, String> {
    let outcome = match result {
        "inserted" => Outcome::Inserted,
        "updated" => Outcome::Updated,
        "exists" => Outcome::Exists,
        "absent" => Outcome::Absent,
        "deleted" => Outcome::Deleted,
        "value" if matches!(op, Op::Get { .. }) => Outcome::value(fields.take_str("value")?),
        "value" => Outcome::value(String::new()),
        other => return Err(format!("unknown kv result `{other}`")),
    };
    if !op.allows(&outcome) {
        return Err(format!("`{}` cannot return `{result}`", op.name()));
    }
    Ok(outcome)
}
