//! A reconnect storm. In type-2 mode every data QP a client drops takes its type-2
//! windows with it; the node once scanned its whole window table per dropped QP, so a client
//! reconnecting thousands of times kept it busy for seconds. The work per reconnection is now
//! bounded by the windows bound to that QP (the NIC keeps them per QP, unit-tested in `rnic`),
//! and a reconnection is O(1) at the node: the honest client is served between any two
//! reconnections of the storm.

use super::*;
use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits};
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

const STORM: usize = 400;

fn storm(t: Link) {
    let node = NodeConfig {
        // The storm is allowed (its own budget is the faults test's subject).
        limits: NodeLimits {
            fault_burst: 1_000_000,
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, Isolation::Type2, 1, node, ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let ctx = b.cluster.client_ctxs[0].clone();
    let mut stormer =
        Client::<SoftProvider>::connect(&ctx, b.cluster.node.address(), ClientConfig::default())
            .unwrap();
    // Windows bound to the stormer's QPs: each reconnection drops some.
    let held: Vec<_> = (0..8)
        .map(|_| {
            stormer
                .allocate(64, Duration::from_secs(1), Mode::Shared)
                .unwrap()
        })
        .collect();
    for i in 0..STORM {
        let mut bad = held[i % held.len()].forged_copy();
        bad.corrupt_rkey();
        match stormer.write(&bad, 0, b"x") {
            Err(ClientError::Denied(_)) => {}
            other => panic!("a forged rkey: {other:?}"),
        }
        if i % 8 == 0 {
            honest_round(&mut b);
        }
    }
    let s = wait_for(&b, "the storm's reconnections", |s| {
        s.data_reconnects >= STORM as u64
    });
    assert_eq!(s.reconnects_refused, 0, "{s:?}");
    // The stormer's permissions still work (rebound to its current QP after each switch).
    let mut buf = [0u8; 8];
    for p in &held {
        stormer.read(p, 0, &mut buf).unwrap();
    }
    for p in held {
        stormer.free(p).unwrap();
    }
    drop(stormer);
    honest_round(&mut b);
    wait_back_to(&b, start, 0);
}

#[test]
fn inproc_type2_reconnect_storm() {
    storm(Link::InProc);
}

#[test]
fn tcp_type2_reconnect_storm() {
    storm(Link::Tcp);
}
