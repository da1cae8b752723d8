//! The control channel on its own (`core::rpc`), on the in-process soft NIC, single-threaded:
//! the inline link delivers a send on the sender's thread, so each step is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

use parking_lot::Mutex;
use patronus_core::rpc::{
    Incoming, Protocol, RpcClient, RpcError, RpcServer, SlotError, SlotReader, SlotWriter,
};
use rnic::soft::{SoftConfig, SoftCq, SoftFabric, SoftProvider, SoftQp, SoftSrq};
use rnic::{AcceptPolicy, AccessFlags, Context, ProtectionDomain, QpInit, QpTiming, QueuePair};
use std::sync::Arc;
use std::time::Duration;

/// Requests and replies are one number each.
struct Echo;

impl Protocol for Echo {
    type Request = u64;
    type Reply = u64;
    const SLOT_SIZE: usize = 16;
    fn encode_request(req_id: u64, req: &u64, slot: &mut [u8]) {
        let mut w = SlotWriter::new(slot);
        w.u64(0, req_id);
        w.u64(8, *req);
    }
    fn decode_request(slot: &[u8]) -> Result<(u64, u64), SlotError> {
        let r = SlotReader::new(slot, 16)?;
        Ok((r.u64(0)?, r.u64(8)?))
    }
    fn encode_reply(req_id: u64, reply: &u64, slot: &mut [u8]) {
        Self::encode_request(req_id, reply, slot);
    }
    fn decode_reply(slot: &[u8]) -> Result<(u64, u64), SlotError> {
        Self::decode_request(slot)
    }
}

struct Accept {
    pd: rnic::soft::SoftPd,
    srq: SoftSrq,
    send_cq: SoftCq,
    recv_cq: SoftCq,
    got: Mutex<Option<SoftQp>>,
}

impl AcceptPolicy<SoftProvider> for Accept {
    fn create_qp(&self, _: &[u8]) -> Result<SoftQp, String> {
        self.pd
            .create_qp(QpInit {
                send_cq: &self.send_cq,
                recv_cq: &self.recv_cq,
                srq: Some(&self.srq),
                max_send_wr: 64,
                max_recv_wr: 1,
                access: AccessFlags::empty(),
                timing: QpTiming::default(),
            })
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _: &[u8]) {
        *self.got.lock() = Some(qp);
    }
}

struct Pair {
    client: RpcClient<SoftProvider, Echo>,
    server: RpcServer<SoftProvider, Echo>,
    server_qp: SoftQp,
    _listener: rnic::soft::SoftListener,
}

/// A connected client (4 receive slots) and server.
fn pair() -> Pair {
    let fabric = SoftFabric::new();
    let (mn, cn) = (
        fabric.open_device(SoftConfig::default()),
        fabric.open_device(SoftConfig::default()),
    );
    let mpd = mn.alloc_pd().unwrap();
    let server = RpcServer::<SoftProvider, Echo>::new(&mn, &mpd, 16, 16).unwrap();
    let accept = Arc::new(Accept {
        pd: mpd.clone(),
        srq: server.srq().unwrap().clone(),
        send_cq: server.send_cq().clone(),
        recv_cq: server.recv_cq().clone(),
        got: Mutex::new(None),
    });
    let listener = mn.listen(accept.clone()).unwrap();
    let cpd = cn.alloc_pd().unwrap();
    let cq = cn.create_cq(64).unwrap();
    let qp = cpd
        .create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 8,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(&mn.listener_address(&listener), b"c").unwrap();
    let client = RpcClient::new(&cn, &cpd, qp, cq, 4).unwrap();
    let server_qp = accept.got.lock().clone().unwrap();
    Pair {
        client,
        server,
        server_qp,
        _listener: listener,
    }
}

impl Pair {
    /// Every request the server has received, as (id, value).
    fn received(&mut self) -> Vec<(u64, u64)> {
        let mut got: Vec<Incoming<u64>> = Vec::new();
        self.server.receive(&mut got, |_| None);
        got.into_iter().map(|m| m.message.unwrap()).collect()
    }

    fn answer(&mut self, id: u64, value: u64) {
        self.server.reply(&self.server_qp, id, &value).unwrap();
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
