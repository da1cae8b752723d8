//! `NodePerm`: a permission that knows its node.

use super::addr::{GlobalAddr, NodeId};
use crate::client::Perm;
use crate::proto::messages::{Access, Mode};
use rnic::{MemoryKey, Timestamp};

/// A permission granted by one node of a [`NodeSet`](super::NodeSet): the node's [`Perm`]
/// and the global address of its buffer. Its rkeys are the node's: they mean nothing on any
/// other node (a window is a node's NIC's object). Obtained from the set's `allocate` and
/// `acquire`; ended by its `revoke` or `free`.
#[derive(Debug)]
pub struct NodePerm {
    pub(super) node: NodeId,
    pub(super) addr: GlobalAddr,
    pub(super) perm: Perm,
}

impl NodePerm {
    /// The node that granted it.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The global address of the buffer's first byte, as a `u64` (what structures store).
    pub fn addr(&self) -> u64 {
        self.addr.into()
    }

    /// The global address of the buffer's first byte.
    pub fn global(&self) -> GlobalAddr {
        self.addr
    }

    /// The node's permission (its node-local address, rkeys and lease).
    pub fn perm(&self) -> &Perm {
        &self.perm
    }

    /// The node's permission, giving up the node and global address.
    pub fn into_perm(self) -> Perm {
        self.perm
    }

    /// Length of the buffer.
    pub fn len(&self) -> u64 {
        self.perm.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.perm.is_empty()
    }

    /// The rkey of the buffer window on its node.
    pub fn rkey(&self) -> MemoryKey {
        self.perm.rkey()
    }

    /// Rights.
    pub fn access(&self) -> Access {
        self.perm.access()
    }

    /// Ownership.
    pub fn mode(&self) -> Mode {
        self.perm.mode()
    }

    /// Conservative local expiry, on the node's client's clock.
    pub fn expiry(&self) -> Timestamp {
        self.perm.expiry()
    }

    /// Tamper helper: the same permission presented as one of `node` at `addr` (an rkey
    /// carried to another node): the set sends it there, where the NIC must refuse it.
    #[cfg(feature = "testing")]
    pub fn moved_to(&self, node: NodeId, addr: GlobalAddr, local: u64) -> NodePerm {
        NodePerm {
            node,
            addr,
            perm: self.perm.forged(local, self.perm.len(), self.perm.rkey()),
        }
    }

    /// Tamper helper: a permission for `[addr, addr + len)` (a global address on this
    /// permission's node) through `rkey` that nobody granted, built on this one's identity
    /// (an adversary's guess at another tenant's memory; see [`Perm::forged`]). `None` if
    /// `addr` is not on this node.
    #[cfg(feature = "testing")]
    pub fn forged(&self, addr: u64, len: u64, rkey: MemoryKey) -> Option<NodePerm> {
        let target = GlobalAddr::try_from(addr).ok()?;
        if target.node() != self.node {
            return None;
        }
        let local = self
            .perm
            .addr()
            .wrapping_add(target.offset())
            .wrapping_sub(self.addr.offset());
        Some(NodePerm {
            node: self.node,
            addr: target,
            perm: self.perm.forged(local, len, rkey),
        })
    }
}
