//! The server end of the control channel: request slots in a shared receive queue (every
//! client's control QP draws from it), a ring of reply slots, and the serving thread's
//! spin-then-park wait (see the module docs of [`super`]).

use super::slots::Slots;
use super::{IdleWait, Protocol, SlotError};
use rnic::{
    CompletionQueue, Context, ProtectionDomain, Provider, QpNumber, RecvWr, SharedReceiveQueue,
    VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use std::time::Duration;

/// Set on the ids of reply sends, to tell them from receives in error reports.
const REPLY: u64 = 1 << 63;

/// A request taken from the shared receive queue.
#[derive(Debug)]
pub struct Incoming<R> {
    /// The control QP it came from.
    pub qp_num: QpNumber,
    /// The request and its id, or why the slot could not be decoded (the server drops it; the
    /// sender's RPC times out).
    pub message: Result<(u64, R), SlotError>,
}

/// The server end of a control channel.
pub struct RpcServer<P: Provider, Pr: Protocol> {
    srq: P::Srq,
    recv_cq: P::Cq,
    send_cq: P::Cq,
    /// `depth` request slots, then `depth` reply slots.
    memory: Slots<P>,
    depth: u32,
    next_reply: u32,
    wcs: Vec<WorkCompletion>,
    scratch: Vec<u8>,
    idle: IdleWait,
    _protocol: std::marker::PhantomData<fn() -> Pr>,
}

impl<P: Provider, Pr: Protocol> std::fmt::Debug for RpcServer<P, Pr> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl<P: Provider, Pr: Protocol> RpcServer<P, Pr> {
    /// A shared receive queue of `depth` request slots in `pd`, with its CQs, taking at most
    /// `max_batch` requests per [`RpcServer::receive`]. Every slot is posted.
    pub fn new(
        ctx: &P::Context,
        pd: &P::Pd,
        depth: u32,
        max_batch: usize,
    ) -> Result<Self, VerbsError> {
        let depth = depth.max(1);
        let srq = pd.create_srq(depth)?;
        let recv_cq = ctx.create_cq(depth * 2)?;
        let send_cq = ctx.create_cq(8192)?;
        let server: Self = RpcServer {
            srq,
            recv_cq,
            send_cq,
            memory: Slots::new(ctx, pd, depth, Pr::SLOT_SIZE)?,
            depth,
            next_reply: 0,
            wcs: vec![WorkCompletion::default(); max_batch.clamp(1, 256)],
            scratch: vec![0; Pr::SLOT_SIZE],
            idle: IdleWait::new(256),
            _protocol: std::marker::PhantomData,
        };
        let wrs: Vec<RecvWr> = (0..depth).map(|s| server.recv_wr(s)).collect();
        server.srq.post_recv(&wrs)?;
        Ok(server)
    }

    /// The shared receive queue control QPs must be created with.
    pub fn srq(&self) -> &P::Srq {
        &self.srq
    }

    /// The CQ of requests (control QPs' receive CQ).
    pub fn recv_cq(&self) -> &P::Cq {
        &self.recv_cq
    }

    /// The CQ of replies (control QPs' send CQ).
    pub fn send_cq(&self) -> &P::Cq {
        &self.send_cq
    }

    fn recv_wr(&self, slot: u32) -> RecvWr {
        self.memory.recv_wr(slot, slot as u64)
    }

    /// Takes the requests that arrived (at most the batch size), reposting their slots, and
    /// appends them to `out`. Returns how many completions were taken (failed receives are
    /// counted but not appended).
    pub fn receive(&mut self, out: &mut Vec<Incoming<Pr::Request>>) -> usize {
        let n = self.recv_cq.poll(&mut self.wcs);
        for i in 0..n {
            let wc = self.wcs[i];
            let slot = wc.wr_id;
            if slot >= self.depth as u64 {
                continue;
            }
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                let len = (wc.byte_len as usize).min(Pr::SLOT_SIZE);
                let message = match self.memory.read(slot as u32, &mut self.scratch[..len]) {
                    Ok(()) => Pr::decode_request(&self.scratch[..len]),
                    Err(_) => Err(SlotError::Truncated {
                        got: 0,
                        want: Pr::SLOT_SIZE,
                    }),
                };
                out.push(Incoming {
                    qp_num: wc.qp_num,
                    message,
                });
            }
            // Cannot fail short of a provider bug: the slot was just taken from the SRQ.
            let _ = self.srq.post_recv(&[self.recv_wr(slot as u32)]);
        }
        if n > 0 {
            self.idle.busy();
        }
        n
    }

    /// Sends the reply to request `req_id` on `qp` from the next reply slot. An error means
    /// the client's QP is broken (it gets no reply; its leases end on their own).
    pub fn reply(&mut self, qp: &P::Qp, req_id: u64, reply: &Pr::Reply) -> Result<(), VerbsError> {
        let slot = self.next_reply;
        self.next_reply = (self.next_reply + 1) % self.depth;
        Pr::encode_reply(req_id, reply, &mut self.scratch);
        self.memory
            .send(qp, slot, REPLY | slot as u64, &self.scratch)
    }

    /// Reaps reply completions (replies are unsignaled, so only failures show). Returns
    /// whether a reply failed: some client's control QP broke.
    pub fn reap_replies(&mut self) -> bool {
        let mut failed = false;
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            let n = self.send_cq.poll(&mut wcs);
            if n == 0 {
                return failed;
            }
            failed |= wcs[..n].iter().any(|wc| wc.status != WcStatus::Success);
        }
    }

    /// Whether the serving thread has spun long enough to sleep at its next idle turn.
    pub fn is_parking(&self) -> bool {
        self.idle.is_parking()
    }

    /// One idle turn of the serving thread: spin, or sleep until a request arrives or `max`
    /// passes. Work noted by [`RpcServer::receive`] (or [`RpcServer::busy`]) restarts the spin.
    pub fn idle(&mut self, max: Duration) {
        self.idle.idle(&self.recv_cq, max);
    }

    /// The serving thread did work other than receiving: the next idle turn spins again.
    pub fn busy(&mut self) {
        self.idle.busy();
    }
}
