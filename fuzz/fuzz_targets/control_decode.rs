//! Fuzzes the control decoders of `patronus-core`: control requests and replies, connection
//! intents, permission headers and the slot views must never panic on arbitrary bytes, and a
//! slot or intent that decodes must re-encode to exactly the same bytes (canonical encoding).
//! The checks are shared with the stable smoke test `crates/core/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks/control.rs"]
mod check;

fuzz_target!(|data: &[u8]| {
    check::check_input(data);
});
