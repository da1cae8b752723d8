//! What tests and benchmarks use to play a hostile client (built with the `testing` feature).
//!
//! [`RawControl`] is a control connection to a memory node driven with raw verbs: it ignores
//! every rule the client library keeps (credits, one request per slot, receives for replies).
//! It can stay silent (never authenticate), authenticate, and flood the node with a
//! well-formed request — an `Extend` of a permission that does not exist — as fast as its
//! send queue takes it, never posting a receive for the replies.

use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{ControlProtocol, PermissionId, Request, SLOT_SIZE};
use crate::rpc::Protocol;
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryBuffer, MemoryRegion, ProtectionDomain, Provider,
    QpInit, QpState, QpTiming, QueuePair, SendOp, SendWr, Sge, VerbsError, WorkCompletion,
};

/// Offset of the `Hello` in the connection's buffer; the bogus `Extend` follows it.
const HELLO: u64 = 0;
const EXTEND: u64 = SLOT_SIZE as u64;

/// A control connection to shard 0 of a memory node, on raw verbs (see the module docs).
pub struct RawControl<P: Provider> {
    qp: P::Qp,
    cq: P::Cq,
    buf: P::Buffer,
    mr: P::Mr,
    addr: u64,
    depth: u32,
    posted: u64,
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
            max_recv_wr: 1,
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
        let buf = ctx.alloc_buffer(2 * SLOT_SIZE)?;
        let mr = pd.reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        let mut slot = vec![0u8; SLOT_SIZE];
        let hello = Request::Hello {
            tenant: 0,
            secret: 0,
        };
        ControlProtocol::encode_request(1, &hello, &mut slot);
        buf.write(HELLO as usize, &slot)?;
        let bogus = Request::Extend {
            id: PermissionId {
                header_addr: 64,
                start_us: 1,
            },
            lease_us: 1_000,
        };
        ControlProtocol::encode_request(2, &bogus, &mut slot);
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
