//! New sessions per second. Concurrent sessions are limited per tenant and per host; their
//! rate is limited too: the node's bucket refuses first connections past its burst, whoever
//! opens them, until its clock refills it (one token per 1/rate s), and each tenant's
//! bucket refuses its sessions' `Hello`s past its own rate while another tenant's sessions
//! open. The clock is the bed's virtual one: time passes only when the test says.

use super::*;
use patronus_core::client::ClientConfig;
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits, TenantSecret};
use patronus_core::testing::RawControl;
use rnic::VerbsError;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

const BURST: u32 = 6;
/// 10 a second: one token every 100 ms.
const PER_S: u32 = 10;

fn the_node_admits_sessions_at_its_rate(t: Link, iso: Isolation) {
    let node = NodeConfig {
        limits: NodeLimits {
            new_session_burst: BURST,
            new_sessions_per_s: PER_S,
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, iso, 1, node, ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let (ctx, addr) = (
        b.cluster.client_ctxs[0].clone(),
        b.cluster.node.address().clone(),
    );
    let open = || RawControl::<SoftProvider>::connect(&ctx, &addr, None, 4);
    let refusal = |r: Result<RawControl<SoftProvider>, VerbsError>| match r {
        Err(VerbsError::ConnectionRefused(reason)) => {
            assert!(reason.contains("too many new sessions"), "{reason}");
        }
        other => panic!("past the node's rate: {:?}", other.map(|_| "admitted")),
    };
    // The bed's client took one token; the rest of the burst goes to the newcomers.
    let mut held = Vec::new();
    while let Ok(c) = open() {
        held.push(c);
        assert!(
            held.len() <= BURST as usize,
            "more sessions than the burst at one instant"
        );
    }
    assert_eq!(held.len(), BURST as usize - 1);
    refusal(open());
    // The honest session is served all along.
    honest_round(&mut b);
    b.clock.advance(Duration::from_millis(100));
    held.push(open().expect("a token after 100 ms"));
    refusal(open());
    honest_round(&mut b);
    wait_for(&b, "the refusals counted", |s| {
        s.sessions_rate_refused.0 >= 2
    });
    drop(held);
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

fn each_tenant_spends_its_own_rate(t: Link, iso: Isolation) {
    let tenants = [
        TenantSecret {
            tenant: 1,
            secret: 0x1111,
        },
        TenantSecret {
            tenant: 2,
            secret: 0x2222,
        },
    ];
    let node = NodeConfig {
        tenants: tenants.to_vec(),
        limits: NodeLimits {
            // Burst 2, one a second.
            tenant_new_sessions_per_s: Some(1),
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let honest = ClientConfig {
        tenant: 1,
        tenant_secret: 0x1111,
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 1, node, honest);
    honest_round(&mut b);
    let start = footprint(&b);
    let (ctx, addr) = (
        b.cluster.client_ctxs[0].clone(),
        b.cluster.node.address().clone(),
    );
    let sessions_of = |b: &Bed, tenant: u32| {
        let (status, _) = b.cluster.node.status();
        status
            .sessions
            .iter()
            // Every client has a session on shard 0 (and, with several shards, on the others).
            .filter(|s| s.tenant == Some(tenant) && s.shard == 0)
            .count()
    };
    let hog = || RawControl::<SoftProvider>::authenticated_as(&ctx, &addr, None, 4, 2, 0x2222);
    let mut held: Vec<_> = (0..3).map(|_| hog().unwrap()).collect();
    wait_for(&b, "tenant 2's third Hello refused", |s| {
        s.sessions_rate_refused.1 == 1
    });
    assert_eq!(sessions_of(&b, 2), 2, "tenant 2 opened its burst, no more");
    // Tenant 1 spent one token on the bed's client: it has one left.
    let other = || RawControl::<SoftProvider>::authenticated_as(&ctx, &addr, None, 4, 1, 0x1111);
    held.push(other().unwrap());
    wait_for(&b, "tenant 1's session", |_| sessions_of(&b, 1) == 2);
    honest_round(&mut b);
    b.clock.advance(Duration::from_secs(1));
    held.push(hog().unwrap());
    wait_for(&b, "tenant 2's session after a second", |_| {
        sessions_of(&b, 2) == 3
    });
    let refused = b.cluster.node.fresh_stats().sessions_rate_refused.1;
    assert_eq!(refused, 1, "only the one refusal");
    drop(held);
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

every_mode! {
    the_node_admits_new_sessions_at_its_rate => the_node_admits_sessions_at_its_rate;
    each_tenant_opens_sessions_at_its_own_rate => each_tenant_spends_its_own_rate;
}
