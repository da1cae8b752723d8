//! The properties of the wire decoder that fuzzing checks, in one place for both harnesses:
//! the stable smoke test (`crates/rnic/tests/fuzz_smoke.rs`) and the libFuzzer target
//! (`fuzz/fuzz_targets/wire_decode.rs`) include this file by path. Only the public codec API
//! is used.
//!
//! - `frame_len` and `decode_frame` never panic, whatever the bytes;
//! - a byte string that decodes is the canonical encoding of what it decodes to: it re-encodes
//!   to exactly the same bytes, `encoded_len` agrees, and `frame_len` reports its length.

use rnic::soft::wire::codec::encoded_len;
use rnic::soft::wire::{decode_frame, encode_frame, frame_len};

/// Largest frame the stream split accepts (as a link's `max_frame` would bound it).
const STREAM_MAX_FRAME: usize = 1 << 16;

/// Checks one candidate frame; returns whether it decoded.
pub fn check_frame(bytes: &[u8]) -> bool {
    // The prefix alone, with no bound and with a tight one: never a panic.
    let _ = frame_len(bytes, usize::MAX);
    let _ = frame_len(bytes, 64);
    let Ok(frame) = decode_frame(bytes) else {
        return false;
    };
    let mut again = Vec::with_capacity(bytes.len());
    encode_frame(&frame, &mut again);
    assert_eq!(again.as_slice(), bytes, "non-canonical decode: {frame:?}");
    assert_eq!(encoded_len(&frame), bytes.len(), "encoded_len of {frame:?}");
    assert_eq!(
        frame_len(bytes, bytes.len()),
        Ok(Some(bytes.len())),
        "frame_len of a frame that decodes"
    );
    true
}

/// Checks `data` as one frame, then as a stream split the way a link splits its receive
/// buffer (`frame_len`, then exactly that many bytes to `decode_frame`); returns how many
/// frames decoded.
pub fn check_input(data: &[u8]) -> usize {
    let mut decoded = usize::from(check_frame(data));
    let mut rest = data;
    while let Ok(Some(n)) = frame_len(rest, STREAM_MAX_FRAME) {
        let Some((frame, tail)) = rest.split_at_checked(n) else {
            break;
        };
        decoded += usize::from(check_frame(frame));
        rest = tail;
    }
    decoded
}
