//! An embedded cluster on a virtual clock for end-to-end tests, and a bounded wait on the
//! memory node's published state (never a sleep).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{EmbeddedCluster, Transport};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, NodeStats};
use rnic::VirtualClock;
use rnic::soft::{SoftConfig, SoftProvider};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A memory node whose permissions may live up to 1 s (virtual), defaults otherwise.
pub fn node_cfg() -> NodeConfig {
    NodeConfig {
        max_lifetime_us: 1_000_000,
        ..super::node_config()
    }
}

/// Conflicting acquires fail at once (the tests' virtual clock stands still while they would
/// wait).
pub fn no_wait() -> ClientConfig {
    ClientConfig {
        acquire_wait: Duration::ZERO,
        ..ClientConfig::default()
    }
}

/// Issues ops even past the local expiry, to see what the NIC does with them.
pub fn late_client() -> ClientConfig {
    ClientConfig {
        check_local_expiry: false,
        ..no_wait()
    }
}

/// A cluster and the virtual clock every device in it reads.
#[derive(Debug)]
pub struct Bed {
    /// The cluster.
    pub cluster: EmbeddedCluster,
    /// Its clock.
    pub clock: Arc<VirtualClock>,
}

/// Starts a cluster of `clients` clients with `node.isolation = iso` on a virtual clock.
pub fn bed(
    t: Transport,
    iso: Isolation,
    clients: usize,
    mut node: NodeConfig,
    client: ClientConfig,
) -> Bed {
    node.isolation = iso;
    node.key_seed = node.key_seed.or(Some(7)); // random key bytes, replayed exactly
    let clock = VirtualClock::new();
    let device = SoftConfig {
        clock: clock.clone(),
        seed: Some(7),
        ..SoftConfig::default()
    };
    let cluster = EmbeddedCluster::start(t, device, node, client, clients).unwrap();
    Bed { cluster, clock }
}

/// Spins until `cond` holds on fresh node stats (bounded wall time).
#[allow(clippy::disallowed_methods)]
pub fn wait_for(b: &Bed, what: &str, cond: impl Fn(&NodeStats) -> bool) -> NodeStats {
    wait_node(&b.cluster.node, what, cond)
}

/// Spins until `cond` holds on fresh stats of `node` (bounded wall time).
#[allow(clippy::disallowed_methods)]
pub fn wait_node(
    node: &MemoryNode<SoftProvider>,
    what: &str,
    cond: impl Fn(&NodeStats) -> bool,
) -> NodeStats {
    let t0 = Instant::now();
    loop {
        let s = node.fresh_stats();
        if cond(&s) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}: {s:?}"
        );
        std::thread::yield_now();
    }
}

/// The first two clients, both mutable.
pub fn two(b: &mut Bed) -> (&mut Client<SoftProvider>, &mut Client<SoftProvider>) {
    let (x, y) = b.cluster.clients.split_at_mut(1);
    (&mut x[0], &mut y[0])
}
