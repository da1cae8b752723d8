//! What tests and benchmarks use to play a hostile client (built with the `testing` feature).
//!
//! [`RawControl`] is a control connection to a memory node driven with raw verbs: it ignores
//! every rule the client library keeps (credits, one request per slot, receives for replies).
//! It can stay silent (never authenticate), authenticate, and flood the node with a
//! well-formed request — an `Extend` of a permission that does not exist — as fast as its
//! send queue takes it, never posting a receive for the replies. A *listening* one
//! ([`RawControl::listening_as`]) takes its replies instead: it sends requests of the test's
//! choosing, learns when the node's NIC has them, and counts the replies, so a test can see
//! in what order a backlog is served.

use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{Access, ControlProtocol, Mode, PermissionId, Request, SLOT_SIZE};
use crate::rpc::Protocol;
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryBuffer, MemoryRegion, ProtectionDomain, Provider,
    QpInit, QpState, QpTiming, QueuePair, RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode,
    WorkCompletion,
};

/// Offset of the `Hello` in the connection's buffer; the bogus `Extend` follows it, then a
/// send slot and a reply slot per request in flight.
const HELLO: u64 = 0;
const EXTEND: u64 = SLOT_SIZE as u64;
const SLOTS: u64 = 2 * SLOT_SIZE as u64;

/// Longest a listening connection waits for the node's NIC (its send completions, a reply):
/// the wait is bounded so that a test fails instead of hanging.
const NIC_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// An `Extend` of a permission that does not exist: refused, one unit of its tenant's share
/// of the manager (`manager::node::fair`).
pub fn refused_extend() -> Request {
    Request::Extend {
        id: PermissionId {
            header_addr: 64,
            start_us: 1,
        },
        lease_us: 1_000,
    }
}

/// An `Acquire` of an object that does not exist: refused, but charged to its tenant as a
/// permission change (four units).
pub fn refused_acquire() -> Request {
    Request::Acquire {
        addr: 64,
        size: 64,
        lease_us: 1_000,
        access: Access::Read,
        mode: Mode::Shared,
        wait_us: 0,
    }
}

/// A control connection to shard 0 of a memory node, on raw verbs (see the module docs).
pub struct RawControl<P: Provider> {
    qp: P::Qp,
    cq: P::Cq,
    buf: P::Buffer,
    mr: P::Mr,
    addr: u64,
    depth: u32,
    posted: u64,
    /// Signaled sends whose completion has not been taken.
    unacknowledged: u64,
    /// Replies taken (listening connections).
    replies: u64,
}

impl<P: Provider> std::fmt::Debug for RawControl<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawControl")
            .field("posted", &self.posted)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> RawControl<P> {
    /// Connects a control QP with room for `depth` sends in flight (its CQ on `channel`, if
    /// given), and nothing else: it has not authenticated.
    pub fn connect(
        ctx: &P::Context,
        node: &P::Address,
        channel: Option<&P::Channel>,
        depth: u32,
    ) -> Result<Self, VerbsError> {
        let pd = ctx.alloc_pd()?;
        let cq = match channel {
            Some(ch) => ctx.create_cq_on(4 * depth, ch)?,
            None => ctx.create_cq(4 * depth)?,
        };
        let qp = pd.create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: depth,
            max_recv_wr: depth,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })?;
        let intent = Intent {
            role: Role::Control,
            client_id: 0,
            secret: 0,
            slot: 0,
        };
        qp.connect(node, &intent.encode())?;
        let buf = ctx.alloc_buffer((2 + 2 * depth as usize) * SLOT_SIZE)?;
        let mr = pd.reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        let mut slot = vec![0u8; SLOT_SIZE];
        let hello = Request::Hello {
            tenant: 0,
            secret: 0,
        };
        ControlProtocol::encode_request(1, &hello, &mut slot);
        buf.write(HELLO as usize, &slot)?;
        ControlProtocol::encode_request(2, &refused_extend(), &mut slot);
        buf.write(EXTEND as usize, &slot)?;
        let addr = buf.addr();
        Ok(RawControl {
            qp,
            cq,
            buf,
            mr,
            addr,
            depth,
            posted: 0,
            unacknowledged: 0,
            replies: 0,
        })
    }

    /// Connects and authenticates as the default tenant (the `Hello` is sent; its reply is
    /// never taken).
    pub fn authenticated(
        ctx: &P::Context,
        node: &P::Address,
        channel: Option<&P::Channel>,
        depth: u32,
    ) -> Result<Self, VerbsError> {
        Self::authenticated_as(ctx, node, channel, depth, 0, 0)
    }

    /// Connects and authenticates as `tenant` with `secret` (the `Hello` is sent; its reply
    /// is never taken).
    pub fn authenticated_as(
        ctx: &P::Context,
        node: &P::Address,
        channel: Option<&P::Channel>,
        depth: u32,
        tenant: u32,
        secret: u64,
    ) -> Result<Self, VerbsError> {
        let c = Self::connect(ctx, node, channel, depth)?;
        let mut slot = vec![0u8; SLOT_SIZE];
        ControlProtocol::encode_request(1, &Request::Hello { tenant, secret }, &mut slot);
        c.buf.write(HELLO as usize, &slot)?;
        let mut c = c;
        c.post(HELLO, 1);
        Ok(c)
    }

    /// Connects with a receive posted for each of `depth` replies, and says nothing: it has
    /// not authenticated (what it sends is refused, and answered).
    pub fn listening(ctx: &P::Context, node: &P::Address, depth: u32) -> Result<Self, VerbsError> {
        let mut c = Self::connect(ctx, node, None, depth)?;
        for i in 0..depth {
            c.post_reply_slot(i)?;
        }
        Ok(c)
    }

    /// A [`listening`](Self::listening) connection authenticated as `tenant` with `secret`:
    /// it waits for the `Hello`'s reply (the node must be serving), which it does not count.
    pub fn listening_as(
        ctx: &P::Context,
        node: &P::Address,
        depth: u32,
        tenant: u32,
        secret: u64,
    ) -> Result<Self, VerbsError> {
        let mut c = Self::listening(ctx, node, depth)?;
        c.send(&Request::Hello { tenant, secret })?;
        c.await_replies(1)?;
        c.replies = 0;
        Ok(c)
    }

    /// Sends `request` (numbered after the ones before) from a slot of its own; a listening
    /// connection's way to ask. At most `depth` may wait for their replies.
    pub fn send(&mut self, request: &Request) -> Result<(), VerbsError> {
        let mut slot = vec![0u8; SLOT_SIZE];
        let req_id = self.posted + 1;
        ControlProtocol::encode_request(req_id, request, &mut slot);
        let offset = SLOTS + (self.posted % u64::from(self.depth)) * SLOT_SIZE as u64;
        self.buf.write(offset as usize, &slot)?;
        let wr = SendWr {
            wr_id: req_id,
            signaled: true,
            op: SendOp::Send {
                local: Some(Sge {
                    addr: self.addr + offset,
                    length: SLOT_SIZE as u32,
                    lkey: self.mr.lkey(),
                }),
            },
        };
        self.qp
            .post_send(std::slice::from_ref(&wr))
            .map_err(|(_, e)| e)?;
        self.posted += 1;
        self.unacknowledged += 1;
        Ok(())
    }

    /// Waits until the node's NIC has acknowledged every request sent so far (each sits in a
    /// receive slot at the node), taking the replies that arrive meanwhile.
    pub fn await_delivered(&mut self) -> Result<(), VerbsError> {
        self.poll_until(|c| c.unacknowledged == 0)
    }

    /// Waits until `n` replies in all have arrived since the `Hello`'s.
    pub fn await_replies(&mut self, n: u64) -> Result<(), VerbsError> {
        self.poll_until(|c| c.replies >= n)
    }

    /// Replies taken so far (after the `Hello`'s), after taking what has arrived.
    pub fn replies(&mut self) -> Result<u64, VerbsError> {
        self.take_completions()?;
        Ok(self.replies)
    }

    #[allow(clippy::disallowed_methods)] // a bound on a wait for another thread's NIC work
    fn poll_until(&mut self, done: impl Fn(&Self) -> bool) -> Result<(), VerbsError> {
        let deadline = std::time::Instant::now() + NIC_BOUND;
        while !done(self) {
            self.take_completions()?;
            if done(self) {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(VerbsError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the node's NIC did not answer in time",
                )));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Takes every completion: a send's counts it acknowledged, a reply's is counted and its
    /// receive posted again. A failed one is the QP's error.
    fn take_completions(&mut self) -> Result<(), VerbsError> {
        let mut wcs = [WorkCompletion::default(); 64];
        loop {
            let n = self.cq.poll(&mut wcs);
            if n == 0 {
                return Ok(());
            }
            for wc in &wcs[..n] {
                if !wc.status.is_success() {
                    return Err(VerbsError::Protocol(format!(
                        "work request {} completed with {:?}",
                        wc.wr_id, wc.status
                    )));
                }
                if wc.opcode == WcOpcode::Recv {
                    self.replies += 1;
                    self.post_reply_slot((wc.wr_id % u64::from(self.depth)) as u32)?;
                } else {
                    self.unacknowledged = self.unacknowledged.saturating_sub(1);
                }
            }
        }
    }

    /// Posts the receive of reply slot `i`.
    fn post_reply_slot(&mut self, i: u32) -> Result<(), VerbsError> {
        let offset = SLOTS + (u64::from(self.depth) + u64::from(i)) * SLOT_SIZE as u64;
        let wr = RecvWr {
            wr_id: u64::from(i) + u64::from(self.depth) * (self.replies + 1),
            sge: Some(Sge {
                addr: self.addr + offset,
                length: SLOT_SIZE as u32,
                lkey: self.mr.lkey(),
            }),
        };
        self.qp.post_recv(std::slice::from_ref(&wr))
    }

    /// One burst of the flood: takes its completions (which runs its QP's timers), then posts
    /// the bogus request as often as its send queue takes it. Returns how many it posted.
    pub fn burst(&mut self) -> u32 {
        let mut wcs = [WorkCompletion::default(); 64];
        while self.cq.poll(&mut wcs) > 0 {}
        self.post(EXTEND, self.depth)
    }

    /// Whether its QP broke (its receiver-not-ready retries ran out, or the node cut it off).
    pub fn broken(&self) -> bool {
        self.qp.state() == QpState::Error
    }

    /// Its CQ (to arm before sleeping on its channel).
    pub fn cq(&self) -> &P::Cq {
        &self.cq
    }

    /// Posts up to `n` sends of the slot at `offset`, every 64th signaled (so the CQ stays
    /// bounded and the sender learns when its send queue drains); returns how many it took.
    fn post(&mut self, offset: u64, n: u32) -> u32 {
        let mut taken = 0;
        for _ in 0..n {
            let wr = SendWr {
                wr_id: self.posted + 1,
                signaled: (self.posted + 1) % 64 == 0,
                op: SendOp::Send {
                    local: Some(Sge {
                        addr: self.addr + offset,
                        length: SLOT_SIZE as u32,
                        lkey: self.mr.lkey(),
                    }),
                },
            };
            if self.qp.post_send(std::slice::from_ref(&wr)).is_err() {
                break; // its send queue is full (or it broke): that is its own problem
            }
            self.posted += 1;
            taken += 1;
        }
        taken
    }
}
