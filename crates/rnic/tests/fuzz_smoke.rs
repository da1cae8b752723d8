//! Stable fuzz smoke of the wire decoder (`decode_frame`, `frame_len`), run by `cargo test`:
//! whatever the bytes it never panics, and anything that decodes re-encodes to exactly the same
//! bytes (the checks of the libFuzzer target `wire_decode`, shared in `fuzz/checks/wire.rs`).
//! Inputs: frames built by `arbitrary` from seeded random bytes (and those bytes themselves),
//! seeded mutations of valid encodings, and every file of `fuzz/corpus/wire_decode/` and
//! `fuzz/artifacts/wire_decode/`.
//!
//! Reproduce a failure: each test prints its seed and iteration count; a failing input is
//! printed and saved under `target/tmp/fuzz_smoke/`. Rerun with
//! `PATRONUS_FUZZ_SEED=<seed> cargo test -p rnic --test fuzz_smoke`, or copy the saved file
//! to `fuzz/corpus/wire_decode/regress-<what>` to keep it (`docs/fuzzing.md`).
//! `PATRONUS_FUZZ_ITERS=<n>` runs longer.

#[path = "../../../fuzz/checks/wire.rs"]
mod check;
#[path = "../../../fuzz/smoke.rs"]
mod smoke;

use arbitrary::Unstructured;
use rand::{Rng, RngCore};
use rnic::soft::wire::{
    CmMessage, Frame, MAX_PRIVATE_DATA, NakCode, Packet, Request, RequestOp, Response,
    ResponseKind, decode_frame, encode_frame, frame_len,
};
use rnic::{MemoryKey, Psn, QpNumber};
use smoke::{Origin, Replay, Settings, Stats};

/// The libFuzzer target whose corpus is replayed.
const TARGET: &str = "wire_decode";
/// Default iterations of each randomized test (a few seconds in a debug build).
const ITERS: u64 = 100_000;
/// Longest payload or reason the structured frames carry.
const MAX_DATA: usize = 300;

fn encode(f: &Frame<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(f, &mut out);
    out
}

fn owned(f: Frame<&[u8]>) -> Frame<Vec<u8>> {
    match f {
        Frame::Cm(cm) => Frame::Cm(cm),
        Frame::Packet(p) => Frame::Packet(p.to_owned_packet()),
    }
}

fn arb_data(u: &mut Unstructured<'_>, max: usize) -> arbitrary::Result<Vec<u8>> {
    let n = u.int_in_range(0..=max)?;
    Ok(u.bytes(n.min(u.len()))?.to_vec())
}

fn arb_qpn(u: &mut Unstructured<'_>) -> arbitrary::Result<QpNumber> {
    Ok(QpNumber(u.int_in_range(0..=0x00ff_ffff)?))
}

/// A frame in the encoder's domain (24-bit QPNs, private data and reasons within their limits):
/// one whose encoding must decode back to it.
fn arb_frame(u: &mut Unstructured<'_>) -> arbitrary::Result<Frame<Vec<u8>>> {
    let dst_qp = arb_qpn(u)?;
    let psn = Psn::new(u.arbitrary()?);
    let (addr, rkey) = (u.arbitrary()?, MemoryKey(u.arbitrary()?));
    let ack_req = u.arbitrary()?;
    let request = |op| {
        Frame::Packet(Packet::Request(Request {
            dst_qp,
            psn,
            op,
            ack_req,
        }))
    };
    let response = |kind| Frame::Packet(Packet::Response(Response { dst_qp, psn, kind }));
    Ok(match u.int_in_range(0..=12u8)? {
        0 => request(RequestOp::Read {
            addr,
            rkey,
            len: u.arbitrary()?,
        }),
        1 => request(RequestOp::Write {
            addr,
            rkey,
            data: arb_data(u, MAX_DATA)?,
        }),
        2 => request(RequestOp::CompareSwap {
            addr,
            rkey,
            compare: u.arbitrary()?,
            swap: u.arbitrary()?,
        }),
        3 => request(RequestOp::FetchAdd {
            addr,
            rkey,
            add: u.arbitrary()?,
        }),
        4 => request(RequestOp::Send {
            data: arb_data(u, MAX_DATA)?,
            invalidate: u.arbitrary::<Option<u32>>()?.map(MemoryKey),
        }),
        5 => response(ResponseKind::Ack),
        6 => response(ResponseKind::ReadData(arb_data(u, MAX_DATA)?)),
        7 => response(ResponseKind::AtomicAck(u.arbitrary()?)),
        8 => response(ResponseKind::Nak(*u.choose(&[
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRkey,
            NakCode::ReceiverNotReady,
        ])?)),
        9 => Frame::Cm(CmMessage::ConnectRequest {
            version: u.arbitrary()?,
            qp: arb_qpn(u)?,
            start_psn: Psn::new(u.arbitrary()?),
            private_data: arb_data(u, MAX_PRIVATE_DATA)?,
        }),
        10 => Frame::Cm(CmMessage::ConnectReply {
            qp: arb_qpn(u)?,
            start_psn: Psn::new(u.arbitrary()?),
        }),
        _ => {
            let mut reason: String = u.arbitrary::<&str>()?.to_owned();
            while reason.len() > 256 {
                reason.pop();
            }
            Frame::Cm(CmMessage::ConnectReject { reason })
        }
    })
}

/// One valid frame of each kind: the seed corpus and the starting points of the mutations.
fn seed_frames() -> Vec<(&'static str, Frame<Vec<u8>>)> {
    let (dst_qp, psn) = (QpNumber(0x12_3456), Psn::new(0x00ab_cdef));
    let rkey = MemoryKey::new(0x42, 7);
    let request = |op| {
        Frame::Packet(Packet::Request(Request {
            dst_qp,
            psn,
            op,
            ack_req: true,
        }))
    };
    let response = |kind| Frame::Packet(Packet::Response(Response { dst_qp, psn, kind }));
    vec![
        (
            "read",
            request(RequestOp::Read {
                addr: 0x7f00_1000,
                rkey,
                len: 4096,
            }),
        ),
        (
            "write",
            request(RequestOp::Write {
                addr: 0x7f00_2000,
                rkey,
                data: b"patronus".to_vec(),
            }),
        ),
        (
            "compare-swap",
            request(RequestOp::CompareSwap {
                addr: 0x7f00_3000,
                rkey,
                compare: 1,
                swap: 2,
            }),
        ),
        (
            "fetch-add",
            request(RequestOp::FetchAdd {
                addr: 0x7f00_4000,
                rkey,
                add: 3,
            }),
        ),
        (
            "send",
            request(RequestOp::Send {
                data: vec![0x5a; 24],
                invalidate: None,
            }),
        ),
        (
            "send-invalidate",
            request(RequestOp::Send {
                data: b"bye".to_vec(),
                invalidate: Some(rkey),
            }),
        ),
        ("ack", response(ResponseKind::Ack)),
        (
            "read-data",
            response(ResponseKind::ReadData(vec![1, 2, 3, 4])),
        ),
        ("atomic-ack", response(ResponseKind::AtomicAck(u64::MAX))),
        (
            "nak",
            response(ResponseKind::Nak(NakCode::RemoteAccessError)),
        ),
        (
            "connect-request",
            Frame::Cm(CmMessage::ConnectRequest {
                version: rnic::soft::wire::WIRE_VERSION,
                qp: QpNumber(9),
                start_psn: Psn::new(100),
                private_data: b"PT\x01\x00".to_vec(),
            }),
        ),
        (
            "connect-reply",
            Frame::Cm(CmMessage::ConnectReply {
                qp: QpNumber(10),
                start_psn: Psn::new(200),
            }),
        ),
        (
            "connect-reject",
            Frame::Cm(CmMessage::ConnectReject {
                reason: "no such service".to_owned(),
            }),
        ),
    ]
}

/// Sets the length prefix to the buffer's length, so a mutation that changed the length
/// reaches the body's checks instead of failing at the prefix.
fn fix_length_prefix(bytes: &mut [u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes();
    if let Some(prefix) = bytes.get_mut(..4) {
        prefix.copy_from_slice(&len);
    }
}

/// Seeded random bytes as garbage, then as the `arbitrary` source of a frame that must round
/// trip; no strict prefix of an encoding decodes.
#[test]
fn arbitrary_frames_round_trip_and_garbage_never_panics() {
    const TEST: &str = "arbitrary_frames_round_trip_and_garbage_never_panics";
    let s = Settings::from_env(TEST, ITERS);
    let mut rng = s.rng();
    let mut stats = Stats::new(TEST, Some(s.seed));
    let mut raw = vec![0u8; 2 * MAX_DATA];
    for iteration in 0..s.iters {
        let origin = Origin::Random {
            test: TEST,
            seed: s.seed,
            iteration,
        };
        let n = rng.random_range(0..=raw.len());
        let raw = &mut raw[..n];
        rng.fill_bytes(raw);
        {
            let _replay = Replay::new(origin, raw);
            stats.record(check::check_input(raw) > 0);
        }
        let Ok(frame) = arb_frame(&mut Unstructured::new(raw)) else {
            continue;
        };
        let wire = encode(&frame);
        let _replay = Replay::new(origin, &wire);
        assert_eq!(decode_frame(&wire).map(owned), Ok(frame), "round trip");
        stats.record(check::check_input(&wire) > 0);
        for cut in 0..wire.len() {
            let prefix = &wire[..cut];
            assert!(decode_frame(prefix).is_err(), "a {cut}-byte prefix decodes");
            let want = if cut < 4 { None } else { Some(wire.len()) };
            assert_eq!(
                frame_len(prefix, usize::MAX),
                Ok(want),
                "frame_len of a prefix"
            );
        }
    }
}

/// Valid encodings (the seeds, and `arbitrary` frames), alone or two in a stream, damaged by
/// seeded edits, half of the time with the length prefix fixed up to reach the body's checks.
#[test]
fn mutated_valid_frames_never_panic_and_stay_canonical() {
    const TEST: &str = "mutated_valid_frames_never_panic_and_stay_canonical";
    let s = Settings::from_env(TEST, ITERS);
    let mut rng = s.rng();
    let mut stats = Stats::new(TEST, Some(s.seed));
    let seeds: Vec<Vec<u8>> = seed_frames().iter().map(|(_, f)| encode(f)).collect();
    let mut raw = vec![0u8; 2 * MAX_DATA];
    let mut valid = |rng: &mut rand::rngs::StdRng| {
        if rng.random() {
            return seeds[rng.random_range(0..seeds.len())].clone();
        }
        rng.fill_bytes(&mut raw);
        arb_frame(&mut Unstructured::new(&raw))
            .map(|f| encode(&f))
            .unwrap_or_default()
    };
    for iteration in 0..s.iters {
        let mut wire = valid(&mut rng);
        if rng.random_ratio(1, 4) {
            wire.extend(valid(&mut rng));
        }
        smoke::mutate(&mut rng, &mut wire);
        if rng.random() {
            fix_length_prefix(&mut wire);
        }
        let origin = Origin::Random {
            test: TEST,
            seed: s.seed,
            iteration,
        };
        let _replay = Replay::new(origin, &wire);
        stats.record(check::check_input(&wire) > 0);
    }
    assert!(
        s.iters < 1000 || stats.decoded * 10 >= stats.tried,
        "fewer than one mutated frame in ten still decodes: the smoke no longer reaches deep \
         into the decoder"
    );
}

/// Every file of the libFuzzer corpus and artifacts; the committed seeds must be there.
#[test]
fn corpus_and_artifacts_replay() {
    smoke::replay_corpus(TARGET, seed_frames().len(), |bytes| {
        check::check_input(bytes) > 0
    });
}

/// The committed seed corpus is the current encoding of `seed_frames`.
#[test]
fn seed_corpus_is_current() {
    for (name, frame) in seed_frames() {
        smoke::seed_file(TARGET, name, &encode(&frame));
    }
}
