//! The transport of a control channel's client end: a connected RC QP, its CQ, and the
//! registered slots messages go out of and land in. It sends a request under the id it is
//! given and turns completions into decoded replies; what is owed, retried or given up is its
//! owner's business ([`super::RpcClient`]'s table, or the client library's sans-IO core).
//!
//! Invariants:
//! - Every receive slot is posted at all times but while its message is being read: a
//!   slot that completed is posted again before its bytes are decoded, so a malformed reply
//!   never costs a slot.
//! - A request leaves from send slot `(id / step) % slots`: ids of one channel advance by
//!   `step`, so `slots` consecutive requests never share a send slot.

use super::slots::Slots;
use super::{Protocol, RpcError};
use rnic::{CompletionQueue, Provider, QueuePair, RecvWr, WcOpcode, WcStatus, WorkCompletion};

/// Work-request ids of the channel carry this tag in their top bits, so the channel can share
/// a CQ with other work (the baselines post one-sided ops on the same QP).
const TAG: u64 = 0x52 << 56;
const TAG_MASK: u64 = 0xff << 56;
/// Set on the ids of sends (which complete only when they fail: they are unsignaled).
const SEND: u64 = 1 << 40;

/// What one completion of the channel's CQ was.
#[derive(Debug)]
pub enum Arrival<R> {
    /// Not the channel's work (another user of a shared CQ).
    NotOurs,
    /// The channel's, and nothing to deliver (a send's completion).
    Nothing,
    /// A reply to request `id`.
    Reply(u64, R),
    /// A reply slot that did not decode: dropped (its slot is posted again).
    Malformed,
}

/// The transport of a control channel (see the module docs).
pub struct Link<P: Provider, Pr: Protocol> {
    qp: P::Qp,
    cq: P::Cq,
    /// `slots` receive slots, then `slots` send slots.
    memory: Slots<P>,
    slots: u32,
    /// Ids of this channel advance by this much.
    step: u64,
    scratch: Vec<u8>,
    _protocol: std::marker::PhantomData<fn() -> Pr>,
}

impl<P: Provider, Pr: Protocol> std::fmt::Debug for Link<P, Pr> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("qp", &self.qp.qp_num())
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl<P: Provider, Pr: Protocol> Link<P, Pr> {
    /// Takes over `qp` (connected, its receive completions on `cq`) with `slots` receive
    /// slots posted in memory registered in `pd`.
    pub fn new(
        ctx: &P::Context,
        pd: &P::Pd,
        qp: P::Qp,
        cq: P::Cq,
        slots: u32,
    ) -> Result<Self, RpcError> {
        let slots = slots.max(1);
        let link: Self = Link {
            qp,
            cq,
            memory: Slots::new(ctx, pd, slots, Pr::SLOT_SIZE)?,
            slots,
            step: 1,
            scratch: vec![0; Pr::SLOT_SIZE],
            _protocol: std::marker::PhantomData,
        };
        let wrs: Vec<RecvWr> = (0..slots).map(|s| link.recv_wr(s)).collect();
        link.qp.post_recv(&wrs)?;
        Ok(link)
    }

    /// Ids of this channel advance by `step` from now on (it picks the send slot).
    pub fn set_id_step(&mut self, step: u64) {
        self.step = step.max(1);
    }

    /// Receive slots posted: the most answers the channel may be owed at once.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The QP under the channel.
    pub fn qp(&self) -> &P::Qp {
        &self.qp
    }

    /// The CQ its completions arrive on.
    pub fn cq(&self) -> &P::Cq {
        &self.cq
    }

    /// Arms the CQ (`req_notify`): its next completion raises an event on its channel.
    pub fn arm(&self) {
        self.cq.req_notify();
    }

    fn recv_wr(&self, slot: u32) -> RecvWr {
        self.memory.recv_wr(slot, TAG | slot as u64)
    }

    /// Sends `req` under `id` (unsignaled: it completes only if it fails).
    pub fn send(&mut self, id: u64, req: &Pr::Request) -> Result<(), RpcError> {
        let slot = (id / self.step % self.slots as u64) as u32;
        Pr::encode_request(id, req, &mut self.scratch);
        let len = Pr::wire_len(&self.scratch).min(self.scratch.len());
        self.memory.send(
            &self.qp,
            slot,
            TAG | SEND | slot as u64,
            &self.scratch[..len],
        )?;
        Ok(())
    }

    /// Polls the CQ once and hands every arrival to `on`; returns how many completions it
    /// took. A failed completion means the QP broke ([`RpcError::QpFailed`]); the arrivals
    /// before it were handed out.
    pub fn poll(&mut self, mut on: impl FnMut(Arrival<Pr::Reply>)) -> Result<usize, RpcError> {
        let mut wcs = [WorkCompletion::default(); 16];
        let n = self.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            on(self.arrival(wc)?);
        }
        Ok(n)
    }

    /// Polls the CQ into `wcs` (each to be taken apart with [`Link::arrival`]); how many.
    pub fn poll_completions(&self, wcs: &mut [WorkCompletion]) -> usize {
        self.cq.poll(wcs)
    }

    /// What one completion polled from the channel's CQ is (see [`Link::poll`]).
    pub fn arrival(&mut self, wc: &WorkCompletion) -> Result<Arrival<Pr::Reply>, RpcError> {
        if wc.wr_id & TAG_MASK != TAG {
            return Ok(Arrival::NotOurs);
        }
        if wc.status != WcStatus::Success {
            return Err(RpcError::QpFailed(wc.status));
        }
        if wc.wr_id & SEND != 0 || wc.opcode != WcOpcode::Recv {
            return Ok(Arrival::Nothing);
        }
        let slot = (wc.wr_id & 0xffff_ffff) as u32;
        if slot >= self.slots {
            return Ok(Arrival::Nothing);
        }
        // Only the bytes that arrived: the rest of the slot is an earlier message's.
        let len = (wc.byte_len as usize).min(self.scratch.len());
        let read = self.memory.read(slot, &mut self.scratch[..len]);
        self.qp.post_recv(&[self.recv_wr(slot)])?;
        read?;
        Ok(match Pr::decode_reply(&self.scratch[..len]) {
            Ok((id, reply)) => Arrival::Reply(id, reply),
            Err(_) => Arrival::Malformed,
        })
    }
}
