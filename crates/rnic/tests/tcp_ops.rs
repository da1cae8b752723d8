//! The TCP transport over loopback: one-sided and two-sided operations, errors, reconnection,
//! refusal and CPU accounting.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::link::LinkStack;
use rnic::soft::link::tracing::PacketTrace;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;
use util::*;

#[test]
fn tcp_read_write_atomics_send_recv() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"hello").unwrap();
    assert_eq!(c.qp.state(), QpState::ReadyToSend);
    let sqp = s.wait_qps(1);
    assert_eq!(sqp.state(), QpState::ReadyToSend);
    assert_eq!(s.policy.private.lock()[0], b"hello");
    let base = s.buf.addr();
    let rkey = s.mr.rkey();

    let pattern = one_sided_ops(&s, &c);

    // SEND / RECV.
    let recv_sge = Sge {
        addr: base + 2048,
        length: 64,
        lkey: s.mr.lkey(),
    };
    sqp.post_recv(&[RecvWr {
        wr_id: 77,
        sge: Some(recv_sge),
    }])
    .unwrap();
    c.buf.write(128, b"two-sided").unwrap();
    let wc = c.run(
        4,
        SendOp::Send {
            local: Some(c.sge(128, 9)),
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let rwc = wait_wcs(&s.cq, 1).remove(0);
    assert_eq!(
        (rwc.wr_id, rwc.status, rwc.byte_len),
        (77, WcStatus::Success, 9)
    );
    let mut msg = [0u8; 9];
    s.buf.read(2048, &mut msg).unwrap();
    assert_eq!(&msg, b"two-sided");

    // A batch of pipelined READs completes in order.
    let wrs: Vec<_> = (0..32u64)
        .map(|i| SendWr {
            wr_id: 100 + i,
            signaled: true,
            op: SendOp::Read {
                local: c.sge(4096 + i * 64, 64),
                remote_addr: base + 4096 + i * 64,
                rkey,
            },
        })
        .collect();
    c.qp.post_send(&wrs).unwrap();
    let wcs = wait_wcs(&c.cq, 32);
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.status), (100 + i as u64, WcStatus::Success));
    }
    let mut chunk = vec![0u8; 32 * 64];
    c.buf.read(4096, &mut chunk).unwrap();
    assert_eq!(chunk, pattern[..32 * 64]);
}

#[test]
fn tcp_server_qp_can_issue_requests_too() {
    let s = Server::new();
    let c = Client::with_access(AccessFlags::REMOTE_READ);
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    c.buf.write(300, b"from the client").unwrap();
    sqp.post_send(&[SendWr {
        wr_id: 5,
        signaled: true,
        op: SendOp::Read {
            local: Sge {
                addr: s.buf.addr() + 64,
                length: 15,
                lkey: s.mr.lkey(),
            },
            remote_addr: c.buf.addr() + 300,
            rkey: c.mr.rkey(),
        },
    }])
    .unwrap();
    let wc = wait_wcs(&s.cq, 1).remove(0);
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 15];
    s.buf.read(64, &mut got).unwrap();
    assert_eq!(&got, b"from the client");
}

#[test]
fn tcp_remote_access_error_errors_both_qps_and_flushes() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    let base = s.buf.addr();
    let before = {
        let mut b = vec![0u8; 64];
        s.buf.read(SERVER_BUF - 64, &mut b).unwrap();
        b
    };
    c.qp.post_send(&[
        SendWr {
            wr_id: 1,
            signaled: true,
            op: SendOp::Write {
                local: c.sge(0, 64),
                remote_addr: base + SERVER_BUF as u64 - 32, // runs past the MR
                rkey: s.mr.rkey(),
            },
        },
        SendWr {
            wr_id: 2,
            signaled: true,
            op: SendOp::Read {
                local: c.sge(0, 8),
                remote_addr: base,
                rkey: s.mr.rkey(),
            },
        },
    ])
    .unwrap();
    let wcs = wait_wcs(&c.cq, 2);
    assert_eq!(wcs[0].status, WcStatus::RemoteAccessError);
    assert_eq!(wcs[1].status, WcStatus::WrFlushError);
    assert_eq!(c.qp.state(), QpState::Error);
    assert_eq!(sqp.state(), QpState::Error);
    assert_eq!(
        s.ctx.poll_async_event(),
        Some(AsyncEvent::QpAccessError(sqp.qp_num()))
    );
    // Later requests are flushed.
    let wc = c.read(0, 8, base, s.mr.rkey());
    assert_eq!(wc.status, WcStatus::WrFlushError);
    let mut after = vec![0u8; 64];
    s.buf.read(SERVER_BUF - 64, &mut after).unwrap();
    assert_eq!(before, after);
}

#[test]
fn tcp_reset_and_reconnect_keeps_type1_window() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"first").unwrap();
    let sqp1 = s.wait_qps(1);

    // Bind a type-1 window over [8192, 8192 + 128) (any QP of the PD can post the bind).
    let mw = s.pd.alloc_mw(MwType::Type1).unwrap();
    sqp1.post_send(&[SendWr {
        wr_id: 9,
        signaled: true,
        op: SendOp::BindMw {
            mw: &mw,
            bind: BindInfo {
                mr: Some(&s.mr),
                addr: s.buf.addr() + 8192,
                length: 128,
                access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                key: None,
                target_qp: None,
            },
        },
    }])
    .unwrap();
    assert_eq!(wait_wcs(&s.cq, 1)[0].status, WcStatus::Success);
    let rkey = mw.rkey();
    s.buf.write(8192, b"window contents!").unwrap();

    let wc = c.read(0, 16, s.buf.addr() + 8192, rkey);
    assert_eq!(wc.status, WcStatus::Success);

    // Out of the window: both QPs to ERR.
    let wc = c.read(0, 16, s.buf.addr() + 8192 + 120, rkey);
    assert_eq!(wc.status, WcStatus::RemoteAccessError);
    assert_eq!(c.qp.state(), QpState::Error);
    assert_eq!(sqp1.state(), QpState::Error);

    // Reset and reconnect: a new handshake, a new server QP.
    c.qp.reset().unwrap();
    assert_eq!(c.qp.state(), QpState::Reset);
    c.qp.connect(&s.addr, b"second").unwrap();
    let sqp2 = s.wait_qps(2);
    assert_ne!(sqp1.qp_num(), sqp2.qp_num());
    assert_eq!(sqp2.state(), QpState::ReadyToSend);
    c.buf.write(0, &[0u8; 16]).unwrap();
    let wc = c.read(0, 16, s.buf.addr() + 8192, rkey);
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "type-1 window rkey on the new QP"
    );
    let mut got = [0u8; 16];
    c.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"window contents!");
    assert!(TcpNode::stats(&c.ctx).unwrap().connected >= 2);
}

#[test]
fn tcp_local_close_is_seen_by_the_peer() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    c.qp.reset().unwrap();
    wait_until("server QP in ERR after the client closed", || {
        sqp.state() == QpState::Error
    });
    // An orderly close between frames: the peer learns it was disconnected, not that its
    // QP failed (a memory node counts only failures as QP errors).
    assert_eq!(
        s.ctx.poll_async_event(),
        Some(AsyncEvent::QpDisconnected(sqp.qp_num()))
    );
    // The client side reports nothing: it closed on purpose.
    assert_eq!(c.ctx.poll_async_event(), None);
}

#[test]
fn tcp_dropped_server_qp_errors_the_client_and_flushes() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let _ = s.wait_qps(1);
    s.policy.got.lock().clear(); // drop the server QP: its link closes
    wait_until("client QP in ERR after the server QP went away", || {
        drain_cq(&c.cq);
        c.qp.state() == QpState::Error
    });
    let wc = c.read(0, 8, s.buf.addr(), s.mr.rkey());
    assert_eq!(wc.status, WcStatus::WrFlushError);
}

#[test]
fn tcp_refused_connection_reports_the_reason() {
    let s = Server::new();
    *s.policy.refuse.lock() = Some("no capacity for you".into());
    let c = Client::new();
    match c.qp.connect(&s.addr, b"") {
        Err(VerbsError::ConnectionRefused(reason)) => assert_eq!(reason, "no capacity for you"),
        other => panic!("expected ConnectionRefused, got {other:?}"),
    }
    assert_eq!(c.qp.state(), QpState::Reset);
    // The QP can still connect once the policy accepts.
    *s.policy.refuse.lock() = None;
    c.qp.connect(&s.addr, b"").unwrap();
    assert_eq!(c.qp.state(), QpState::ReadyToSend);
    assert!(TcpNode::stats(&s.ctx).unwrap().rejected >= 1);
}

#[test]
fn tcp_connect_errors() {
    let c = Client::new();
    // Nobody listens there any more.
    let s = Server::new();
    let addr = s.addr.clone();
    let mut s = s;
    s.listener = None;
    drop(s);
    let err = c.qp.connect(&addr, b"").unwrap_err();
    assert!(
        matches!(err, VerbsError::ConnectionRefused(_)),
        "expected ConnectionRefused, got {err:?}"
    );
    // In-process addresses and oversized private data are argument errors.
    let err =
        c.qp.connect(&SoftAddress::InProc { node: 1, port: 1 }, b"")
            .unwrap_err();
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err:?}");
    let s = Server::new();
    let err = c.qp.connect(&s.addr, &[0u8; 65]).unwrap_err();
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err:?}");
    assert_eq!(c.qp.state(), QpState::Reset);
}

#[test]
fn tcp_wrong_version_is_a_protocol_error() {
    use rnic::soft::wire::{CmMessage, Frame};
    use std::io::Write;
    // A fake listener that answers with a frame of another wire version.
    let l = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    let c = Client::new();
    let server = std::thread::Builder::new()
        .name("fake-listener".into())
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut reply = encode(&Frame::Cm(CmMessage::ConnectReply {
                qp: QpNumber(5),
                start_psn: Psn::new(1),
            }));
            reply[4] = 99; // version byte
            s.write_all(&reply).unwrap();
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut sink);
        })
        .unwrap();
    let err = c.qp.connect(&SoftAddress::Tcp(addr), b"").unwrap_err();
    assert!(matches!(err, VerbsError::Protocol(_)), "{err:?}");
    assert_eq!(c.qp.state(), QpState::Reset);
    drop(c);
    server.join().unwrap();

    // And the listener refuses a request of another version with a reason.
    let s = Server::new();
    let mut raw = Raw::connect(s.sock);
    let req = encode(&Frame::Cm(CmMessage::ConnectRequest {
        version: 7,
        qp: QpNumber(3),
        start_psn: Psn::new(0),
        private_data: Vec::new(),
    }));
    raw.send(&req).unwrap();
    match raw.read_frame() {
        RawRead::Frame(Frame::Cm(CmMessage::ConnectReject { reason })) => {
            assert!(reason.contains("version"), "{reason}");
        }
        _ => panic!("expected a ConnectReject"),
    }
    assert_eq!(s.policy.count(), 0);
}

#[test]
fn tcp_engine_cpu_time_is_reported() {
    let fabric = SoftFabric::new();
    let inproc = fabric.open_device(SoftConfig::default());
    assert_eq!(engine_cpu_time(&inproc), None);
    assert!(TcpNode::stats(&inproc).is_none());

    let s = Server::with(
        SoftConfig::default(),
        TcpOptions {
            engine_threads: 2,
            ..TcpOptions::default()
        },
    );
    assert_eq!(TcpNode::engine_cpu_times(&s.ctx).unwrap().len(), 2);
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    for _ in 0..200 {
        assert_eq!(
            c.read(0, 64, s.buf.addr(), s.mr.rkey()).status,
            WcStatus::Success
        );
    }
    wait_until("engine CPU time published", || {
        TcpNode::engine_cpu_time(&s.ctx).unwrap() > std::time::Duration::ZERO
    });
}

#[test]
fn tcp_many_qps_many_threads_two_engines() {
    let s = Arc::new(Server::with(
        SoftConfig::default(),
        TcpOptions {
            engine_threads: 2,
            ..TcpOptions::default()
        },
    ));
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let s = s.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("client-{t}"))
                .spawn(move || {
                    let c = Client::new();
                    c.qp.connect(&s.addr, b"").unwrap();
                    let slot = s.buf.addr() + 65536 + t * 8;
                    for i in 0..200u64 {
                        c.buf.store_u64(0, i).unwrap();
                        let wc = c.run(
                            i,
                            SendOp::FetchAdd {
                                local: c.sge(8, 8),
                                remote_addr: slot,
                                rkey: s.mr.rkey(),
                                add: 1,
                            },
                        );
                        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                        assert_eq!(c.buf.load_u64(8).unwrap(), i);
                    }
                })
                .unwrap(),
        );
    }
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..4 {
        assert_eq!(s.buf.load_u64(65536 + t * 8).unwrap(), 200);
    }
    assert_eq!(TcpNode::stats(&s.ctx).unwrap().established, 4);
}

/// A doorbell of 16 READs leaves the requester in one `write`, and the responder answers the
/// requests one read delivered in one `write` too (corked batches).
#[test]
fn tcp_a_doorbell_leaves_in_one_write() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    // Warm up (the connection's first frames), then count.
    assert_eq!(c.read(0, 64, base, rkey).status, WcStatus::Success);
    let calls = |ctx: &SoftContext| TcpNode::stats(ctx).unwrap().syscalls;
    let (c0, s0) = (calls(&c.ctx), calls(&s.ctx));
    let reads: Vec<SendWr<'_, SoftMw, SoftMr>> = (0..16)
        .map(|i| SendWr {
            wr_id: i,
            signaled: true,
            op: SendOp::Read {
                local: c.sge(64 * i, 64),
                remote_addr: base + 64 * i,
                rkey,
            },
        })
        .collect();
    c.qp.post_send(&reads).unwrap();
    assert_eq!(wait_wcs(&c.cq, 16).len(), 16);
    let (c1, s1) = (calls(&c.ctx).since(&c0), calls(&s.ctx).since(&s0));
    assert_eq!(c1.writes, 1, "the doorbell's 16 READs in one write: {c1:?}");
    assert!(
        s1.writes <= 2,
        "16 responses in as many writes as reads delivered them: {s1:?}"
    );
}

/// Unsignaled WRITEs over TCP go without AckReq, and the responder sends one acknowledgement
/// for them and the signaled WRITE after them (cumulative); every WRITE still lands.
#[test]
fn tcp_unsignaled_writes_share_one_acknowledgement() {
    let trace = PacketTrace::new();
    let s = Server::with(
        SoftConfig::default(),
        TcpOptions {
            links: LinkStack::new().traced(trace.clone()),
            ..TcpOptions::default()
        },
    );
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    c.buf.write(0, &[7u8; 512]).unwrap();
    for i in 0..8 {
        c.qp.post_send(&[SendWr {
            wr_id: 100 + i,
            signaled: false,
            op: SendOp::Write {
                local: c.sge(64 * i, 64),
                remote_addr: base + 4096 + 64 * i,
                rkey,
            },
        }])
        .unwrap();
    }
    let wc = c.run(
        200,
        SendOp::Write {
            local: c.sge(0, 8),
            remote_addr: base + 8192,
            rkey,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let acks = trace
        .snapshot()
        .iter()
        .filter(|p| matches!(p, wire::Packet::Response(r) if r.kind == wire::ResponseKind::Ack))
        .count();
    assert_eq!(acks, 1, "one acknowledgement for nine WRITEs");
    let mut landed = [0u8; 512];
    s.buf.read(4096, &mut landed).unwrap();
    assert_eq!(landed, [7u8; 512]);
}
