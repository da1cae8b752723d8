//! Connections that never authenticate share one small budget, at the NIC and at the
//! manager. Over TCP the node's NIC serves a control connection before its `Hello` at the
//! unauthenticated rate — a burst of its credits, then `unauthenticated_ops_per_s` messages a
//! second of the node's (virtual) clock — so a flood of requests that will all be refused
//! costs the node a bounded amount of work; once a connection authenticates it is its
//! tenant's, unlimited. (In-process the device enforces no QP rate: the flooder's own thread
//! does the NIC's work there, and the manager's fair queue bounds what reaches the manager.)

use super::*;
use patronus_core::client::{ClientConfig, MAX_OUTSTANDING_RPCS};
use patronus_core::cluster::Link;
use patronus_core::manager::{Class, Isolation, NodeStats};
use patronus_core::testing::RawControl;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

/// Messages of `class` the manager's fair queue has served.
fn served(s: &NodeStats, class: Class) -> u64 {
    s.classes.get(&class).map_or(0, |c| c.served)
}

fn unauthenticated_floods_are_served_at_their_rate(iso: Isolation) {
    let mut b = bed(Link::Tcp, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let (ctx, addr) = (
        b.cluster.client_ctxs[0].clone(),
        b.cluster.node.address().clone(),
    );
    let burst = u64::from(MAX_OUTSTANDING_RPCS);
    let u = Class::Unauthenticated;
    // The bed's client said its Hello as an unauthenticated session.
    let u0 = served(&b.cluster.node.fresh_stats(), u);
    let mut silent = RawControl::<SoftProvider>::connect(&ctx, &addr, None, 512).unwrap();
    let posted = silent.burst();
    assert!(posted > 100, "the flood is posted: {posted}");
    wait_for(&b, "the burst served", |s| served(s, u) == u0 + burst);
    // No time passes: the NIC serves nothing more of it, however long the honest client works.
    for _ in 0..20 {
        honest_round(&mut b);
    }
    let now = b.cluster.node.fresh_stats();
    assert_eq!(
        served(&now, u),
        u0 + burst,
        "nothing past the burst while the clock stands"
    );
    // A tenth of a second: ten more (100 a second by default).
    b.clock.advance(Duration::from_millis(100));
    silent.burst(); // runs its QP's timers: its receiver-not-ready retries go out
    wait_for(&b, "ten more served", |s| served(s, u) >= u0 + burst + 10);
    assert!(served(&b.cluster.node.fresh_stats(), u) <= u0 + burst + 10 + 1);
    // An authenticated connection is its tenant's: its requests are served past any burst
    // with no time passing (it keeps its credits full, taking its replies).
    let before = served(&b.cluster.node.fresh_stats(), Class::Tenant(0));
    let mut loud =
        RawControl::<SoftProvider>::listening_as(&ctx, &addr, MAX_OUTSTANDING_RPCS, 0, 0).unwrap();
    let extend = patronus_core::testing::refused_extend();
    for round in 1..=5 {
        for _ in 0..burst {
            loud.send(&extend).unwrap();
        }
        loud.await_replies(round * burst).unwrap();
        honest_round(&mut b);
    }
    wait_for(&b, "the authenticated flood served past a burst", |s| {
        served(s, Class::Tenant(0)) > before + 4 * burst
    });
    drop((silent, loud));
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

#[test]
fn tcp_shared_pd() {
    unauthenticated_floods_are_served_at_their_rate(Isolation::SharedPd);
}

#[test]
fn tcp_pd_per_client() {
    unauthenticated_floods_are_served_at_their_rate(Isolation::PdPerClient);
}

#[test]
fn tcp_type2() {
    unauthenticated_floods_are_served_at_their_rate(Isolation::Type2);
}
