//! An embedded cluster: a memory node and N clients in one process. On the software RNIC
//! ([`EmbeddedCluster::start`]) the links are in-process or the memory node is behind TCP;
//! on any other provider ([`EmbeddedCluster::start_on`]) the caller opens the devices, e.g.
//! contexts of one rdma-core device for the node and each client. [`EmbeddedNodes`]: several
//! memory nodes in one process, for a [`NodeSet`] to connect to.

/// Defines a `#[test]` per named test body `fn name(link: Link)`, once on each transport, as
/// `inproc::name` and `tcp::name` (the test crates of the workspace share it).
#[macro_export]
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        mod inproc {
            $(#[test] fn $name() { super::$name($crate::cluster::Link::InProc) })*
        }
        mod tcp {
            $(#[test] fn $name() { super::$name($crate::cluster::Link::Tcp) })*
        }
    };
}

use crate::client::{Client, ClientConfig, ClientError};
use crate::manager::{MemoryNode, NodeConfig, NodeError};
use crate::nodes::{NodeId, NodeSet, NodeSetConfig, NodeSetError};
use rnic::Provider;
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use std::net::SocketAddr;

/// How the cluster's software devices reach each other: in-process links or TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// In-process links (the requester's thread runs the responder).
    InProc,
    /// TCP over loopback (memory node and clients still in this process).
    Tcp,
}

/// A running embedded cluster, on the software RNIC unless `P` says otherwise.
#[derive(Debug)]
pub struct EmbeddedCluster<P: Provider = SoftProvider> {
    /// The memory node.
    pub node: MemoryNode<P>,
    /// Its device.
    pub node_ctx: P::Context,
    /// The clients.
    pub clients: Vec<Client<P>>,
    /// Their devices (one per client: one compute node each).
    pub client_ctxs: Vec<P::Context>,
    _fabric: Option<SoftFabric>,
}

/// Which device of a cluster [`EmbeddedCluster::start_on`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRole {
    /// The memory node's (it listens for clients).
    Node,
    /// Client `i`'s (one compute node each).
    Client(usize),
}

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The memory node failed.
    #[error("memory node: {0}")]
    Node(#[from] NodeError),
    /// A client failed to connect.
    #[error("client: {0}")]
    Client(#[from] ClientError),
    /// A device failed to open.
    #[error("device: {0}")]
    Device(#[from] rnic::VerbsError),
    /// A node set failed to connect.
    #[error("node set: {0}")]
    Nodes(#[from] NodeSetError),
}

impl EmbeddedCluster<SoftProvider> {
    /// Starts a memory node and `clients` clients on the software RNIC.
    pub fn start(
        transport: Link,
        device: SoftConfig,
        node_cfg: NodeConfig,
        client_cfg: ClientConfig,
        clients: usize,
    ) -> Result<Self, ClusterError> {
        let loopback: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
        let (fabric, node_ctx) = match transport {
            Link::InProc => {
                let f = SoftFabric::new();
                let ctx = f.open_device(device.clone());
                (Some(f), ctx)
            }
            Link::Tcp => (None, TcpNode::open(device.clone(), loopback)?),
        };
        let mut cluster = EmbeddedCluster::start_on(
            |role| match role {
                DeviceRole::Node => Ok(node_ctx.clone()),
                DeviceRole::Client(i) => {
                    let mut dc = device.clone();
                    dc.seed = dc.seed.map(|s| s.wrapping_add(1 + i as u64));
                    Ok(match &fabric {
                        Some(f) => f.open_device(dc),
                        None => TcpNode::open(dc, loopback)?,
                    })
                }
            },
            node_cfg,
            client_cfg,
            clients,
        )?;
        cluster._fabric = fabric;
        Ok(cluster)
    }
}

impl<P: Provider> EmbeddedCluster<P> {
    /// Starts a memory node and `clients` clients on devices that `open` returns: first the
    /// node's, then each client's in turn.
    pub fn start_on(
        mut open: impl FnMut(DeviceRole) -> Result<P::Context, ClusterError>,
        node_cfg: NodeConfig,
        client_cfg: ClientConfig,
        clients: usize,
    ) -> Result<Self, ClusterError> {
        let node_ctx = open(DeviceRole::Node)?;
        let node = MemoryNode::start(node_ctx.clone(), node_cfg)?;
        let mut client_ctxs = Vec::with_capacity(clients);
        let mut cs = Vec::with_capacity(clients);
        for i in 0..clients {
            let ctx = open(DeviceRole::Client(i))?;
            cs.push(Client::connect(&ctx, node.address(), client_cfg.clone())?);
            client_ctxs.push(ctx);
        }
        Ok(EmbeddedCluster {
            node,
            node_ctx,
            clients: cs,
            client_ctxs,
            _fabric: None,
        })
    }
}

/// Several memory nodes running in one process, each on its own device, on one transport; a
/// compute node's [`NodeSet`] over them comes from [`EmbeddedNodes::connect`]. A node can be
/// stopped mid-way ([`EmbeddedNodes::stop`]): its manager threads end and its device closes,
/// so every connection to it fails, as when a machine goes away.
#[derive(Debug)]
pub struct EmbeddedNodes {
    /// The running nodes and their devices, by index (`None` once stopped).
    nodes: Vec<Option<(MemoryNode<SoftProvider>, SoftContext)>>,
    /// Where each node listened (kept after it stopped: connecting there fails).
    addresses: Vec<rnic::soft::SoftAddress>,
    transport: Link,
    device: SoftConfig,
    /// Client devices opened so far (their seeds differ).
    opened: u64,
    fabric: Option<SoftFabric>,
}

impl EmbeddedNodes {
    /// Starts `count` memory nodes with configuration `node_cfg`.
    pub fn start(
        transport: Link,
        device: SoftConfig,
        node_cfg: NodeConfig,
        count: usize,
    ) -> Result<Self, ClusterError> {
        let fabric = (transport == Link::InProc).then(SoftFabric::new);
        let mut this = EmbeddedNodes {
            nodes: Vec::with_capacity(count),
            addresses: Vec::with_capacity(count),
            transport,
            device,
            opened: 0,
            fabric,
        };
        for _ in 0..count {
            let ctx = this.open_device()?;
            let node = MemoryNode::<SoftProvider>::start(ctx.clone(), node_cfg.clone())?;
            this.addresses.push(node.address().clone());
            this.nodes.push(Some((node, ctx)));
        }
        Ok(this)
    }

    /// A new device on the nodes' transport (its seed differs from every earlier one's).
    pub fn open_device(&mut self) -> Result<SoftContext, ClusterError> {
        let mut dc = self.device.clone();
        dc.seed = dc.seed.map(|s| s.wrapping_add(self.opened));
        self.opened += 1;
        Ok(match &self.fabric {
            Some(f) => f.open_device(dc),
            None => TcpNode::open(dc, SocketAddr::from(([127, 0, 0, 1], 0)))?,
        })
    }

    /// The transport.
    pub fn transport(&self) -> Link {
        self.transport
    }

    /// Number of nodes started (stopped ones included).
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether no node was started.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Where each node listens (or listened), by index.
    pub fn addresses(&self) -> &[rnic::soft::SoftAddress] {
        &self.addresses
    }

    /// Node `i`, if it runs.
    pub fn node(&self, i: NodeId) -> Option<&MemoryNode<SoftProvider>> {
        self.nodes.get(i.index())?.as_ref().map(|(n, _)| n)
    }

    /// A node set over every node, its clients on one new device (one compute node).
    pub fn connect(
        &mut self,
        client_cfg: &ClientConfig,
        cfg: NodeSetConfig,
    ) -> Result<NodeSet<SoftProvider>, ClusterError> {
        let ctx = self.open_device()?;
        let addresses = self.addresses.clone();
        Ok(NodeSet::connect_with(addresses.len(), cfg, |node| {
            Client::connect(&ctx, &addresses[node.index()], client_cfg.clone())
        })?)
    }

    /// Stops node `i`: its manager threads end and its device closes (every connection to
    /// it fails; connecting to it is refused). Whether it was running.
    pub fn stop(&mut self, i: NodeId) -> bool {
        match self.nodes.get_mut(i.index()).and_then(Option::take) {
            Some((node, ctx)) => {
                node.shutdown();
                drop(ctx);
                true
            }
            None => false,
        }
    }
}
