//! What the admin endpoint and the shutdown path need of a running node, whatever its RNIC.

use patronus_core::MemoryNode;
use patronus_core::manager::{NodeStats, NodeStatus};
use rnic::Provider;

/// A running memory node, seen from the daemon.
pub trait NodeView: Send + Sync + std::fmt::Debug {
    /// A fresh snapshot of its counters and pools.
    fn stats(&self) -> NodeStats;
    /// Its live permissions and sessions, with a fresh snapshot.
    fn status(&self) -> (NodeStatus, NodeStats);
    /// Its pool, bytes.
    fn pool_bytes(&self) -> u64;
    /// Whether it serves although its NIC does not enforce window bounds.
    fn unenforced_window_bounds(&self) -> bool;
}

/// A node and its pool size.
pub struct Served<P: Provider> {
    /// The node.
    pub node: MemoryNode<P>,
    /// Its pool, bytes.
    pub pool_bytes: u64,
}

impl<P: Provider> std::fmt::Debug for Served<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("pool_bytes", &self.pool_bytes)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> NodeView for Served<P>
where
    MemoryNode<P>: Send + Sync,
{
    fn stats(&self) -> NodeStats {
        self.node.fresh_stats()
    }

    fn status(&self) -> (NodeStatus, NodeStats) {
        self.node.status()
    }

    fn pool_bytes(&self) -> u64 {
        self.pool_bytes
    }

    fn unenforced_window_bounds(&self) -> bool {
        self.node.unenforced_window_bounds()
    }
}
