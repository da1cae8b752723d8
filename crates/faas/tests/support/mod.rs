//! Helpers of the FaaS tests.
#![allow(dead_code)] // each test file uses some

use patronus_core::cluster::EmbeddedCluster;

/// Permissions the memory node holds now.
pub fn live_permissions(c: &EmbeddedCluster) -> usize {
    c.node.fresh_stats().occupancy.map_or(0, |o| o.permissions)
}

/// A test body run on both transports, as `inproc::name` and `tcp::name`.
#[macro_export]
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        mod inproc {
            $(#[test] fn $name() { super::$name(patronus_core::cluster::Link::InProc) })*
        }
        mod tcp {
            $(#[test] fn $name() { super::$name(patronus_core::cluster::Link::Tcp) })*
        }
    };
}

/// Objects allocated on the memory node now.
pub fn live_objects(c: &EmbeddedCluster) -> usize {
    c.node.fresh_stats().occupancy.map_or(0, |o| o.live_objects)
}
