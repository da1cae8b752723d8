//! Test support.
//!
//! - [`fake_nic`]: deterministic simulation for the manager-core tests — a fake NIC + memory
//!   that executes [`NicOp`](patronus_core::manager::NicOp)s like the soft NIC does, and a
//!   [`Sim`] driver with a virtual clock that pumps the sans-IO core (`begin` → CASes → `plan`
//!   → chain → `finish` → header writes → replies) exactly as the memory node's runner does.
//!   It runs the manager split into shards as the node does ([`test_shards`]; the model
//!   tests always run both 1 and several), routing requests as clients do.
//! - [`bed`]: an embedded cluster on a virtual clock for end-to-end tests.
//! - [`queued`]: devices on a queued network (delays, faults) timed by a virtual clock.
//! - [`client`]: short forms of the client's ticket API.
//! - [`echo`]: the control channel on its own, with a test-controlled server end.
#![allow(dead_code)]

pub mod client;

use patronus_core::manager::NodeConfig;

/// The shard count the tests run the manager with unless a test names one:
/// `PATRONUS_TEST_SHARDS` (`scripts/test` runs the core suite with 1 and again with 4), else
/// 1. Only the tests read this variable: a shipped node's shard count is its configuration's.
pub fn test_shards() -> usize {
    std::env::var("PATRONUS_TEST_SHARDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// The node configuration every end-to-end test starts from: the defaults with
/// [`test_shards`] shards.
pub fn node_config() -> NodeConfig {
    NodeConfig {
        shards: test_shards(),
        ..NodeConfig::default()
    }
}

/// `every_mode! { name => body; ... }` stamps out one `#[test] fn name` per test bed: both
/// transports of the software RNIC × the three isolation modes, in modules `inproc`, `tcp`,
/// `inproc_pd_per_client`, `tcp_pd_per_client`, `inproc_type2` and `tcp_type2`. `body` is
/// called as `body(Link, Isolation)`; the invoking file must have both types in scope.
#[allow(unused_macros)]
macro_rules! every_mode {
    ($($name:ident => $body:expr;)*) => {
        mod inproc {
            use super::*;
            $(#[test] fn $name() { $body(Link::InProc, Isolation::SharedPd); })*
        }
        mod tcp {
            use super::*;
            $(#[test] fn $name() { $body(Link::Tcp, Isolation::SharedPd); })*
        }
        mod inproc_pd_per_client {
            use super::*;
            $(#[test] fn $name() { $body(Link::InProc, Isolation::PdPerClient); })*
        }
        mod tcp_pd_per_client {
            use super::*;
            $(#[test] fn $name() { $body(Link::Tcp, Isolation::PdPerClient); })*
        }
        mod inproc_type2 {
            use super::*;
            $(#[test] fn $name() { $body(Link::InProc, Isolation::Type2); })*
        }
        mod tcp_type2 {
            use super::*;
            $(#[test] fn $name() { $body(Link::Tcp, Isolation::Type2); })*
        }
    };
}

pub mod bed;
pub mod echo;
pub mod fake_nic;
pub mod queued;

#[allow(unused_imports)]
pub use fake_nic::*;

/// `every_rig! { name => body; ... }`: what [`every_mode!`] stamps out, and the same on the
/// rdma-core device of `PATRONUS_RDMA_DEVICE` × the three modes, in modules `rdma_shared_pd`,
/// `rdma_pd_per_client` and `rdma_type2`, `#[ignore]`d (`scripts/rxe-suites` runs them with
/// `--ignored rdma_` on Soft-RoCE). `body` is called as `body(rig, Isolation)` with a
/// [`bed::Rig`]; the invoking file must have `Link`, `Rdma` and `Isolation` in scope.
#[allow(unused_macros)]
macro_rules! every_rig {
    ($($name:ident => $body:expr;)*) => {
        every_mode! { $($name => $body;)* }
        mod rdma_shared_pd {
            use super::*;
            $(#[test] #[ignore = "needs an RDMA device: PATRONUS_RDMA_DEVICE"]
              fn $name() { $body(Rdma, Isolation::SharedPd); })*
        }
        mod rdma_pd_per_client {
            use super::*;
            $(#[test] #[ignore = "needs an RDMA device: PATRONUS_RDMA_DEVICE"]
              fn $name() { $body(Rdma, Isolation::PdPerClient); })*
        }
        mod rdma_type2 {
            use super::*;
            $(#[test] #[ignore = "needs an RDMA device: PATRONUS_RDMA_DEVICE"]
              fn $name() { $body(Rdma, Isolation::Type2); })*
        }
    };
}
