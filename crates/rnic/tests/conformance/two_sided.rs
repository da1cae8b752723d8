//! Two-sided SEND/RECV, shared receive queues, and receiver-not-ready retries.

use super::harness::*;
use rnic::{
    AccessFlags, AsyncEvent, Context, MemoryRegion, ProtectionDomain, Provider, QpInit, QpState,
    QpTiming, QueuePair, RecvWr, SendOp, WcOpcode, WcStatus,
};
use std::sync::Arc;
use std::time::Duration;

fn mn_recv<P: Provider, B: TestBed<P>>(w: &World<P, B>, id: u64, off: usize, len: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        sge: Some(sge(&w.mbuf, w.mmr.lkey(), off, len)),
    }
}

/// SEND consumes the peer's posted receive, in order; zero-byte messages need no buffer; the
/// MN can send to the CN as well.
pub fn send_recv<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![
            mn_recv(&w, 1, 0, 64),
            RecvWr {
                wr_id: 2,
                sge: None,
            },
        ],
        ..ConnOpts::default()
    });
    let msg = w.fill_cn(0, 48, 1);
    let wc = conn.exec(
        &w.bed,
        SendOp::Send {
            local: Some(w.csge(0, 48)),
        },
    );
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::Send, 48)
    );
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode, rc.byte_len),
        (1, WcStatus::Success, WcOpcode::Recv, 48)
    );
    assert_eq!(rc.qp_num, conn.sqp.qp_num());
    assert_eq!(rc.invalidated_rkey, None);
    assert_eq!(w.mn_bytes(0, 48), msg);

    let wc = conn.exec(&w.bed, SendOp::Send { local: None });
    assert_eq!(wc.status, WcStatus::Success);
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (2, WcStatus::Success, 0)
    );

    // MN → CN.
    conn.cqp
        .post_recv(&[RecvWr {
            wr_id: 3,
            sge: Some(w.csge(4096, 64)),
        }])
        .unwrap();
    let reply = w.fill_mn(1024, 32, 2);
    let wc = conn.exec_server(
        &w.bed,
        SendOp::Send {
            local: Some(sge(&w.mbuf, w.mmr.lkey(), 1024, 32)),
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let rc = wait_completions::<P, B>(&w.bed, &conn.crcq, 1)[0];
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (3, WcStatus::Success, 32)
    );
    assert_eq!(rc.qp_num, conn.cqp.qp_num());
    assert_eq!(w.cn_bytes(4096, 32), reply);
}

/// A message longer than the receive buffer fails on both sides and closes the connection.
pub fn send_longer_than_receive_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![mn_recv(&w, 1, 0, 16)],
        ..ConnOpts::default()
    });
    let before = w.fill_mn(0, 64, 7);
    w.fill_cn(0, 32, 8);
    let wc = conn.exec(
        &w.bed,
        SendOp::Send {
            local: Some(w.csge(0, 32)),
        },
    );
    assert_ne!(wc.status, WcStatus::Success, "a too-long SEND");
    assert_eq!(conn.cqp.state(), QpState::Error);
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!((rc.wr_id, rc.status), (1, WcStatus::LocalLengthError));
    assert_eq!(
        w.mn_bytes(16, 48),
        before[16..],
        "nothing written past the receive buffer"
    );
}

/// Receives come from a shared receive queue, in posting order, across the QPs using it.
pub fn send_recv_srq<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let srq = Arc::new(w.mpd.create_srq(16).unwrap());
    w.post_srq(
        &srq,
        &[
            mn_recv(&w, 0, 0, 64),
            mn_recv(&w, 1, 64, 64),
            mn_recv(&w, 2, 128, 64),
        ],
    );
    let opts = || ConnOpts {
        srq: Some(srq.clone()),
        ..ConnOpts::default()
    };
    let c1 = w.connect_with(opts());
    let c2 = w.connect_with(opts());
    let m0 = w.fill_cn(0, 16, 10);
    let m1 = w.fill_cn(16, 16, 11);
    let m2 = w.fill_cn(32, 16, 12);
    assert_eq!(
        c1.exec(
            &w.bed,
            SendOp::Send {
                local: Some(w.csge(0, 16))
            }
        )
        .status,
        WcStatus::Success
    );
    assert_eq!(
        c2.exec(
            &w.bed,
            SendOp::Send {
                local: Some(w.csge(16, 16))
            }
        )
        .status,
        WcStatus::Success
    );
    assert_eq!(
        c1.exec(
            &w.bed,
            SendOp::Send {
                local: Some(w.csge(32, 16))
            }
        )
        .status,
        WcStatus::Success
    );
    let r1 = wait_completions::<P, B>(&w.bed, c1.srcq(), 2);
    let r2 = wait_completions::<P, B>(&w.bed, c2.srcq(), 1);
    assert_eq!((r1[0].wr_id, r1[1].wr_id, r2[0].wr_id), (0, 2, 1));
    assert!(
        r1.iter()
            .chain(&r2)
            .all(|c| c.status == WcStatus::Success && c.byte_len == 16)
    );
    assert_eq!(r1[0].qp_num, c1.sqp.qp_num());
    assert_eq!(r2[0].qp_num, c2.sqp.qp_num());
    assert_eq!(w.mn_bytes(0, 16), m0);
    assert_eq!(w.mn_bytes(64, 16), m1);
    assert_eq!(w.mn_bytes(128, 16), m2);
    // A QP attached to an SRQ has no receive queue of its own.
    assert!(c1.sqp.post_recv(&[mn_recv(&w, 9, 0, 8)]).is_err());
    // An SRQ serves only QPs of its own PD.
    let cq = w.mn().create_cq(4).unwrap();
    let foreign = w.mpd2.create_qp(QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        srq: Some(&srq),
        max_send_wr: 4,
        max_recv_wr: 4,
        access: AccessFlags::empty(),
        timing: QpTiming::default(),
    });
    assert!(foreign.is_err(), "a QP of another PD on the SRQ");
}

/// Timing with a short RNR timer and `rnr_retry` retries.
fn rnr_timing<P: Provider, B: TestBed<P>>(bed: &B, timer_us: u64, rnr_retry: u8) -> QpTiming {
    QpTiming {
        rnr_timer_us: timer_us,
        rnr_retry,
        ..bed.quiet_timing()
    }
}

/// Receiver not ready: with no receive posted the SEND is retried `rnr_retry` times, an RNR
/// timer apart, then fails with `RnrRetryExceeded`; the requester QP enters ERR, the
/// responder stays up.
pub fn rnr_retry_exceeded<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let timer_us = 2_000;
    let retries = 3u8;
    let conn = w.connect_with(ConnOpts {
        client_timing: Some(rnr_timing(&w.bed, timer_us, retries)),
        ..ConnOpts::default()
    });
    let clock = w.cn().clock();
    let start = clock.now();
    conn.post(&[wr::<P>(
        1,
        SendOp::Send {
            local: Some(w.csge(0, 8)),
        },
    )]);
    if w.bed.virtual_time() {
        // Device time has not moved: the retries cannot have run out.
        assert!(poll_now::<P, B>(&w.bed, &conn.ccq).is_empty());
    }
    let wc = wait_completions_advancing::<P, B>(
        &w.bed,
        &conn.ccq,
        1,
        Some(Duration::from_micros(timer_us / 4)),
    )[0];
    let elapsed = clock.now().since(start);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RnrRetryExceeded));
    assert_eq!(conn.cqp.state(), QpState::Error);
    assert!(
        elapsed >= Duration::from_micros(timer_us * u64::from(retries)),
        "{retries} RNR retries need {retries} timer periods; failed after {elapsed:?}"
    );
    // The NAK itself does not break the responder. Where the requester's ERR hangs up the
    // connection, the responder fails too, as soon as it reads the hang-up: for that reason,
    // at a moment the test does not control.
    if !w.bed.hangs_up_on_error() {
        assert_eq!(
            conn.sqp.state(),
            QpState::ReadyToSend,
            "RNR does not break the responder"
        );
    }
    assert!(poll_now::<P, B>(&w.bed, conn.srcq()).is_empty());
    let events = drain_events::<P>(w.mn());
    assert!(
        !events.iter().any(|e| matches!(
            e,
            AsyncEvent::QpAccessError(_) | AsyncEvent::QpRequestError(_)
        )),
        "MN events: {events:?}"
    );
}

/// Receiver not ready, then ready: a receive posted before the RNR retries run out lets the
/// SEND succeed.
pub fn rnr_recv_posted_in_time<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let virtual_time = w.bed.virtual_time();
    // Real-time beds get a wide margin: 7 retries of 50 ms.
    let (timer_us, retries) = if virtual_time {
        (1_000, 3)
    } else {
        (50_000, 7)
    };
    let conn = w.connect_with(ConnOpts {
        client_timing: Some(rnr_timing(&w.bed, timer_us, retries)),
        ..ConnOpts::default()
    });
    let msg = w.fill_cn(0, 24, 4);
    conn.post(&[wr::<P>(
        1,
        SendOp::Send {
            local: Some(w.csge(0, 24)),
        },
    )]);
    if virtual_time {
        // At least one RNR round trip and one retry happen before the receive is posted.
        assert!(poll_now::<P, B>(&w.bed, &conn.ccq).is_empty());
        w.bed.advance(Duration::from_micros(timer_us));
        assert!(poll_now::<P, B>(&w.bed, &conn.ccq).is_empty());
        w.bed.drive();
        assert!(poll_now::<P, B>(&w.bed, &conn.ccq).is_empty());
    }
    conn.sqp.post_recv(&[mn_recv(&w, 7, 512, 64)]).unwrap();
    let wc = wait_completions_advancing::<P, B>(
        &w.bed,
        &conn.ccq,
        1,
        Some(Duration::from_micros(timer_us / 4)),
    )[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!(
        (rc.wr_id, rc.status, rc.byte_len),
        (7, WcStatus::Success, 24)
    );
    assert_eq!(w.mn_bytes(512, 24), msg);
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    // The connection keeps working afterwards (no stale retransmission confuses it).
    let (_mw, rkey) = w.window1(8192, 64, AccessFlags::REMOTE_READ);
    assert_eq!(w.read(&conn, 0, 8192, 8, rkey).status, WcStatus::Success);
}
