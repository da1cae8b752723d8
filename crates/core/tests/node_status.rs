//! [`MemoryNode::status`]: a client's live permission is listed (its memory, access, mode,
//! lease left — no rkey) while it lives and not after; its session shows with its QPs ready
//! to send; the manager's service times count the requests it answered. A drained node
//! refuses new permissions and lets the live ones run on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_core::client::ClientConfig;
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::QpState;
use rnic::soft::SoftConfig;
use std::time::Duration;

fn status_shows_what_lives(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    let mut c =
        EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 1).unwrap();
    let client = &mut c.clients[0];
    let p = client
        .allocate(100, Duration::from_secs(20), Mode::Exclusive)
        .unwrap();
    // Every shard takes each data connection from the node's accept thread on its next turn,
    // which may come after the client saw the connection up: look again (each status call
    // waits for a turn of every shard) until every shard has taken them, or give up.
    let data_qps_taken = |s: &patronus_core::manager::NodeStatus| {
        s.sessions
            .iter()
            .all(|s| s.data_qps.iter().any(|(_, st)| *st == QpState::ReadyToSend))
    };
    let mut looks = 0;
    let (status, stats) = loop {
        let (status, stats) = c.node.status();
        looks += 1;
        if data_qps_taken(&status) || looks == 1_000 {
            break (status, stats);
        }
    };
    assert_eq!(status.permissions_total, 1);
    let listed = &status.permissions[0].permission;
    assert_eq!((listed.addr, listed.len), (p.addr(), p.len()));
    assert_eq!(
        (listed.access, listed.mode),
        (Access::ReadWrite, Mode::Exclusive)
    );
    assert!(listed.lease_left > Duration::ZERO && listed.lease_left <= Duration::from_secs(21));
    assert!(listed.hard_left >= listed.lease_left);
    assert!(
        !format!("{listed:?}").contains(&format!("{}", p.rkey().0)),
        "no rkey in what an operator sees"
    );
    assert!(
        !status.sessions.is_empty(),
        "the client's session is listed"
    );
    for s in &status.sessions {
        assert_eq!(s.control_qp, QpState::ReadyToSend);
        assert!(
            s.data_qps.iter().any(|(_, st)| *st == QpState::ReadyToSend),
            "{s:?}"
        );
    }
    assert!(
        stats.service.count() >= 1,
        "the allocation was answered by a timed turn"
    );

    let client = &mut c.clients[0];
    client.revoke(p).unwrap();
    let (status, _) = c.node.status();
    assert_eq!(status.permissions_total, 0);
    assert!(status.permissions.is_empty());
}

#[test]
fn status_shows_what_lives_inproc() {
    status_shows_what_lives(Link::InProc);
}

#[test]
fn status_shows_what_lives_tcp() {
    status_shows_what_lives(Link::Tcp);
}

/// [`MemoryNode::drain`]: new permissions are refused (overloaded), the live one works on and
/// is revoked as usual, and the node then holds none.
fn drain_refuses_new_permissions(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    let client_cfg = ClientConfig {
        rpc_timeout: Duration::from_millis(300),
        ..ClientConfig::default()
    };
    let mut c = EmbeddedCluster::start(t, SoftConfig::default(), node, client_cfg, 1).unwrap();
    let p = c.clients[0]
        .allocate(64, Duration::from_secs(20), Mode::Shared)
        .unwrap();
    // Every shard takes the client's connections from the accept thread on a turn of its own;
    // a draining node refuses those not taken yet, which ends the session. Wait for a turn of
    // every shard first: the drain is about new permissions, not new connections.
    c.node.fresh_stats();
    c.node.drain();
    let client = &mut c.clients[0];
    let refused = client.allocate(64, Duration::from_secs(1), Mode::Shared);
    assert!(
        matches!(refused, Err(patronus_core::client::ClientError::Overloaded)),
        "{refused:?}"
    );
    client.write(&p, 0, b"still mine").unwrap();
    client.revoke(p).unwrap();
    assert_eq!(c.node.status().0.permissions_total, 0);
}

#[test]
fn drain_refuses_new_permissions_inproc() {
    drain_refuses_new_permissions(Link::InProc);
}

#[test]
fn drain_refuses_new_permissions_tcp() {
    drain_refuses_new_permissions(Link::Tcp);
}
