use super::*;
use patronus_core::rpc::Protocol;

fn name(s: &str) -> RootName {
    RootName::new(s).unwrap_or_else(|| panic!("bad test name {s}"))
}

fn requests() -> Vec<BaselineRequest> {
    let page: Vec<u8> = (0..MAX_PAYLOAD).map(|i| (i * 7) as u8).collect();
    vec![
        BaselineRequest::Hello,
        BaselineRequest::RegisterMr {
            addr: 1,
            len: 2,
            read_only: false,
            object: false,
        },
        BaselineRequest::RegisterMr {
            addr: 3,
            len: 4,
            read_only: true,
            object: true,
        },
        BaselineRequest::DeregisterMr {
            rkey: MemoryKey(0xabcd),
        },
        BaselineRequest::OpenQp,
        BaselineRequest::CloseQp,
        BaselineRequest::Read {
            addr: 7,
            len: MAX_PAYLOAD as u32,
        },
        BaselineRequest::Write {
            addr: 8,
            bytes: vec![1, 2, 3],
        },
        BaselineRequest::Write {
            addr: 8,
            bytes: page,
        },
        BaselineRequest::Write {
            addr: 9,
            bytes: Vec::new(),
        },
        BaselineRequest::Cas {
            addr: 16,
            compare: u64::MAX,
            swap: 5,
        },
        BaselineRequest::Faa { addr: 24, add: 3 },
        BaselineRequest::Alloc { size: 4096 },
        BaselineRequest::Free { addr: 64 },
        BaselineRequest::Publish {
            name: name(&"n".repeat(32)),
            addr: 1,
            len: 2,
        },
        BaselineRequest::Lookup { name: name("root") },
        BaselineRequest::Unpublish { name: name("x") },
    ]
}

fn replies() -> Vec<BaselineReply> {
    vec![
        BaselineReply::Welcome(Welcome {
            pool_addr: 1,
            pool_len: 2,
            rkey: Some(MemoryKey(3)),
        }),
        BaselineReply::Welcome(Welcome {
            pool_addr: 1,
            pool_len: 2,
            rkey: None,
        }),
        BaselineReply::Registered { rkey: MemoryKey(5) },
        BaselineReply::Done,
        BaselineReply::Data(vec![9; MAX_PAYLOAD]),
        BaselineReply::Data(vec![4; 3]),
        BaselineReply::Data(Vec::new()),
        BaselineReply::Atomic(u64::MAX),
        BaselineReply::Allocated {
            addr: 64,
            rkey: Some(MemoryKey(6)),
        },
        BaselineReply::Allocated {
            addr: 64,
            rkey: None,
        },
        BaselineReply::Found { addr: 1, len: 2 },
    ]
    .into_iter()
    .chain(FailCode::WIRE.map(BaselineReply::Failed))
    .collect()
}

#[test]
fn requests_and_replies_round_trip_at_their_wire_length() {
    let mut slot = vec![0xeeu8; SLOT_SIZE];
    for (i, r) in requests().into_iter().enumerate() {
        let id = i as u64;
        let wire = encode_request(id, &r);
        assert_eq!(decode_request(&wire), Ok((id, r.clone())));
        // Through the channel's path: encoded into a slot holding an earlier message's bytes,
        // cut at the protocol's wire length.
        BaselineProtocol::encode_request(id, &r, &mut slot);
        let len = BaselineProtocol::wire_len(&slot);
        assert_eq!(len, wire.len(), "{r:?}");
        assert_eq!(&slot[..len], &wire[..], "{r:?}");
        let want = (PAYLOAD_AT + r.payload_len()).max(SMALL_MESSAGE);
        assert_eq!(len, want, "{r:?}");
    }
    for r in replies() {
        let wire = encode_reply(42, &r);
        assert_eq!(decode_reply(&wire), Ok((42, r.clone())));
        BaselineProtocol::encode_reply(42, &r, &mut slot);
        let len = BaselineProtocol::wire_len(&slot);
        assert_eq!(&slot[..len], &wire[..], "{r:?}");
    }
}

#[test]
fn small_messages_are_small_and_a_page_fits_a_slot() {
    assert_eq!(
        encode_request(1, &BaselineRequest::Hello).len(),
        SMALL_MESSAGE
    );
    assert_eq!(
        encode_request(1, &BaselineRequest::Read { addr: 0, len: 4096 }).len(),
        SMALL_MESSAGE
    );
    assert_eq!(
        encode_reply(1, &BaselineReply::Atomic(3)).len(),
        SMALL_MESSAGE
    );
    let page = BaselineRequest::Write {
        addr: 0,
        bytes: vec![1; MAX_PAYLOAD],
    };
    assert_eq!(encode_request(1, &page).len(), SLOT_SIZE);
    assert_eq!(
        encode_reply(1, &BaselineReply::Data(vec![0; 100])).len(),
        PAYLOAD_AT + 100
    );
}

#[test]
fn an_oversized_or_truncated_payload_does_not_decode() {
    let long = BaselineRequest::Write {
        addr: 0,
        bytes: vec![1; MAX_PAYLOAD + 1],
    };
    let wire = encode_request(1, &long);
    assert_eq!(wire.len(), SLOT_SIZE, "never more than a slot");
    assert_eq!(
        decode_request(&wire),
        Err(ProtoError::BadField("payload length"))
    );
    let ok = encode_request(
        1,
        &BaselineRequest::Write {
            addr: 0,
            bytes: vec![1; 100],
        },
    );
    assert!(matches!(
        decode_request(&ok[..ok.len() - 1]),
        Err(ProtoError::Truncated { .. })
    ));
    let mut flags = encode_request(
        1,
        &BaselineRequest::RegisterMr {
            addr: 0,
            len: 8,
            read_only: false,
            object: false,
        },
    );
    flags[40] = 4;
    assert!(decode_request(&flags).is_err());
    let mut bad_name = encode_request(1, &BaselineRequest::Lookup { name: name("ab") });
    bad_name[20] = b'c'; // bytes after the padding started
    assert_eq!(decode_request(&bad_name), Err(ProtoError::BadField("name")));
}

#[test]
fn garbage_never_panics() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for n in 0..3000usize {
        let mut buf = vec![0u8; n * 7 % (SLOT_SIZE + 64)];
        for b in &mut buf {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        if let Some(k) = buf.first_mut() {
            *k = (n % 16) as u8 | if n % 2 == 0 { 0x80 } else { 0 };
        }
        let _ = decode_request(&buf);
        let _ = decode_reply(&buf);
        let _ = BaselineProtocol::wire_len(&buf);
        let _ = Scheme::from_private_data(&buf);
    }
    assert_eq!(
        decode_request(&[1; 10]),
        Err(ProtoError::Truncated {
            got: 10,
            want: HEADER
        })
    );
}

#[test]
fn fail_codes_round_trip() {
    for c in FailCode::WIRE {
        assert_eq!(FailCode::from_wire(c.to_wire()), Ok(c));
    }
    assert!(FailCode::from_wire(0).is_err());
    assert!(FailCode::from_wire(FailCode::WIRE.len() as u8 + 1).is_err());
}

#[test]
fn scheme_private_data() {
    for s in Scheme::ALL {
        assert_eq!(Scheme::from_private_data(&s.private_data()), Ok(s));
    }
    assert!(Scheme::from_private_data(b"XXXX\0").is_err());
}
