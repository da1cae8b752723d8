//! Hole 3: a client flooding the control path with requests (raw verbs, ignoring every rule
//! the client library keeps) slows only itself: each control connection has its own credits
//! (receive slots) at the node, so the flood meets receiver-not-ready on the flooder's QP,
//! never on an honest client's.

use super::*;
use patronus_core::client::ClientConfig;
use patronus_core::cluster::Transport;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::{ControlProtocol, PermissionId, Request, SLOT_SIZE};
use patronus_core::rpc::Protocol;
use rnic::soft::{SoftBuffer, SoftCq, SoftMr, SoftQp};
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpState, QueuePair,
    SendOp, SendWr, Sge, WorkCompletion,
};
use std::time::Duration;
use support::bed::{bed, node_cfg};

/// Requests a flooder has in flight at most (its send queue).
const FLOOD_DEPTH: u32 = 512;

/// A control connection driven with raw verbs: it authenticates, then sends requests as fast
/// as its send queue takes them, and never posts a receive for the replies.
struct Flooder {
    qp: SoftQp,
    cq: SoftCq,
    _buf: SoftBuffer,
    mr: SoftMr,
    addr: u64,
    sent: u64,
}

impl Flooder {
    fn connect(b: &Bed) -> Flooder {
        let ctx = &b.cluster.client_ctxs[0];
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4 * FLOOD_DEPTH).unwrap();
        let qp = raw_control_qp(b, &pd, &cq, FLOOD_DEPTH);
        let buf = ctx.alloc_buffer(2 * SLOT_SIZE).unwrap();
        let mr = pd
            .reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)
            .unwrap();
        let mut slot = vec![0u8; SLOT_SIZE];
        let hello = Request::Hello {
            tenant: 0,
            secret: 0,
        };
        ControlProtocol::encode_request(1, &hello, &mut slot);
        buf.write(0, &slot).unwrap();
        // Then the same well-formed request over and over: an extension of no permission.
        let bogus = Request::Extend {
            id: PermissionId {
                header_addr: 64,
                start_us: 1,
            },
            lease_us: 1_000,
        };
        ControlProtocol::encode_request(2, &bogus, &mut slot);
        buf.write(SLOT_SIZE, &slot).unwrap();
        let addr = buf.addr();
        let mut f = Flooder {
            qp,
            cq,
            _buf: buf,
            mr,
            addr,
            sent: 0,
        };
        f.post(0, 1);
        f
    }

    /// Posts `n` sends of the slot at `offset`, every 64th signaled (to bound the CQ).
    fn post(&mut self, offset: u64, n: u32) -> u32 {
        let mut posted = 0;
        for _ in 0..n {
            self.sent += 1;
            let wr = SendWr {
                wr_id: self.sent,
                signaled: self.sent % 64 == 0,
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
            posted += 1;
        }
        posted
    }

    /// One burst: as many requests as its send queue takes.
    fn burst(&mut self) -> u32 {
        let mut wcs = [WorkCompletion::default(); 64];
        while self.cq.poll(&mut wcs) > 0 {}
        self.post(SLOT_SIZE as u64, FLOOD_DEPTH)
    }

    fn broken(&self) -> bool {
        self.qp.state() == QpState::Error
    }
}

fn flood(t: Transport, iso: Isolation) {
    // (With `limits.control_credits = 0`, the paper's one shared receive queue, the honest
    // client's RPCs time out in the first round: checked when this test was written.)
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let mut flooders: Vec<Flooder> = (0..3).map(|_| Flooder::connect(&b)).collect();
    let mut sent = 0;
    let mut reconnects = 0;
    for round in 0..24 {
        for f in flooders.iter_mut() {
            if f.broken() {
                // Its RNR retries ran out: it comes back on a new connection.
                *f = Flooder::connect(&b);
                reconnects += 1;
            }
            sent += f.burst();
        }
        // The honest client is served in every round of the flood.
        honest_round(&mut b);
        // Time passes (virtual): RNR retries of the flooders' QPs come due.
        b.clock
            .advance(Duration::from_micros(150 + 50 * (round % 3)));
    }
    assert!(
        sent >= 3 * FLOOD_DEPTH,
        "the flooders did flood: {sent} requests posted ({reconnects} reconnects)"
    );
    drop(flooders);
    for _ in 0..4 {
        honest_round(&mut b);
    }
    wait_back_to(&b, start, 0);
}

/// The credits are the honest client's to use: right after connecting (its `Hello` taken
/// before its connection was), it keeps `MAX_OUTSTANDING_RPCS` requests in flight, round after
/// round, and never meets receiver-not-ready.
fn all_credits_in_flight(t: Transport, iso: Isolation) {
    use patronus_core::client::{Client, MAX_OUTSTANDING_RPCS};
    use patronus_core::proto::messages::{Mode, Reply};
    let b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    let ctx = &b.cluster.client_ctxs[0];
    for _ in 0..4 {
        let mut c =
            Client::<SoftProvider>::connect(ctx, b.cluster.node.address(), ClientConfig::default())
                .unwrap();
        for _ in 0..8 {
            let ids: Vec<u64> = (0..MAX_OUTSTANDING_RPCS)
                .map(|_| {
                    c.submit(Request::Allocate {
                        size: 64,
                        lease_us: 100_000,
                        mode: Mode::Shared,
                    })
                    .unwrap()
                })
                .collect();
            let mut granted = Vec::new();
            while granted.len() < ids.len() {
                match c.wait_reply(Duration::from_secs(5)).unwrap() {
                    Some((_, Reply::Granted(g))) => granted.push(g),
                    other => panic!("{other:?}"),
                }
            }
            for g in granted {
                c.submit(Request::Revoke {
                    id: g.id,
                    free: true,
                })
                .unwrap();
                assert_eq!(
                    c.wait_reply(Duration::from_secs(5)).unwrap().map(|r| r.1),
                    Some(Reply::Revoked)
                );
            }
        }
    }
}

every_mode! {
    a_flooding_client_slows_only_itself => flood;
    an_honest_client_may_use_all_its_credits => all_credits_in_flight;
}
