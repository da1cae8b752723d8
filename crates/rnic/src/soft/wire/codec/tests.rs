//! Unit tests of the codec: layout, limits, every rejection path.

use super::*;

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

fn req(op: RequestOp) -> Frame {
    Frame::Packet(Packet::Request(Request {
        dst_qp: QpNumber(0x00ab_cdef),
        psn: Psn::new(0x12_3456),
        op,
        ack_req: false,
    }))
}

fn resp(kind: ResponseKind) -> Frame {
    Frame::Packet(Packet::Response(Response {
        dst_qp: QpNumber(7),
        psn: Psn::new(Psn::MASK),
        kind,
    }))
}

/// One frame of every variant.
fn every_variant() -> Vec<Frame> {
    let rkey = MemoryKey::new(0x12_3456, 0x9a);
    let mut frames = vec![
        req(RequestOp::Read {
            addr: 0x1122_3344_5566_7788,
            rkey,
            len: u32::MAX,
        }),
        req(RequestOp::Write {
            addr: 8,
            rkey,
            data: b"hello".to_vec(),
        }),
        req(RequestOp::Write {
            addr: 0,
            rkey,
            data: Vec::new(),
        }),
        req(RequestOp::CompareSwap {
            addr: 64,
            rkey,
            compare: 1,
            swap: u64::MAX,
        }),
        req(RequestOp::FetchAdd {
            addr: 128,
            rkey,
            add: 42,
        }),
        req(RequestOp::Send {
            data: vec![0; 100],
            invalidate: None,
        }),
        req(RequestOp::Send {
            data: b"x".to_vec(),
            invalidate: Some(rkey),
        }),
        req(RequestOp::Send {
            data: Vec::new(),
            invalidate: Some(MemoryKey(0)),
        }),
        resp(ResponseKind::Ack),
        resp(ResponseKind::ReadData(vec![1, 2, 3])),
        resp(ResponseKind::ReadData(Vec::new())),
        resp(ResponseKind::AtomicAck(0xdead_beef)),
        Frame::Cm(CmMessage::ConnectRequest {
            version: WIRE_VERSION,
            qp: QpNumber(0x00ff_ffff),
            start_psn: Psn::new(3),
            private_data: vec![0x5a; MAX_PRIVATE_DATA],
        }),
        Frame::Cm(CmMessage::ConnectRequest {
            version: 9,
            qp: QpNumber(1),
            start_psn: Psn::new(0),
            private_data: Vec::new(),
        }),
        Frame::Cm(CmMessage::ConnectReply {
            qp: QpNumber(2),
            start_psn: Psn::new(77),
        }),
        Frame::Cm(CmMessage::ConnectReject {
            reason: "no such service ✗".to_owned(),
        }),
        Frame::Cm(CmMessage::ConnectReject {
            reason: String::new(),
        }),
    ];
    for code in [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
        NakCode::InvalidRkey,
        NakCode::ReceiverNotReady,
    ] {
        frames.push(resp(ResponseKind::Nak(code)));
    }
    frames
}

#[test]
fn every_variant_round_trips() {
    for f in every_variant() {
        let bytes = encode(&f);
        assert_eq!(bytes.len(), encoded_len(&f), "{f:?}");
        assert_eq!(frame_len(&bytes, usize::MAX), Ok(Some(bytes.len())));
        let back = decode_frame(&bytes).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        assert_eq!(owned(back), f);
    }
}

#[test]
fn encode_appends_after_existing_bytes() {
    let frames = every_variant();
    let mut stream = vec![0xee];
    for f in &frames {
        encode_frame(f, &mut stream);
    }
    let mut rest = stream.get(1..).unwrap();
    for f in &frames {
        let n = frame_len(rest, 1 << 20).unwrap().unwrap();
        let (one, tail) = rest.split_at(n);
        assert_eq!(owned(decode_frame(one).unwrap()), *f);
        rest = tail;
    }
    assert!(rest.is_empty());
}

#[test]
fn layout_is_as_documented() {
    let f = req(RequestOp::Send {
        data: vec![0xaa, 0xbb],
        invalidate: Some(MemoryKey(0x0102_0304)),
    });
    assert_eq!(
        encode(&f),
        [
            0, 0, 0, 26, // length
            2, 2, 5, 1, // version, packet, SEND, invalidate flag
            0, 0xab, 0xcd, 0xef, // dst QPN
            0, 0x12, 0x34, 0x56, // PSN
            1, 2, 3, 4, // invalidate rkey
            0, 0, 0, 2, // data length
            0xaa, 0xbb,
        ]
    );
    let f = Frame::<Vec<u8>>::Cm(CmMessage::ConnectReply {
        qp: QpNumber(0x10),
        start_psn: Psn::new(0x20),
    });
    assert_eq!(
        encode(&f),
        [0, 0, 0, 16, 2, 1, 0x22, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x20]
    );
}

#[test]
fn truncation_at_every_length_fails_cleanly() {
    for f in every_variant() {
        let bytes = encode(&f);
        for cut in 0..bytes.len() {
            let short = bytes.get(..cut).unwrap();
            assert!(decode_frame(short).is_err(), "{f:?} cut at {cut}");
            // frame_len still reports the whole length once the prefix is there.
            let expect = if cut < 4 { None } else { Some(bytes.len()) };
            assert_eq!(frame_len(short, usize::MAX), Ok(expect));
            // A prefix rewritten to match the cut body is refused too.
            if cut >= 4 {
                let mut lying = short.to_vec();
                lying
                    .get_mut(field::LENGTH)
                    .unwrap()
                    .copy_from_slice(&u32::try_from(cut).unwrap().to_be_bytes());
                assert!(decode_frame(&lying).is_err(), "{f:?} relabelled at {cut}");
            }
        }
    }
}

#[test]
fn frame_len_rejects_oversized_before_allocating() {
    // Only the 4-byte prefix is present: nothing else is needed to refuse the frame.
    let huge = u32::MAX.to_be_bytes();
    assert_eq!(
        frame_len(&huge, 1 << 20),
        Err(WireError::TooLarge {
            size: usize_from(u32::MAX),
            max: 1 << 20
        })
    );
    let f = req(RequestOp::Write {
        addr: 0,
        rkey: MemoryKey(1),
        data: vec![0; 100],
    });
    let bytes = encode(&f);
    assert_eq!(frame_len(&bytes, 132), Ok(Some(132)));
    assert_eq!(
        frame_len(&bytes, 131),
        Err(WireError::TooLarge {
            size: 132,
            max: 131
        })
    );
}

#[test]
fn frame_len_needs_prefix_and_minimum_header() {
    assert_eq!(frame_len(&[], 100), Ok(None));
    assert_eq!(frame_len(&[0, 0, 0], 100), Ok(None));
    for declared in 0..FRAME_HEADER_LEN {
        let prefix = u32::try_from(declared).unwrap().to_be_bytes();
        assert_eq!(
            frame_len(&prefix, 100),
            Err(WireError::BadLength { declared })
        );
    }
    assert_eq!(frame_len(&[0, 0, 0, 8, 1], 100), Ok(Some(8)));
}

#[test]
fn trailing_bytes_rejected() {
    let f = resp(ResponseKind::Ack);
    let mut bytes = encode(&f);
    bytes.push(0);
    // Buffer longer than the prefix says.
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::LengthMismatch {
            declared: 16,
            actual: 17
        })
    );
    // Prefix covering an extra byte after a fixed-size body.
    bytes
        .get_mut(field::LENGTH)
        .unwrap()
        .copy_from_slice(&17u32.to_be_bytes());
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::TrailingBytes { extra: 1 })
    );
    // Payload shorter than the bytes left in the frame.
    let f = req(RequestOp::Write {
        addr: 0,
        rkey: MemoryKey(1),
        data: b"abc".to_vec(),
    });
    let mut bytes = encode(&f);
    bytes.push(b'd');
    bytes
        .get_mut(field::LENGTH)
        .unwrap()
        .copy_from_slice(&36u32.to_be_bytes());
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::PayloadLength {
            field: "data_len",
            declared: 3,
            available: 4
        })
    );
}

#[test]
fn wrong_version_rejected() {
    for f in every_variant() {
        let mut bytes = encode(&f);
        for v in [0, 1, 3, 0xff] {
            *bytes.get_mut(field::VERSION).unwrap() = v;
            assert_eq!(
                decode_frame(&bytes),
                Err(WireError::UnsupportedVersion { got: v })
            );
        }
    }
}

#[test]
fn overflowing_24_bit_fields_rejected() {
    let f = resp(ResponseKind::AtomicAck(1));
    for (at, name) in [(field::DST_QP, "dst_qp"), (field::PSN, "psn")] {
        let mut bytes = encode(&f);
        *bytes.get_mut(at.start).unwrap() = 0x01;
        assert_eq!(
            decode_frame(&bytes),
            Err(WireError::BadField {
                field: name,
                problem: "value exceeds 24 bits"
            })
        );
    }
    let f = Frame::<Vec<u8>>::Cm(CmMessage::ConnectReply {
        qp: QpNumber(1),
        start_psn: Psn::new(1),
    });
    for at in [field::connect_reply::QP, field::connect_reply::START_PSN] {
        let mut bytes = encode(&f);
        *bytes.get_mut(at.start).unwrap() = 0x80;
        assert!(matches!(
            decode_frame(&bytes),
            Err(WireError::BadField { .. })
        ));
    }
    // The encoder keeps the 24 bits the wire carries.
    let f = Frame::<Vec<u8>>::Cm(CmMessage::ConnectReply {
        qp: QpNumber(0xff12_3456),
        start_psn: Psn::new(1),
    });
    let bytes = encode(&f);
    assert_eq!(
        owned(decode_frame(&bytes).unwrap()),
        Frame::Cm(CmMessage::ConnectReply {
            qp: QpNumber(0x12_3456),
            start_psn: Psn::new(1),
        })
    );
}

#[test]
fn unknown_type_opcode_and_nak_code_rejected() {
    let mut bytes = encode(&resp(ResponseKind::Ack));
    *bytes.get_mut(field::FRAME_TYPE).unwrap() = 9;
    assert_eq!(decode_frame(&bytes), Err(WireError::UnknownFrameType(9)));

    let mut bytes = encode(&resp(ResponseKind::Ack));
    *bytes.get_mut(field::OPCODE).unwrap() = opcode::CONNECT_REPLY;
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::UnknownOpcode {
            frame_type: frame_type::PACKET,
            opcode: opcode::CONNECT_REPLY
        })
    );

    // The opcode is judged before the flags it would allow.
    let mut bytes = encode(&resp(ResponseKind::Ack));
    *bytes.get_mut(field::OPCODE).unwrap() = 0x7f;
    *bytes.get_mut(field::FLAGS).unwrap() = 0xff;
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::UnknownOpcode {
            frame_type: frame_type::PACKET,
            opcode: 0x7f
        })
    );

    let mut bytes = encode(&resp(ResponseKind::Nak(NakCode::InvalidRkey)));
    *bytes.get_mut(field::nak_body::CODE).unwrap() = 0x42;
    assert_eq!(decode_frame(&bytes), Err(WireError::UnknownNakCode(0x42)));
}

#[test]
fn reserved_bits_and_fields_rejected() {
    // Flags on a non-SEND opcode, and an unknown flag on SEND.
    let mut bytes = encode(&resp(ResponseKind::Ack));
    *bytes.get_mut(field::FLAGS).unwrap() = 1;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField { field: "flags", .. })
    ));
    let send = req(RequestOp::Send {
        data: Vec::new(),
        invalidate: None,
    });
    let mut bytes = encode(&send);
    *bytes.get_mut(field::FLAGS).unwrap() = 4;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField { field: "flags", .. })
    ));
    // AckReq belongs to requests only.
    let mut bytes = encode(&resp(ResponseKind::Ack));
    *bytes.get_mut(field::FLAGS).unwrap() = flags::ACK_REQ;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField { field: "flags", .. })
    ));
    // An invalidate rkey without the flag.
    let mut bytes = encode(&send);
    *bytes.get_mut(field::send::INVALIDATE_RKEY.start).unwrap() = 1;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField {
            field: "invalidate_rkey",
            ..
        })
    ));
    // Reserved bytes of a connect request.
    let cr = Frame::<Vec<u8>>::Cm(CmMessage::ConnectRequest {
        version: 1,
        qp: QpNumber(1),
        start_psn: Psn::new(1),
        private_data: vec![1],
    });
    let mut bytes = encode(&cr);
    *bytes
        .get_mut(field::connect_request::RESERVED.end - 1)
        .unwrap() = 1;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField {
            field: "reserved",
            ..
        })
    ));
}

#[test]
fn private_data_limit() {
    let cr = |n| {
        Frame::<Vec<u8>>::Cm(CmMessage::ConnectRequest {
            version: 1,
            qp: QpNumber(1),
            start_psn: Psn::new(1),
            private_data: vec![7; n],
        })
    };
    // Encoding truncates to the limit.
    let bytes = encode(&cr(MAX_PRIVATE_DATA + 10));
    assert_eq!(owned(decode_frame(&bytes).unwrap()), cr(MAX_PRIVATE_DATA));
    // Decoding refuses a longer declared length.
    let mut bytes = encode(&cr(MAX_PRIVATE_DATA));
    bytes.push(7);
    let len = u32::try_from(bytes.len()).unwrap();
    bytes
        .get_mut(field::LENGTH)
        .unwrap()
        .copy_from_slice(&len.to_be_bytes());
    *bytes.get_mut(field::connect_request::PRIVATE_LEN).unwrap() = 65;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField {
            field: "private_len",
            ..
        })
    ));
}

#[test]
fn reject_reason_limit_and_utf8() {
    let rej = |s: &str| {
        Frame::<Vec<u8>>::Cm(CmMessage::ConnectReject {
            reason: s.to_owned(),
        })
    };
    // 255 ASCII bytes then a 3-byte char straddling the limit: cut before the char.
    let long = format!("{}€€", "a".repeat(255));
    let bytes = encode(&rej(&long));
    assert_eq!(owned(decode_frame(&bytes).unwrap()), rej(&"a".repeat(255)));
    let exact = "é".repeat(128);
    assert_eq!(exact.len(), MAX_REJECT_REASON);
    assert_eq!(
        owned(decode_frame(&encode(&rej(&exact))).unwrap()),
        rej(&exact)
    );

    // Invalid UTF-8.
    let mut bytes = encode(&rej("ab"));
    *bytes.get_mut(field::connect_reject::REASON_START).unwrap() = 0xff;
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField {
            field: "reason",
            ..
        })
    ));
    // Declared length over the limit.
    let mut bytes = encode(&rej(&"a".repeat(256)));
    bytes.push(b'a');
    let len = u32::try_from(bytes.len()).unwrap();
    bytes
        .get_mut(field::LENGTH)
        .unwrap()
        .copy_from_slice(&len.to_be_bytes());
    bytes
        .get_mut(field::connect_reject::REASON_LEN)
        .unwrap()
        .copy_from_slice(&257u16.to_be_bytes());
    assert!(matches!(
        decode_frame(&bytes),
        Err(WireError::BadField {
            field: "reason_len",
            ..
        })
    ));
}

#[test]
fn payload_borrows_from_input() {
    let f = resp(ResponseKind::ReadData(vec![9; 32]));
    let bytes = encode(&f);
    let Ok(Frame::Packet(Packet::Response(Response {
        kind: ResponseKind::ReadData(d),
        ..
    }))) = decode_frame(&bytes)
    else {
        panic!("not read data");
    };
    let range = bytes.as_ptr_range();
    assert!(range.contains(&d.as_ptr()));
}

#[test]
fn max_constants_are_consistent() {
    let rej = Frame::<Vec<u8>>::Cm(CmMessage::ConnectReject {
        reason: "r".repeat(1000),
    });
    assert_eq!(encoded_len(&rej), MAX_CM_FRAME_LEN);
    let w = req(RequestOp::Write {
        addr: 0,
        rkey: MemoryKey(0),
        data: vec![0; 10],
    });
    assert_eq!(encoded_len(&w), 10 + MAX_PAYLOAD_OVERHEAD);
    assert_eq!(FRAME_HEADER_LEN, 8);
    assert_eq!(PACKET_HEADER_LEN, 16);
}

#[test]
fn ack_req_is_flag_bit_1_of_every_request() {
    for op in [
        RequestOp::Read {
            addr: 8,
            rkey: MemoryKey(1),
            len: 8,
        },
        RequestOp::Send {
            data: vec![1],
            invalidate: Some(MemoryKey(5)),
        },
    ] {
        let f = Frame::Packet(Packet::Request(Request {
            dst_qp: QpNumber(3),
            psn: Psn::new(4),
            op,
            ack_req: true,
        }));
        let bytes = encode(&f);
        assert_eq!(bytes[field::FLAGS] & flags::ACK_REQ, flags::ACK_REQ);
        assert_eq!(owned(decode_frame(&bytes).unwrap()), f);
    }
}
