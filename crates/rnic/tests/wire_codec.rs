//! Property tests of the wire codec: arbitrary frames round-trip, and arbitrary or damaged byte
//! strings never panic the decoder and, when they decode, are the canonical encoding.

use proptest::prelude::*;
use rnic::soft::wire::codec::{FRAME_HEADER_LEN, encoded_len};
use rnic::soft::wire::{
    CmMessage, Frame, MAX_PRIVATE_DATA, NakCode, Packet, Request, RequestOp, Response,
    ResponseKind, decode_frame, encode_frame, frame_len,
};
use rnic::{MemoryKey, Psn, QpNumber};

fn owned(f: Frame<&[u8]>) -> Frame<Vec<u8>> {
    match f {
        Frame::Cm(cm) => Frame::Cm(cm),
        Frame::Packet(p) => Frame::Packet(p.to_owned_packet()),
    }
}

fn encode(f: &Frame<Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(f, &mut out);
    out
}

/// Decoding never panics; whatever decodes re-encodes to exactly the input.
fn check_canonical(bytes: &[u8]) {
    let _ = frame_len(bytes, usize::MAX);
    let _ = frame_len(bytes, 64);
    if let Ok(frame) = decode_frame(bytes) {
        let mut again = Vec::new();
        encode_frame(&frame, &mut again);
        assert_eq!(again.as_slice(), bytes, "non-canonical: {frame:?}");
        assert_eq!(frame_len(bytes, bytes.len()), Ok(Some(bytes.len())));
    }
}

fn qpn() -> impl Strategy<Value = QpNumber> {
    (0..=0x00ff_ffffu32).prop_map(QpNumber)
}

fn psn() -> impl Strategy<Value = Psn> {
    any::<u32>().prop_map(Psn::new)
}

fn rkey() -> impl Strategy<Value = MemoryKey> {
    any::<u32>().prop_map(MemoryKey)
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..96)
}

fn request_op() -> impl Strategy<Value = RequestOp> {
    prop_oneof![
        (any::<u64>(), rkey(), any::<u32>()).prop_map(|(addr, rkey, len)| RequestOp::Read {
            addr,
            rkey,
            len
        }),
        (any::<u64>(), rkey(), data()).prop_map(|(addr, rkey, data)| RequestOp::Write {
            addr,
            rkey,
            data
        }),
        (any::<u64>(), rkey(), any::<u64>(), any::<u64>()).prop_map(
            |(addr, rkey, compare, swap)| RequestOp::CompareSwap {
                addr,
                rkey,
                compare,
                swap
            }
        ),
        (any::<u64>(), rkey(), any::<u64>()).prop_map(|(addr, rkey, add)| RequestOp::FetchAdd {
            addr,
            rkey,
            add
        }),
        (data(), prop::option::of(rkey()))
            .prop_map(|(data, invalidate)| RequestOp::Send { data, invalidate }),
    ]
}

fn nak_code() -> impl Strategy<Value = NakCode> {
    prop_oneof![
        Just(NakCode::PsnSequenceError),
        Just(NakCode::InvalidRequest),
        Just(NakCode::RemoteAccessError),
        Just(NakCode::RemoteOperationalError),
        Just(NakCode::InvalidRkey),
        Just(NakCode::ReceiverNotReady),
    ]
}

fn response_kind() -> impl Strategy<Value = ResponseKind> {
    prop_oneof![
        Just(ResponseKind::Ack),
        data().prop_map(ResponseKind::ReadData),
        any::<u64>().prop_map(ResponseKind::AtomicAck),
        nak_code().prop_map(ResponseKind::Nak),
    ]
}

fn cm_message() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        (
            any::<u8>(),
            qpn(),
            psn(),
            prop::collection::vec(any::<u8>(), 0..=MAX_PRIVATE_DATA)
        )
            .prop_map(|(version, qp, start_psn, private_data)| {
                CmMessage::ConnectRequest {
                    version,
                    qp,
                    start_psn,
                    private_data,
                }
            }),
        (qpn(), psn()).prop_map(|(qp, start_psn)| CmMessage::ConnectReply { qp, start_psn }),
        // At most 64 chars of at most 4 bytes: within the 256-byte reason limit.
        prop::collection::vec(any::<char>(), 0..=64).prop_map(|cs| CmMessage::ConnectReject {
            reason: cs.into_iter().collect()
        }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        cm_message().prop_map(Frame::Cm),
        (qpn(), psn(), request_op(), any::<bool>()).prop_map(|(dst_qp, psn, op, ack_req)| {
            Frame::Packet(Packet::Request(Request {
                dst_qp,
                psn,
                op,
                ack_req,
            }))
        }),
        (qpn(), psn(), response_kind()).prop_map(|(dst_qp, psn, kind)| Frame::Packet(
            Packet::Response(Response { dst_qp, psn, kind })
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_frames_round_trip(f in frame()) {
        let bytes = encode(&f);
        prop_assert_eq!(bytes.len(), encoded_len(&f));
        prop_assert_eq!(frame_len(&bytes, bytes.len()), Ok(Some(bytes.len())));
        let back = decode_frame(&bytes);
        prop_assert!(back.is_ok(), "{:?}", back);
        prop_assert_eq!(back.map(owned), Ok(f));
    }

    #[test]
    fn streams_of_frames_split_correctly(fs in prop::collection::vec(frame(), 1..8)) {
        let mut stream = Vec::new();
        for f in &fs {
            encode_frame(f, &mut stream);
        }
        let mut rest = stream.as_slice();
        for f in &fs {
            let n = frame_len(rest, 1 << 16).ok().flatten();
            prop_assert!(n.is_some());
            let (one, tail) = rest.split_at(n.unwrap_or(0));
            prop_assert_eq!(decode_frame(one).map(owned), Ok(f.clone()));
            rest = tail;
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        check_canonical(&bytes);
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_never_panic(
        ty in 0u8..4,
        op in any::<u8>(),
        flags in prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
        body in prop::collection::vec(any::<u8>(), 0..96),
    ) {
        // Bias towards frames that get past the header checks into the body parsers.
        let len = u32::try_from(FRAME_HEADER_LEN + body.len()).unwrap_or(u32::MAX);
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[1, ty, op, flags]);
        bytes.extend_from_slice(&body);
        check_canonical(&bytes);
    }

    #[test]
    fn bit_flipped_encodings_never_panic(
        f in frame(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
    ) {
        let mut bytes = encode(&f);
        for (at, bit) in flips {
            let i = at.index(bytes.len());
            if let Some(b) = bytes.get_mut(i) {
                *b ^= 1 << bit;
            }
        }
        check_canonical(&bytes);
    }

    #[test]
    fn truncated_encodings_fail_cleanly(f in frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&f);
        let short = bytes.get(..cut.index(bytes.len())).unwrap_or_default();
        prop_assert!(decode_frame(short).is_err());
        check_canonical(short);
    }

    #[test]
    fn oversized_declarations_fail_in_frame_len(
        declared in 0u32..=u32::MAX,
        max in 0usize..1 << 20,
    ) {
        let r = frame_len(&declared.to_be_bytes(), max);
        let d = usize::try_from(declared).unwrap_or(usize::MAX);
        if d > max {
            prop_assert!(r.is_err());
        } else if d < FRAME_HEADER_LEN {
            prop_assert!(r.is_err());
        } else {
            prop_assert_eq!(r, Ok(Some(d)));
        }
    }
}
