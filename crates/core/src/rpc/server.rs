//! The server end of the control channel: request slots, a ring of reply slots, and the
//! serving thread's spin-then-park wait (see the module docs of [`super`]).
//!
//! Requests land in one of two ways:
//! - **Shared** ([`RpcServer::new`]): one shared receive queue every connection draws from
//!   (the paper's design: the fewest slots). A client that sends faster than the server
//!   drains takes slots from everyone: the others meet receiver-not-ready and, past their
//!   retries, lose their QP.
//! - **Credits** ([`RpcServer::with_credits`]): each connection gets its own block of
//!   `credits` slots posted on its own receive queue ([`ConnectionSlots`]), reposted as its
//!   requests are taken. A connection that sends more than its credits meets
//!   receiver-not-ready on its own QP only: the NIC enforces the flow control, whatever the
//!   client runs. A well-behaved client never has more requests unanswered than its credits.

use super::slots::Slots;
use super::{IdleWait, Protocol, SlotError, Stopwatch};
use parking_lot::Mutex;
use rnic::{
    CompletionQueue, Context, ProtectionDomain, Provider, QpNumber, QueuePair, RecvWr,
    SharedReceiveQueue, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::Arc;
use std::time::Duration;

/// Set on the ids of reply sends, to tell them from receives in error reports.
const REPLY: u64 = 1 << 63;
/// The longest a serving thread spins without work before it sleeps on its CQ.
pub const SPIN_BUDGET: Duration = Duration::from_micros(50);

/// A request taken from the shared receive queue.
#[derive(Debug)]
pub struct Incoming<R> {
    /// The control QP it came from.
    pub qp_num: QpNumber,
    /// The request and its id, or why the slot could not be decoded (the server drops it; the
    /// sender's RPC times out).
    pub message: Result<(u64, R), SlotError>,
}

/// The request slots of a server with credits: a block of `credits` slots per connection.
/// Cloning shares them (the accept path attaches connections, the serving thread reposts and
/// releases).
pub struct ConnectionSlots<P: Provider> {
    inner: Arc<BlocksInner<P>>,
}

struct BlocksInner<P: Provider> {
    memory: Arc<Slots<P>>,
    credits: u32,
    blocks: u32,
    /// Blocks not attached to a connection.
    free: Mutex<Vec<u32>>,
}

impl<P: Provider> Clone for ConnectionSlots<P> {
    fn clone(&self) -> Self {
        ConnectionSlots {
            inner: self.inner.clone(),
        }
    }
}

impl<P: Provider> std::fmt::Debug for ConnectionSlots<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSlots")
            .field("credits", &self.inner.credits)
            .field("free_blocks", &self.inner.free.lock().len())
            .finish()
    }
}

impl<P: Provider> ConnectionSlots<P> {
    /// Requests a connection may have in flight.
    pub fn credits(&self) -> u32 {
        self.inner.credits
    }

    /// Blocks not attached to a connection.
    pub fn available(&self) -> usize {
        self.inner.free.lock().len()
    }

    /// Blocks attached to connections.
    pub fn attached(&self) -> usize {
        self.inner.blocks as usize - self.available()
    }

    /// Gives `qp` (created without a shared receive queue, with room for `credits` receives)
    /// a block and posts its slots on it; returns the block (release it with
    /// [`release`](Self::release) once the QP is broken off). `None`: no block is free, or the
    /// QP refused the receives.
    pub fn attach(&self, qp: &P::Qp) -> Option<u32> {
        let block = self.inner.free.lock().pop()?;
        let first = block * self.inner.credits;
        let wrs: Vec<RecvWr> = (first..first + self.inner.credits)
            .map(|slot| self.inner.memory.recv_wr(slot, slot as u64))
            .collect();
        if qp.post_recv(&wrs).is_err() {
            self.inner.free.lock().push(block);
            return None;
        }
        Some(block)
    }

    /// Returns a block whose connection is broken off (its QP in the error state, so nothing
    /// lands in the block any more).
    pub fn release(&self, block: u32) {
        self.inner.free.lock().push(block);
    }
}

/// Where requests land.
enum Receives<P: Provider> {
    Shared(P::Srq),
    Credits(ConnectionSlots<P>),
}

/// The server end of a control channel.
pub struct RpcServer<P: Provider, Pr: Protocol> {
    receives: Receives<P>,
    recv_cq: P::Cq,
    send_cq: P::Cq,
    /// `depth` request slots, then `depth` reply slots.
    memory: Arc<Slots<P>>,
    depth: u32,
    next_reply: u32,
    /// Credit mode: slots taken whose connection was not known yet when they were (it had not
    /// been taken up by the serving thread), to repost once it is.
    deferred: Vec<(QpNumber, u32)>,
    wcs: Vec<WorkCompletion>,
    scratch: Vec<u8>,
    idle: IdleWait,
    /// Times the NIC calls (CQ polls, posts) when armed ([`RpcServer::time_nic_calls`]).
    nic_calls: Stopwatch,
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
        let server = Self::build(ctx, pd, depth, max_batch, |_| Receives::Shared(srq))?;
        let wrs: Vec<RecvWr> = (0..depth).map(|s| server.recv_wr(s)).collect();
        if let Receives::Shared(srq) = &server.receives {
            srq.post_recv(&wrs)?;
        }
        Ok(server)
    }

    /// A server with `credits` request slots for each of at most `connections` connections
    /// (each attached with [`connection_slots`](Self::connection_slots)), taking at most
    /// `max_batch` requests per [`RpcServer::receive`].
    pub fn with_credits(
        ctx: &P::Context,
        pd: &P::Pd,
        connections: u32,
        credits: u32,
        max_batch: usize,
    ) -> Result<Self, VerbsError> {
        let (connections, credits) = (connections.max(1), credits.max(1));
        let depth = connections
            .checked_mul(credits)
            .ok_or(VerbsError::InvalidArgument("too many control slots"))?;
        Self::build(ctx, pd, depth, max_batch, |memory| {
            Receives::Credits(ConnectionSlots {
                inner: Arc::new(BlocksInner {
                    memory,
                    credits,
                    blocks: connections,
                    free: Mutex::new((0..connections).rev().collect()),
                }),
            })
        })
    }

    fn build(
        ctx: &P::Context,
        pd: &P::Pd,
        depth: u32,
        max_batch: usize,
        receives: impl FnOnce(Arc<Slots<P>>) -> Receives<P>,
    ) -> Result<Self, VerbsError> {
        // Room for every slot's completion, twice where the device allows (flushes of a
        // closing connection's receives come on top of live ones); a node whose slots alone
        // exceed the device's completion queue is refused at start, not left to overflow it.
        let max_cqe = ctx.query_device().max_cqe;
        if depth > max_cqe {
            return Err(VerbsError::InvalidArgument(
                "control slots (max connections x credits) exceed the device's completion-queue \
                 entries: lower limits.max_connections",
            ));
        }
        let recv_cq = ctx.create_cq(depth.saturating_mul(2).min(max_cqe))?;
        let send_cq = ctx.create_cq(8192)?;
        let memory = Arc::new(Slots::new(ctx, pd, depth, Pr::SLOT_SIZE)?);
        Ok(RpcServer {
            receives: receives(memory.clone()),
            recv_cq,
            send_cq,
            memory,
            depth,
            next_reply: 0,
            deferred: Vec::new(),
            wcs: vec![WorkCompletion::default(); max_batch.clamp(1, 256)],
            scratch: vec![0; Pr::SLOT_SIZE],
            // 256 turns are ~25 µs in-process; over TCP each turn reads sockets, and the
            // budget ends the spin there after as long.
            idle: IdleWait::with_budget(256, SPIN_BUDGET),
            nic_calls: Stopwatch::default(),
            _protocol: std::marker::PhantomData,
        })
    }

    /// The shared receive queue connections must be created with (shared mode).
    pub fn srq(&self) -> Option<&P::Srq> {
        match &self.receives {
            Receives::Shared(srq) => Some(srq),
            Receives::Credits(_) => None,
        }
    }

    /// The per-connection slots to attach connections to (credit mode).
    pub fn connection_slots(&self) -> Option<&ConnectionSlots<P>> {
        match &self.receives {
            Receives::Shared(_) => None,
            Receives::Credits(slots) => Some(slots),
        }
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

    /// Most completions one [`receive`](Self::receive) takes (the batch size, at most 256).
    pub fn poll_capacity(&self) -> usize {
        self.wcs.len()
    }

    /// Takes the requests that arrived (at most [`poll_capacity`](Self::poll_capacity)),
    /// reposting their slots, and appends them to `out`. Returns how many completions were
    /// taken (failed receives are counted but not appended). With credits, a slot goes back to
    /// the QP `qp_of` names for the request's QP number (none: the connection is being broken
    /// off, and its block is released with it).
    pub fn receive<'q>(
        &mut self,
        out: &mut Vec<Incoming<Pr::Request>>,
        qp_of: impl Fn(QpNumber) -> Option<&'q P::Qp>,
    ) -> usize
    where
        P::Qp: 'q,
    {
        let (cq, wcs) = (&self.recv_cq, &mut self.wcs);
        let n = self.nic_calls.time(|| cq.poll(wcs));
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
            let wr = self.recv_wr(slot as u32);
            let watch = &mut self.nic_calls;
            match &self.receives {
                // Cannot fail short of a provider bug: the slot was just taken from the SRQ.
                Receives::Shared(srq) => {
                    let _ = watch.time(|| srq.post_recv(&[wr]));
                }
                // A flushed receive (its QP broke) is not reposted; nor is a slot whose QP
                // failed to take it back (it is broken: the block goes with the connection).
                // A connection not known yet gets its slot back once it is (`repost_deferred`).
                Receives::Credits(_) if wc.status == WcStatus::Success => match qp_of(wc.qp_num) {
                    Some(qp) => {
                        let _ = watch.time(|| qp.post_recv(&[wr]));
                    }
                    None => self.deferred.push((wc.qp_num, slot as u32)),
                },
                Receives::Credits(_) => {}
            }
        }
        if n > 0 {
            self.idle.busy();
        }
        n
    }

    /// Credit mode: reposts the slots [`receive`](Self::receive) took from connections not
    /// known then, for those `qp_of` knows now.
    pub fn repost_deferred<'q>(&mut self, qp_of: impl Fn(QpNumber) -> Option<&'q P::Qp>)
    where
        P::Qp: 'q,
    {
        if self.deferred.is_empty() {
            return;
        }
        let memory = &self.memory;
        self.deferred.retain(|&(qpn, slot)| match qp_of(qpn) {
            Some(qp) => {
                let _ = qp.post_recv(&[memory.recv_wr(slot, slot as u64)]);
                false
            }
            None => true,
        });
    }

    /// Credit mode: a connection's block comes back (its QP is broken off: nothing lands in
    /// it any more); slots of it waiting to be reposted are dropped.
    pub fn release(&mut self, block: u32) {
        let Receives::Credits(slots) = &self.receives else {
            return;
        };
        let credits = slots.credits();
        let range = block * credits..(block + 1) * credits;
        self.deferred.retain(|(_, slot)| !range.contains(slot));
        slots.release(block);
    }

    /// Sends the reply to request `req_id` on `qp` from the next reply slot. An error means
    /// the client's QP is broken (it gets no reply; its leases end on their own).
    pub fn reply(&mut self, qp: &P::Qp, req_id: u64, reply: &Pr::Reply) -> Result<(), VerbsError> {
        let slot = self.next_reply;
        self.next_reply = (self.next_reply + 1) % self.depth;
        Pr::encode_reply(req_id, reply, &mut self.scratch);
        let len = Pr::wire_len(&self.scratch).min(self.scratch.len());
        let bytes = &self.scratch[..len];
        let watch = &mut self.nic_calls;
        self.memory
            .send_timed(qp, slot, REPLY | slot as u64, bytes, watch)
    }

    /// Starts (`true`) or stops timing this server's NIC calls: polling the receive CQ,
    /// reposting request slots, posting replies. A serving thread arms it for a sample of its
    /// turns (each timed call reads the clock twice).
    pub fn time_nic_calls(&mut self, on: bool) {
        self.nic_calls.arm(on);
    }

    /// Wall time spent in NIC calls while timed, since the last call (resets it).
    pub fn take_nic_time(&mut self) -> Duration {
        self.nic_calls.take()
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

    /// How long idle turns spin before the thread sleeps (at most 256 turns; zero: it sleeps
    /// at the first idle turn). [`SPIN_BUDGET`] unless set.
    pub fn set_idle_spin(&mut self, budget: Duration) {
        self.idle = if budget.is_zero() {
            IdleWait::new(0)
        } else {
            IdleWait::with_budget(256, budget)
        };
    }

    /// Notes the time of an idle turn (the spin ends once it has lasted `SPIN_BUDGET`).
    pub fn note_idle_time(&mut self, now: rnic::Timestamp) {
        self.idle.note_time(now);
    }

    /// The serving thread did work other than receiving: the next idle turn spins again.
    pub fn busy(&mut self) {
        self.idle.busy();
    }
}
