//! The node set's error type: which node, and what happened there.

use super::addr::{AddrError, NodeId};
use crate::client::ClientError;

/// Errors of [`NodeSet`](super::NodeSet) calls. Every failure at a node names the node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeSetError {
    // ---- a node is gone ----
    /// The node's connection failed (its control or data connection broke, it refused a new
    /// one, or it stopped answering): every permission granted on it before has ended. The
    /// other nodes are not affected. Calls that need the node fail at once with this error
    /// until its retry time has passed; then the next one tries it again.
    #[error("{node} is unreachable ({cause}); its permissions have ended")]
    NodeDown {
        /// The node.
        node: NodeId,
        /// What the node's client reported when the node was found gone.
        cause: String,
    },
    // ---- a node refused ----
    /// The node refused or failed the call as its client reports it (not found, no memory,
    /// the NIC denied the access, ...).
    #[error("{node}: {source}")]
    Node {
        /// The node.
        node: NodeId,
        /// What its client reported.
        #[source]
        source: ClientError,
    },
    /// No node could take an allocation: every node is down or refused it (out of memory or
    /// quota); `last` is the last refusal.
    #[error("no memory node could take the allocation (last: {last})")]
    NoNodeAvailable {
        /// The last node's refusal.
        last: Box<NodeSetError>,
    },
    // ---- API misuse ----
    /// The address is not a global address of this set.
    #[error("address: {0}")]
    Address(#[from] AddrError),
    /// A node set of no node, or of more than a global address can name.
    #[error("a node set needs 1 to {max} nodes, not {0}", max = super::addr::MAX_NODES)]
    NodeCount(usize),
    /// Connecting to a node failed while the set was being built.
    #[error("connecting to {node}: {source}")]
    Connect {
        /// The node.
        node: NodeId,
        /// What its client reported.
        #[source]
        source: ClientError,
    },
}

impl NodeSetError {
    /// The node the error happened at, if one did.
    pub fn node(&self) -> Option<NodeId> {
        match self {
            NodeSetError::NodeDown { node, .. }
            | NodeSetError::Node { node, .. }
            | NodeSetError::Connect { node, .. } => Some(*node),
            NodeSetError::NoNodeAvailable { last } => last.node(),
            _ => None,
        }
    }

    /// The client error behind it, if a node's client reported one.
    pub fn client_error(&self) -> Option<&ClientError> {
        match self {
            NodeSetError::Node { source, .. } | NodeSetError::Connect { source, .. } => {
                Some(source)
            }
            NodeSetError::NoNodeAvailable { last } => last.client_error(),
            _ => None,
        }
    }
}
