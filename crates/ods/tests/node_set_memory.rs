//! The data structures over several memory nodes (`PatronusMemory::over`), on both transports: the
//! remote-memory contract holds, a RACE hash table (its blocks and subtables spread over
//! three nodes, 48-bit pointers holding global addresses) and a queue whose segments go round
//! the nodes work unchanged, and a second compute node finds the table's root by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::client::ClientConfig;
use patronus_core::cluster::{EmbeddedNodes, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::nodes::{NodeId, NodeSetConfig};
use patronus_core::proto::messages::Mode;
use patronus_ods::queue::{Queue, QueueConfig, QueueOptions};
use patronus_ods::race::{self, LockMode};
use patronus_ods::{MemError, NamedRoots, PatronusMemory, RemoteMemory, conformance};
use race_support::{key, opts, small, value};
use rnic::VirtualClock;
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::Duration;

type Mem = PatronusMemory<SoftProvider>;

const LEASE: Duration = Duration::from_millis(500);

/// `count` memory nodes on a virtual clock (leases end only when a test moves time).
fn nodes(t: Link, count: usize) -> EmbeddedNodes {
    let device = SoftConfig {
        clock: VirtualClock::new(),
        seed: Some(11),
        ..SoftConfig::default()
    };
    let node = NodeConfig {
        key_seed: Some(11),
        pool_bytes: 16 << 20,
        ..race_support::node_cfg()
    };
    EmbeddedNodes::start(t, device, node, count).unwrap()
}

fn memory(n: &mut EmbeddedNodes) -> Mem {
    let cfg = ClientConfig {
        acquire_wait: Duration::ZERO,
        ..ClientConfig::default()
    };
    PatronusMemory::over(n.connect(&cfg, NodeSetConfig::default()).unwrap())
}

fn live_objects(n: &EmbeddedNodes, i: u16) -> usize {
    n.node(NodeId(i))
        .unwrap()
        .fresh_stats()
        .occupancy
        .map_or(0, |o| o.live_objects)
}

fn the_contract_holds_across_nodes(t: Link) {
    let mut n = nodes(t, 3);
    let (mut mem, mut other) = (memory(&mut n), memory(&mut n));
    let sizes = [4096, 4096, 64, 64];
    let blocks = mem.allocate(&sizes, LEASE, Mode::Shared).unwrap();
    let on: Vec<u16> = blocks.iter().map(|b| b.node().0).collect();
    assert_eq!(on, [0, 1, 2, 0]);
    conformance::allocated_objects_are_zeroed_and_disjoint(&mut mem, &blocks, &sizes);
    // `a` on node 0, `b` on node 2: one batch over two nodes.
    let (a, b) = (&blocks[0], &blocks[2]);
    conformance::one_batch_runs_in_order(&mut mem, a, b);
    let seen = conformance::a_named_root_is_shared(&mut mem, &mut other, a, LEASE);
    let mut blocks = blocks.into_iter();
    mem.free(blocks.next().unwrap()).unwrap();
    conformance::a_freed_objects_stale_right_reads_nothing_foreign(&mut other, &seen, LEASE);
    for b in blocks {
        mem.free(b).unwrap();
    }
    other.unpublish("block").unwrap();
    assert_eq!(other.lookup("block"), Err(MemError::NotFound));
    // A node-local address is no address of the set.
    let local = seen.perm().addr();
    let r = other.acquire(local, 8, LEASE, patronus_core::Access::Read, Mode::Shared);
    assert!(matches!(r, Err(MemError::Invalid(_))), "{r:?}");
}

fn a_race_table_spreads_over_the_nodes(t: Link) {
    let mut n = nodes(t, 3);
    let mut mem = memory(&mut n);
    let root = race::create(&mut mem, small(LockMode::Lease)).unwrap();
    mem.publish("table", root, 64).unwrap();
    let mut c = race::open(&mut mem, root, opts()).unwrap();
    let count = 200;
    for i in 0..count {
        c.insert(&mut mem, &key(i), &value(i, 0)).unwrap();
    }
    assert!(c.stats().splits >= 4, "{:?}", c.stats());
    for i in 0..count {
        assert_eq!(
            c.get(&mut mem, &key(i)).unwrap(),
            Some(value(i, 0)),
            "key {i}"
        );
    }
    for i in (0..count).step_by(3) {
        c.update(&mut mem, &key(i), &value(i, 1)).unwrap();
    }
    for i in (1..count).step_by(3) {
        c.delete(&mut mem, &key(i)).unwrap();
    }
    let mut all = c.scan(&mut mem).unwrap();
    all.sort();
    let mut want: Vec<_> = (0..count)
        .filter(|i| i % 3 != 1)
        .map(|i| (key(i), value(i, u64::from(i % 3 == 0))))
        .collect();
    want.sort();
    assert_eq!(all, want);
    // Every node holds part of the table.
    for i in 0..3 {
        assert!(
            live_objects(&n, i) > 10,
            "node {i}: {}",
            live_objects(&n, i)
        );
    }
    // Another compute node finds the table by name and reads every key.
    let mut other = memory(&mut n);
    let (at, _) = other.lookup("table").unwrap();
    assert_eq!(at, root);
    let mut d = race::open(&mut other, at, opts()).unwrap();
    for (k, v) in &want {
        assert_eq!(d.get(&mut other, k).unwrap().as_ref(), Some(v));
    }
}

fn a_queue_links_segments_on_every_node(t: Link) {
    let mut n = nodes(t, 3);
    let mut mem = memory(&mut n);
    let config = QueueConfig {
        entries: 4,
        item_size: 16,
    };
    let root = Queue::create(&mut mem, &config).unwrap();
    let opts = QueueOptions {
        max_steps: 20_000,
        ..QueueOptions::default()
    };
    let mut q = Queue::open(mem, root, opts).unwrap();
    let item = |i: u64| {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&i.to_le_bytes());
        b
    };
    for i in 0..24 {
        q.push(&item(i)).unwrap();
    }
    // Segments of four entries went round the nodes.
    for i in 0..3 {
        assert!(live_objects(&n, i) >= 2, "node {i}");
    }
    for i in 0..24 {
        assert_eq!(q.pop().unwrap(), Some(item(i).to_vec()));
    }
    assert_eq!(q.pop().unwrap(), None);
    let s = q.stats();
    assert_eq!((s.pushes, s.pops), (24, 24));
}

patronus_core::both_transports!(
    the_contract_holds_across_nodes,
    a_race_table_spreads_over_the_nodes,
    a_queue_links_segments_on_every_node,
);
