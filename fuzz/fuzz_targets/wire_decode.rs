//! Fuzzes the wire decoder: `frame_len` and `decode_frame` must never panic on arbitrary
//! bytes, and whatever decodes must re-encode to exactly the same bytes (canonical encoding).
//! The checks are shared with the stable smoke test `crates/rnic/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks/wire.rs"]
mod check;

fuzz_target!(|data: &[u8]| {
    // The whole input as one frame, then as a stream split the way a link splits its receive
    // buffer.
    check::check_input(data);
});
