//! The control-path flooder, on raw verbs: it ignores every rule the client library keeps.
//! Each of its control connections authenticates with a `Hello`, then posts the same
//! well-formed request (an `Extend` of a permission that does not exist) as fast as its send
//! queue takes it, and never posts a receive for the replies. A connection that breaks (its
//! receiver-not-ready retries ran out, or the node cut it off) is replaced by a new one.
//!
//! With per-connection credits the flood meets receiver-not-ready on the flooder's own QPs;
//! with the paper's one shared receive queue it takes the slots the honest client needs.

use super::abusers::Tally;
use anyhow::Result;
use patronus_core::proto::connect::{Intent, Role};
use patronus_core::proto::messages::{ControlProtocol, PermissionId, Request, SLOT_SIZE};
use patronus_core::rpc::Protocol;
use rnic::soft::{SoftAddress, SoftBuffer, SoftChannel, SoftContext, SoftCq, SoftMr, SoftQp};
use rnic::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpInit, QpState, QpTiming, QueuePair, SendOp, SendWr, Sge, WorkCompletion,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Control connections the flooder keeps open.
pub(super) const CONNECTIONS: usize = 3;
/// Requests each has in flight at most (its send queue).
pub(super) const DEPTH: u32 = 512;
/// How long the flooder blocks when no send queue takes more: until a completion, or until
/// its QPs' receiver-not-ready timers (100 µs by default) are due, which only a CQ poll runs.
const IDLE_WAIT: Duration = Duration::from_micros(100);

/// One raw control connection.
struct Connection {
    qp: SoftQp,
    cq: SoftCq,
    _buf: SoftBuffer,
    mr: SoftMr,
    addr: u64,
    posted: u64,
}

impl Connection {
    /// Connects, writes its two requests (the `Hello`, the bogus `Extend`) into a registered
    /// buffer and posts the `Hello`.
    fn open(ctx: &SoftContext, node: &SoftAddress, channel: &SoftChannel) -> Result<Connection> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq_on(4 * DEPTH, channel)?;
        let qp = pd.create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: DEPTH,
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
        buf.write(0, &slot)?;
        let bogus = Request::Extend {
            id: PermissionId {
                header_addr: 64,
                start_us: 1,
            },
            lease_us: 1_000,
        };
        ControlProtocol::encode_request(2, &bogus, &mut slot);
        buf.write(SLOT_SIZE, &slot)?;
        let addr = buf.addr();
        let mut c = Connection {
            qp,
            cq,
            _buf: buf,
            mr,
            addr,
            posted: 0,
        };
        c.post(0, 1);
        Ok(c)
    }

    /// Posts up to `n` sends of the slot at `offset`, every 64th signaled (so the CQ stays
    /// bounded and the flooder learns when its send queue drains); returns how many it took.
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
                break; // its send queue is full (or it broke)
            }
            self.posted += 1;
            taken += 1;
        }
        taken
    }

    /// Takes its completions (which runs its QP's timers) and posts what its send queue takes.
    fn burst(&mut self) -> u32 {
        let mut wcs = [WorkCompletion::default(); 64];
        while self.cq.poll(&mut wcs) > 0 {}
        self.post(SLOT_SIZE as u64, DEPTH)
    }

    fn broken(&self) -> bool {
        self.qp.state() == QpState::Error
    }
}

/// Floods the node's control path from `ctx` until `stop`.
pub(super) fn flood(ctx: &SoftContext, node: &SoftAddress, stop: &AtomicBool) -> Result<Tally> {
    let mut t = Tally::new("requests");
    let channel = ctx.create_channel()?;
    let mut conns: Vec<Option<Connection>> = (0..CONNECTIONS).map(|_| None).collect();
    let (mut opened, mut broke) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let mut posted = 0;
        for slot in conns.iter_mut() {
            if slot.as_ref().is_some_and(Connection::broken) {
                *slot = None;
                broke += 1;
            }
            if slot.is_none() {
                match Connection::open(ctx, node, &channel) {
                    Ok(c) => {
                        *slot = Some(c);
                        opened += 1;
                    }
                    Err(_) => {
                        t.refused += 1; // the node refused the connection (or it failed)
                        continue;
                    }
                }
            }
            if let Some(c) = slot.as_mut() {
                posted += c.burst();
            }
        }
        t.done += u64::from(posted);
        if posted == 0 {
            // Nothing more fits: block until a send completes or the RNR timers are due.
            for c in conns.iter().flatten() {
                c.cq.req_notify();
            }
            channel.wait(IDLE_WAIT);
        }
    }
    t.extra = vec![("connections", opened), ("broken", broke)];
    Ok(t)
}
