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
        // The permission must outlive the test's steps, however slow a loaded machine makes
        // them (the default 10 ms cap expired it mid-test under load: the retried FAA was
        // refused and the read found the lease over).
        let node = NodeConfig {
            isolation,
            max_lifetime_us: 60_000_000,
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
        assert_eq!(
            (again.wc.wr_id, again.wc.status),
            (8, WcStatus::Success),
            "{isolation:?}: {again:?}"
        );
        let mut word = [0u8; 8];
        c.read(&p, 8, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 1, "{isolation:?}");

        // The worker recovers the broken QP in the background; the spare comes back.
        let stats = c.data.qps.wait_recoveries(1, Duration::from_secs(30));
        assert_eq!((stats.promotions, stats.reconnects), (1, 0), "{stats:?}");
        assert_eq!((stats.recovered, stats.spares_ready), (1, 2), "{stats:?}");
    }
}

/// A reset drops what a QP has not completed. A QP another user still has requests in
/// flight on is drained before it is reset — in place when no spare is ready, or by the
/// recovery worker after a promotion — so that user gets every completion. Here the other
/// user's FAA is lost on the wire (a queued network told to drop the next packet), so it is
/// still outstanding at the requester when the lane is replaced; without the drain the reset
/// dropped it and its user never heard of it.
#[test]
fn a_reset_of_a_shared_qp_keeps_the_other_users_completions() {
    use rnic::soft::link::queued::{Faults, QueuedNetwork};
    use rnic::{Clock, VirtualClock};
    use std::sync::atomic::{AtomicBool, Ordering};
    for spares in [0, 2] {
        let clock = VirtualClock::new();
        let net = QueuedNetwork::new(clock.clone(), 5);
        let fabric = SoftFabric::queued(net.clone());
        let device = |seed| {
            fabric.open_device(SoftConfig {
                clock: clock.clone(),
                seed: Some(seed),
                ..SoftConfig::default()
            })
        };
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(due) = net.next_due() {
                        clock.set(due.max(clock.now()));
                    }
                    net.step(clock.now());
                    std::thread::yield_now();
                }
            });
            let node = MemoryNode::<SoftProvider>::start(device(1), NodeConfig::default());
            let run = || {
                let node = node.as_ref().expect("memory node");
                let cfg = ClientConfig {
                    spare_qps: spares,
                    ..ClientConfig::default()
                };
                let mut client = Client::connect(&device(2), node.address(), cfg).unwrap();
                let c = &mut client;
                let p = c
                    .allocate(64, Duration::from_secs(60), Mode::Exclusive)
                    .unwrap();
                c.node.data_cq.join(OTHER_USER);
                let lane = c.data.qps.current(c.lane).unwrap();
                net.set_faults(Faults {
                    drop_next: 1,
                    ..Faults::default()
                });
                let lost = faa(c, OTHER_USER, p.addr() + 8, p.rkey(), 7);
                lane.qp.post_send(&[lost]).unwrap();

                // The lane is replaced while the FAA is outstanding.
                let kind = c.data.qps.fail_over(c.lane, lane.incarnation).unwrap();
                if spares == 0 {
                    assert_eq!(kind, SwitchKind::Recovered, "reconnected in place");
                } else {
                    assert_eq!(kind, SwitchKind::Promoted);
                    let stats = c.data.qps.wait_recoveries(1, Duration::from_secs(30));
                    assert_eq!(stats.recovered, 1, "the worker reset the QP: {stats:?}");
                }
                let theirs = next_completion(c, OTHER_USER);
                assert_eq!(
                    (theirs.wc.wr_id, theirs.wc.status, theirs.cause),
                    (7, WcStatus::WrFlushError, None),
                    "spares {spares}: flushed by the drain, which says nothing about what ran"
                );
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            stop.store(true, Ordering::SeqCst);
            if let Err(e) = outcome {
                std::panic::resume_unwind(e);
            }
        });
    }
}
