//! Hostile peers on raw sockets: garbage, truncated and oversized frames, forged rkeys,
//! out-of-place frames and a peer that never reads. Each gets an error or a closed connection;
//! the node keeps serving a legitimate client, and memory outside valid windows is unchanged.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::wire::{CmMessage, Frame, NakCode, Packet, RequestOp, ResponseKind};
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;
use util::*;

/// Fills the server buffer with a known pattern.
fn fill(s: &Server) -> Vec<u8> {
    let pattern: Vec<u8> = (0..SERVER_BUF).map(|i| (i % 253) as u8 ^ 0x5a).collect();
    s.buf.write(0, &pattern).unwrap();
    pattern
}

fn snapshot(s: &Server) -> Vec<u8> {
    let mut b = vec![0u8; SERVER_BUF];
    s.buf.read(0, &mut b).unwrap();
    b
}

/// A legitimate client does a WRITE + READ round trip.
fn legit_round_trip(s: &Server, c: &Client, offset: u64, tag: u8) {
    c.buf.write(0, &[tag; 32]).unwrap();
    let wc = c.run(
        1,
        SendOp::Write {
            local: c.sge(0, 32),
            remote_addr: s.buf.addr() + offset,
            rkey: s.mr.rkey(),
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let wc = c.read(64, 32, s.buf.addr() + offset, s.mr.rkey());
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 32];
    c.buf.read(64, &mut got).unwrap();
    assert_eq!(got, [tag; 32]);
}

/// A named hostile frame, built from the server QP's number.
type Case = (&'static str, Box<dyn Fn(QpNumber) -> Vec<u8>>);

#[test]
fn tcp_garbage_truncated_and_oversized_before_handshake() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();

    // Garbage: a frame header with an unknown frame type.
    let mut raw = Raw::connect(s.sock);
    raw.send(&[0, 0, 0, 12, 1, 0xee, 0, 0, 1, 2, 3, 4]).unwrap();
    let frames = raw.read_until_closed();
    assert!(
        frames
            .iter()
            .all(|f| matches!(f, Frame::Cm(CmMessage::ConnectReject { .. }))),
        "{frames:?}"
    );
    legit_round_trip(&s, &c, 0, 1);

    // Pure noise.
    let mut raw = Raw::connect(s.sock);
    raw.send(&[0xff; 300]).unwrap();
    raw.read_until_closed();
    legit_round_trip(&s, &c, 0, 2);

    // Oversized length prefix on the first frame (bigger than any handshake frame).
    let mut raw = Raw::connect(s.sock);
    raw.send(&[0x7f, 0xff, 0xff, 0xff, 1, 1]).unwrap();
    raw.read_until_closed();
    legit_round_trip(&s, &c, 0, 3);

    // Truncated request, then EOF.
    let req = encode(&Frame::Cm(CmMessage::ConnectRequest {
        version: rnic::soft::wire::WIRE_VERSION,
        qp: QpNumber(1),
        start_psn: Psn::new(1),
        private_data: vec![1; 20],
    }));
    let mut raw = Raw::connect(s.sock);
    raw.send(&req[..req.len() - 3]).unwrap();
    raw.s.shutdown(std::net::Shutdown::Write).unwrap();
    raw.read_until_closed();
    legit_round_trip(&s, &c, 0, 4);

    // A packet instead of a ConnectRequest.
    let mut raw = Raw::connect(s.sock);
    raw.send(&request(
        QpNumber(1),
        Psn::new(0),
        RequestOp::Read {
            addr: s.buf.addr(),
            rkey: s.mr.rkey(),
            len: 8,
        },
    ))
    .unwrap();
    let frames = raw.read_until_closed();
    assert!(
        matches!(
            frames.first(),
            Some(Frame::Cm(CmMessage::ConnectReject { .. }))
        ),
        "{frames:?}"
    );
    legit_round_trip(&s, &c, 0, 5);

    assert_eq!(s.policy.count(), 1, "no QP was created for a hostile peer");
    let stats = TcpNode::stats(&s.ctx).unwrap();
    assert!(stats.protocol_errors >= 3, "{stats:?}");
}

#[test]
fn tcp_forged_rkeys_get_naks_and_touch_nothing() {
    let s = Server::new();
    let pattern = fill(&s);
    // A type-1 window over [4096, 4096 + 256): the only memory a window rkey may reach.
    let mw = s.pd.alloc_mw(MwType::Type1).unwrap();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    sqp.post_send(&[SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::BindMw {
            mw: &mw,
            bind: BindInfo {
                mr: Some(&s.mr),
                addr: s.buf.addr() + 4096,
                length: 256,
                access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                key: None,
                target_qp: None,
            },
        },
    }])
    .unwrap();
    assert_eq!(wait_wcs(&s.cq, 1)[0].status, WcStatus::Success);
    let window = mw.rkey();
    let base = s.buf.addr();

    let forged: [(u64, Rkey); 5] = [
        (base + 4096, MemoryKey(window.0 ^ 0x01)), // wrong key byte
        (base + 4096, MemoryKey(window.0 + 0x100)), // neighbouring index
        (base + 4096 + 200, window),               // runs past the window
        (base + 4000, window),                     // starts before it
        (base + 4096, MemoryKey(0xdead_beef)),     // made up
    ];
    for (i, (addr, rkey)) in forged.into_iter().enumerate() {
        let mut raw = Raw::connect(s.sock);
        let (sqpn, _) = raw.handshake(1000 + i as u32, 50);
        raw.send(&request(
            sqpn,
            Psn::new(50),
            RequestOp::Write {
                addr,
                rkey,
                data: &[0xAA; 64],
            },
        ))
        .unwrap();
        match raw.read_frame() {
            RawRead::Frame(Frame::Packet(Packet::Response(r))) => {
                assert_eq!(r.kind, ResponseKind::Nak(NakCode::RemoteAccessError), "{i}");
            }
            other => panic!(
                "forged rkey {i}: expected a NAK, got {:?}",
                matches!(other, RawRead::Closed)
            ),
        }
        // The responder QP is in ERR: later requests, even valid ones, do nothing.
        raw.send(&request(
            sqpn,
            Psn::new(51),
            RequestOp::Write {
                addr: base + 4096,
                rkey: window,
                data: &[0xBB; 8],
            },
        ))
        .unwrap();
    }
    wait_until("all forged-rkey QPs in ERR", || {
        let got = s.policy.got.lock();
        got.len() == 6 && got[1..].iter().all(|q| q.state() == QpState::Error)
    });
    // The legitimate client was never affected.
    assert_eq!(c.qp.state(), QpState::ReadyToSend);
    let wc = c.read(0, 16, base + 4096, window);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(snapshot(&s), pattern, "memory changed by rejected requests");
}

#[test]
fn tcp_protocol_errors_after_handshake_close_the_connection() {
    let config = SoftConfig {
        attr: DeviceAttr {
            max_msg_size: 64 * 1024,
            ..DeviceAttr::default()
        },
        ..SoftConfig::default()
    };
    let s = Server::with(config, TcpOptions::default());
    let pattern = fill(&s);
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let mut n = 1;

    let cases: Vec<Case> = vec![
        (
            "oversized length prefix",
            Box::new(|_| vec![0x00, 0x10, 0x00, 0x00, 1, 2, 0x02, 0]),
        ),
        ("garbage", Box::new(|_| vec![0xde; 64])),
        (
            "CM frame after set-up",
            Box::new(|_| {
                encode(&Frame::Cm(CmMessage::ConnectReply {
                    qp: QpNumber(1),
                    start_psn: Psn::new(1),
                }))
            }),
        ),
        (
            "packet for another QP",
            Box::new(|sqpn: QpNumber| {
                request(
                    QpNumber((sqpn.0 + 1) & 0xff_ffff),
                    Psn::new(10),
                    RequestOp::FetchAdd {
                        addr: 0,
                        rkey: MemoryKey(0),
                        add: 1,
                    },
                )
            }),
        ),
        (
            "bad field (PSN over 24 bits)",
            Box::new(|sqpn: QpNumber| {
                let mut f = request(
                    sqpn,
                    Psn::new(10),
                    RequestOp::Read {
                        addr: 0,
                        rkey: MemoryKey(0),
                        len: 8,
                    },
                );
                f[12] = 0xff;
                f
            }),
        ),
    ];
    for (what, bytes) in &cases {
        let mut raw = Raw::connect(s.sock);
        let (sqpn, _) = raw.handshake(42, 10);
        n += 1;
        let sqp = s.wait_qps(n);
        raw.send(&bytes(sqpn)).unwrap();
        let frames = raw.read_until_closed();
        assert!(frames.is_empty(), "{what}: {frames:?}");
        wait_until("server QP in ERR", || sqp.state() == QpState::Error);
        legit_round_trip(&s, &c, 8192, n as u8);
    }

    // Truncated frame then EOF: the connection is lost, the QP goes to ERR.
    let mut raw = Raw::connect(s.sock);
    let (sqpn, _) = raw.handshake(43, 10);
    n += 1;
    let sqp = s.wait_qps(n);
    let frame = request(
        sqpn,
        Psn::new(10),
        RequestOp::Write {
            addr: s.buf.addr(),
            rkey: s.mr.rkey(),
            data: &[0x11; 100],
        },
    );
    raw.send(&frame[..frame.len() - 10]).unwrap();
    raw.s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(raw.read_until_closed().is_empty());
    wait_until("server QP in ERR after a truncated frame", || {
        sqp.state() == QpState::Error
    });

    let mut expected = pattern;
    for (i, byte) in expected[8192..8192 + 32].iter_mut().enumerate() {
        let _ = i;
        *byte = (n - 1) as u8;
    }
    assert_eq!(snapshot(&s), expected, "memory touched by a hostile peer");
    let stats = TcpNode::stats(&s.ctx).unwrap();
    assert!(stats.protocol_errors >= cases.len() as u64, "{stats:?}");
}

#[test]
fn tcp_peer_that_never_reads_is_cut_off() {
    let s = Arc::new(Server::with(
        SoftConfig::default(),
        TcpOptions {
            out_buffer_limit: 512 * 1024,
            ..TcpOptions::default()
        },
    ));
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();

    // The hostile peer: a small receive buffer, never reads, floods 64 KiB READs until its
    // connection is reset.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&s.sock.into()).unwrap();
    let stream: std::net::TcpStream = sock.into();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut raw = Raw {
        s: stream,
        buf: Vec::new(),
    };
    let (sqpn, _) = raw.handshake(9, 0);
    let flooded = s.wait_qps(2);
    let (addr, rkey) = (s.buf.addr(), s.mr.rkey());
    let flood = std::thread::Builder::new()
        .name("flood".into())
        .spawn(move || {
            let mut sent = 0u32;
            while sent < 10_000_000 {
                let frame = request(
                    sqpn,
                    Psn::new(sent),
                    RequestOp::Read {
                        addr,
                        rkey,
                        len: 64 * 1024,
                    },
                );
                if raw.send(&frame).is_err() {
                    return sent;
                }
                sent += 1;
            }
            sent
        })
        .unwrap();

    // Meanwhile the legitimate client keeps working.
    for i in 0..50u64 {
        legit_round_trip(&s, &c, 16384 + (i % 4) * 64, i as u8);
    }
    wait_until("the flooding connection closed for overflow", || {
        TcpNode::stats(&s.ctx).unwrap().overflow_closes >= 1
    });
    wait_until("the flooding QP in ERR", || {
        flooded.state() == QpState::Error
    });
    let sent = flood.join().unwrap();
    assert!(sent < 10_000_000, "the flooder was never cut off");
    legit_round_trip(&s, &c, 16384, 0xee);
    assert_eq!(c.qp.state(), QpState::ReadyToSend);
}

#[test]
fn tcp_idle_handshakes_are_bounded() {
    let s = Server::with(
        SoftConfig::default(),
        TcpOptions {
            max_pending_handshakes: 4,
            ..TcpOptions::default()
        },
    );
    // Ten peers connect and say nothing: the oldest are refused and closed.
    let mut silent: Vec<Raw> = (0..10).map(|_| Raw::connect(s.sock)).collect();
    for raw in silent.iter_mut().take(6) {
        let frames = raw.read_until_closed();
        assert!(
            matches!(
                frames.first(),
                Some(Frame::Cm(CmMessage::ConnectReject { .. }))
            ),
            "{frames:?}"
        );
    }
    // A real client still gets in.
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    legit_round_trip(&s, &c, 0, 9);
}

/// Garbage written after a huge frame header, at most.
const FLOOD: usize = 8 << 20;

/// Writes a frame header declaring `declared` bytes, then up to [`FLOOD`] bytes of garbage,
/// stopping early if the node resets the connection; then reads until the node closes it and
/// returns the frames it sent first. The node must close without waiting for the frame (it
/// gets at most `FLOOD` of its `declared` bytes); a node that buffered it instead would leave
/// the read (or a write) blocked until the socket timeout, which only guards against hanging.
fn flood_declared_frame(raw: &mut Raw, declared: u32) -> Vec<Frame<Vec<u8>>> {
    let mut header = declared.to_be_bytes().to_vec();
    header.extend_from_slice(&[1, 2, 0, 0]);
    let garbage = vec![0xa5u8; 64 * 1024];
    let mut sent = raw.send(&header).map(|()| 0);
    while let Ok(n) = sent
        && n < FLOOD
    {
        sent = raw.send(&garbage).map(|()| n + garbage.len());
    }
    if let Err(e) = sent {
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            ),
            "the node stopped reading without closing: {e}"
        );
    }
    raw.read_until_closed()
}

#[test]
fn tcp_huge_declared_frames_close_the_connection_before_buffering() {
    let small = SoftConfig {
        attr: DeviceAttr {
            max_msg_size: 64 * 1024,
            ..DeviceAttr::default()
        },
        ..SoftConfig::default()
    };
    for (config, declared) in [
        (small, 1u32 << 30),
        // The default maximum message is 1 GiB: a frame of 4 GiB is still refused.
        (SoftConfig::default(), u32::MAX),
    ] {
        let s = Server::with(config, TcpOptions::default());
        let c = Client::new();
        c.qp.connect(&s.addr, b"").unwrap();
        let errors = |s: &Server| TcpNode::stats(&s.ctx).unwrap().protocol_errors;

        // Before the handshake (where the limit is a handshake frame's).
        let mut raw = Raw::connect(s.sock);
        let frames = flood_declared_frame(&mut raw, declared);
        assert!(
            frames
                .iter()
                .all(|f| matches!(f, Frame::Cm(CmMessage::ConnectReject { .. }))),
            "{frames:?}"
        );
        wait_until("a protocol error counted", || errors(&s) == 1);
        assert_eq!(s.policy.count(), 1, "no QP for the hostile peer");

        // After it (the limit is the largest message's frame).
        let mut raw = Raw::connect(s.sock);
        raw.handshake(77, 0);
        let sqp = s.wait_qps(2);
        let frames = flood_declared_frame(&mut raw, declared);
        assert!(frames.is_empty(), "{frames:?}");
        wait_until("a second protocol error counted", || errors(&s) == 2);
        wait_until("the hostile QP in ERR", || sqp.state() == QpState::Error);

        legit_round_trip(&s, &c, 0, 0x42);
        let stats = TcpNode::stats(&s.ctx).unwrap();
        assert_eq!(stats.protocol_errors, 2, "{stats:?}");
    }
}

/// Sends `header`, then up to [`FLOOD`] bytes of its payload (stopping if the node closes),
/// then reads until the node closes the connection; returns the frames it sent.
fn flood_after(raw: &mut Raw, header: &[u8]) -> Vec<Frame<Vec<u8>>> {
    let chunk = vec![0x5au8; 64 * 1024];
    let mut sent = raw.send(header).map(|()| 0);
    while let Ok(n) = sent
        && n < FLOOD
    {
        sent = raw.send(&chunk).map(|()| n + chunk.len());
    }
    raw.read_until_closed()
}

fn high_water(s: &Server) -> u64 {
    TcpNode::stats(&s.ctx).unwrap().rx_buffer_high_water
}

/// The QP decides on a large frame from its header, as a NIC does: a WRITE beyond the region
/// its rkey grants, a WRITE with a made-up rkey and a SEND longer than the posted receive are
/// refused (NAK, QP in ERR, connection closed) before their payload is buffered, though each
/// declares far less than the device's 1 GiB maximum message; a READ request (which carries
/// no payload) declaring a large frame is a protocol error.
#[test]
fn tcp_large_frames_are_judged_by_their_header_before_buffering() {
    let s = Server::new();
    let pattern = fill(&s);
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let base = s.buf.addr();
    let rkey = s.mr.rkey();
    let big = 512u32 << 20;
    let cases: Vec<(&str, RequestOp<&[u8]>, NakCode)> = vec![
        (
            "WRITE past its region",
            RequestOp::Write {
                addr: base,
                rkey,
                data: &[],
            },
            NakCode::RemoteAccessError,
        ),
        (
            "WRITE with a made-up rkey",
            RequestOp::Write {
                addr: base,
                rkey: MemoryKey(0xdead_beef),
                data: &[],
            },
            NakCode::RemoteAccessError,
        ),
        (
            "SEND longer than its receive",
            RequestOp::Send {
                data: &[],
                invalidate: None,
            },
            NakCode::InvalidRequest,
        ),
    ];
    for (n, (what, op, nak)) in (1..).zip(cases) {
        let mut raw = Raw::connect(s.sock);
        let (sqpn, _) = raw.handshake(2000 + n as u32, 7);
        let sqp = s.wait_qps(n + 1);
        sqp.post_recv(&[RecvWr {
            wr_id: 99,
            sge: Some(Sge {
                addr: base + 8192,
                length: 4096,
                lkey: s.mr.lkey(),
            }),
        }])
        .unwrap();
        let frames = flood_after(&mut raw, &large_header(sqpn, Psn::new(7), op, big));
        let naks: Vec<_> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Packet(Packet::Response(r)) => Some(r.kind.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(naks, vec![ResponseKind::Nak(nak)], "{what}");
        wait_until("the refusing QP in ERR", || sqp.state() == QpState::Error);
        assert!(
            high_water(&s) <= 64 * 1024,
            "{what}: {} bytes buffered for a refused frame",
            high_water(&s)
        );
    }
    // The SEND consumed its receive, with a length error, as a whole one would have.
    let wcs = drain_cq(&s.cq);
    assert!(
        wcs.iter()
            .any(|wc| wc.wr_id == 99 && wc.status == WcStatus::LocalLengthError),
        "{wcs:?}"
    );

    // A READ request carries no payload: a large frame of one is malformed from its header.
    let mut raw = Raw::connect(s.sock);
    let (sqpn, _) = raw.handshake(3000, 7);
    let mut header = request(
        sqpn,
        Psn::new(7),
        RequestOp::Read {
            addr: base,
            rkey,
            len: 8,
        },
    );
    header[0..4].copy_from_slice(&big.to_be_bytes());
    let errors = TcpNode::stats(&s.ctx).unwrap().protocol_errors;
    assert!(flood_after(&mut raw, &header).is_empty());
    wait_until("a protocol error counted", || {
        TcpNode::stats(&s.ctx).unwrap().protocol_errors == errors + 1
    });
    assert!(high_water(&s) <= 64 * 1024, "{}", high_water(&s));

    assert_eq!(snapshot(&s)[..8192], pattern[..8192], "memory changed");
    legit_round_trip(&s, &c, 0, 0x17);
}

/// A large SEND that finds no receive gets its RNR NAK from the header; its payload is
/// dropped as it arrives, the connection stays in step and serves the retry once a receive
/// is posted. A large legal WRITE is buffered up to its own length only.
#[test]
fn tcp_large_frames_answered_from_the_header_keep_the_stream_in_step() {
    let s = Server::new();
    let mut raw = Raw::connect(s.sock);
    let (sqpn, _) = raw.handshake(4000, 7);
    let sqp = s.wait_qps(1);
    let len = 256 * 1024u32;
    let payload = vec![0x3cu8; len as usize];
    let send = |raw: &mut Raw, psn: u32| {
        let op = RequestOp::Send {
            data: &[][..],
            invalidate: None,
        };
        raw.send(&large_header(sqpn, Psn::new(psn), op, len))
            .unwrap();
        raw.send(&payload).unwrap();
    };
    send(&mut raw, 7);
    match raw.read_frame() {
        RawRead::Frame(Frame::Packet(Packet::Response(r))) => {
            assert_eq!(r.kind, ResponseKind::Nak(NakCode::ReceiverNotReady));
        }
        other => panic!("expected an RNR NAK: {other:?}"),
    }
    wait_until("the payload dropped", || {
        TcpNode::stats(&s.ctx).unwrap().discarded_frames == 1
    });
    assert_eq!(sqp.state(), QpState::ReadyToSend);
    sqp.post_recv(&[RecvWr {
        wr_id: 5,
        sge: Some(Sge {
            addr: s.buf.addr(),
            length: len,
            lkey: s.mr.lkey(),
        }),
    }])
    .unwrap();
    send(&mut raw, 7);
    match raw.read_frame() {
        RawRead::Frame(Frame::Packet(Packet::Response(r))) => {
            assert_eq!((r.psn, r.kind), (Psn::new(7), ResponseKind::Ack));
        }
        other => panic!("expected an ACK: {other:?}"),
    }
    let wc = wait_wcs(&s.cq, 1).remove(0);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (5, WcStatus::Success, len)
    );
    let mut got = vec![0u8; len as usize];
    s.buf.read(0, &mut got).unwrap();
    assert_eq!(got, payload);

    // A legal WRITE of half the region: buffered whole, and no more.
    let write = RequestOp::Write {
        addr: s.buf.addr(),
        rkey: s.mr.rkey(),
        data: &[][..],
    };
    raw.send(&large_header(sqpn, Psn::new(8), write, 512 * 1024))
        .unwrap();
    raw.send(&vec![0x77u8; 512 * 1024]).unwrap();
    match raw.read_frame() {
        RawRead::Frame(Frame::Packet(Packet::Response(r))) => {
            assert_eq!((r.psn, r.kind), (Psn::new(8), ResponseKind::Ack));
        }
        other => panic!("expected an ACK: {other:?}"),
    }
    let hw = high_water(&s);
    assert!((512 * 1024..=512 * 1024 + 64).contains(&hw), "{hw}");
    assert_eq!(sqp.state(), QpState::ReadyToSend);
}
