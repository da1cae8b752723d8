//! One-sided allocation end to end (`docs/onesided.md`), on both transports: clients allocate
//! chunks by SEND with the manager thread held (no CPU of the node on the path), each chunk
//! works through its client's data QP only, a client's budget bounds what it takes, and a
//! client that leaves gives every chunk back, zeroed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_core::client::{ClientConfig, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, OneSidedConfig};
use std::collections::HashSet;
use std::time::Duration;
use support::bed::{bed, node_cfg};

type Node = patronus_core::manager::MemoryNode<rnic::soft::SoftProvider>;

const PER_CLIENT: u32 = 8;
const CHUNKS: u32 = 64;

fn node() -> NodeConfig {
    NodeConfig {
        one_sided: Some(OneSidedConfig {
            chunk_bytes: 4096,
            chunks: CHUNKS,
            per_client: PER_CLIENT,
        }),
        ..node_cfg()
    }
}

fn client() -> ClientConfig {
    ClientConfig {
        // The test's exhaustion waits this long (wall time) at most.
        rpc_timeout: Duration::from_millis(300),
        ..ClientConfig::default()
    }
}

fn allocations_need_no_manager(t: Link) {
    let mut b = bed(t, Isolation::Type2, 2, node(), client());
    let (first, rest) = b.cluster.clients.split_at_mut(1);
    let (a, other) = (&mut first[0], &mut rest[0]);
    // The first opens the allocation connection; the node posts its chains as it accepts it.
    let mut chunks = vec![a.allocate_one_sided().unwrap()];
    {
        let _hold = b.cluster.node.hold_managers();
        for _ in 1..PER_CLIENT {
            chunks.push(a.allocate_one_sided().unwrap());
        }
        // Each chunk is the client's, zeroed, through its data QP.
        for (i, c) in chunks.iter().enumerate() {
            let mut zero = [0xffu8; 64];
            a.read(c, 0, &mut zero).unwrap();
            assert_eq!(zero, [0; 64], "chunk {i} zeroed");
            a.write(c, 8, &[i as u8 + 1; 8]).unwrap();
        }
        for (i, c) in chunks.iter().enumerate() {
            let mut got = [0u8; 8];
            a.read(c, 8, &mut got).unwrap();
            assert_eq!(got, [i as u8 + 1; 8]);
        }
    }
    let addrs: HashSet<u64> = chunks.iter().map(|c| c.addr()).collect();
    assert_eq!(addrs.len(), PER_CLIENT as usize, "distinct chunks");
    let stats = b.cluster.node.one_sided_stats().unwrap();
    assert_eq!(
        stats.free_chunks,
        u64::from(CHUNKS - PER_CLIENT),
        "{stats:?}"
    );

    // No lease to extend.
    assert!(matches!(
        a.extend(&chunks[0], Duration::from_millis(10)),
        Err(ClientError::OneSidedChunk(_))
    ));
    // Past its budget: no chunk is queued for it.
    let e = a.allocate_one_sided().unwrap_err();
    assert!(
        matches!(e, ClientError::NoChunk | ClientError::RpcTimeout),
        "{e:?}"
    );

    // Another client with the first one's grant: its own data QP is refused by the NIC, to
    // read it and to free it; the chunk stays the first client's.
    let mut buf = [0u8; 8];
    let e = other.read(&chunks[0], 8, &mut buf).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Denied(_) | ClientError::FailedAfterFailover(_)
        ),
        "{e:?}"
    );
    let stolen = chunks.remove(0);
    let kept_addr = stolen.addr();
    assert!(
        other.free(stolen).is_err(),
        "a foreign free fails in the NIC"
    );
    // And its own allocations are other chunks.
    let theirs = other.allocate_one_sided().unwrap();
    assert!(!addrs.contains(&theirs.addr()));
    let mut got = [0xffu8; 16];
    other.read(&theirs, 0, &mut got).unwrap();
    assert_eq!(got, [0; 16]);

    // The first client frees four chunks with the manager held: the NIC invalidates each
    // window at once; the manager zeroes and returns them once it runs again.
    {
        let _hold = b.cluster.node.hold_managers();
        for _ in 0..4 {
            a.free(chunks.pop().unwrap()).unwrap();
        }
    }
    let mut back = [0u8; 8];
    let survivor = chunks.iter().find(|c| c.addr() != kept_addr).unwrap();
    a.read(survivor, 8, &mut back).unwrap();
    wait_stats(&b.cluster.node, &b.clock, "the frees taken", |s| {
        s.freed == 4
    });
    // Its budget has room again: four more, zeroed (freed ones among them, maybe). The
    // first attempt opens a new allocation connection (the last one broke when the budget
    // ran out): what the client holds stays its own, bytes and all.
    let held = chunks.len();
    for _ in 0..4 {
        let c = wait_allocation(&b.cluster.node, a);
        let mut zero = [0xffu8; 16];
        a.read(&c, 8, &mut zero).unwrap();
        assert_eq!(zero, [0; 16], "a reused chunk is zeroed");
        chunks.push(c);
    }
    for c in &chunks[..held] {
        let mut kept = [0u8; 8];
        a.read(c, 8, &mut kept).unwrap();
        assert_ne!(
            kept, [0; 8],
            "a chunk held across a new connection keeps its bytes"
        );
    }

    // The first client leaves: everything it had comes back, zeroed. (The chunk the other
    // client failed to free is among them.)
    drop(chunks);
    b.cluster.clients.remove(0);
    wait_stats(
        &b.cluster.node,
        &b.clock,
        "the departed client's chunks back",
        |s| s.free_chunks == u64::from(CHUNKS - PER_CLIENT),
    );
}

/// Allocates once the manager refilled the queue (bounded).
#[allow(clippy::disallowed_methods)] // a bound on a wait for the manager thread
fn wait_allocation(
    node: &Node,
    a: &mut patronus_core::client::Client<rnic::soft::SoftProvider>,
) -> patronus_core::client::Perm {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match a.allocate_one_sided() {
            Ok(p) => return p,
            Err(ClientError::NoChunk | ClientError::RpcTimeout) => {}
            Err(e) => panic!("{e:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "no refill");
        node.fresh_stats();
    }
}

/// Waits (bounded) until the node's one-sided statistics say `what`.
#[allow(clippy::disallowed_methods)] // a bound on a wait for the manager thread
fn wait_stats(
    node: &Node,
    clock: &rnic::VirtualClock,
    what: &str,
    cond: impl Fn(&patronus_core::manager::OneSidedStats) -> bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        // Fresh statistics make the manager turn (its session sweep ends departed sessions).
        node.fresh_stats();
        let s = node.one_sided_stats().unwrap();
        if cond(&s) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {s:?}");
        clock.advance(Duration::from_millis(1));
        std::thread::yield_now();
    }
}

#[test]
fn in_process() {
    allocations_need_no_manager(Link::InProc);
}

#[test]
fn over_tcp() {
    allocations_need_no_manager(Link::Tcp);
}

#[test]
fn a_node_without_the_verbs_or_type_2_refuses_to_start() {
    let cfg = NodeConfig {
        isolation: Isolation::SharedPd,
        ..node()
    };
    let ctx = rnic::soft::SoftFabric::new().open_device(rnic::soft::SoftConfig::default());
    let e = patronus_core::manager::MemoryNode::<rnic::soft::SoftProvider>::start(ctx, cfg)
        .unwrap_err();
    assert!(e.to_string().contains("type-2"), "{e}");
}
