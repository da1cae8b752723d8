//! A memory node and clients on a virtual clock, for the data structures' tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // helpers, not #[test] fns

use patronus_core::client::ClientConfig;
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_ods::PatronusMemory;
use rnic::VirtualClock;
use rnic::soft::{SoftConfig, SoftProvider};
use std::sync::Arc;

/// A running cluster whose clients were handed out as remote memory.
pub struct Bed {
    /// The cluster (its node and devices; its client list is empty).
    pub cluster: EmbeddedCluster,
    /// The clock every device reads.
    pub clock: Arc<VirtualClock>,
}

/// A memory node with `node` and `clients` clients on transport `t`, each as remote memory.
pub fn bed(
    t: Link,
    clients: usize,
    node: NodeConfig,
    client: ClientConfig,
) -> (Bed, Vec<PatronusMemory<SoftProvider>>) {
    let clock = VirtualClock::new();
    let device = SoftConfig {
        clock: clock.clone(),
        seed: Some(11),
        ..SoftConfig::default()
    };
    let node = NodeConfig {
        key_seed: node.key_seed.or(Some(11)),
        ..node
    };
    let mut cluster = EmbeddedCluster::start(t, device, node, client, clients).unwrap();
    let mems = std::mem::take(&mut cluster.clients)
        .into_iter()
        .map(PatronusMemory::new)
        .collect();
    (Bed { cluster, clock }, mems)
}
