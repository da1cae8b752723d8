//! The manager's fair shares, end to end: with the manager thread held (a testing hook), a
//! backlog builds up in the NIC's receive queues; each step then runs one turn of the manager,
//! and the replies each connection receives show what that turn served. A tenant that keeps
//! all its credits full of requests that each bind windows (an `Acquire` of nothing) gets its
//! weighted share of cost units per turn and no more; connections that never said `Hello`
//! share one small budget; a client of the flooder's own tenant is served in the next turn,
//! not after the flooder's backlog. With the fair queue off (`limits.fair_shares = false`, the
//! manager before it) the first turn serves the whole backlog first-come, first-served, and
//! each of these tests fails.

use super::*;
use patronus_core::client::{ClientConfig, MAX_OUTSTANDING_RPCS};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, TenantSecret, TenantWeight};
use patronus_core::proto::messages::Request;
use patronus_core::testing::{RawControl, refused_acquire, refused_extend};
use support::bed::{bed, node_cfg};

const HONEST: u32 = 1;
const FLOODER: u32 = 2;
const CREDITS: u32 = MAX_OUTSTANDING_RPCS;

/// A request that binds windows, for an object that does not exist (4 units).
fn costly() -> Request {
    refused_acquire()
}

/// An extension of a permission that does not exist (1 unit).
fn cheap() -> Request {
    refused_extend()
}

fn two_tenants(honest_weight: u32) -> NodeConfig {
    NodeConfig {
        tenants: [HONEST, FLOODER]
            .map(|tenant| TenantSecret {
                tenant,
                secret: 0xbeef + u64::from(tenant),
            })
            .to_vec(),
        tenant_weights: vec![TenantWeight {
            tenant: HONEST,
            weight: honest_weight,
        }],
        ..node_cfg()
    }
}

/// The bed's own client is the honest tenant's.
fn honest_client() -> ClientConfig {
    ClientConfig {
        tenant: HONEST,
        tenant_secret: 0xbeef + u64::from(HONEST),
        ..ClientConfig::default()
    }
}

type Raw = RawControl<SoftProvider>;

fn connect(b: &Bed, tenant: Option<u32>) -> Raw {
    let (ctx, addr) = (&b.cluster.client_ctxs[0], b.cluster.node.address());
    match tenant {
        Some(t) => Raw::listening_as(ctx, addr, CREDITS, t, 0xbeef + u64::from(t)).unwrap(),
        None => Raw::listening(ctx, addr, CREDITS).unwrap(),
    }
}

/// Sends `n` copies of `request` and waits until the node's NIC holds them all.
fn send(c: &mut Raw, request: &Request, n: u64) {
    for _ in 0..n {
        c.send(request).unwrap();
    }
    c.await_delivered().unwrap();
}

/// Waits until each connection has at least its expected replies, then checks it has exactly
/// that many (a connection served more than its share in a turn fails here, at the latest
/// once its extra replies arrived, a few turns later).
fn expect_replies(turn: u64, conns: &mut [(&str, &mut Raw, u64)]) {
    for (who, c, want) in conns.iter_mut() {
        c.await_replies(*want)
            .unwrap_or_else(|e| panic!("turn {turn}: {who} has no {want} replies: {e}"));
    }
    for (who, c, want) in conns.iter_mut() {
        assert_eq!(c.replies().unwrap(), *want, "turn {turn}: replies of {who}");
    }
}

/// The honest tenant (weight `w`) and a flooding tenant both keep their credits full: the
/// honest one of one-unit requests, the flooder of four-unit ones. Each turn is one round:
/// `4 w` of the honest requests and one of the flooder's, whatever their backlogs.
fn weighted_share(t: Link, iso: Isolation, w: u32) {
    let b = bed(t, iso, 1, two_tenants(w), honest_client());
    let mut honest = connect(&b, Some(HONEST));
    let mut flooder = connect(&b, Some(FLOODER));
    let hold = b.cluster.node.hold_managers();
    send(&mut flooder, &costly(), u64::from(CREDITS));
    send(&mut honest, &cheap(), u64::from(CREDITS));
    let per_turn = u64::from(4 * w);
    for turn in 1..=8 {
        hold.step(0);
        expect_replies(
            turn,
            &mut [
                ("the honest tenant", &mut honest, per_turn * turn),
                ("the flooder", &mut flooder, turn),
            ],
        );
        // Both stay backlogged: what was answered is asked again.
        send(&mut honest, &cheap(), per_turn);
        send(&mut flooder, &costly(), 1);
    }
    // The node's own counters agree: equal cost units per unit of weight (the `Hello`s were
    // charged to the unauthenticated class).
    let classes = b.cluster.node.stats().classes;
    let units = |t| classes[&patronus_core::manager::Class::Tenant(t)].cost_units;
    assert_eq!(units(FLOODER), 4 * 8, "{classes:?}");
    assert_eq!(units(HONEST), u64::from(w) * units(FLOODER), "{classes:?}");
    drop(hold);
}

fn equal_share(t: Link, iso: Isolation) {
    weighted_share(t, iso, 1);
}

fn thrice_the_share(t: Link, iso: Isolation) {
    weighted_share(t, iso, 3);
}

/// Connections that never said `Hello` share one unit a turn (`unauthenticated_quantum`),
/// against the honest tenant's four, and every one of their messages is refused.
fn unauthenticated_budget(t: Link, iso: Isolation) {
    let b = bed(t, iso, 1, two_tenants(1), honest_client());
    let mut honest = connect(&b, Some(HONEST));
    let mut silent = connect(&b, None);
    let hold = b.cluster.node.hold_managers();
    // Over TCP the NIC admits a burst of one control slot's worth before `Hello` (the
    // virtual clock stands, so no more): the backlog outlasts the turns below.
    send(&mut silent, &cheap(), u64::from(CREDITS));
    send(&mut honest, &cheap(), u64::from(CREDITS));
    for turn in 1..=8 {
        hold.step(0);
        expect_replies(
            turn,
            &mut [
                ("the honest tenant", &mut honest, 4 * turn),
                ("the unauthenticated connection", &mut silent, turn),
            ],
        );
        send(&mut honest, &cheap(), 4);
    }
    drop(hold);
}

/// Within one tenant (the default configuration: no tenants), clients take turns: two
/// flooders keep 16 requests each queued, an honest client sends one after them, and the
/// next turn (a batch of 8 here) serves it.
fn one_tenant_takes_turns(t: Link, iso: Isolation) {
    let node = NodeConfig {
        max_batch: 8,
        ..node_cfg()
    };
    let b = bed(t, iso, 1, node, ClientConfig::default());
    let (ctx, addr) = (&b.cluster.client_ctxs[0], b.cluster.node.address());
    let mut flooders: Vec<Raw> = (0..2)
        .map(|_| Raw::listening_as(ctx, addr, CREDITS, 0, 0).unwrap())
        .collect();
    let mut honest = Raw::listening_as(ctx, addr, CREDITS, 0, 0).unwrap();
    let hold = b.cluster.node.hold_managers();
    for f in flooders.iter_mut() {
        send(f, &cheap(), u64::from(CREDITS));
    }
    send(&mut honest, &cheap(), 1);
    hold.step(0);
    let [f0, f1] = &mut flooders[..] else {
        unreachable!()
    };
    // Round robin over the three sessions: f0, f1, honest, f0, f1, f0, f1, f0.
    expect_replies(
        1,
        &mut [
            ("the honest client", &mut honest, 1),
            ("the first flooder", f0, 4),
            ("the second flooder", f1, 3),
        ],
    );
    drop(hold);
}

every_mode! {
    a_flooding_tenant_gets_its_share_and_no_more => equal_share;
    weights_set_the_shares_of_the_manager => thrice_the_share;
    unauthenticated_connections_share_one_unit_a_turn => unauthenticated_budget;
    clients_of_one_tenant_take_turns => one_tenant_takes_turns;
}
