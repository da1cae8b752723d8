//! Revokes sent as a group of tickets, all before any answer is awaited
//! (`support::client::revoke_many`): every permission of the batch ends (its rkeys are refused by the
//! NIC, the node holds none of them), more than a channel's worth at once; one that had ended
//! already is reported without keeping the others alive; with the channel full of acquires in
//! flight, the rest still end.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError, MAX_OUTSTANDING_RPCS, Perm};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;
use support::client::{poll_perm, revoke_many, start_acquire};

const LEASE: Duration = Duration::from_secs(30);

fn cluster(t: Link) -> EmbeddedCluster {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 1).unwrap()
}

/// A second handle on `p`'s grant (to try its rkey after `p` was given up).
fn copy(c: &mut Client<SoftProvider>, p: &Perm) -> Perm {
    let now = c.status().clock().now();
    c.control()
        .adopt(p.grant(), Access::ReadWrite, Mode::Shared, now)
}

fn live_permissions(c: &EmbeddedCluster) -> usize {
    c.node.fresh_stats().occupancy.unwrap().permissions
}

fn all_end(t: Link) {
    let mut cl = cluster(t);
    let c = &mut cl.clients[0];
    let n = MAX_OUTSTANDING_RPCS as usize + 5;
    let perms: Vec<Perm> = (0..n)
        .map(|_| c.allocate(64, LEASE, Mode::Shared).unwrap())
        .collect();
    let copies: Vec<Perm> = perms.iter().map(|p| copy(c, p)).collect();
    for p in &copies {
        c.write(p, 0, b"mine").unwrap();
    }
    let rpcs = c.status().rpcs();
    revoke_many(c, perms).unwrap();
    assert_eq!(
        c.status().rpcs() - rpcs,
        n as u64,
        "one revoke request per permission"
    );
    assert_eq!(live_permissions(&cl), 0, "the node holds none of them");
    let c = &mut cl.clients[0];
    for p in &copies {
        let mut buf = [0u8; 4];
        assert!(
            matches!(c.read(p, 0, &mut buf), Err(ClientError::Denied(_))),
            "a revoked permission's rkey is refused"
        );
    }
}

#[test]
fn every_permission_ends_inproc() {
    all_end(Link::InProc);
}

#[test]
fn every_permission_ends_tcp() {
    all_end(Link::Tcp);
}

fn one_ended_already(t: Link) {
    let mut cl = cluster(t);
    let c = &mut cl.clients[0];
    let perms: Vec<Perm> = (0..4)
        .map(|_| c.allocate(64, LEASE, Mode::Shared).unwrap())
        .collect();
    let gone = copy(c, &perms[1]);
    c.revoke(gone).unwrap();
    let result = revoke_many(c, perms);
    assert!(
        matches!(result, Err(ClientError::NotFound)),
        "the ended one is reported: {result:?}"
    );
    assert_eq!(live_permissions(&cl), 0, "the others ended all the same");
}

#[test]
fn one_ended_already_inproc() {
    one_ended_already(Link::InProc);
}

#[test]
fn one_ended_already_tcp() {
    one_ended_already(Link::Tcp);
}

#[test]
fn a_full_channel_still_ends_them() {
    let mut cl = cluster(Link::InProc);
    let c = &mut cl.clients[0];
    let object = c.allocate(64, LEASE, Mode::Shared).unwrap();
    let perms: Vec<Perm> = (0..4)
        .map(|_| c.allocate(64, LEASE, Mode::Shared).unwrap())
        .collect();
    // Every slot but two owed an answer to an acquire.
    let pending: Vec<_> = (0..MAX_OUTSTANDING_RPCS - 2)
        .map(|_| start_acquire(c, object.addr(), 64, LEASE, Access::Read, Mode::Shared).unwrap())
        .collect();
    revoke_many(c, perms).unwrap();
    // The acquires' answers were kept for their tickets, not lost.
    for t in pending {
        let mut perm = None;
        while perm.is_none() {
            assert!(c.wait_any(Duration::from_secs(20)).unwrap());
            perm = poll_perm(c, t).unwrap();
        }
        c.revoke(perm.unwrap()).unwrap();
    }
    c.revoke(object).unwrap();
    assert_eq!(live_permissions(&cl), 0);
}
