//! The requester under each retry policy, on timestamps the test chooses: what is resent on a
//! timeout, when the QP gives up, and which responses feed the RTT estimator.

use super::*;
use crate::soft::link::AdaptiveTimeouts;
use crate::verbs::MemoryKey;

const MS: u64 = 1_000;

fn at_ms(ms: u64) -> Timestamp {
    Timestamp(ms * MS)
}

fn write_op() -> RequestOp<Payload> {
    RequestOp::Write {
        addr: 0,
        rkey: MemoryKey(0x100),
        data: Arc::<[u8]>::from(vec![0u8; 8]),
    }
}

fn spec(wr_id: u64) -> PendingSpec {
    PendingSpec {
        wr_id,
        signaled: true,
        opcode: WcOpcode::Write,
        local: None,
        byte_len: 8,
    }
}

fn stream() -> Requester {
    Requester::with_policy(
        QpNumber(1),
        Psn::new(100),
        QpTiming::default(),
        RetryPolicy::Stream(AdaptiveTimeouts::default()),
    )
}

fn ack(r: &mut Requester, psn: u32, now: Timestamp) -> RequesterAction {
    let mut deliver = |_: &Pending, _: &ResponseKind<Vec<u8>>| WcStatus::Success;
    r.on_response(Psn::new(psn), &ResponseKind::Ack, now, &mut deliver)
}

/// Polls the requester every millisecond after `from` up to (excluding) `until`, as its
/// owner polling a CQ does; returns the PSNs resent and when.
fn run_timers(r: &mut Requester, from: Timestamp, until: Timestamp) -> Vec<(u64, Vec<u32>)> {
    let mut out = Vec::new();
    let mut now = from.plus_us(MS);
    while now < until {
        match r.on_timeout(now) {
            RequesterAction::Retransmit(reqs) => {
                out.push((now.0 / MS, reqs.iter().map(|q| q.psn.value()).collect()));
            }
            RequesterAction::None => {}
            RequesterAction::Fatal => panic!("gave up at {now:?}"),
        }
        now = now.plus_us(MS);
    }
    out
}

fn completions(r: &mut Requester) -> Vec<(u64, WcStatus)> {
    let mut out = Vec::new();
    r.release(QpNumber(2), &mut |wc| out.push((wc.wr_id, wc.status)));
    out
}

#[test]
fn on_a_stream_a_response_after_many_rtos_completes_the_request() {
    let mut r = stream();
    for id in 1..=3 {
        r.push_remote(spec(id), write_op(), at_ms(0));
    }
    // 14.9 s of silence, far past 7 × 16 ms: probes with the oldest request only, at the
    // initial RTO backed off (1, 2, 4, 5, 5 s).
    let probes = run_timers(&mut r, at_ms(0), at_ms(14_900));
    assert_eq!(
        probes,
        [
            (1_000, vec![100]),
            (3_000, vec![100]),
            (7_000, vec![100]),
            (12_000, vec![100])
        ]
    );
    // Then the peer answers all three.
    for psn in 100..=102 {
        assert_eq!(ack(&mut r, psn, at_ms(14_900)), RequesterAction::None);
    }
    assert_eq!(
        completions(&mut r),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(r.deadline(), None);
}

#[test]
fn on_a_stream_silence_fails_the_qp_exactly_at_the_budget() {
    let mut r = stream();
    r.push_remote(spec(1), write_op(), at_ms(0));
    r.push_remote(spec(2), write_op(), at_ms(5));
    run_timers(&mut r, at_ms(0), at_ms(15_000));
    assert_eq!(r.deadline(), Some(at_ms(15_000)));
    // Run a microsecond early, the timer is not due.
    assert_eq!(
        r.on_timeout(Timestamp(15_000 * MS - 1)),
        RequesterAction::None
    );
    assert_eq!(r.on_timeout(at_ms(15_000)), RequesterAction::Fatal);
    assert_eq!(
        completions(&mut r),
        [(1, WcStatus::RetryExceeded), (2, WcStatus::WrFlushError)]
    );
}

#[test]
fn on_a_stream_a_requester_that_was_not_running_looks_once_more_before_giving_up() {
    let mut r = stream();
    r.push_remote(spec(1), write_op(), at_ms(0));
    run_timers(&mut r, at_ms(0), at_ms(2_000));
    // Nothing runs the requester for 20 s (its process stopped); its first run finds the
    // budget spent but gives the response that may be waiting unread one more floor.
    assert_eq!(r.on_timeout(at_ms(22_000)), RequesterAction::None);
    assert_eq!(r.deadline(), Some(at_ms(22_200)));
    // It was: the request completes.
    assert_eq!(ack(&mut r, 100, at_ms(22_001)), RequesterAction::None);
    assert_eq!(completions(&mut r), [(1, WcStatus::Success)]);
    // Had it not been, the QP gives up at the look.
    r.push_remote(spec(2), write_op(), at_ms(30_000));
    assert_eq!(r.on_timeout(at_ms(60_000)), RequesterAction::None);
    assert_eq!(r.on_timeout(at_ms(60_200)), RequesterAction::Fatal);
    assert_eq!(completions(&mut r), [(2, WcStatus::RetryExceeded)]);
}

#[test]
fn on_a_stream_each_response_restarts_the_budget() {
    let mut r = stream();
    r.push_remote(spec(1), write_op(), at_ms(0));
    r.push_remote(spec(2), write_op(), at_ms(0));
    run_timers(&mut r, at_ms(0), at_ms(14_000));
    // The first is answered 14 s in: the second may now wait 15 s more.
    assert_eq!(ack(&mut r, 100, at_ms(14_000)), RequesterAction::None);
    run_timers(&mut r, at_ms(14_000), at_ms(29_000));
    assert_eq!(r.deadline(), Some(at_ms(29_000)));
    assert_eq!(r.on_timeout(at_ms(29_000)), RequesterAction::Fatal);
    assert_eq!(
        completions(&mut r),
        [(1, WcStatus::Success), (2, WcStatus::RetryExceeded)]
    );
}

#[test]
fn the_verbs_policy_resends_everything_and_gives_up_after_retry_count() {
    let timing = QpTiming::default(); // 16 ms, 7 retries
    let mut r = Requester::new(QpNumber(1), Psn::new(100), timing);
    r.push_remote(spec(1), write_op(), at_ms(0));
    r.push_remote(spec(2), write_op(), at_ms(0));
    let resent = run_timers(&mut r, at_ms(0), at_ms(128));
    let expected: Vec<(u64, Vec<u32>)> = (1..=7).map(|k| (16 * k, vec![100, 101])).collect();
    assert_eq!(resent, expected);
    assert_eq!(r.on_timeout(at_ms(128)), RequesterAction::Fatal);
    assert_eq!(
        completions(&mut r),
        [(1, WcStatus::RetryExceeded), (2, WcStatus::WrFlushError)]
    );
}

#[test]
fn karn_no_sample_from_a_retransmitted_request_and_the_backoff_stays() {
    let mut r = stream();
    // A request sent once: its round trip (10 ms) is a sample.
    r.push_remote(spec(1), write_op(), at_ms(0));
    ack(&mut r, 100, at_ms(10));
    let est = *r.ack_timer().estimator().unwrap();
    assert_eq!(est.srtt(), Some(Duration::from_millis(10)));
    assert_eq!(r.ack_timer().rto(), Duration::from_millis(200), "the floor");

    // A request probed once and answered 1 s later: no sample (which transmission was
    // answered is unknown), and the doubled RTO is kept.
    r.push_remote(spec(2), write_op(), at_ms(1_000));
    assert_eq!(
        run_timers(&mut r, at_ms(1_000), at_ms(1_300)),
        [(1_200, vec![101])]
    );
    ack(&mut r, 101, at_ms(2_000));
    let after = *r.ack_timer().estimator().unwrap();
    assert_eq!(
        after.srtt(),
        est.srtt(),
        "no sample from a retransmitted request"
    );
    assert_eq!(after.backoffs(), 1);

    // The doubled RTO (400 ms) times the next requests. A request behind the probed one was
    // sent once: its answer is a sample again, and it ends the backoff.
    r.push_remote(spec(3), write_op(), at_ms(3_000));
    r.push_remote(spec(4), write_op(), at_ms(3_000));
    assert_eq!(
        run_timers(&mut r, at_ms(3_000), at_ms(3_450)),
        [(3_400, vec![102])]
    );
    ack(&mut r, 102, at_ms(3_450));
    assert_eq!(r.ack_timer().estimator().unwrap().backoffs(), 2);
    ack(&mut r, 103, at_ms(3_450));
    let last = *r.ack_timer().estimator().unwrap();
    assert_eq!(last.backoffs(), 0);
    // SRTT = 7/8 · 10 ms + 1/8 · 450 ms.
    assert_eq!(last.srtt(), Some(Duration::from_millis(65)));
}

#[test]
fn an_rnr_wait_resends_everything_on_a_stream_too() {
    let mut r = stream();
    r.push_remote(spec(1), write_op(), at_ms(0));
    r.push_remote(spec(2), write_op(), at_ms(0));
    let mut deliver = |_: &Pending, _: &ResponseKind<Vec<u8>>| WcStatus::Success;
    let rnr = ResponseKind::<Vec<u8>>::Nak(NakCode::ReceiverNotReady);
    assert_eq!(
        r.on_response(Psn::new(100), &rnr, at_ms(1), &mut deliver),
        RequesterAction::None
    );
    let timer = QpTiming::default().rnr_timer_us;
    let due = at_ms(1).plus_us(timer);
    assert_eq!(r.deadline(), Some(due));
    let RequesterAction::Retransmit(reqs) = r.on_timeout(due) else {
        panic!("no resend after the RNR wait");
    };
    let psns: Vec<u32> = reqs.iter().map(|q| q.psn.value()).collect();
    assert_eq!(
        psns,
        [100, 101],
        "the responder dropped what followed the NAKed one"
    );
}

fn unsignaled(wr_id: u64) -> PendingSpec {
    PendingSpec {
        signaled: false,
        ..spec(wr_id)
    }
}

fn released(r: &mut Requester) -> Vec<(u64, WcStatus)> {
    let mut out = Vec::new();
    r.release(QpNumber(2), &mut |wc| out.push((wc.wr_id, wc.status)));
    out
}

#[test]
fn unsignaled_writes_coalesce_their_acks_into_every_nth_request() {
    let mut r = stream();
    r.set_ack_every(4);
    let asked: Vec<bool> = (0..8)
        .map(|i| r.push_remote(unsignaled(i), write_op(), at_ms(0)).ack_req)
        .collect();
    assert_eq!(
        asked,
        [false, false, false, true, false, false, false, true],
        "every fourth asks"
    );
    // A signaled request always asks, and restarts the count.
    assert!(r.push_remote(spec(8), write_op(), at_ms(0)).ack_req);
    assert!(!r.push_remote(unsignaled(9), write_op(), at_ms(0)).ack_req);
    // The ack of the fourth acknowledges the three before it.
    assert_eq!(ack(&mut r, 103, at_ms(1)), RequesterAction::None);
    assert_eq!(
        released(&mut r),
        vec![],
        "unsignaled ones leave without completions"
    );
    assert_eq!(r.in_flight(), 6);
    assert_eq!(ack(&mut r, 107, at_ms(1)), RequesterAction::None);
    assert_eq!(ack(&mut r, 108, at_ms(1)), RequesterAction::None);
    assert_eq!(released(&mut r), vec![(8, WcStatus::Success)]);
    assert_eq!(r.in_flight(), 1, "the last one waits for an ack of its own");
}

#[test]
fn a_read_response_acknowledges_the_unasked_writes_before_it() {
    let mut r = stream();
    r.set_ack_every(16);
    for i in 0..3 {
        assert!(!r.push_remote(unsignaled(i), write_op(), at_ms(0)).ack_req);
    }
    let read = RequestOp::Read {
        addr: 0,
        rkey: MemoryKey(0x100),
        len: 8,
    };
    let read_spec = PendingSpec {
        opcode: WcOpcode::Read,
        ..spec(3)
    };
    assert!(r.push_remote(read_spec, read, at_ms(0)).ack_req);
    let mut deliver = |_: &Pending, _: &ResponseKind<Vec<u8>>| WcStatus::Success;
    let data = ResponseKind::ReadData(vec![0u8; 8]);
    let action = r.on_response(Psn::new(103), &data, at_ms(1), &mut deliver);
    assert_eq!(action, RequesterAction::None);
    assert_eq!(released(&mut r), vec![(3, WcStatus::Success)]);
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn a_response_past_a_request_that_asked_is_still_forged() {
    let mut r = stream();
    r.set_ack_every(16);
    assert!(r.push_remote(spec(0), write_op(), at_ms(0)).ack_req);
    assert!(!r.push_remote(unsignaled(1), write_op(), at_ms(0)).ack_req);
    assert!(r.push_remote(spec(2), write_op(), at_ms(0)).ack_req);
    // PSN 102's ack before 100's own: request 100 asked, so nothing covers it.
    assert_eq!(ack(&mut r, 102, at_ms(1)), RequesterAction::Fatal);
    assert_eq!(
        released(&mut r),
        vec![
            (0, WcStatus::BadResponseError),
            (1, WcStatus::WrFlushError),
            (2, WcStatus::WrFlushError)
        ],
        "flushed requests complete, signaled or not"
    );
}

#[test]
fn a_probe_of_an_unasked_request_asks() {
    let mut r = stream();
    r.set_ack_every(16);
    assert!(!r.push_remote(unsignaled(0), write_op(), at_ms(0)).ack_req);
    // Nothing answers: the first RTO (1 s before any sample) resends it, asking.
    let mut now = at_ms(0);
    let probe = loop {
        now = now.plus_us(MS);
        if let RequesterAction::Retransmit(reqs) = r.on_timeout(now) {
            break reqs;
        }
        assert!(now < at_ms(5_000), "no probe");
    };
    assert_eq!(probe.len(), 1);
    assert!(probe[0].ack_req);
    assert_eq!(ack(&mut r, 100, now), RequesterAction::None);
    assert_eq!(released(&mut r), vec![]);
    assert_eq!(r.in_flight(), 0);
}

#[test]
fn a_probed_unasked_request_is_still_acknowledged_by_a_later_response() {
    let mut r = stream();
    r.set_ack_every(2);
    assert!(!r.push_remote(unsignaled(0), write_op(), at_ms(0)).ack_req);
    assert!(r.push_remote(unsignaled(1), write_op(), at_ms(0)).ack_req);
    // Silence: the first RTO probes the oldest, asking.
    let mut now = at_ms(0);
    loop {
        now = now.plus_us(MS);
        if let RequesterAction::Retransmit(reqs) = r.on_timeout(now) {
            assert_eq!(reqs.len(), 1);
            assert!(reqs[0].ack_req);
            break;
        }
        assert!(now < at_ms(5_000), "no probe");
    }
    // The responder answers the second request (which asked) before the probe.
    assert_eq!(ack(&mut r, 101, now), RequesterAction::None);
    assert_eq!(released(&mut r), vec![]);
    assert_eq!(r.in_flight(), 0);
    // The probe's late answer is a duplicate.
    assert_eq!(ack(&mut r, 100, now), RequesterAction::None);
}
