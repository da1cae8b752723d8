//! Two users on one physical data QP, played by hand against an in-process memory node: one
//! user's forged access breaks the QP; the other user's op, flushed behind it, is filed with
//! the refusal as its cause (so it never ran and is safe to run again); the first report
//! promotes a spare, the second finds the lane replaced; the worker recovers the broken QP
//! and the spare comes back.

use super::config::ClientConfig;
use super::driver::Client;
use super::qps::{Routed, SwitchKind, tagged};
use crate::manager::{Isolation, MemoryNode, NodeConfig};
use crate::proto::messages::Mode;
use rnic::soft::{SoftConfig, SoftFabric, SoftProvider};
use rnic::{MemoryRegion, QueuePair, SendOp, SendWr, Sge, WcStatus};
use std::time::Duration;

const OTHER_USER: u16 = 1;

/// Polls `user`'s completions until one arrives (bounded: 10 s of waits on the CQ).
fn next_completion(c: &Client<SoftProvider>, user: u16) -> Routed {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        c.node.data_cq.poll(user, &mut out);
        if let Some(r) = out.first() {
            return *r;
        }
        c.node.data_cq.wait(user, Duration::from_millis(1));
    }
    panic!("no completion for user {user}");
}

type Wr = SendWr<'static, rnic::soft::SoftMw, rnic::soft::SoftMr>;

/// An FAA of 1 by `user` (result at staging offset 64).
fn faa(c: &Client<SoftProvider>, user: u16, addr: u64, rkey: rnic::MemoryKey, id: u64) -> Wr {
    SendWr {
        wr_id: tagged(user, id),
        signaled: true,
        op: SendOp::FetchAdd {
            local: Sge {
                addr: c.staging.addr() + 64,
                length: 8,
                lkey: c.staging_mr.lkey(),
            },
            remote_addr: addr,
            rkey,
            add: 1,
        },
    }
}

/// A one-byte WRITE by `user`.
fn write(c: &Client<SoftProvider>, user: u16, addr: u64, rkey: rnic::MemoryKey, id: u64) -> Wr {
    SendWr {
        wr_id: tagged(user, id),
        signaled: true,
        op: SendOp::Write {
            local: Sge {
                addr: c.staging.addr(),
                length: 1,
                lkey: c.staging_mr.lkey(),
            },
            remote_addr: addr,
            rkey,
        },
    }
}

#[test]
fn a_fault_on_a_shared_qp_is_promoted_once_and_spares_the_other_user() {
    for isolation in [Isolation::SharedPd, Isolation::PdPerClient] {
        let node = NodeConfig {
            isolation,
            ..NodeConfig::default()
        };
        let cfg = ClientConfig {
            spare_qps: 2,
            ..ClientConfig::default()
        };
        let fabric = SoftFabric::new();
        let node_ctx = fabric.open_device(SoftConfig::default());
        let node = MemoryNode::<SoftProvider>::start(node_ctx, node).unwrap();
        let ctx = fabric.open_device(SoftConfig::default());
        let mut client = Client::connect(&ctx, node.address(), cfg).unwrap();
        let c = &mut client;
        let p = c
            .allocate(64, Duration::from_secs(60), Mode::Exclusive)
            .unwrap();
        c.node.data_cq.join(OTHER_USER);
        let lane = c.data.qps.current(c.lane).unwrap();

        // The client's forged WRITE, then the other user's FAA, on the same physical QP.
        let mut forged = p.forged_copy();
        forged.corrupt_rkey();
        let first = write(c, c.user, forged.addr(), forged.rkey(), 3);
        let behind = faa(c, OTHER_USER, p.addr() + 8, p.rkey(), 7);
        lane.qp.post_send(&[first, behind]).unwrap();

        let theirs = next_completion(c, OTHER_USER);
        assert_eq!(theirs.wc.wr_id, 7, "the tag is taken off");
        assert_eq!(theirs.wc.status, WcStatus::WrFlushError);
        assert_eq!(
            theirs.cause,
            Some(WcStatus::RemoteAccessError),
            "the flush says that an access was refused ahead of it: it never ran"
        );
        let ours = next_completion(c, c.user);
        assert_eq!(
            (ours.wc.wr_id, ours.wc.status),
            (3, WcStatus::RemoteAccessError)
        );

        // The first report promotes a spare; the second finds the lane replaced.
        let qps = &c.data.qps;
        assert_eq!(
            qps.fail_over(c.lane, lane.incarnation).unwrap(),
            SwitchKind::Promoted
        );
        assert_eq!(
            qps.fail_over(c.lane, lane.incarnation).unwrap(),
            SwitchKind::AlreadyReplaced
        );
        let now = qps.current(c.lane).unwrap();
        assert_ne!(now.qp.qp_num(), lane.qp.qp_num());

        // The other user runs its FAA again on the promoted QP: it runs exactly once.
        let retry = faa(c, OTHER_USER, p.addr() + 8, p.rkey(), 8);
        now.qp.post_send(&[retry]).unwrap();
        let again = next_completion(c, OTHER_USER);
        assert_eq!((again.wc.wr_id, again.wc.status), (8, WcStatus::Success));
        let mut word = [0u8; 8];
        c.read(&p, 8, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 1, "{isolation:?}");

        // The worker recovers the broken QP in the background; the spare comes back.
        let stats = c.data.qps.wait_recoveries(1, Duration::from_secs(30));
        assert_eq!((stats.promotions, stats.reconnects), (1, 0), "{stats:?}");
        assert_eq!((stats.recovered, stats.spares_ready), (1, 2), "{stats:?}");
    }
}
