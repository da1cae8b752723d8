//! Helpers of the FaaS tests.
#![allow(dead_code)] // each test file uses some

use patronus_core::cluster::EmbeddedCluster;

/// Permissions the memory node holds now.
pub fn live_permissions(c: &EmbeddedCluster) -> usize {
    c.node.fresh_stats().occupancy.map_or(0, |o| o.permissions)
}

/// Objects allocated on the memory node now.
pub fn live_objects(c: &EmbeddedCluster) -> usize {
    c.node.fresh_stats().occupancy.map_or(0, |o| o.live_objects)
}
