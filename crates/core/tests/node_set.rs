//! A client over several memory nodes (`NodeSet`, `docs/multi-node.md`), on both transports.
//! Objects are spread round robin over the nodes and hold their data; global addresses round-trip
//! and lead another compute node to the same objects; a permission's rkey means nothing on another
//! node (that node's NIC refuses it); a node stopped mid-way fails its permissions with an error
//! naming it, at once and without I/O after the first, while the other nodes keep working and
//! allocations skip it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{ClientConfig, ClientError, OpResult};
use patronus_core::cluster::{EmbeddedNodes, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::nodes::{GlobalAddr, NodeId, NodeSet, NodeSetConfig, NodeSetError};
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

fn nodes(t: Link, count: usize) -> EmbeddedNodes {
    let cfg = NodeConfig {
        max_lifetime_us: 60_000_000,
        pool_bytes: 8 << 20,
        ..crate::support::node_config()
    };
    EmbeddedNodes::start(t, SoftConfig::default(), cfg, count).unwrap()
}

fn connect(n: &mut EmbeddedNodes) -> NodeSet<SoftProvider> {
    n.connect(&ClientConfig::default(), NodeSetConfig::default())
        .unwrap()
}

fn live_objects(n: &EmbeddedNodes, i: u16) -> usize {
    n.node(NodeId(i))
        .unwrap()
        .fresh_stats()
        .occupancy
        .map_or(0, |o| o.live_objects)
}

fn objects_spread_and_hold_their_data(t: Link) {
    let mut n = nodes(t, 3);
    let mut set = connect(&mut n);
    let perms = set
        .allocate_many(&[64, 128, 256, 64, 128, 256], LEASE, Mode::Shared)
        .unwrap();
    // Round robin: two objects on each node, in turn.
    let on: Vec<u16> = perms.iter().map(|p| p.node().0).collect();
    assert_eq!(on, [0, 1, 2, 0, 1, 2]);
    assert_eq!(
        perms.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [64, 128, 256, 64, 128, 256]
    );
    for i in 0..3 {
        assert_eq!(live_objects(&n, i), 2, "node {i}");
    }
    // Global addresses: below 2^48, never 0, distinct, and they round-trip.
    for p in &perms {
        let g = GlobalAddr::try_from(p.addr()).unwrap();
        assert!(p.addr() != 0 && p.addr() < 1 << 48);
        assert_eq!(g, p.global());
        assert_eq!(g.node(), p.node());
        assert_eq!(set.locate(p.addr()).unwrap(), (p.node(), p.perm().addr()));
        assert_eq!(set.global(p.node(), p.perm().addr()).unwrap(), g);
    }
    // One batch over every node: each node's share with one doorbell, results in order.
    let data: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i + 1; 16]).collect();
    let mut b = set.batch();
    for (p, d) in perms.iter().zip(&data) {
        b.write(p, 0, d);
    }
    b.faa(&perms[1], 32, 7).faa(&perms[2], 32, 9);
    for p in &perms {
        b.read(p, 0, 16);
    }
    let out: Vec<OpResult> = b.execute().into_iter().map(Result::unwrap).collect();
    assert_eq!(out[6..8], [OpResult::Atomic(0), OpResult::Atomic(0)]);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(out[8 + i], OpResult::Read(d.clone()), "object {i}");
    }
    assert_eq!(set.cas(&perms[2], 32, 9, 10).unwrap(), 9);

    // Another compute node finds the objects by their global addresses alone.
    let mut other = connect(&mut n);
    for (p, d) in perms.iter().zip(&data) {
        let q = other
            .acquire(p.addr(), p.len(), LEASE, Access::Read, Mode::Shared)
            .unwrap();
        assert_eq!((q.node(), q.addr()), (p.node(), p.addr()));
        let mut buf = [0u8; 16];
        other.read(&q, 0, &mut buf).unwrap();
        assert_eq!(&buf[..], &d[..]);
        other.revoke(q).unwrap();
    }
    // An address of no node of the set is refused before anything is sent.
    let far = GlobalAddr::new(NodeId(7), 0).unwrap();
    let e = set
        .acquire(far.into(), 8, LEASE, Access::Read, Mode::Shared)
        .unwrap_err();
    assert!(matches!(e, NodeSetError::Address(_)), "{e}");
    let e = set
        .acquire(0x7f00_0000_1000, 8, LEASE, Access::Read, Mode::Shared)
        .unwrap_err();
    assert!(matches!(e, NodeSetError::Address(_)), "{e}");

    for p in perms {
        set.free(p).unwrap();
    }
    for i in 0..3 {
        assert_eq!(live_objects(&n, i), 0, "node {i}");
    }
}

fn an_rkey_is_valid_on_its_own_node_only(t: Link) {
    let mut n = nodes(t, 2);
    let mut set = connect(&mut n);
    let [mut mine, theirs]: [_; 2] = set
        .allocate_many(&[64, 64], LEASE, Mode::Shared)
        .unwrap()
        .try_into()
        .unwrap();
    // Two nodes' windows may carry the same key by chance: keep to one that differs.
    for _ in 0..8 {
        if mine.rkey() != theirs.rkey() {
            break;
        }
        let [again, spare]: [_; 2] = set
            .allocate_many(&[64, 64], LEASE, Mode::Shared)
            .unwrap()
            .try_into()
            .unwrap();
        set.free(std::mem::replace(&mut mine, again)).unwrap();
        set.free(spare).unwrap();
    }
    assert_eq!((mine.node(), theirs.node()), (NodeId(0), NodeId(1)));
    set.write(&theirs, 0, b"node one").unwrap();
    set.write(&mine, 0, b"node 0").unwrap();
    assert_ne!(mine.rkey(), theirs.rkey());
    // Node 0's right, carried to node 1's object: node 1's NIC refuses it.
    let carried = mine.moved_to(theirs.node(), theirs.global(), theirs.perm().addr());
    let mut buf = [0u8; 8];
    let e = set.read(&carried, 0, &mut buf).unwrap_err();
    assert!(
        matches!(
            &e,
            NodeSetError::Node {
                node: NodeId(1),
                source: ClientError::Denied(_)
            }
        ),
        "{e}"
    );
    let e = set.write(&carried, 0, b"stolen!!").unwrap_err();
    assert!(e.to_string().contains("memory node 1"), "{e}");
    // Nothing changed; both rights work on.
    set.read(&theirs, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"node one");
    set.read(&mine, 0, &mut buf[..6]).unwrap();
    assert_eq!(&buf[..6], b"node 0");
    set.free(mine).unwrap();
    set.free(theirs).unwrap();
}

fn a_stopped_node_fails_its_permissions_and_the_others_go_on(t: Link) {
    let mut n = nodes(t, 3);
    let mut set = connect(&mut n);
    let perms = set.allocate_many(&[64; 4], LEASE, Mode::Shared).unwrap();
    for (i, p) in perms.iter().enumerate() {
        set.write(p, 0, &[i as u8 + 1; 8]).unwrap();
    }
    let [p0, p1, p2, p0b]: [_; 4] = perms.try_into().unwrap();
    let also_gone = set
        .acquire(p1.addr(), 8, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    let gone_addr = p1.addr();
    assert!(n.stop(NodeId(1)));

    // The first call on the lost node's permission finds it gone and names it.
    let mut buf = [0u8; 8];
    let e = set.read(&p1, 0, &mut buf).unwrap_err();
    assert!(
        matches!(
            e,
            NodeSetError::NodeDown {
                node: NodeId(1),
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("memory node 1 is unreachable"),
        "{e}"
    );
    assert_eq!(set.down_nodes(), [NodeId(1)]);
    // Later ones fail at once, sending nothing (the client counts no new QP switch).
    let switches = set.client(NodeId(1)).unwrap().status().qps().switches();
    for r in [
        set.write(&p1, 0, b"x"),
        set.extend(&p1, LEASE),
        set.faa(&p1, 8, 1).map(|_| ()),
    ] {
        assert!(
            matches!(
                r,
                Err(NodeSetError::NodeDown {
                    node: NodeId(1),
                    ..
                })
            ),
            "{r:?}"
        );
    }
    assert_eq!(
        set.client(NodeId(1)).unwrap().status().qps().switches(),
        switches
    );
    let e = set
        .acquire(gone_addr, 8, LEASE, Access::Read, Mode::Shared)
        .unwrap_err();
    assert!(
        matches!(
            e,
            NodeSetError::NodeDown {
                node: NodeId(1),
                ..
            }
        ),
        "{e}"
    );

    // The other nodes work on: their data, a batch over both, new objects skip node 1.
    let mut b = set.batch();
    b.read(&p0, 0, 8).read(&p1, 0, 8).read(&p2, 0, 8);
    let out = b.execute();
    assert_eq!(out[0].as_ref().unwrap(), &OpResult::Read(vec![1; 8]));
    assert!(matches!(out[1], Err(NodeSetError::NodeDown { .. })));
    assert_eq!(out[2].as_ref().unwrap(), &OpResult::Read(vec![3; 8]));
    let fresh = set
        .allocate_many(&[64, 64, 64, 64], LEASE, Mode::Shared)
        .unwrap();
    assert!(fresh.iter().all(|p| p.node() != NodeId(1)));
    for p in &fresh {
        set.write(p, 0, b"fresh").unwrap();
    }
    // Revoking rights on every node: node 1's is reported, the others end.
    let held = |n: &EmbeddedNodes, i| {
        n.node(NodeId(i))
            .unwrap()
            .fresh_stats()
            .occupancy
            .map_or(0, |o| o.permissions)
    };
    assert_eq!((held(&n, 0), held(&n, 2)), (4, 3));
    let mut rights = fresh;
    rights.push(also_gone);
    let e = set.revoke_many(rights).unwrap_err();
    assert!(
        matches!(
            e,
            NodeSetError::NodeDown {
                node: NodeId(1),
                ..
            }
        ),
        "{e}"
    );
    assert_eq!((held(&n, 0), held(&n, 2)), (2, 1));
    assert!(matches!(
        set.free(p1),
        Err(NodeSetError::NodeDown {
            node: NodeId(1),
            ..
        })
    ));
    set.free(p0b).unwrap();
    set.free(p0).unwrap();
    set.free(p2).unwrap();
    assert_eq!(set.down_nodes(), [NodeId(1)]);
}

/// `free_many` frees objects on every node in one call, one outcome each and in order: an
/// object freed already is reported as gone, and does not keep the others from being freed.
fn free_many_frees_across_nodes_and_reports_each(t: Link) {
    let mut n = nodes(t, 2);
    let mut set = connect(&mut n);
    let mut perms = set
        .allocate_many(&[64, 64, 64, 64, 64], LEASE, Mode::Shared)
        .unwrap();
    assert_eq!((live_objects(&n, 0), live_objects(&n, 1)), (3, 2));
    // Another right over the third object, which is freed before the batch.
    let third = perms.remove(2);
    let again = set
        .acquire(third.addr(), 64, LEASE, Access::ReadWrite, Mode::Shared)
        .unwrap();
    set.free(third).unwrap();
    perms.insert(2, again);
    let outcomes = set.free_many(perms);
    assert_eq!(outcomes.len(), 5);
    for (i, o) in outcomes.iter().enumerate() {
        if i == 2 {
            let e = o.as_ref().unwrap_err();
            assert!(
                matches!(e.client_error(), Some(ClientError::NotFound)),
                "{e}"
            );
        } else {
            assert!(o.is_ok(), "object {i}: {o:?}");
        }
    }
    assert_eq!((live_objects(&n, 0), live_objects(&n, 1)), (0, 0));
}

/// A set whose every node is gone refuses allocations, naming the last node tried.
fn with_every_node_gone_allocation_says_so(t: Link) {
    let mut n = nodes(t, 2);
    let mut set = connect(&mut n);
    n.stop(NodeId(0));
    n.stop(NodeId(1));
    let e = set.allocate(64, LEASE, Mode::Shared).unwrap_err();
    assert!(
        matches!(&e, NodeSetError::NoNodeAvailable { last } if matches!(**last, NodeSetError::NodeDown { .. })),
        "{e}"
    );
    assert_eq!(set.down_nodes(), [NodeId(0), NodeId(1)]);
    // Until the retry time, nothing is sent: the same answer at once.
    let e = set.allocate(64, LEASE, Mode::Shared).unwrap_err();
    assert!(e.to_string().contains("unreachable"), "{e}");
}

patronus_core::both_transports!(
    objects_spread_and_hold_their_data,
    an_rkey_is_valid_on_its_own_node_only,
    a_stopped_node_fails_its_permissions_and_the_others_go_on,
    with_every_node_gone_allocation_says_so,
    free_many_frees_across_nodes_and_reports_each,
);
