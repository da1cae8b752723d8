//! A compute node's clients share one session with the memory node ([`ComputeNode`]): its
//! control QPs, its data QPs and their spares. Checked on both transports in every isolation
//! mode:
//! - the QPs a compute node holds, and the clients the memory node sees, do not grow with the
//!   compute node's clients (threads);
//! - one client's forged access breaks the shared data QP; a spare is promoted once (not
//!   reconnected on anyone's path), the other clients' operations caught in the failure are
//!   run again on the spare exactly once (each counter ends at the count of increments its
//!   client was told succeeded), and the worker recovers the broken QP in the background.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

#[macro_use]
mod support;

use patronus_core::client::{ClientConfig, ClientError, ComputeNode};
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::Mode;
use std::sync::Barrier;
use std::time::Duration;
use support::bed::{Bed, Rig, bed, no_wait, node_cfg};

const SPARES: usize = 2;

fn handle<R: Rig>(b: &Bed<R::P>) -> ComputeNode<R::P> {
    let cfg = ClientConfig {
        spare_qps: SPARES,
        ..no_wait()
    };
    ComputeNode::connect(&b.cluster.client_ctxs[0], b.cluster.node.address(), cfg).unwrap()
}

/// Each client allocates a counter and adds 1 to it `n` times; returns nothing, asserts the
/// counter's end value.
fn count_to<P: rnic::Provider>(cn: &ComputeNode<P>, n: u64) {
    let mut c = cn.client().unwrap();
    let p = c
        .allocate(8, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    for _ in 0..n {
        c.faa(&p, 0, 1).unwrap();
    }
    let mut buf = [0u8; 8];
    c.read(&p, 0, &mut buf).unwrap();
    assert_eq!(u64::from_le_bytes(buf), n);
    c.free(p).unwrap();
}

fn sixteen_clients_on_the_qps_of_one<R: Rig>(t: R, iso: Isolation) {
    let b = bed(t, iso, 1, node_cfg(), no_wait());
    let cn = handle::<R>(&b);
    let qps = cn.qp_count();
    // A control QP per shard, one lane and the spares.
    assert_eq!(qps, b.cluster.node.fresh_stats().shards + 1 + SPARES);
    count_to(&cn, 10);
    let seen = b.cluster.node.fresh_stats().clients;
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| count_to(&cn, 50));
        }
    });
    assert_eq!(cn.qp_count(), qps, "16 clients, the same QPs");
    assert_eq!(
        b.cluster.node.fresh_stats().clients,
        seen,
        "the memory node sees one client per compute node"
    );
    let stats = cn.qps();
    assert_eq!(stats.switches(), 0, "{stats:?}");
}

fn forge_among_busy_neighbours<R: Rig>(t: R, iso: Isolation) {
    const VICTIMS: usize = 3;
    const BEFORE: u64 = 20;
    const AFTER: u64 = 200;
    let b = bed(t, iso, 1, node_cfg(), no_wait());
    let cn = handle::<R>(&b);
    let forged_at = Barrier::new(VICTIMS + 1);
    std::thread::scope(|s| {
        for _ in 0..VICTIMS {
            let mut c = cn.client().unwrap();
            let forged_at = &forged_at;
            s.spawn(move || {
                let p = c
                    .allocate(8, Duration::from_secs(1), Mode::Exclusive)
                    .unwrap();
                let mut done = 0;
                let mut add = |c: &mut patronus_core::client::Client<R::P>, n| {
                    for _ in 0..n {
                        match c.faa(&p, 0, 1) {
                            Ok(old) => {
                                assert_eq!(old, done, "an increment ran twice or was lost");
                                done += 1;
                            }
                            Err(e) => panic!("another client's fault reached this one: {e}"),
                        }
                    }
                };
                add(&mut c, BEFORE);
                forged_at.wait();
                add(&mut c, AFTER);
                let mut buf = [0u8; 8];
                c.read(&p, 0, &mut buf).unwrap();
                assert_eq!(u64::from_le_bytes(buf), BEFORE + AFTER);
                c.free(p).unwrap();
            });
        }
        let mut attacker = cn.client().unwrap();
        let p = attacker
            .allocate(64, Duration::from_secs(1), Mode::Exclusive)
            .unwrap();
        let mut forged = p.forged_copy();
        forged.corrupt_rkey();
        forged_at.wait();
        let e = attacker.write(&forged, 0, b"x").unwrap_err();
        assert!(matches!(e, ClientError::Denied(_)), "{e:?}");
        attacker.write(&p, 0, b"after").unwrap();
        attacker.free(p).unwrap();
    });
    let qps = cn.qps();
    assert_eq!(
        (qps.promotions, qps.reconnects),
        (1, 0),
        "one fault, one promotion, whoever reported it: {qps:?}"
    );
    let mut c = cn.client().unwrap();
    let after = c.status().wait_recoveries(1, Duration::from_secs(30));
    assert_eq!(
        (after.recovered, after.recovery_failures),
        (1, 0),
        "{after:?}"
    );
    assert_eq!(after.spares_ready, SPARES, "the spare came back: {after:?}");
    // The handle still works for a new client.
    let p = c.allocate(8, Duration::from_secs(1), Mode::Shared).unwrap();
    assert_eq!(c.faa(&p, 0, 5).unwrap(), 0);
    c.free(p).unwrap();
}

every_mode! {
    qps_do_not_grow_with_clients => sixteen_clients_on_the_qps_of_one;
    a_forged_access_costs_the_others_only_a_promotion => forge_among_busy_neighbours;
}
