//! The control channel on its own (`core::rpc`), on the in-process soft NIC, single-threaded:
//! the inline link delivers a send on the sender's thread, so each step is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::rpc::{RpcClient, RpcError};
use rnic::soft::SoftProvider;
use std::time::Duration;
use support::echo::{Echo, EchoServer, Varlen, channel_pair, echo_pair};

/// A connected client (4 receive slots) and server.
struct Pair {
    client: RpcClient<SoftProvider, Echo>,
    server: EchoServer,
    _listener: rnic::soft::SoftListener,
}

fn pair() -> Pair {
    let p = echo_pair(4);
    Pair {
        client: p.client,
        server: p.server,
        _listener: p.listener,
    }
}

impl Pair {
    /// Every request the server has received, as (id, value).
    fn received(&mut self) -> Vec<(u64, u64)> {
        self.server.received()
    }

    fn answer(&mut self, id: u64, value: u64) {
        self.server.answer(id, value);
    }
}

#[test]
fn a_call_is_answered_and_ids_advance() {
    let mut p = pair();
    let a = p.client.submit(7).unwrap();
    let b = p.client.submit(8).unwrap();
    assert_eq!(p.received(), vec![(a, 7), (b, 8)]);
    p.answer(b, 80);
    p.answer(a, 70);
    // Answers are taken by id, whatever order they arrived in.
    assert_eq!(p.client.wait(a, Duration::from_secs(5), false).unwrap(), 70);
    assert_eq!(p.client.wait(b, Duration::from_secs(5), false).unwrap(), 80);
    assert_eq!(p.client.poll().unwrap(), None);
}

#[test]
fn a_retried_request_is_delivered_once() {
    let mut p = pair();
    let id = p.client.submit(1).unwrap();
    p.client.resend(id).unwrap();
    assert_eq!(
        p.received(),
        vec![(id, 1), (id, 1)],
        "both copies reach the server"
    );
    p.answer(id, 10);
    p.answer(id, 10);
    assert_eq!(p.client.poll().unwrap(), Some((id, 10)));
    assert_eq!(
        p.client.poll().unwrap(),
        None,
        "the retry's answer is dropped"
    );
    assert!(p.client.take_orphans().is_empty());
}

#[test]
fn a_late_answer_to_an_abandoned_request_is_an_orphan_once() {
    let mut p = pair();
    let id = p.client.submit(5).unwrap();
    p.client.resend(id).unwrap();
    p.client.abandon(id);
    assert_eq!(p.received().len(), 2);
    p.answer(id, 50);
    p.answer(id, 50);
    assert_eq!(p.client.poll().unwrap(), None, "nobody waits for it");
    let orphans = p.client.take_orphans();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(
        (orphans[0].req_id, orphans[0].request, orphans[0].reply),
        (id, 5, 50)
    );
    assert!(p.client.take_orphans().is_empty());
}

#[test]
fn no_more_requests_than_receive_slots_are_outstanding() {
    let mut p = pair();
    let ids: Vec<u64> = (0..4).map(|v| p.client.submit(v).unwrap()).collect();
    assert!(matches!(p.client.submit(9), Err(RpcError::Busy)));
    assert!(matches!(p.client.resend(ids[0]), Err(RpcError::Busy)));
    assert_eq!(p.received().len(), 4);
    p.answer(ids[0], 0);
    assert_eq!(p.client.poll().unwrap(), Some((ids[0], 0)));
    assert!(p.client.submit(9).is_ok(), "an answer frees its slot");
}

/// A blocking call behind pipelined requests that fill every slot (another user of the
/// channel has them in flight) waits for their answers to free a slot, instead of failing
/// `Busy`; the answers it takes in stay for their own polls. Failed before: a RACE insert
/// of one of three logical clients sharing a connection failed "too many outstanding
/// control requests" while another's split kept its classification acquires in flight.
#[test]
fn a_call_behind_pipelined_requests_waits_for_a_slot() {
    let mut p = pair();
    let ids: Vec<u64> = (0..4).map(|v| p.client.submit(v).unwrap()).collect();
    for (id, v) in p.received() {
        p.answer(id, v + 100);
    }
    // No answer for the call itself: it times out, but only after it went out.
    let r = p.client.call(7, Duration::from_millis(20), false);
    assert!(matches!(r, Err(RpcError::Timeout)), "{r:?}");
    assert_eq!(
        p.received().into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        vec![7]
    );
    let mut got = Vec::new();
    while let Some(x) = p.client.poll().unwrap() {
        got.push(x);
    }
    got.sort_unstable();
    let want: Vec<(u64, u64)> = ids.iter().zip(100..).map(|(&id, v)| (id, v)).collect();
    assert_eq!(got, want);
}

#[test]
fn disjoint_id_spaces_for_several_channels() {
    let mut p = pair();
    p.client.use_ids(3, 4);
    let ids: Vec<u64> = (0..3).map(|v| p.client.submit(v).unwrap()).collect();
    assert_eq!(ids, vec![3, 7, 11]);
    let got: Vec<u64> = p.received().into_iter().map(|(id, _)| id).collect();
    assert_eq!(got, ids);
}

#[test]
fn a_timed_out_call_reports_timeout_and_hands_out_its_late_answer() {
    let mut p = pair();
    let r = p.client.call(3, Duration::from_millis(20), false);
    assert!(matches!(r, Err(RpcError::Timeout)), "{r:?}");
    let (id, v) = p.received()[0];
    p.answer(id, v * 10);
    p.client.poll_cq().unwrap();
    let orphans = p.client.take_orphans();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].reply, 30);
}

#[test]
fn a_channel_whose_every_slot_waits_for_a_lost_answer_is_wedged() {
    let mut p = pair();
    let ids: Vec<u64> = (0..4).map(|v| p.client.submit(v).unwrap()).collect();
    // Given up on, one by one: while any is still waited for, the channel is merely busy.
    for &id in &ids[..3] {
        p.client.abandon(id);
    }
    assert!(matches!(p.client.submit(9), Err(RpcError::Busy)));
    p.client.abandon(ids[3]);
    // Every slot waits for an answer nobody will send: the channel must be replaced.
    assert!(matches!(p.client.submit(9), Err(RpcError::Wedged)));
    // An answer after all frees its slot (handed out as an orphan).
    p.answer(ids[0], 0);
    p.client.poll_cq().unwrap();
    assert_eq!(p.client.take_orphans().len(), 1);
    assert!(p.client.submit(9).is_ok());
}

#[test]
fn a_short_message_goes_on_the_wire_at_its_length() {
    let mut p = channel_pair::<Varlen>(4);
    // A long message first, so its bytes are left behind in the slots the short ones reuse.
    let long = vec![0xaa; 40];
    let id = p.client.submit(long.clone()).unwrap();
    assert_eq!(p.server.received(), vec![(id, long.clone())]);
    p.server.answer(id, long.clone());
    assert_eq!(
        p.client.wait(id, Duration::from_secs(5), false).unwrap(),
        long
    );
    // Each end decodes exactly what was sent (`Varlen` refuses a message of any other length):
    // short ones, and one of a header only, in both directions, over every slot.
    for round in 0..8u8 {
        let short = vec![round; usize::from(round % 3)];
        let id = p.client.submit(short.clone()).unwrap();
        assert_eq!(p.server.received(), vec![(id, short.clone())], "{round}");
        p.server.answer(id, vec![round ^ 0xff; 1]);
        assert_eq!(
            p.client.wait(id, Duration::from_secs(5), false).unwrap(),
            vec![round ^ 0xff],
            "{round}"
        );
    }
    assert_eq!(p.client.stray_replies(), 0, "no reply failed to decode");
}
