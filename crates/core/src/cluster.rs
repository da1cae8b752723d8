//! An embedded cluster: a memory node and N clients in one process on the software RNIC —
//! in-process links by default, or the memory node behind TCP.

use crate::client::{Client, ClientConfig, ClientError};
use crate::manager::{MemoryNode, NodeConfig, NodeError};
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use std::net::SocketAddr;

/// Which transport the cluster uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// In-process links (the requester's thread runs the responder).
    InProc,
    /// TCP over loopback (memory node and clients still in this process).
    Tcp,
}

/// A running embedded cluster.
#[derive(Debug)]
pub struct EmbeddedCluster {
    /// The memory node.
    pub node: MemoryNode<SoftProvider>,
    /// Its device.
    pub node_ctx: SoftContext,
    /// The clients.
    pub clients: Vec<Client<SoftProvider>>,
    /// Their devices (one per client: one compute node each).
    pub client_ctxs: Vec<SoftContext>,
    _fabric: Option<SoftFabric>,
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
}

impl EmbeddedCluster {
    /// Starts a memory node and `clients` clients.
    pub fn start(
        transport: Transport,
        device: SoftConfig,
        node_cfg: NodeConfig,
        client_cfg: ClientConfig,
        clients: usize,
    ) -> Result<Self, ClusterError> {
        let loopback: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
        let (fabric, node_ctx) = match transport {
            Transport::InProc => {
                let f = SoftFabric::new();
                let ctx = f.open_device(device.clone());
                (Some(f), ctx)
            }
            Transport::Tcp => (None, TcpNode::open(device.clone(), loopback)?),
        };
        let node = MemoryNode::start(node_ctx.clone(), node_cfg)?;
        let mut client_ctxs = Vec::with_capacity(clients);
        let mut cs = Vec::with_capacity(clients);
        for i in 0..clients {
            let mut dc = device.clone();
            dc.seed = dc.seed.map(|s| s.wrapping_add(1 + i as u64));
            let ctx = match &fabric {
                Some(f) => f.open_device(dc),
                None => TcpNode::open(dc, loopback)?,
            };
            cs.push(Client::connect(&ctx, node.address(), client_cfg.clone())?);
            client_ctxs.push(ctx);
        }
        Ok(EmbeddedCluster {
            node,
            node_ctx,
            clients: cs,
            client_ctxs,
            _fabric: fabric,
        })
    }
}
