//! A client flooding the control path with requests (raw verbs, ignoring every rule
//! the client library keeps) slows only itself: each control connection has its own credits
//! (receive slots) at the node, so the flood meets receiver-not-ready on the flooder's QP,
//! never on an honest client's.

use super::*;
use patronus_core::client::ClientConfig;
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::Request;
use patronus_core::testing::RawControl;
use std::time::Duration;
use support::bed::{bed, node_cfg};

/// Requests a flooder has in flight at most (its send queue).
const FLOOD_DEPTH: u32 = 512;

/// A flooder: an authenticated raw control connection (it ignores the library's rules).
fn flooder(b: &Bed) -> RawControl<SoftProvider> {
    RawControl::authenticated(
        &b.cluster.client_ctxs[0],
        b.cluster.node.address(),
        None,
        FLOOD_DEPTH,
    )
    .unwrap()
}

fn flood(t: Link, iso: Isolation) {
    // (With `limits.control_credits = 0`, the paper's one shared receive queue, the honest
    // client's RPCs time out in the first round: checked when this test was written.)
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let mut flooders: Vec<_> = (0..3).map(|_| flooder(&b)).collect();
    let mut sent = 0;
    let mut reconnects = 0;
    for round in 0..24 {
        for f in flooders.iter_mut() {
            if f.broken() {
                // Its RNR retries ran out: it comes back on a new connection.
                *f = flooder(&b);
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
fn all_credits_in_flight(t: Link, iso: Isolation) {
    use patronus_core::client::{Client, MAX_OUTSTANDING_RPCS};
    use patronus_core::proto::messages::{Mode, Reply};
    let b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    let ctx = &b.cluster.client_ctxs[0];
    for _ in 0..4 {
        let mut c =
            Client::<SoftProvider>::connect(ctx, b.cluster.node.address(), ClientConfig::default())
                .unwrap();
        for _ in 0..8 {
            let tickets: Vec<_> = (0..MAX_OUTSTANDING_RPCS)
                .map(|_| {
                    let req = Request::Allocate {
                        size: 64,
                        lease_us: 100_000,
                        mode: Mode::Shared,
                    };
                    crate::support::client::submit(&mut c, req).unwrap()
                })
                .collect();
            let mut granted = Vec::new();
            for t in tickets {
                match crate::support::client::wait_reply(&mut c, t).unwrap() {
                    Reply::Granted(g) => granted.push(g),
                    other => panic!("{other:?}"),
                }
            }
            for g in granted {
                let req = Request::Revoke {
                    id: g.id,
                    free: true,
                };
                assert_eq!(
                    crate::support::client::call(&mut c, req).unwrap(),
                    Reply::Revoked
                );
            }
        }
    }
}

every_mode! {
    a_flooding_client_slows_only_itself => flood;
    an_honest_client_may_use_all_its_credits => all_credits_in_flight;
}
