//! QP service on the TCP transport: weighted round robin among the QPs an engine serves, and
//! responder rate limits (`QueuePair::set_service`). Shares and rates are read from the
//! device's per-QP served counters (`TcpNode::qp_stats`), and time from an injected clock:
//! nothing here asserts on wall-clock timing.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::*;
use rnic::*;
use std::time::Duration;
use util::*;

/// Small one-sided requests the flooding and the steady client queue (multiples of 64).
const FLOOD: usize = 24 * 64;
const STEADY: usize = 8 * 64;

/// A QP on `c`'s device with a send queue deep enough for [`QUEUED`] requests.
fn deep_qp(c: &Client) -> SoftQp {
    c.pd.create_qp(QpInit {
        send_cq: &c.cq,
        recv_cq: &c.cq,
        srq: None,
        max_send_wr: 8192,
        max_recv_wr: 1,
        access: AccessFlags::empty(),
        timing: timing(),
    })
    .unwrap()
}

/// Posts `n` 8-byte WRITEs into `s`'s buffer, in doorbells of 64 (the last of each signaled).
fn post_writes(c: &Client, qp: &SoftQp, s: &Server, n: usize) {
    for batch in 0..n / 64 {
        let wrs: Vec<_> = (0..64)
            .map(|i| SendWr {
                wr_id: (batch * 64 + i) as u64,
                signaled: i == 63,
                op: SendOp::Write {
                    local: c.sge(0, 8),
                    remote_addr: s.buf.addr() + 8 * (i as u64),
                    rkey: s.mr.rkey(),
                },
            })
            .collect();
        qp.post_send(&wrs).unwrap();
    }
}

/// A server (one engine thread) on a clock the test moves.
fn server_on_virtual_clock() -> (std::sync::Arc<VirtualClock>, Server) {
    let clock = VirtualClock::new();
    let config = SoftConfig {
        clock: clock.clone(),
        ..SoftConfig::default()
    };
    (clock, Server::with(config, TcpOptions::default()))
}

fn served(s: &Server, qp: &SoftQp) -> TcpQpStats {
    TcpNode::qp_stats(&s.ctx, qp.qp_num()).unwrap()
}

fn ops_limit(per_sec: u64, burst: u64) -> QpService {
    QpService {
        weight: 1,
        rate: Some(RateLimit {
            ops: Some(TokenRate { per_sec, burst }),
            bytes: None,
        }),
    }
}

/// Two QPs on one engine, each with small WRITEs queued at the node — held back by a rate
/// limit until all are queued, then released together by moving the node's clock — the
/// flooding one with enough to outlast the steady one's: the steady one's share of everything
/// the device served up to its last request is at least 0.9 of its weighted share. Counted
/// from the served-request counters once everything is served, so the result does not
/// depend on when the test thread runs.
fn weighted_share(weight_flood: u32, weight_steady: u32) {
    let (clock, s) = server_on_virtual_clock(); // one engine thread
    let (cf, cs) = (Client::new(), Client::new());
    let (flood, steady) = (deep_qp(&cf), deep_qp(&cs));
    flood.connect(&s.addr, b"").unwrap();
    let s_flood = s.wait_qps(1);
    steady.connect(&s.addr, b"").unwrap();
    let s_steady = s.wait_qps(2);
    // One request each, then nothing until the clock moves.
    let hold = |weight| QpService {
        weight,
        ..ops_limit(1, 1)
    };
    s_flood.set_service(hold(weight_flood)).unwrap();
    s_steady.set_service(hold(weight_steady)).unwrap();
    post_writes(&cf, &flood, &s, FLOOD);
    post_writes(&cs, &steady, &s, STEADY);
    // A changed limit keeps the (empty) buckets: both wait for the clock, then have all the
    // tokens they need at the same instant.
    let open = |weight| QpService {
        weight,
        ..ops_limit(1 << 30, 1 << 30)
    };
    s_flood.set_service(open(weight_flood)).unwrap();
    s_steady.set_service(open(weight_steady)).unwrap();
    clock.advance(Duration::from_secs(1));
    wait_wcs(&cs.cq, STEADY / 64);
    wait_wcs(&cf.cq, FLOOD / 64);
    let (f, st) = (served(&s, &s_flood), served(&s, &s_steady));
    assert_eq!((f.served_ops, st.served_ops), (FLOOD as u64, STEADY as u64));
    assert!(
        f.last_served_at > st.last_served_at,
        "the flood ran out first: {f:?} {st:?}"
    );
    let share = st.served_ops as f64 / st.last_served_at as f64;
    let entitled = f64::from(weight_steady) / f64::from(weight_flood + weight_steady);
    assert!(
        share >= 0.9 * entitled,
        "steady QP got {share:.3} of the requests served up to its last, entitled to \
         {entitled:.3} ({st:?})"
    );
}

#[test]
fn tcp_equal_weights_share_the_engine_under_a_flood() {
    weighted_share(1, 1);
}

#[test]
fn tcp_a_heavier_qp_gets_its_weighted_share() {
    weighted_share(1, 3);
}

/// A rate-limited QP on a device whose clock the test moves: never more than the burst plus
/// the rate times the time elapsed is served, and each step's tokens are served in full.
#[test]
fn tcp_a_rate_limited_qp_is_served_at_most_its_rate() {
    let (clock, s) = server_on_virtual_clock();
    assert!(s.ctx.query_device().qp_rate_limit);
    let c = Client::new();
    let qp = deep_qp(&c);
    qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    // 1000 requests per second, bursts of 10.
    sqp.set_service(ops_limit(1000, 10)).unwrap();
    post_writes(&c, &qp, &s, 640);
    for step in 0..6u64 {
        let allowed = 10 + 10 * step; // burst + rate × elapsed
        wait_until("the step's tokens served", || {
            let n = served(&s, &sqp).served_ops;
            assert!(n <= allowed, "{n} served with {allowed} tokens");
            n == allowed
        });
        clock.advance(Duration::from_millis(10));
    }
    assert!(served(&s, &sqp).throttled >= 5);
    // Lifted: the rest is served at once.
    sqp.set_service(QpService::default()).unwrap();
    wait_wcs(&c.cq, 10);
    assert_eq!(qp.state(), QpState::ReadyToSend);
}

/// A byte rate: requests of 1 KiB at 64 KiB per second with a 4 KiB burst.
#[test]
fn tcp_a_byte_rate_limits_request_bytes() {
    let (clock, s) = server_on_virtual_clock();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    sqp.set_service(QpService {
        weight: 1,
        rate: Some(RateLimit {
            ops: None,
            bytes: Some(TokenRate {
                per_sec: 64 * 1024,
                burst: 4096,
            }),
        }),
    })
    .unwrap();
    let wrs: Vec<_> = (0..64u64)
        .map(|i| SendWr {
            wr_id: i,
            signaled: i == 63,
            op: SendOp::Write {
                local: c.sge(0, 1024),
                remote_addr: s.buf.addr(),
                rkey: s.mr.rkey(),
            },
        })
        .collect();
    c.qp.post_send(&wrs).unwrap();
    let frame = 1024 + 32; // a WRITE frame's bytes
    for step in 0..5u64 {
        // Tokens so far: the burst plus 64 KiB/s × 10 ms per step (655.36 bytes/ms).
        let tokens = 4096 + 64 * 1024 * 10 * step / 1000;
        // A request passes when the balance covers it; each may run the balance into debt by
        // at most the bucket's shortfall, so what is served stays within one frame of it.
        wait_until("the step's bytes served", || {
            let b = served(&s, &sqp).served_bytes;
            assert!(b <= tokens + frame, "{b} bytes served with {tokens} tokens");
            b + frame > tokens
        });
        clock.advance(Duration::from_millis(10));
    }
    sqp.set_service(QpService::default()).unwrap();
    wait_wcs(&c.cq, 1);
}

/// A peer that goes away while its requests wait for its QP's tokens is noticed at once, not
/// when the tokens come back: its connection ends (the node's QP fails) with the clock
/// standing, and what it left waiting is not served.
#[test]
fn tcp_a_throttled_peer_that_closes_is_ended_at_once() {
    let (_standing_clock, s) = server_on_virtual_clock();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    sqp.set_service(ops_limit(1, 1)).unwrap();
    post_writes(&c, &c.qp, &s, 64);
    wait_until("the burst served", || served(&s, &sqp).served_ops == 1);
    drop(c);
    wait_until("the node's QP failed with its peer gone", || {
        sqp.state() == QpState::Error
    });
    assert_eq!(served(&s, &sqp).served_ops, 1, "nothing more was served");
}

/// Contract checks: weights and rates are validated; the in-process transport refuses.
#[test]
fn set_service_validates_and_reports_support() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    let zero = QpService {
        weight: 0,
        rate: None,
    };
    assert!(matches!(
        sqp.set_service(zero),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        sqp.set_service(ops_limit(0, 1)),
        Err(VerbsError::InvalidArgument(_))
    ));
    // Before connecting too: the service is kept and applied on connect.
    c.qp.set_service(ops_limit(5, 5)).unwrap();

    let fabric = SoftFabric::new();
    let ctx = fabric.open_device(SoftConfig::default());
    assert!(!ctx.query_device().qp_rate_limit);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 4,
            max_recv_wr: 4,
            access: AccessFlags::empty(),
            timing: timing(),
        })
        .unwrap();
    assert!(matches!(
        qp.set_service(QpService::default()),
        Err(VerbsError::Unsupported(_))
    ));
}

/// The verbs contract's served counters (`QueuePair::served`): the responder's QP counts the
/// requests its engine delivered, as the transport's own per-QP counters do; the requester's
/// QP served nothing; a QP without a connection has no counts.
#[test]
fn tcp_served_counts_the_responders_requests() {
    let s = Server::new();
    let c = Client::new();
    let qp = deep_qp(&c);
    assert_eq!(qp.served(), None, "no connection yet");
    qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    assert_eq!(sqp.served(), Some(QpServed::default()));
    post_writes(&c, &qp, &s, 128);
    wait_wcs(&c.cq, 2);
    let got = sqp.served().unwrap();
    let stats = served(&s, &sqp);
    assert_eq!(got.ops, 128);
    assert_eq!((got.ops, got.bytes), (stats.served_ops, stats.served_bytes));
    assert!(got.bytes >= 128 * 8, "{got:?}");
    assert_eq!(
        qp.served(),
        Some(QpServed::default()),
        "the requester served none"
    );
}

/// A QP whose responder answered receiver-not-ready leaves the peer's requests unread (TCP's
/// flow control pushes back on the peer) until a receive is posted or the hold has passed on
/// the device's clock — instead of reading and dropping every request of a deep window
/// behind the refused one, again at each of the peer's RNR retries.
#[test]
fn tcp_receiver_not_ready_leaves_the_peer_s_requests_unread() {
    let (clock, s) = server_on_virtual_clock();
    let c = Client::new();
    let qp = deep_qp(&c);
    qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    let ops = || served(&s, &sqp).served_ops;
    let sends: Vec<_> = (0..64)
        .map(|i| SendWr {
            wr_id: i,
            signaled: i == 63,
            op: SendOp::Send {
                local: Some(c.sge(0, 8)),
            },
        })
        .collect();
    qp.post_send(&sends).unwrap();
    // The first SEND finds no receive: refused, and nothing after it is read (another client
    // of the same engine is served meanwhile).
    wait_until("the first SEND refused", || ops() >= 1);
    c.qp.connect(&s.addr, b"").unwrap();
    let other = s.wait_qps(2);
    let _ = other;
    let wc = c.read(0, 8, s.buf.addr(), s.mr.rkey());
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(
        ops(),
        1,
        "the requests behind the refused one are left unread"
    );
    // A receive: reading resumes (the rest of the window is dropped: the client goes back to
    // the refused SEND at its RNR retry).
    let receive = |wr_id| RecvWr {
        wr_id,
        sge: Some(Sge {
            addr: s.buf.addr() + 4096,
            length: 64,
            lkey: s.mr.lkey(),
        }),
    };
    sqp.post_recv(&[receive(1)]).unwrap();
    // Reading resumes: the rest of the window is dropped (the client goes back to the refused
    // SEND at its RNR retry, which its CQ polls run), the retried SEND lands, and the next
    // one is refused and held again.
    wait_until("the retried SEND received", || {
        let _ = drain_cq(&c.cq);
        drain_cq(&s.cq)
            .iter()
            .any(|wc| wc.wr_id == 1 && wc.status == WcStatus::Success)
    });
    // Read: the refused SEND, the 63 behind it, the retried one and the next (refused).
    wait_until("the next SEND refused", || {
        let _ = drain_cq(&c.cq);
        ops() >= 66
    });
    let wc = c.read(0, 8, s.buf.addr(), s.mr.rkey());
    assert_eq!(wc.status, WcStatus::Success);
    let _ = drain_cq(&c.cq);
    assert_eq!(ops(), 66, "held again after the next refusal");
    let held = ops();
    // Without a receive, the hold ends with time on the device's clock.
    clock.advance(Duration::from_millis(2));
    wait_until("reading resumed after the hold", || {
        let _ = drain_cq(&c.cq);
        ops() > held
    });
}
