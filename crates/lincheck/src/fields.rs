//! The fields of one JSON-lines record ([`crate::jsonl`]), which the codec and each model's
//! decoders take out one by one.

use serde_json::{Map, Value};

/// The fields of one record, taken out one by one by the decoders.
#[derive(Debug)]
pub struct Fields(pub(crate) Map<String, Value>);

impl Fields {
    /// Whether the record has this field.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Takes a required string field.
    pub fn take_str(&mut self, name: &str) -> Result<String, String> {
        self.take_opt_str(name)?
            .ok_or_else(|| format!("missing field `{name}`"))
    }

    /// Takes an optional string field.
    pub fn take_opt_str(&mut self, name: &str) -> Result<Option<String>, String> {
        match self.0.remove(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!("field `{name}` must be a string, not {other}")),
        }
    }

    pub(crate) fn take_opt_u64(&mut self, name: &str) -> Result<Option<u64>, String> {
        match self.0.remove(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("field `{name}` must be a non-negative integer, not {v}")),
        }
    }

    pub(crate) fn take_u64(&mut self, name: &str) -> Result<u64, String> {
        self.take_opt_u64(name)?
            .ok_or_else(|| format!("missing field `{name}`"))
    }

    /// Fails if any field was left over.
    pub(crate) fn finish(self, what: &str) -> Result<(), String> {
        match self.0.keys().next() {
            Some(name) => Err(format!("unexpected field `{name}` in {what}")),
            None => Ok(()),
        }
    }
}
