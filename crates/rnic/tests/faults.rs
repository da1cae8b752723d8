//! Transport faults on the in-process fabric, deterministic: a seeded [`QueuedNetwork`] on a
//! [`VirtualClock`], stepped explicitly, with every packet recorded by a [`PacketTrace`]. Each
//! test asserts completion statuses and QP states (and, where it says something, the wire).
//!
//! Forged packets are crafted against the sans-IO requester/responder cores running on the
//! memory node's real protection table: the in-process links expose no injection point into a
//! live connection (reordering below produces a genuine out-of-sequence PSN on a live QP).

// Test code: rule and helper functions outside `#[test]` fns may panic on setup failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/beds.rs"]
mod beds;
#[path = "conformance/harness.rs"]
mod harness;

use harness::*;
use rnic::soft::link::queued::{Faults, QueuedNetwork};
use rnic::soft::link::tracing::PacketTrace;
use rnic::soft::qp::requester::{PendingSpec, Requester, RequesterAction};
use rnic::soft::qp::responder::{RecvSource, ResponderCtx, ResponderState};
use rnic::soft::wire::{NakCode, Packet, Request, RequestOp, ResponseKind};
use rnic::soft::{LinkMode, SoftContext, SoftFabric, SoftProvider};
use rnic::{
    AccessFlags, AsyncEvent, Clock, MemoryBuffer, MemoryKey, ProtectionDomain, Psn, QpNumber,
    QpState, QpTiming, QueuePair, RecvWr, SendOp, Timestamp, VirtualClock, WcOpcode, WcStatus,
};
use std::sync::Arc;
use std::time::Duration;

type P = SoftProvider;

const R: AccessFlags = AccessFlags::REMOTE_READ;
const W: AccessFlags = AccessFlags::REMOTE_WRITE;
const A: AccessFlags = AccessFlags::REMOTE_ATOMIC;
const OFF: usize = 8192;

/// The queued fabric with a trace; faults are set per test.
#[derive(Debug)]
struct FaultBed {
    clock: Arc<VirtualClock>,
    net: Arc<QueuedNetwork>,
    trace: Arc<PacketTrace>,
    mn: SoftContext,
    cn: SoftContext,
}

impl TestBed<P> for FaultBed {
    fn open(opts: BedOptions) -> Self {
        let clock = VirtualClock::new();
        let net = QueuedNetwork::new(clock.clone(), 0xfa17);
        let trace = PacketTrace::new();
        let fabric = SoftFabric::with_mode(LinkMode::Queued(net.clone()), Some(trace.clone()));
        let mn = fabric.open_device(beds::soft_config(&opts, clock.clone(), 11));
        let cn = fabric.open_device(beds::soft_config(&opts, clock.clone(), 12));
        FaultBed {
            clock,
            net,
            trace,
            mn,
            cn,
        }
    }
    fn mn(&self) -> &SoftContext {
        &self.mn
    }
    fn cn(&self) -> &SoftContext {
        &self.cn
    }
    fn drive(&self) {
        self.net.step(self.clock.now());
    }
    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
    fn virtual_time(&self) -> bool {
        true
    }
}

type FW = World<P, FaultBed>;

/// Ack timeout of the client QPs in these tests.
const ACK_US: u64 = 1_000;

fn timing(retry_count: u8) -> QpTiming {
    QpTiming {
        ack_timeout_us: ACK_US,
        retry_count,
        rnr_timer_us: 200,
        rnr_retry: 3,
    }
}

/// A connection whose client retransmits after `ACK_US` up to `retries` times.
fn conn(w: &FW, retries: u8) -> Conn<P> {
    w.connect_with(ConnOpts {
        client_timing: Some(timing(retries)),
        ..ConnOpts::default()
    })
}

fn set_faults(w: &FW, faults: Faults) {
    w.bed.net.set_faults(faults);
}

/// Requests recorded on the wire so far, as (PSN, is-FAA) pairs.
fn requests(w: &FW) -> Vec<Psn> {
    w.bed
        .trace
        .snapshot()
        .into_iter()
        .filter_map(|p| match p {
            Packet::Request(r) => Some(r.psn),
            Packet::Response(_) => None,
        })
        .collect()
}

/// Responses recorded on the wire so far.
fn responses(w: &FW) -> Vec<(Psn, ResponseKind)> {
    w.bed
        .trace
        .snapshot()
        .into_iter()
        .filter_map(|p| match p {
            Packet::Response(r) => Some((r.psn, r.kind)),
            Packet::Request(_) => None,
        })
        .collect()
}

/// Delay: nothing completes until the network is stepped past the delay of the request and
/// then of the response.
#[test]
fn delay_completes_after_stepping_past_it() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let data = w.fill_mn(OFF, 64, 1);
    set_faults(
        &w,
        Faults {
            delay_us: (300, 300),
            ..Faults::default()
        },
    );
    conn.post(&[wr::<P>(1, op_read::<P>(w.csge(0, 64), w.maddr(OFF), rkey))]);
    assert!(poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty());
    w.bed.advance(Duration::from_micros(299));
    assert!(
        poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty(),
        "request not due yet"
    );
    w.bed.advance(Duration::from_micros(1));
    assert!(
        poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty(),
        "response still in flight"
    );
    assert_eq!(responses(&w).len(), 1, "the responder answered at t=300");
    w.bed.advance(Duration::from_micros(299));
    assert!(poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty());
    w.bed.advance(Duration::from_micros(1));
    let wcs = poll_now::<P, FaultBed>(&w.bed, &conn.ccq);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
    assert_eq!(w.cn_bytes(0, 64), data);
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    assert_eq!(
        requests(&w).len(),
        1,
        "no retransmission within the ack timeout"
    );
}

/// A link delivers in order: a request sent under a smaller delay waits behind one sent
/// earlier under a larger delay (it would otherwise reach the responder first, out of
/// sequence, and close the connection; only the reorder fault reorders).
#[test]
fn a_smaller_delay_never_overtakes_a_larger_one() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    w.fill_mn(OFF, 64, 1);
    set_faults(
        &w,
        Faults {
            delay_us: (300, 300),
            ..Faults::default()
        },
    );
    conn.post(&[wr::<P>(1, op_read::<P>(w.csge(0, 32), w.maddr(OFF), rkey))]);
    set_faults(&w, Faults::default());
    conn.post(&[wr::<P>(
        2,
        op_read::<P>(w.csge(32, 32), w.maddr(OFF + 32), rkey),
    )]);
    let wcs = wait_completions_advancing::<P, FaultBed>(
        &w.bed,
        &conn.ccq,
        2,
        Some(Duration::from_micros(100)),
    );
    let got: Vec<_> = wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let reqs = requests(&w);
    assert!(
        reqs.len() == 2 && reqs[0] != reqs[1],
        "two requests, neither sent again: {reqs:?}"
    );
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
}

/// A delay longer than the ack timeout causes a retransmission; the duplicate is answered from
/// the replay cache, the operation executes once.
#[test]
fn delay_beyond_ack_timeout_executes_once() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W | A);
    w.mbuf.store_u64(OFF, 10).unwrap();
    set_faults(
        &w,
        Faults {
            delay_us: (1_500, 1_500),
            ..Faults::default()
        },
    );
    conn.post(&[wr::<P>(1, op_faa::<P>(w.csge(0, 8), w.maddr(OFF), rkey, 5))]);
    let wc = wait_completions_advancing::<P, FaultBed>(
        &w.bed,
        &conn.ccq,
        1,
        Some(Duration::from_micros(100)),
    )[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(w.cbuf.load_u64(0).unwrap(), 10);
    assert_eq!(
        w.mbuf.load_u64(OFF).unwrap(),
        15,
        "the FAA executed exactly once"
    );
    let reqs = requests(&w);
    assert!(reqs.len() >= 2, "expected a retransmission, wire: {reqs:?}");
    assert!(
        reqs.iter().all(|p| *p == reqs[0]),
        "all copies carry the same PSN"
    );
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
}

/// A dropped request is retransmitted after the ack timeout and then succeeds.
#[test]
fn dropped_request_is_retransmitted() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let data = w.fill_cn(0, 32, 2);
    set_faults(
        &w,
        Faults {
            drop_next: 1,
            ..Faults::default()
        },
    );
    conn.post(&[wr::<P>(1, op_write::<P>(w.csge(0, 32), w.maddr(OFF), rkey))]);
    assert!(poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty());
    assert_eq!(w.bed.net.counters().1, 1, "one packet dropped");
    w.bed.advance(Duration::from_micros(ACK_US - 1));
    assert!(
        poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty(),
        "no retransmission before the timeout"
    );
    assert_eq!(requests(&w).len(), 1);
    w.bed.advance(Duration::from_micros(1));
    // This poll retransmits; the next drive delivers and answers.
    assert!(poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty());
    let wc = wait_completions::<P, FaultBed>(&w.bed, &conn.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(w.mn_bytes(OFF, 32), data);
    let reqs = requests(&w);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0], reqs[1], "the retransmission carries the same PSN");
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
}

/// With every packet dropped the requester retransmits `retry_count` times, then completes
/// `RetryExceeded`, flushes the rest, enters ERR and raises `QpFatal`.
#[test]
fn drop_everything_retry_exceeded() {
    let w = FW::new();
    let retries = 3;
    let conn = conn(&w, retries);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    set_faults(
        &w,
        Faults {
            drop_probability: 1.0,
            ..Faults::default()
        },
    );
    let start = w.bed.clock.now();
    conn.post(&[
        wr::<P>(1, op_read::<P>(w.csge(0, 8), w.maddr(OFF), rkey)),
        wr_unsignaled::<P>(2, op_read::<P>(w.csge(8, 8), w.maddr(OFF), rkey)),
    ]);
    let wcs = wait_completions_advancing::<P, FaultBed>(
        &w.bed,
        &conn.ccq,
        2,
        Some(Duration::from_micros(ACK_US / 4)),
    );
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RetryExceeded), (2, WcStatus::WrFlushError)]
    );
    assert_eq!(conn.cqp.state(), QpState::Error);
    wait_event::<P, FaultBed>(&w.bed, w.cn(), AsyncEvent::QpFatal(conn.cqp.qp_num()));
    let elapsed = w.bed.clock.now().since(start);
    assert!(
        elapsed >= Duration::from_micros(ACK_US * (u64::from(retries) + 1)),
        "gave up after {elapsed:?}"
    );
    // The original transmission plus `retries` retransmissions of both requests.
    assert_eq!(requests(&w).len(), 2 * (1 + usize::from(retries)));
    assert_eq!(
        conn.sqp.state(),
        QpState::ReadyToSend,
        "the responder never heard anything"
    );
}

/// Reordering: a later request overtakes an earlier one; the responder sees a PSN gap (links
/// are reliable and ordered, so a gap means a broken connection) and both QPs close with an
/// error; nothing executes.
#[test]
fn reorder_closes_the_connection() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let before = w.fill_mn(OFF, 64, 3);
    w.fill_cn(0, 64, 4);
    set_faults(
        &w,
        Faults {
            reorder_probability: 1.0,
            ..Faults::default()
        },
    );
    conn.post(&[
        wr::<P>(1, op_write::<P>(w.csge(0, 32), w.maddr(OFF), rkey)),
        wr::<P>(2, op_write::<P>(w.csge(32, 32), w.maddr(OFF + 32), rkey)),
    ]);
    let wcs = wait_completions::<P, FaultBed>(&w.bed, &conn.ccq, 2);
    assert_ne!(
        wcs[0].status,
        WcStatus::Success,
        "first completion: {:?}",
        wcs[0]
    );
    assert_ne!(
        wcs[0].status,
        WcStatus::WrFlushError,
        "an error, not just a flush"
    );
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushError));
    assert_eq!(conn.cqp.state(), QpState::Error);
    assert_eq!(conn.sqp.state(), QpState::Error);
    wait_event::<P, FaultBed>(&w.bed, w.mn(), AsyncEvent::QpFatal(conn.sqp.qp_num()));
    assert_eq!(
        w.mn_bytes(OFF, 64),
        before,
        "an out-of-sequence request must not execute"
    );
    let naks: Vec<_> = responses(&w)
        .into_iter()
        .filter(|(_, k)| *k == ResponseKind::Nak(NakCode::PsnSequenceError))
        .collect();
    assert_eq!(naks.len(), 1, "the responder NAKs the gap");
}

/// Kill: the link goes down under an outstanding request — the oldest request completes
/// `RetryExceeded`, the rest flush, both ends get `QpFatal`, later posts flush.
#[test]
fn killed_link_fails_and_flushes() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    set_faults(
        &w,
        Faults {
            delay_us: (100, 100),
            ..Faults::default()
        },
    );
    conn.post(&[
        wr::<P>(1, op_read::<P>(w.csge(0, 8), w.maddr(OFF), rkey)),
        wr::<P>(2, op_read::<P>(w.csge(8, 8), w.maddr(OFF), rkey)),
    ]);
    w.bed.net.kill_all();
    let wcs = wait_completions::<P, FaultBed>(&w.bed, &conn.ccq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RetryExceeded), (2, WcStatus::WrFlushError)]
    );
    assert_eq!(conn.cqp.state(), QpState::Error);
    wait_state::<P, FaultBed>(&w.bed, &conn.sqp, QpState::Error, "server QP");
    wait_event::<P, FaultBed>(&w.bed, w.cn(), AsyncEvent::QpFatal(conn.cqp.qp_num()));
    wait_event::<P, FaultBed>(&w.bed, w.mn(), AsyncEvent::QpFatal(conn.sqp.qp_num()));
    conn.post(&[wr::<P>(3, op_read::<P>(w.csge(0, 8), w.maddr(OFF), rkey))]);
    let wc = wait_completions::<P, FaultBed>(&w.bed, &conn.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::WrFlushError));
}

/// A link that dies under a response: the FAA executed, but its response is lost with the
/// connection, so the requester can only report `RetryExceeded` — the outcome is unknown to it.
/// Connections with nothing in flight stay up.
#[test]
fn link_dying_under_a_response_leaves_the_outcome_unknown() {
    let w = FW::new();
    let victim = conn(&w, 7);
    let bystander = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W | A);
    set_faults(
        &w,
        Faults {
            delay_us: (100, 100),
            ..Faults::default()
        },
    );
    victim.post(&[wr::<P>(1, op_faa::<P>(w.csge(0, 8), w.maddr(OFF), rkey, 1))]);
    w.bed.advance(Duration::from_micros(100));
    w.bed.drive(); // the request arrives and executes; its response is on the wire
    assert_eq!(w.mbuf.load_u64(OFF).unwrap(), 1, "executed");
    assert_eq!(
        w.bed.net.kill_in_flight(),
        1,
        "only the victim's link had a packet"
    );
    let wc = wait_completions::<P, FaultBed>(&w.bed, &victim.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RetryExceeded));
    assert_eq!(victim.cqp.state(), QpState::Error);
    set_faults(&w, Faults::default());
    bystander.post(&[wr::<P>(2, op_read::<P>(w.csge(8, 8), w.maddr(OFF), rkey))]);
    let wc = wait_completions::<P, FaultBed>(&w.bed, &bystander.ccq, 1)[0];
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    assert_eq!(w.cbuf.load_u64(8).unwrap(), 1, "added exactly once");
}

/// Duplicate request: the response is lost, the requester retransmits, the responder replays
/// its cached response without executing again — an FAA adds once and the requester sees the
/// original value.
#[test]
fn duplicate_request_replayed_not_reexecuted() {
    let w = FW::new();
    let conn = conn(&w, 7);
    let (_mw, rkey) = w.window1(OFF, 64, R | W | A);
    w.mbuf.store_u64(OFF, 100).unwrap();
    conn.post(&[wr::<P>(1, op_faa::<P>(w.csge(0, 8), w.maddr(OFF), rkey, 1))]);
    // The request is queued; the next packet transmitted is the response: drop it.
    set_faults(
        &w,
        Faults {
            drop_next: 1,
            ..Faults::default()
        },
    );
    assert!(poll_now::<P, FaultBed>(&w.bed, &conn.ccq).is_empty());
    assert_eq!(w.mbuf.load_u64(OFF).unwrap(), 101, "executed once");
    assert_eq!(w.bed.net.counters().1, 1, "the response was dropped");
    w.bed.advance(Duration::from_micros(ACK_US));
    let wc = wait_completions::<P, FaultBed>(&w.bed, &conn.ccq, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(
        w.cbuf.load_u64(0).unwrap(),
        100,
        "the replayed response carries the original value"
    );
    assert_eq!(
        w.mbuf.load_u64(OFF).unwrap(),
        101,
        "the duplicate did not add again"
    );
    let reqs = requests(&w);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0], reqs[1]);
    let resps = responses(&w);
    assert_eq!(resps.len(), 2, "original (dropped) and replayed response");
    assert_eq!(resps[0], resps[1], "the replay is the original response");
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
}

/// RNR retries on the wire: with no receive posted, the SEND goes out `1 + rnr_retry` times,
/// each answered by an RNR NAK, and then fails with `RnrRetryExceeded`.
#[test]
fn rnr_retries_counted_on_the_wire() {
    let w = FW::new();
    let conn = conn(&w, 7);
    conn.post(&[wr::<P>(
        1,
        SendOp::Send {
            local: Some(w.csge(0, 8)),
        },
    )]);
    let wc = wait_completions_advancing::<P, FaultBed>(
        &w.bed,
        &conn.ccq,
        1,
        Some(Duration::from_micros(50)),
    )[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RnrRetryExceeded));
    let rnr = responses(&w)
        .into_iter()
        .filter(|(_, k)| *k == ResponseKind::Nak(NakCode::ReceiverNotReady))
        .count();
    assert_eq!(rnr, 1 + 3, "one RNR NAK per attempt");
    assert_eq!(requests(&w).len(), 1 + 3);
    assert_eq!(conn.cqp.state(), QpState::Error);
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
}

// ---------------------------------------------------------------------------------------------
// Forged packets, against the sans-IO cores and the MN's real protection table.

struct Recvs(Vec<RecvWr>);
impl RecvSource for Recvs {
    fn take(&mut self) -> Option<RecvWr> {
        if self.0.is_empty() {
            None
        } else {
            Some(self.0.remove(0))
        }
    }
    fn next_capacity(&mut self) -> Option<usize> {
        self.0
            .first()
            .map(|r| r.sge.map_or(0, |s| s.length as usize))
    }
}

fn ctx<'a>(w: &'a FW, qpn: QpNumber) -> ResponderCtx<'a> {
    ResponderCtx {
        mpt: w.mn().protection_table(),
        pd: w.mpd.id(),
        qpn,
        qp_access: AccessFlags::REMOTE_ALL,
        max_msg: 1 << 20,
    }
}

fn write_req(qpn: QpNumber, psn: Psn, addr: u64, rkey: MemoryKey, data: &[u8]) -> Request {
    Request {
        dst_qp: qpn,
        psn,
        op: RequestOp::Write {
            addr,
            rkey,
            data: data.to_vec(),
        },
        ack_req: true,
    }
}

/// A forged request with a PSN ahead of the expected one (ReDMArk A1 with a guessed PSN) is a
/// sequence error: NAK, `QpFatal`, nothing executes, even with a valid rkey.
#[test]
fn forged_out_of_sequence_psn_closes_the_qp() {
    let w = FW::new();
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let before = w.fill_mn(OFF, 64, 5);
    let qpn = QpNumber(0x1234);
    let start = Psn::new(0x00ff_fff0);
    let mut responder = ResponderState::new(start);
    let forged = write_req(qpn, start.add(7), w.maddr(OFF), rkey, &[0xaa; 16]);
    let out = responder.handle(&ctx(&w, qpn), &forged, &mut Recvs(Vec::new()));
    assert_eq!(
        out.response,
        Some((start.add(7), ResponseKind::Nak(NakCode::PsnSequenceError)))
    );
    assert_eq!(out.error, Some(AsyncEvent::QpFatal(qpn)));
    assert_eq!(w.mn_bytes(OFF, 64), before);
    assert_eq!(responder.expected_psn(), start, "the sequence did not move");
}

/// ReDMArk A2: one forged packet at the right PSN with a wrong rkey NAKs with a remote access
/// error and moves the victim's QP to ERR; memory is untouched.
#[test]
fn forged_bad_rkey_packet_kills_the_qp() {
    let w = FW::new();
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let before = w.fill_mn(OFF, 64, 6);
    let qpn = QpNumber(77);
    let start = Psn::new(5);
    let mut responder = ResponderState::new(start);
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    let out = responder.handle(
        &ctx(&w, qpn),
        &write_req(qpn, start, w.maddr(OFF), wrong, &[1; 8]),
        &mut Recvs(Vec::new()),
    );
    assert_eq!(
        out.response,
        Some((start, ResponseKind::Nak(NakCode::RemoteAccessError)))
    );
    assert_eq!(out.error, Some(AsyncEvent::QpAccessError(qpn)));
    assert_eq!(w.mn_bytes(OFF, 64), before);
}

/// ReDMArk A1: an injected packet with the right PSN and rkey executes (no authentication,
/// V8), and the victim's own packet with that PSN is then treated as a duplicate: answered
/// from the replay cache, not executed.
#[test]
fn injected_valid_packet_makes_victims_a_duplicate() {
    let w = FW::new();
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    w.fill_mn(OFF, 64, 7);
    let qpn = QpNumber(78);
    let start = Psn::new(9);
    let mut responder = ResponderState::new(start);
    let c = ctx(&w, qpn);
    let out = responder.handle(
        &c,
        &write_req(qpn, start, w.maddr(OFF), rkey, b"attacker"),
        &mut Recvs(Vec::new()),
    );
    assert_eq!(out.response, Some((start, ResponseKind::Ack)));
    assert_eq!(out.error, None);
    assert_eq!(w.mn_bytes(OFF, 8), b"attacker");
    let out = responder.handle(
        &c,
        &write_req(qpn, start, w.maddr(OFF), rkey, b"victim!!"),
        &mut Recvs(Vec::new()),
    );
    assert_eq!(
        out.response,
        Some((start, ResponseKind::Ack)),
        "the victim gets the replayed ack"
    );
    assert_eq!(
        w.mn_bytes(OFF, 8),
        b"attacker",
        "the victim's write was swallowed as a duplicate"
    );
    assert_eq!(responder.expected_psn(), start.next());
}

/// A WRITE without AckReq executes without an acknowledgement of its own (the next one covers
/// it); a duplicate of it is still answered from the replay cache; an access error is NAKed
/// whatever the request asked.
#[test]
fn a_write_without_ack_req_is_executed_silently_and_replayed_when_probed() {
    let w = FW::new();
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    w.fill_mn(OFF, 64, 3);
    let qpn = QpNumber(79);
    let start = Psn::new(20);
    let mut responder = ResponderState::new(start);
    let c = ctx(&w, qpn);
    let mut quiet = write_req(qpn, start, w.maddr(OFF), rkey, b"coalesce");
    quiet.ack_req = false;
    let out = responder.handle(&c, &quiet, &mut Recvs(Vec::new()));
    assert_eq!(out.response, None);
    assert_eq!(out.error, None);
    assert_eq!(w.mn_bytes(OFF, 8), b"coalesce");
    let mut probe = quiet.clone();
    probe.ack_req = true;
    let out = responder.handle(&c, &probe, &mut Recvs(Vec::new()));
    assert_eq!(out.response, Some((start, ResponseKind::Ack)));
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    let mut bad = write_req(qpn, start.next(), w.maddr(OFF), wrong, &[1; 8]);
    bad.ack_req = false;
    let out = responder.handle(&c, &bad, &mut Recvs(Vec::new()));
    assert_eq!(
        out.response,
        Some((start.next(), ResponseKind::Nak(NakCode::RemoteAccessError)))
    );
    assert_eq!(w.mn_bytes(OFF, 8), b"coalesce");
}

/// A forged response for a PSN not yet due closes the requester with `BadResponseError` and
/// flushes everything behind it.
#[test]
fn forged_response_closes_the_requester() {
    let start = Psn::new(0x00ff_fffe);
    let mut req = Requester::new(QpNumber(1), start, timing(7));
    let spec = |id| PendingSpec {
        wr_id: id,
        signaled: true,
        opcode: WcOpcode::Write,
        local: None,
        byte_len: 8,
    };
    let now = Timestamp::ZERO;
    let op = || RequestOp::Write {
        addr: 0,
        rkey: MemoryKey(0x100),
        data: Arc::<[u8]>::from(vec![0u8; 8]),
    };
    req.push_remote(spec(1), op(), now);
    req.push_remote(spec(2), op(), now);
    let mut deliver = |_: &_, _: &ResponseKind<Vec<u8>>| WcStatus::Success;
    let action = req.on_response(start.add(1), &ResponseKind::Ack, now, &mut deliver);
    assert_eq!(action, RequesterAction::Fatal);
    let mut out = Vec::new();
    req.release(QpNumber(2), &mut |wc| out.push((wc.wr_id, wc.status)));
    assert_eq!(
        out,
        vec![(1, WcStatus::BadResponseError), (2, WcStatus::WrFlushError)]
    );
    // A late duplicate of an answered PSN, by contrast, is ignored.
    let mut req = Requester::new(QpNumber(1), start, timing(7));
    req.push_remote(spec(3), op(), now);
    assert_eq!(
        req.on_response(start, &ResponseKind::Ack, now, &mut deliver),
        RequesterAction::None
    );
    assert_eq!(
        req.on_response(start, &ResponseKind::Ack, now, &mut deliver),
        RequesterAction::None
    );
    let mut out = Vec::new();
    req.release(QpNumber(2), &mut |wc| out.push((wc.wr_id, wc.status)));
    assert_eq!(out, vec![(3, WcStatus::Success)]);
}

/// What the TCP link asks before it buffers a large payload (`ResponderState::admit`, from the
/// request's header alone) agrees with executing the whole request: whenever it decides, it
/// decides what execution would (same response, same error, same next PSN), and it leaves to
/// execution only WRITEs that pass every check their header can tell.
#[test]
fn deciding_from_the_header_agrees_with_executing() {
    use rnic::soft::wire::PayloadLen;
    let w = FW::new();
    let (_mw, rkey) = w.window1(OFF, 64, R | W);
    let qpn = QpNumber(91);
    let start = Psn::new(40);
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    let cases: Vec<(&str, Request, bool)> = vec![
        (
            "in the window",
            write_req(qpn, start, w.maddr(OFF), rkey, &[1; 64]),
            false,
        ),
        (
            "past the window",
            write_req(qpn, start, w.maddr(OFF), rkey, &[1; 65]),
            true,
        ),
        (
            "wrong key",
            write_req(qpn, start, w.maddr(OFF), wrong, &[1; 8]),
            true,
        ),
        (
            "out of sequence",
            write_req(qpn, start.add(3), w.maddr(OFF), rkey, &[1; 8]),
            true,
        ),
        (
            "duplicate",
            write_req(qpn, Psn::new(39), w.maddr(OFF), rkey, &[1; 8]),
            true,
        ),
        (
            "SEND, no receive",
            Request {
                dst_qp: qpn,
                psn: start,
                op: RequestOp::Send {
                    data: vec![2; 32],
                    invalidate: None,
                },
                ack_req: true,
            },
            true,
        ),
        (
            "SEND longer than the receive of 16",
            Request {
                dst_qp: qpn,
                psn: start,
                op: RequestOp::Send {
                    data: vec![2; 32],
                    invalidate: None,
                },
                ack_req: true,
            },
            true,
        ),
        (
            "SEND within the receive of 16",
            Request {
                dst_qp: qpn,
                psn: start,
                op: RequestOp::Send {
                    data: vec![2; 16],
                    invalidate: None,
                },
                ack_req: true,
            },
            false,
        ),
    ];
    for (what, req, decided) in cases {
        let head: Request<PayloadLen> = Request {
            dst_qp: req.dst_qp,
            psn: req.psn,
            op: req.op.map_data(|d| PayloadLen(d.len())),
            ack_req: req.ack_req,
        };
        let mut by_head = ResponderState::new(start);
        let mut whole = ResponderState::new(start);
        let ctx = ctx(&w, qpn);
        // One receive of 16 bytes posted.
        let recvs = || {
            Recvs(vec![RecvWr {
                wr_id: 3,
                sge: Some(rnic::Sge {
                    addr: w.maddr(OFF),
                    length: 16,
                    lkey: rnic::MemoryRegion::lkey(&w.mmr),
                }),
            }])
        };
        let none = || Recvs(Vec::new());
        let (mut a, mut b) = if what.contains("receive of") {
            (recvs(), recvs())
        } else {
            (none(), none())
        };
        match by_head.admit(&ctx, &head, &mut a) {
            None => assert!(!decided, "{what}: left to execution"),
            Some(out) => {
                assert!(decided, "{what}: decided from the header");
                let full = whole.handle(&ctx, &req, &mut b);
                assert_eq!(
                    (out.response, out.error),
                    (full.response, full.error),
                    "{what}"
                );
                assert_eq!(
                    out.recv_completion.map(|wc| (wc.wr_id, wc.status)),
                    full.recv_completion.map(|wc| (wc.wr_id, wc.status)),
                    "{what}"
                );
                assert_eq!(by_head.expected_psn(), whole.expected_psn(), "{what}");
            }
        }
    }
}
