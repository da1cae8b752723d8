//! A baseline memory node and a client device on either transport, for the baselines' tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // helpers, not #[test] fns

use patronus_bench::baseline::{BaselineConfig, BaselineError, BaselineNode};
use patronus_core::cluster::Link;
use rnic::WcStatus;
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use std::time::Duration;

pub type Node = BaselineNode<SoftProvider>;

/// A running node and a device its clients connect from.
pub struct Bed {
    /// The in-process fabric (none over TCP).
    pub fabric: Option<SoftFabric>,
    pub node: Node,
    pub dev: SoftContext,
}

/// A node with `cfg` and a client device, on transport `t`.
pub fn bed(t: Link, cfg: BaselineConfig) -> Bed {
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let (fabric, node_dev, dev) = match t {
        Link::InProc => {
            let f = SoftFabric::new();
            let (n, d) = (
                f.open_device(SoftConfig::default()),
                f.open_device(SoftConfig::default()),
            );
            (Some(f), n, d)
        }
        Link::Tcp => (
            None,
            TcpNode::open(SoftConfig::default(), loopback).unwrap(),
            TcpNode::open(SoftConfig::default(), loopback).unwrap(),
        ),
    };
    let node = Node::start(node_dev, cfg).unwrap();
    Bed { fabric, node, dev }
}

/// A small node: 1 MiB of pool, with the whole-pool region unless `mr` (an MR node has none).
pub fn small(mr: bool) -> BaselineConfig {
    BaselineConfig {
        pool_bytes: 1 << 20,
        srq_depth: 64,
        whole_pool_region: !mr,
        ..BaselineConfig::default()
    }
}

/// Whether the NIC refused a one-sided access.
pub fn is_rejected<T>(r: &Result<T, BaselineError>) -> bool {
    matches!(
        r,
        Err(BaselineError::Remote(
            WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError
        ))
    )
}

/// Polls `cond` until it holds, for at most `limit` (wall time); returns whether it held.
#[allow(clippy::disallowed_methods)] // a test's patience is wall time
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
    cond()
}
