//! The control channel on its own (`core::rpc`) on the in-process soft NIC: a one-number
//! protocol, a variable-length one, and a client connected to a test-controlled server end
//! (the server's shared receive queue; single-threaded: the inline link delivers a send on the
//! sender's thread).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

use parking_lot::Mutex;
use patronus_core::rpc::{
    Incoming, Protocol, RpcClient, RpcServer, SlotError, SlotReader, SlotWriter,
};
use rnic::soft::{
    SoftConfig, SoftCq, SoftFabric, SoftListener, SoftPd, SoftProvider, SoftQp, SoftSrq,
};
use rnic::{AcceptPolicy, AccessFlags, Context, ProtectionDomain, QpInit, QpTiming, QueuePair};
use std::sync::Arc;

/// Requests and replies are one number each.
pub struct Echo;

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

/// Messages of a length of their own: `[id u64][len u64][len bytes]` in slots of 64 bytes,
/// sent at their length. Decoding insists that exactly the message's bytes arrived: a channel
/// that sent the whole slot, or decoded more than what arrived, fails it.
pub struct Varlen;

impl Varlen {
    const HEADER: usize = 16;
}

impl Protocol for Varlen {
    type Request = Vec<u8>;
    type Reply = Vec<u8>;
    const SLOT_SIZE: usize = 64;
    fn encode_request(req_id: u64, req: &Vec<u8>, slot: &mut [u8]) {
        let mut w = SlotWriter::new(slot);
        w.u64(0, req_id);
        w.u64(8, req.len() as u64);
        w.put(Self::HEADER, req);
    }
    fn decode_request(slot: &[u8]) -> Result<(u64, Vec<u8>), SlotError> {
        let r = SlotReader::variable(slot, Self::HEADER, Self::SLOT_SIZE)?;
        let len = r.u64(8)? as usize;
        if r.len() != Self::HEADER + len {
            return Err(SlotError::BadField("bytes received"));
        }
        Ok((r.u64(0)?, r.slice(Self::HEADER, len)?.to_vec()))
    }
    fn encode_reply(req_id: u64, reply: &Vec<u8>, slot: &mut [u8]) {
        Self::encode_request(req_id, reply, slot);
    }
    fn decode_reply(slot: &[u8]) -> Result<(u64, Vec<u8>), SlotError> {
        Self::decode_request(slot)
    }
    fn wire_len(message: &[u8]) -> usize {
        let len = SlotReader::new(message, Self::HEADER).and_then(|r| r.u64(8));
        Self::HEADER + len.map_or(0, |l| l as usize)
    }
}

/// The server end: what a test answers (or forges) with.
pub struct EchoServer<Pr: Protocol = Echo> {
    pub server: RpcServer<SoftProvider, Pr>,
    pub qp: SoftQp,
}

impl<Pr: Protocol> EchoServer<Pr> {
    /// Every request received so far, as (id, value).
    pub fn received(&mut self) -> Vec<(u64, Pr::Request)> {
        let mut got: Vec<Incoming<Pr::Request>> = Vec::new();
        self.server.receive(&mut got, |_| None);
        got.into_iter().map(|m| m.message.unwrap()).collect()
    }

    /// Sends a reply under `id`, whether or not anything was asked under it.
    pub fn answer(&mut self, id: u64, value: Pr::Reply) {
        self.server.reply(&self.qp, id, &value).unwrap();
    }
}

/// A connected client and server end.
pub struct EchoPair<Pr: Protocol = Echo> {
    pub client: RpcClient<SoftProvider, Pr>,
    pub server: EchoServer<Pr>,
    pub listener: SoftListener,
}

struct Accept {
    pd: SoftPd,
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

/// A client with `slots` receive slots connected to a server end (16 request slots).
pub fn echo_pair(slots: u32) -> EchoPair {
    channel_pair(slots)
}

/// A client of protocol `Pr` with `slots` receive slots connected to a server end (16 request
/// slots).
pub fn channel_pair<Pr: Protocol>(slots: u32) -> EchoPair<Pr> {
    let fabric = SoftFabric::new();
    let (mn, cn) = (
        fabric.open_device(SoftConfig::default()),
        fabric.open_device(SoftConfig::default()),
    );
    let mpd = mn.alloc_pd().unwrap();
    let server = RpcServer::<SoftProvider, Pr>::new(&mn, &mpd, 16, 16).unwrap();
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
            max_recv_wr: slots + 1,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(&mn.listener_address(&listener), b"c").unwrap();
    let client = RpcClient::new(&cn, &cpd, qp, cq, slots).unwrap();
    let server_qp = accept.got.lock().clone().unwrap();
    EchoPair {
        client,
        server: EchoServer {
            server,
            qp: server_qp,
        },
        listener,
    }
}
