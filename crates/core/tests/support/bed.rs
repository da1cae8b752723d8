//! An embedded cluster on a virtual clock for end-to-end tests, and a bounded wait on the
//! memory node's published state (never a sleep).
//!
//! A [`Rig`] says where the cluster's devices come from: the software RNIC on either
//! transport ([`Link`]), over TCP with mutual TLS ([`TlsTcp`]), or the rdma-core device named
//! by `PATRONUS_RDMA_DEVICE` ([`Rdma`]). The memory node's leases follow the bed's virtual clock on every rig: the
//! rdma provider takes its clock from its configuration, and the NIC itself keeps no time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::{DeviceRole, EmbeddedCluster, Link};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, NodeStats};
use patronus_core::nic_check::Check;
use rnic::soft::SoftConfig;
use rnic::{Provider, VirtualClock};
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a test bed's devices come from.
pub trait Rig: Copy + std::fmt::Debug {
    /// The provider.
    type P: Provider;
    /// A memory node and `clients` clients on devices of this rig, timed by `clock`.
    fn cluster(
        self,
        clock: &Arc<VirtualClock>,
        node: NodeConfig,
        client: ClientConfig,
        clients: usize,
    ) -> EmbeddedCluster<Self::P>;
    /// Whether the cluster's NIC checks an access against the window's own range, as its
    /// node's self-check found. Every NIC does but Soft-RoCE (`docs/rdma.md`,
    /// `mw-bounds-not-enforced`), where an access outside a window but inside its region
    /// lands: tests that depend on bounds assert that leak.
    fn enforces_window_bounds(self, cluster: &EmbeddedCluster<Self::P>) -> bool {
        cluster.node.nic_check().enforces(Check::WindowBounds)
    }
    /// How much longer than on the software RNIC a test waits for a round trip it expects
    /// to complete: Soft-RoCE runs under qemu's emulation, where connecting a client (its
    /// domain's windows allocated and bound) can take longer than a short RPC timeout.
    fn patience(self) -> u32 {
        1
    }
}

impl Rig for Link {
    type P = rnic::soft::SoftProvider;
    fn cluster(
        self,
        clock: &Arc<VirtualClock>,
        node: NodeConfig,
        client: ClientConfig,
        clients: usize,
    ) -> EmbeddedCluster<Self::P> {
        let device = SoftConfig {
            clock: clock.clone(),
            seed: Some(7),
            ..SoftConfig::default()
        };
        EmbeddedCluster::start(self, device, node, client, clients).unwrap()
    }
}

/// The software RNIC over TCP with mutual TLS 1.3 on every connection: a CA made for the
/// cluster signs one certificate (valid for 127.0.0.1) that every device presents.
#[derive(Clone, Copy, Debug)]
pub struct TlsTcp;

impl Rig for TlsTcp {
    type P = rnic::soft::SoftProvider;
    fn cluster(
        self,
        clock: &Arc<VirtualClock>,
        node: NodeConfig,
        client: ClientConfig,
        clients: usize,
    ) -> EmbeddedCluster<Self::P> {
        let options = rnic::soft::TcpOptions {
            tls: Some(rnic::soft::TlsOptions::ephemeral("device").unwrap()),
            ..rnic::soft::TcpOptions::default()
        };
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        EmbeddedCluster::start_on(
            |role| {
                let seed = match role {
                    DeviceRole::Node => 7,
                    DeviceRole::Client(i) => 8 + i as u64,
                };
                let device = SoftConfig {
                    clock: clock.clone(),
                    seed: Some(seed),
                    ..SoftConfig::default()
                };
                Ok(rnic::soft::TcpNode::open_with(
                    device,
                    loopback,
                    options.clone(),
                )?)
            },
            node,
            client,
            clients,
        )
        .unwrap()
    }
}

/// The rdma-core device `PATRONUS_RDMA_DEVICE` (GID index `PATRONUS_RDMA_GID`, else the
/// provider's choice): one context for the node and one per client, handshakes on loopback.
/// The tests on it are `#[ignore]`d; run without a device they fail, never pass unrun.
#[derive(Clone, Copy, Debug)]
pub struct Rdma;

impl Rdma {
    fn config(clock: &Arc<VirtualClock>) -> RdmaConfig {
        let device = std::env::var("PATRONUS_RDMA_DEVICE").expect(
            "an rdma test needs PATRONUS_RDMA_DEVICE (scripts/rxe-suites runs them on Soft-RoCE)",
        );
        RdmaConfig {
            device: Some(device),
            gid_index: std::env::var("PATRONUS_RDMA_GID")
                .ok()
                .map(|g| g.parse().expect("PATRONUS_RDMA_GID is a GID index")),
            clock: clock.clone(),
            ..RdmaConfig::default()
        }
    }
}

impl Rig for Rdma {
    type P = RdmaProvider;
    fn cluster(
        self,
        clock: &Arc<VirtualClock>,
        node: NodeConfig,
        client: ClientConfig,
        clients: usize,
    ) -> EmbeddedCluster<Self::P> {
        let config = Rdma::config(clock);
        // Soft-RoCE fails the window-bounds check: the suites run there anyway, and the
        // tests that rest on bounds assert the leak (`Rig::enforces_window_bounds`).
        let node = NodeConfig {
            allow_unenforced_window_bounds: true,
            ..node
        };
        EmbeddedCluster::start_on(
            |_: DeviceRole| Ok(RdmaContext::open(config.clone())?),
            node,
            client,
            clients,
        )
        .unwrap()
    }
    fn patience(self) -> u32 {
        10
    }
}

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
pub struct Bed<P: Provider = rnic::soft::SoftProvider> {
    /// The cluster.
    pub cluster: EmbeddedCluster<P>,
    /// Its clock.
    pub clock: Arc<VirtualClock>,
}

/// Starts a cluster of `clients` clients with `node.isolation = iso` on a virtual clock.
pub fn bed<R: Rig>(
    t: R,
    iso: Isolation,
    clients: usize,
    mut node: NodeConfig,
    client: ClientConfig,
) -> Bed<R::P> {
    node.isolation = iso;
    node.key_seed = node.key_seed.or(Some(7)); // random key bytes, replayed exactly
    let clock = VirtualClock::new();
    let cluster = t.cluster(&clock, node, client, clients);
    Bed { cluster, clock }
}

/// Spins until `cond` holds on fresh node stats (bounded wall time).
#[allow(clippy::disallowed_methods)]
pub fn wait_for<P: Provider>(
    b: &Bed<P>,
    what: &str,
    cond: impl Fn(&NodeStats) -> bool,
) -> NodeStats {
    wait_node(&b.cluster.node, what, cond)
}

/// Spins until `cond` holds on fresh stats of `node` (bounded wall time).
#[allow(clippy::disallowed_methods)]
pub fn wait_node<P: Provider>(
    node: &MemoryNode<P>,
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
pub fn two<P: Provider>(b: &mut Bed<P>) -> (&mut Client<P>, &mut Client<P>) {
    let (x, y) = b.cluster.clients.split_at_mut(1);
    (&mut x[0], &mut y[0])
}
