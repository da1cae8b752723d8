//! The lease policy learns control round trips, not waits: an acquire that waited at the
//! memory node for a conflicting holder (up to that holder's whole lease) is no sample of the
//! round-trip estimate, blocking or pipelined. Otherwise every later lease would grow by the
//! wait, holders would hold longer and waiters wait longer (Figure 8(b) fell from 280 to 0.4
//! Kops/s that way).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{ClientConfig, Op};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::SoftConfig;
use std::time::Duration;

fn waits_are_no_round_trips(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    // Acquires may wait up to a second for conflicting holders (the default).
    let client = ClientConfig {
        lease_slack_rtts: 2,
        ..ClientConfig::default()
    };
    let mut c = EmbeddedCluster::start(t, SoftConfig::default(), node, client, 2).unwrap();
    let (a, rest) = c.clients.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut rest[0]);
    let hold = Duration::from_millis(30);
    let p = a.allocate(64, hold, Mode::Exclusive).unwrap();
    let addr = p.addr();
    drop(p); // A's right lapses at the end of its lease: B waits for it

    // Blocking: B's acquire waits out A's lease.
    let before = b.status().lease_policy().rtt().samples();
    let q = b
        .acquire(addr, 64, hold, Access::ReadWrite, Mode::Exclusive)
        .unwrap();
    assert_eq!(
        b.status().lease_policy().rtt().samples(),
        before,
        "an acquire that may wait is no round-trip sample"
    );
    drop(q);

    // Pipelined: the same.
    let pending = b
        .start(Op::Acquire {
            addr,
            size: 64,
            lease: hold,
            access: Access::ReadWrite,
            mode: Mode::Exclusive,
            wait: true,
        })
        .unwrap();
    let perm = loop {
        if let Some(done) = b.poll(pending).unwrap() {
            break done.into_perm().unwrap();
        }
        b.wait_any(Duration::from_secs(1)).unwrap();
    };
    assert_eq!(b.status().lease_policy().rtt().samples(), before);
    b.revoke(perm).unwrap();
    // A request that cannot wait is one.
    assert!(
        b.status().lease_policy().rtt().samples() > before,
        "the revoke's round trip is a sample"
    );
}

#[test]
fn waits_are_no_round_trips_inproc() {
    waits_are_no_round_trips(Link::InProc);
}

#[test]
fn waits_are_no_round_trips_tcp() {
    waits_are_no_round_trips(Link::Tcp);
}
