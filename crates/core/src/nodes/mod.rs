//! A client-side handle over several memory nodes: one [`Client`] per node, global addresses
//! that name a node and a place in it, and allocations spread over the nodes
//! (`docs/multi-node.md`).
//!
//! - `addr`: [`GlobalAddr`] (node tag + offset in the node's buffer pool, below 2^48) and
//!   [`NodeId`];
//! - `perm`: [`NodePerm`], a permission that knows its node;
//! - `placement`: where `allocate` puts objects (round robin over the reachable nodes, the
//!   next node when one is full or gone);
//! - `route`: acquire, revoke, free, extend, the data path and named roots, each sent to the
//!   node its address or permission names;
//! - `batch`: [`NodeBatch`], one doorbell per node a batch touches;
//! - `health`: which nodes are reachable; `error`: [`NodeSetError`].
//!
//! Invariants:
//! - The set only uses each node's public client API; nodes never talk to each other, and an
//!   object lives on exactly one node (a global address names it for good).
//! - Node `i` is the `i`-th target the set was connected with: every client of a deployment
//!   lists the nodes in the same order, so they decode each other's addresses alike.
//! - Every call on a node goes through `NodeSet::outcome`, so a node whose connection
//!   failed is marked down and named in the error, and the other nodes go on working.

mod addr;
mod batch;
mod error;
mod health;
mod perm;
mod placement;
mod route;

pub use addr::{
    ADDR_BITS, AddrError, GlobalAddr, MAX_NODES, MAX_OFFSET, NODE_BITS, NodeId, OFFSET_BITS,
};
pub use batch::{NodeBatch, NodeOp, PostedNodeBatch};
pub use error::NodeSetError;
pub use perm::NodePerm;
pub use route::{NAMES_NODE, NodeTicket};

use crate::client::{Client, ClientConfig, ClientError};
use health::Health;
use rnic::{Provider, Timestamp};
use std::time::Duration;

/// How the set treats nodes that go away.
#[derive(Clone, Debug)]
pub struct NodeSetConfig {
    /// How long (on the node's client's clock) a node found gone is skipped by `allocate` and
    /// refused at once by calls that need it; then the next such call tries it again.
    pub retry_after: Duration,
}

impl Default for NodeSetConfig {
    fn default() -> Self {
        NodeSetConfig {
            retry_after: Duration::from_secs(1),
        }
    }
}

/// One node of the set: its client and what the set knows of its reachability.
struct Member<P: Provider> {
    client: Client<P>,
    health: Health,
}

/// Clients of several memory nodes behind global addresses (see the module docs).
pub struct NodeSet<P: Provider> {
    members: Vec<Member<P>>,
    cfg: NodeSetConfig,
    /// The node the next allocation tries first (placement goes round the nodes).
    next: usize,
}

impl<P: Provider> std::fmt::Debug for NodeSet<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSet")
            .field("nodes", &self.members.len())
            .field("down", &self.down_nodes())
            .finish_non_exhaustive()
    }
}

impl<P: Provider> NodeSet<P> {
    /// Connects one client to each `(device, address)` of `targets`, in order: node `i` is
    /// `targets[i]`. Fails (naming the node) if any does not connect.
    pub fn connect(
        targets: &[(P::Context, P::Address)],
        client_cfg: &ClientConfig,
        cfg: NodeSetConfig,
    ) -> Result<Self, NodeSetError> {
        Self::connect_with(targets.len(), cfg, |node| {
            let (ctx, address) = &targets[node.index()];
            Client::connect(ctx, address, client_cfg.clone())
        })
    }

    /// Builds a set of `nodes` nodes whose clients `connect` opens, node by node.
    pub fn connect_with(
        nodes: usize,
        cfg: NodeSetConfig,
        mut connect: impl FnMut(NodeId) -> Result<Client<P>, ClientError>,
    ) -> Result<Self, NodeSetError> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(NodeSetError::NodeCount(nodes));
        }
        let mut clients = Vec::with_capacity(nodes);
        for i in 0..nodes {
            let node = NodeId(i as u16); // i < MAX_NODES < 2^16
            clients.push(connect(node).map_err(|source| NodeSetError::Connect { node, source })?);
        }
        Self::from_clients(clients, cfg)
    }

    /// A set over connected clients: node `i` is `clients[i]`'s memory node.
    pub fn from_clients(clients: Vec<Client<P>>, cfg: NodeSetConfig) -> Result<Self, NodeSetError> {
        if clients.is_empty() || clients.len() > MAX_NODES {
            return Err(NodeSetError::NodeCount(clients.len()));
        }
        Ok(NodeSet {
            members: clients
                .into_iter()
                .map(|client| Member {
                    client,
                    health: Health::Up,
                })
                .collect(),
            cfg,
            next: 0,
        })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set has no node (never: a set has at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every node's id, in order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + use<P> {
        (0..self.members.len() as u16).map(NodeId)
    }

    /// Node `node`'s client (its statistics, its own API).
    pub fn client(&self, node: NodeId) -> Option<&Client<P>> {
        self.members.get(node.index()).map(|m| &m.client)
    }

    /// Node `node`'s client, mutably. What is done through it bypasses the set's health
    /// tracking.
    pub fn client_mut(&mut self, node: NodeId) -> Option<&mut Client<P>> {
        self.members.get_mut(node.index()).map(|m| &mut m.client)
    }

    /// Whether `node` is marked down (its connection failed and no call has succeeded on it
    /// since).
    pub fn is_down(&self, node: NodeId) -> bool {
        self.members
            .get(node.index())
            .is_some_and(|m| m.health.is_down())
    }

    /// The nodes marked down.
    pub fn down_nodes(&self) -> Vec<NodeId> {
        self.nodes().filter(|&n| self.is_down(n)).collect()
    }

    /// Forgets that `node` was found down: the next call that needs it tries it at once
    /// (for a caller that knows it is back).
    pub fn retry(&mut self, node: NodeId) {
        if let Some(m) = self.members.get_mut(node.index()) {
            m.health = Health::Up;
        }
    }

    /// The set's clock: node 0's client's (leases are timed on each node's client's clock;
    /// clients of one set normally share one device clock).
    pub fn now(&self) -> Timestamp {
        self.members[0].client.status().clock().now()
    }

    /// The global address of node-local address `local` on `node`.
    pub fn global(&self, node: NodeId, local: u64) -> Result<GlobalAddr, NodeSetError> {
        let m = self.member(node, u64::MAX)?;
        Ok(GlobalAddr::of_local(
            node,
            local,
            m.client.status().shard_map().buffer_base,
        )?)
    }

    /// The node and node-local address a global address names.
    pub fn locate(&self, addr: u64) -> Result<(NodeId, u64), NodeSetError> {
        let g = GlobalAddr::try_from(addr)?;
        let m = self.member(g.node(), addr)?;
        Ok((g.node(), g.local(m.client.status().shard_map().buffer_base)))
    }

    fn member(&self, node: NodeId, addr: u64) -> Result<&Member<P>, NodeSetError> {
        self.members
            .get(node.index())
            .ok_or(NodeSetError::Address(AddrError::UnknownNode {
                addr,
                node: node.0,
                nodes: self.members.len(),
            }))
    }

    /// Refuses a call that needs `node` while it rests after being found gone.
    fn usable(&self, node: NodeId) -> Result<(), NodeSetError> {
        let m = &self.members[node.index()];
        match m
            .health
            .resting(m.client.status().clock().now(), self.cfg.retry_after)
        {
            Some(cause) => Err(NodeSetError::NodeDown {
                node,
                cause: cause.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Refuses a call on a permission that ended with its node's lost session, without I/O.
    fn alive(&self, p: &NodePerm) -> Result<(), NodeSetError> {
        match self.members[p.node.index()].health.ended(p.perm.session()) {
            Some(cause) => Err(NodeSetError::NodeDown {
                node: p.node,
                cause: cause.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Files the outcome of a call on `node`'s client: an error that says the node is gone
    /// marks it down (and is reported as [`NodeSetError::NodeDown`]); a `control` call that
    /// succeeded marks it up.
    fn outcome<T>(
        &mut self,
        node: NodeId,
        r: Result<T, ClientError>,
        control: bool,
    ) -> Result<T, NodeSetError> {
        let m = &mut self.members[node.index()];
        match r {
            Ok(v) => {
                if control && m.health.is_down() {
                    m.health = Health::Up;
                }
                Ok(v)
            }
            Err(e) if health::means_gone(&e) => {
                let cause = e.to_string();
                // Found gone again: rest from now; the latest session has ended too.
                let session = match m.health {
                    Health::Down { session, .. } => session.max(m.client.status().session()),
                    Health::Up => m.client.status().session(),
                };
                m.health = Health::Down {
                    since: m.client.status().clock().now(),
                    session,
                    cause: cause.clone(),
                };
                Err(NodeSetError::NodeDown { node, cause })
            }
            Err(source) => Err(NodeSetError::Node { node, source }),
        }
    }
}
