//! The properties of the control decoders that fuzzing checks, in one place for both
//! harnesses: the stable smoke test (`crates/core/tests/fuzz_smoke.rs`) and the libFuzzer
//! target (`fuzz/fuzz_targets/control_decode.rs`) include this file by path. Only the public
//! API of `patronus-core` is used.
//!
//! - the control messages (`decode_request`, `decode_reply`, also through
//!   `ControlProtocol`), the connection intent (`Intent::decode`) and the slot views
//!   (`SlotReader`) never panic, whatever the bytes;
//! - a slot or intent that decodes is the canonical encoding of what it decodes to: it
//!   re-encodes to exactly the same bytes;
//! - every read through a `SlotReader` returns exactly the bytes in view, or `Truncated` with
//!   the true lengths;
//! - a permission header (`Header::decode`, words from memory) always re-encodes, to words
//!   that decode to the same header.

use patronus_core::proto::connect::Intent;
use patronus_core::proto::header::{HEADER_SIZE, Header};
use patronus_core::proto::messages::{
    ControlProtocol, SLOT_SIZE, decode_reply, decode_request, encode_reply, encode_request,
};
use patronus_core::rpc::{Protocol, SlotError, SlotReader};

/// Checks `bytes` as a request slot; returns whether it decoded.
pub fn check_request(bytes: &[u8]) -> bool {
    let decoded = decode_request(bytes);
    assert_eq!(
        ControlProtocol::decode_request(bytes),
        decoded,
        "ControlProtocol::decode_request"
    );
    let Ok((id, req)) = decoded else {
        return false;
    };
    assert_eq!(
        encode_request(id, &req).as_slice(),
        bytes,
        "non-canonical request (id {id}): {req:?}"
    );
    let mut slot = [0xa5; SLOT_SIZE];
    ControlProtocol::encode_request(id, &req, &mut slot);
    assert_eq!(slot.as_slice(), bytes, "ControlProtocol::encode_request");
    true
}

/// Checks `bytes` as a reply slot; returns whether it decoded.
pub fn check_reply(bytes: &[u8]) -> bool {
    let decoded = decode_reply(bytes);
    assert_eq!(
        ControlProtocol::decode_reply(bytes),
        decoded,
        "ControlProtocol::decode_reply"
    );
    let Ok((id, reply)) = decoded else {
        return false;
    };
    assert_eq!(
        encode_reply(id, &reply).as_slice(),
        bytes,
        "non-canonical reply (id {id}): {reply:?}"
    );
    let mut slot = [0xa5; SLOT_SIZE];
    ControlProtocol::encode_reply(id, &reply, &mut slot);
    assert_eq!(slot.as_slice(), bytes, "ControlProtocol::encode_reply");
    true
}

/// Checks `bytes` as a connection's private data; returns whether it decoded.
pub fn check_intent(bytes: &[u8]) -> bool {
    let Some(intent) = Intent::decode(bytes) else {
        return false;
    };
    assert_eq!(
        intent.encode().as_slice(),
        bytes,
        "non-canonical intent: {intent:?}"
    );
    true
}

/// Checks the first [`HEADER_SIZE`] bytes of `bytes`, if there are as many, as a permission
/// header in memory.
pub fn check_header(bytes: &[u8]) {
    let Some(raw) = bytes.get(..HEADER_SIZE) else {
        return;
    };
    let mut words = [0u64; 4];
    for (w, b) in words.iter_mut().zip(raw.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        *w = u64::from_ne_bytes(word);
    }
    let header = Header::decode(words);
    let again = header.encode();
    assert!(again.is_ok(), "{header:?} decodes but does not encode");
    if let Ok(again) = again {
        assert_eq!(Header::decode(again), header, "header re-encoding");
    }
}

/// Reads `bytes` through slot views of several sizes, at every offset in view and a few
/// beyond, and compares each read with the bytes themselves.
pub fn check_slot_reader(bytes: &[u8]) {
    let truncated = |got: usize, want: usize| SlotError::Truncated { got, want };
    for size in [SLOT_SIZE, bytes.len() / 2, 0] {
        let expected = bytes.get(..size).ok_or(truncated(bytes.len(), size));
        let view = SlotReader::new(bytes, size);
        assert_eq!(
            view.map(|r| r.len()),
            expected.map(<[u8]>::len),
            "view of {size}"
        );
        if let (Ok(view), Ok(expected)) = (view, expected) {
            check_reads(&view, expected);
        }
    }
    for (min, max) in [(16, SLOT_SIZE), (0, 8), (SLOT_SIZE, SLOT_SIZE)] {
        let view = SlotReader::variable(bytes, min, max);
        if bytes.len() < min {
            assert_eq!(view.err(), Some(truncated(bytes.len(), min)));
        } else if let Ok(view) = view {
            check_reads(&view, &bytes[..bytes.len().min(max)]);
        } else {
            panic!(
                "a variable view of {} bytes (min {min}) failed",
                bytes.len()
            );
        }
    }
}

/// Every accessor of `r` at every offset of `view` and beyond against `view`.
fn check_reads(r: &SlotReader<'_>, view: &[u8]) {
    let got = view.len();
    assert_eq!(r.len(), got);
    assert_eq!(r.is_empty(), view.is_empty());
    let field = |at: usize, n: usize| {
        at.checked_add(n)
            .and_then(|end| view.get(at..end))
            .ok_or(SlotError::Truncated {
                got,
                want: at.saturating_add(n),
            })
    };
    let offsets = (0..=got + 8).chain([usize::MAX - 8, usize::MAX - 3, usize::MAX]);
    for at in offsets {
        assert_eq!(r.u8(at), field(at, 1).map(|b| b[0]), "u8 at {at}");
        assert_eq!(
            r.u32(at),
            field(at, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            "u32 at {at}"
        );
        assert_eq!(
            r.u64(at),
            field(at, 8).map(|b| {
                let mut w = [0u8; 8];
                w.copy_from_slice(b);
                u64::from_le_bytes(w)
            }),
            "u64 at {at}"
        );
        let flag = field(at, 1).and_then(|b| match b[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(SlotError::BadField("f")),
        });
        assert_eq!(r.flag(at, "f"), flag, "flag at {at}");
        assert_eq!(
            r.array::<3>(at),
            field(at, 3).map(|b| [b[0], b[1], b[2]]),
            "array at {at}"
        );
        for len in [0, 5, got, usize::MAX] {
            assert_eq!(r.slice(at, len), field(at, len), "slice({at}, {len})");
        }
    }
}

/// Checks `data` as each control message (request, reply, intent, header); returns how many
/// of the decoders accepted it.
pub fn check_message(data: &[u8]) -> usize {
    check_header(data);
    usize::from(check_request(data))
        + usize::from(check_reply(data))
        + usize::from(check_intent(data))
}

/// Checks `data` as every kind of control input (the messages, then through slot views);
/// returns how many of the message decoders accepted it.
pub fn check_input(data: &[u8]) -> usize {
    check_slot_reader(data);
    check_message(data)
}
