//! Timeouts over TCP (`docs/tcp-transport.md`, "Timeouts"): a slow peer slows a QP down
//! without failing it; a peer whose connection closes fails it at once; a vanished peer fails
//! it when the budget runs out, not before. The client's device runs on a virtual clock that
//! only the test moves, so every timer fires exactly when the test says; where a test waits,
//! it waits for a condition (a frame, a completion), bounded in wall time.
//!
//! In contrast, the in-process fabric keeps the verbs contract's `QpTiming`: the last test
//! shows the same silence failing there after `retry_count` retransmissions.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::link::faulty::LinkFaults;
use rnic::soft::link::tracing::PacketTrace;
use rnic::soft::wire::Packet;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;
use std::time::Duration;
use util::*;

const MS: Duration = Duration::from_millis(1);

/// A client device on `clock` with `links` around its connections and default timeouts.
fn client(clock: &Arc<VirtualClock>, links: LinkStack) -> Client {
    let config = SoftConfig {
        clock: clock.clone(),
        ..SoftConfig::default()
    };
    let options = TcpOptions {
        links,
        ..TcpOptions::default()
    };
    Client::with_config(config, AccessFlags::empty(), options)
}

fn read_wr(c: &Client, wr_id: u64, offset: u64) -> SendWr<'static, SoftMw, SoftMr> {
    SendWr {
        wr_id,
        signaled: true,
        op: SendOp::Read {
            local: c.sge(offset, 8),
            remote_addr: 0x1000,
            rkey: MemoryKey(0x100),
        },
    }
}

/// PSNs of the requests the client transmitted so far (the trace records on the posting or
/// polling thread, before the packet leaves).
fn sent(trace: &PacketTrace) -> Vec<Psn> {
    trace
        .snapshot()
        .into_iter()
        .filter_map(|p| match p {
            Packet::Request(r) => Some(r.psn),
            Packet::Response(_) => None,
        })
        .collect()
}

/// Moves the clock to `until` in steps of `step`, polling the CQ (which runs the QP's timers)
/// at each; asserts that nothing completes and the QP stays connected.
fn stall(c: &Client, clock: &VirtualClock, step: Duration, until: Timestamp) {
    let mut wc = [empty_wc(); 4];
    while clock.now() < until {
        clock.set(clock.now().plus(step).min(until));
        assert_eq!(
            c.cq.poll(&mut wc),
            0,
            "completed at {:?}: {wc:?}",
            clock.now()
        );
        assert_eq!(c.qp.state(), QpState::ReadyToSend, "at {:?}", clock.now());
    }
}

/// A peer that answers after 10 s, twice in a row (20 s in all, more than the budget): the
/// requests complete and the QP stays connected. With the verbs timer (16 ms × 7 retries)
/// each would have failed after 128 ms. Meanwhile the QP probed with its oldest request only,
/// on the initial RTO backed off: at 1, 3 and 7 s.
#[test]
fn a_slow_peer_slows_the_qp_down_without_failing_it() {
    let clock = VirtualClock::new();
    let trace = PacketTrace::new();
    let c = client(&clock, LinkStack::new().traced(trace.clone()));
    let server = RawServer::bind();
    let mut conn = server.connect(&c.qp);
    let first = conn.client_psn;

    c.qp.post_send(&[read_wr(&c, 1, 0)]).unwrap();
    conn.raw.read_request(first);
    stall(
        &c,
        &clock,
        10 * MS,
        Timestamp::ZERO.plus(Duration::from_secs(10)),
    );
    assert_eq!(sent(&trace), [first; 4], "the request and 3 probes of it");
    conn.answer_read(first, b"slowpeer");
    let wc = wait_wcs(&c.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    let mut got = [0u8; 8];
    c.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"slowpeer");

    // The budget counts from the last response, not from the first request.
    let second = first.next();
    c.qp.post_send(&[read_wr(&c, 2, 8)]).unwrap();
    conn.raw.read_request(second);
    stall(
        &c,
        &clock,
        10 * MS,
        Timestamp::ZERO.plus(Duration::from_secs(20)),
    );
    conn.answer_read(second, b"stillok!");
    let wc = wait_wcs(&c.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::Success));
    assert_eq!(c.qp.state(), QpState::ReadyToSend);
    assert_eq!(c.ctx.poll_async_event(), None);
}

/// Polls `c`'s CQ until its QP's outstanding READ fails, and checks that it failed as a lost
/// connection does: at once (the clock never moved, so no timer ran), with `event` raised.
fn fails_at_once(c: &Client, clock: &VirtualClock, event: AsyncEvent) {
    let wc = wait_wcs(&c.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RetryExceeded));
    assert_eq!(c.qp.state(), QpState::Error);
    assert_eq!(c.ctx.poll_async_event(), Some(event));
    assert_eq!(clock.now(), Timestamp::ZERO, "detected by a timer");
}

/// The peer's process ends in order (its socket closes between frames, a FIN): the QP fails
/// at once and the device raises `QpDisconnected`.
#[test]
fn a_peer_that_closes_its_connection_is_detected_at_once() {
    let clock = VirtualClock::new();
    let c = client(&clock, LinkStack::new());
    let server = RawServer::bind();
    let mut conn = server.connect(&c.qp);
    c.qp.post_send(&[read_wr(&c, 1, 0)]).unwrap();
    conn.raw.read_request(conn.client_psn);
    conn.raw.s.shutdown(std::net::Shutdown::Write).unwrap();
    fails_at_once(&c, &clock, AsyncEvent::QpDisconnected(c.qp.qp_num()));
}

/// The peer's process is killed with data unread (its kernel resets the connection): the QP
/// fails at once and the device raises `QpFatal`.
#[test]
fn a_peer_whose_connection_is_reset_is_detected_at_once() {
    let clock = VirtualClock::new();
    let c = client(&clock, LinkStack::new());
    let server = RawServer::bind();
    let mut conn = server.connect(&c.qp);
    c.qp.post_send(&[read_wr(&c, 1, 0)]).unwrap();
    conn.raw.read_request(conn.client_psn);
    socket2::SockRef::from(&conn.raw.s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(conn); // closing with linger 0 sends a reset
    fails_at_once(&c, &clock, AsyncEvent::QpFatal(c.qp.qp_num()));
}

/// A memory node that moves a client's QP to ERR (ending its session) closes the connection,
/// so the client's QP learns at once — before, the client found out only when a request of
/// its own went unanswered for its whole retry budget.
#[test]
fn a_qp_moved_to_error_closes_its_connection_and_the_peer_learns_at_once() {
    let clock = VirtualClock::new();
    let s = Server::new();
    let c = client(&clock, LinkStack::new());
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    sqp.set_error();
    wait_until("the client QP in ERR", || {
        drain_cq(&c.cq);
        c.qp.state() == QpState::Error
    });
    // The event is queued just after the state changes: wait for it too.
    let mut event = None;
    wait_until("the client's disconnect event", || {
        event = c.ctx.poll_async_event();
        event.is_some()
    });
    assert_eq!(event, Some(AsyncEvent::QpDisconnected(c.qp.qp_num())));
    c.qp.post_send(&[read_wr(&c, 1, 0)]).unwrap();
    let wc = wait_wcs(&c.cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::WrFlushError));
    assert_eq!(clock.now(), Timestamp::ZERO, "detected by a timer");
    assert_eq!(s.ctx.poll_async_event(), None, "set_error raises no event");
}

/// Every packet the client sends is lost from some point on (a host that vanished, a path
/// that drops everything): the connection stays up, nothing comes back. The QP probes no
/// sooner than the RTO floor (the RTO sits on it after a warm-up round trip), backs off to
/// the ceiling, and fails exactly when the budget (15 s) runs out — not a microsecond before.
#[test]
fn a_vanished_peer_is_detected_when_the_budget_runs_out() {
    let clock = VirtualClock::new();
    let faults = LinkFaults::new();
    let s = Server::new();
    let c = client(&clock, LinkStack::new().faulty(faults.clone()));
    c.qp.connect(&s.addr, b"").unwrap();
    s.wait_qps(1);
    let warm_up = c.read(0, 8, s.buf.addr(), s.mr.rkey());
    assert_eq!(warm_up.status, WcStatus::Success);

    faults.drop_next(u32::MAX);
    let start = clock.now();
    let at = |us: u64| start.plus_us(us);
    c.qp.post_send(&[read_wr(&c, 2, 0), read_wr(&c, 3, 8)])
        .unwrap();
    assert_eq!(faults.dropped(), 2);
    let floor = TcpOptions::default().timeouts.min_rto;
    stall(
        &c,
        &clock,
        10 * MS,
        start.plus(floor - Duration::from_micros(1)),
    );
    assert_eq!(faults.dropped(), 2, "probed before the RTO floor");
    stall(&c, &clock, 10 * MS, start.plus(floor));
    assert_eq!(faults.dropped(), 3, "one probe: the oldest request");
    // The RTO doubles from the floor: probes at 0.6, 1.4, 3.0 and 6.2 s, then every 5 s
    // (the ceiling): 11.2 s; the budget ends before the next.
    let budget = TcpOptions::default().timeouts.budget;
    let last = start.plus(budget - Duration::from_micros(1));
    stall(&c, &clock, 10 * MS, last);
    assert_eq!(faults.dropped(), 3 + 5);
    assert_eq!(c.qp.state(), QpState::ReadyToSend);

    clock.set(at(budget.as_micros() as u64));
    let mut wc = [empty_wc(); 4];
    let n = c.cq.poll(&mut wc);
    let got: Vec<(u64, WcStatus)> = wc[..n].iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [(2, WcStatus::RetryExceeded), (3, WcStatus::WrFlushError)]
    );
    assert_eq!(c.qp.state(), QpState::Error);
    assert_eq!(
        c.ctx.poll_async_event(),
        Some(AsyncEvent::QpFatal(c.qp.qp_num()))
    );
    // The failed QP closed its connection: the server's QP learns too.
    let sqp = s.policy.last().unwrap();
    wait_until("the server QP in ERR", || sqp.state() == QpState::Error);
}

/// The same silence on the in-process fabric (its fault wrapper around inline links): the
/// verbs contract's timer — `QpTiming::default()`, 16 ms × (7 retries + 1) — fails the QP at
/// 128 ms, having resent everything 7 times.
#[test]
fn in_process_links_keep_the_verbs_retry_count() {
    let clock = VirtualClock::new();
    let faults = LinkFaults::new();
    let fabric = SoftFabric::with_links(LinkMode::Inline, LinkStack::new().faulty(faults.clone()));
    let config = || SoftConfig {
        clock: clock.clone(),
        ..SoftConfig::default()
    };
    let mn = fabric.open_device(config());
    let pd = mn.alloc_pd().unwrap();
    let cq = mn.create_cq(16).unwrap();
    let policy = Arc::new(Policy {
        pd: pd.clone(),
        cq,
        access: AccessFlags::REMOTE_ALL,
        refuse: parking_lot::Mutex::new(None),
        got: parking_lot::Mutex::new(Vec::new()),
        private: parking_lot::Mutex::new(Vec::new()),
        peers: parking_lot::Mutex::new(Vec::new()),
    });
    let listener = mn.listen(policy.clone()).unwrap();
    let cn = fabric.open_device(config());
    let cpd = cn.alloc_pd().unwrap();
    let ccq = cn.create_cq(16).unwrap();
    let buf = cn.alloc_buffer(64).unwrap();
    let mr = cpd.reg_mr(&buf, 0, 64, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = cpd
        .create_qp(QpInit {
            send_cq: &ccq,
            recv_cq: &ccq,
            srq: None,
            max_send_wr: 16,
            max_recv_wr: 16,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(listener.address(), b"").unwrap();

    faults.drop_next(u32::MAX);
    let wr = SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Read {
            local: Sge {
                addr: buf.addr(),
                length: 8,
                lkey: mr.lkey(),
            },
            remote_addr: 0,
            rkey: MemoryKey(0x100),
        },
    };
    qp.post_send(&[wr]).unwrap();
    let timing = QpTiming::default();
    let give_up =
        Duration::from_micros(timing.ack_timeout_us) * (u32::from(timing.retry_count) + 1);
    let mut wc = [empty_wc(); 4];
    while clock.now().since(Timestamp::ZERO) + MS < give_up {
        clock.advance(MS);
        assert_eq!(ccq.poll(&mut wc), 0, "failed at {:?}", clock.now());
    }
    assert_eq!(faults.dropped(), 1 + u64::from(timing.retry_count));
    clock.advance(MS);
    assert_eq!(ccq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RetryExceeded));
    assert_eq!(qp.state(), QpState::Error);
}

#[test]
fn nonsense_timeouts_are_refused_when_the_device_opens() {
    let open = |timeouts| {
        let options = TcpOptions {
            timeouts,
            ..TcpOptions::default()
        };
        TcpNode::open_with(SoftConfig::default(), loopback(), options)
    };
    let d = AdaptiveTimeouts::default();
    let no_budget = AdaptiveTimeouts {
        budget: Duration::ZERO,
        ..d
    };
    let inverted = AdaptiveTimeouts {
        min_rto: d.max_rto * 2,
        ..d
    };
    for bad in [no_budget, inverted] {
        assert!(
            matches!(open(bad), Err(VerbsError::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    assert!(open(d).is_ok());
}
