//! Fuzzes the wire decoder: `frame_len` and `decode_frame` must never panic on arbitrary
//! bytes, and whatever decodes must re-encode to exactly the same bytes (canonical encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic::soft::wire::codec::encoded_len;
use rnic::soft::wire::{decode_frame, encode_frame, frame_len};

/// Checks one candidate frame.
fn check(bytes: &[u8]) {
    if let Ok(frame) = decode_frame(bytes) {
        let mut again = Vec::with_capacity(bytes.len());
        encode_frame(&frame, &mut again);
        assert_eq!(again.as_slice(), bytes, "non-canonical decode: {frame:?}");
        assert_eq!(encoded_len(&frame), bytes.len());
        assert_eq!(frame_len(bytes, bytes.len()), Ok(Some(bytes.len())));
    }
}

fuzz_target!(|data: &[u8]| {
    // The whole input as one frame.
    check(data);
    // The input as a stream, split the way a link splits its receive buffer.
    let mut rest = data;
    while let Ok(Some(n)) = frame_len(rest, 1 << 16) {
        let Some((frame, tail)) = rest.split_at_checked(n) else {
            break;
        };
        check(frame);
        rest = tail;
    }
});
