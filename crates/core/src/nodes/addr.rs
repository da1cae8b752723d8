//! Global addresses: which memory node, and where in its buffer pool, in one `u64`.
//!
//! ```text
//!  63        48 47          38 37                                  0
//! ┌────────────┬──────────────┬─────────────────────────────────────┐
//! │ 0 (16 bits)│ node + 1 (10)│ offset in the node's buffer pool (38)│
//! └────────────┴──────────────┴─────────────────────────────────────┘
//! ```
//!
//! The offset counts from the node's buffer pool base (`ShardMap::buffer_base`, which every
//! client of the node learns in its `Welcome`), so encoding and decoding are pure functions
//! of (node, node-local address, pool base) that every client computes alike.
//!
//! Why not the node index above the raw node-local address: a memory node's addresses are
//! user-space virtual addresses that already use 47 bits, and the data structures keep
//! pointers narrower than 64 bits — RACE hashing's slots and directory entries hold 48-bit
//! pointers, the queue a 40-bit word distance from its root (±4 TiB). A pool-relative offset
//! under a node tag keeps every global address below 2^48, so those structures store them
//! unchanged, and nodes whose indices differ by less than 16 lie within the queue's reach.
//!
//! Invariants:
//! - Lossless: `GlobalAddr::new(n, o)` gives back `n` and `o`; `u64::from` and
//!   `GlobalAddr::try_from(u64)` are inverse on every valid address.
//! - No global address is 0 (the tag is node + 1), so structures keep using 0 as null.
//! - Every valid global address is below 2^48.
//! - Refused, never truncated: an offset of 2^38 or more (a pool larger than 256 GiB), a node
//!   index of [`MAX_NODES`] or more, a word with bits above 47 set or a zero tag.

use std::fmt;

/// Bits of the offset within a node's buffer pool.
pub const OFFSET_BITS: u32 = 38;
/// Bits of the node tag (node index + 1).
pub const NODE_BITS: u32 = 10;
/// Bits a global address uses (the rest are zero).
pub const ADDR_BITS: u32 = OFFSET_BITS + NODE_BITS;
/// The most memory nodes a set can name (tag 0 is reserved, so that no address is 0).
pub const MAX_NODES: usize = (1 << NODE_BITS) - 1;
/// The largest offset within a node's pool, plus one (256 GiB).
pub const MAX_OFFSET: u64 = 1 << OFFSET_BITS;

/// The index of a memory node in a [`NodeSet`](super::NodeSet): its place in the list the set
/// was connected with (every client of a deployment lists the nodes in the same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The index as a `usize`.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memory node {}", self.0)
    }
}

/// Why a value is not a global address, or a node-local address has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddrError {
    /// Bits above bit 47 are set: not a global address (perhaps a raw pointer or garbage).
    #[error("{0:#x} is not a global address (bits above 47 are set)")]
    TooWide(u64),
    /// The node tag is zero: the null address, or a node-local address below 2^38.
    #[error("{0:#x} is not a global address (no node tag)")]
    NoNode(u64),
    /// The address names a node the set does not have.
    #[error("{addr:#x} names memory node {node}, but the set has {nodes} node(s)")]
    UnknownNode {
        /// The address.
        addr: u64,
        /// The node it names.
        node: u16,
        /// Nodes in the set.
        nodes: usize,
    },
    /// A node index past [`MAX_NODES`].
    #[error("a node set names at most {MAX_NODES} nodes, not {0}")]
    TooManyNodes(usize),
    /// A node-local address below the node's buffer pool.
    #[error("{local:#x} lies below the node's buffer pool at {base:#x}")]
    BelowPool {
        /// The node-local address.
        local: u64,
        /// The pool's first byte.
        base: u64,
    },
    /// A node-local address 256 GiB or more past the pool's base: it does not fit the
    /// offset field (the node's pool is larger than a global address can name).
    #[error("offset {0:#x} in the node's pool does not fit in {OFFSET_BITS} bits")]
    OffsetTooLarge(u64),
}

/// A global address: a memory node and an offset in its buffer pool (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalAddr(u64);

impl GlobalAddr {
    /// The address of `offset` in node `node`'s buffer pool.
    pub fn new(node: NodeId, offset: u64) -> Result<Self, AddrError> {
        if node.index() >= MAX_NODES {
            return Err(AddrError::TooManyNodes(node.index() + 1));
        }
        if offset >= MAX_OFFSET {
            return Err(AddrError::OffsetTooLarge(offset));
        }
        Ok(GlobalAddr((u64::from(node.0) + 1) << OFFSET_BITS | offset))
    }

    /// The global address of node-local address `local` on a node whose buffer pool starts
    /// at `pool_base`.
    pub fn of_local(node: NodeId, local: u64, pool_base: u64) -> Result<Self, AddrError> {
        let offset = local.checked_sub(pool_base).ok_or(AddrError::BelowPool {
            local,
            base: pool_base,
        })?;
        Self::new(node, offset)
    }

    /// The node.
    pub fn node(self) -> NodeId {
        // The tag is 1..=MAX_NODES (checked on construction), so this fits and is >= 0.
        NodeId(((self.0 >> OFFSET_BITS) - 1) as u16)
    }

    /// The offset in the node's buffer pool.
    pub fn offset(self) -> u64 {
        self.0 & (MAX_OFFSET - 1)
    }

    /// The node-local address, on a node whose buffer pool starts at `pool_base`.
    pub fn local(self, pool_base: u64) -> u64 {
        pool_base.wrapping_add(self.offset())
    }

    /// The address `delta` bytes further on the same node (an address inside an object).
    pub fn plus(self, delta: u64) -> Result<Self, AddrError> {
        let offset = self
            .offset()
            .checked_add(delta)
            .ok_or(AddrError::OffsetTooLarge(u64::MAX))?;
        Self::new(self.node(), offset)
    }
}

impl TryFrom<u64> for GlobalAddr {
    type Error = AddrError;

    fn try_from(raw: u64) -> Result<Self, AddrError> {
        if raw >> ADDR_BITS != 0 {
            return Err(AddrError::TooWide(raw));
        }
        if raw >> OFFSET_BITS == 0 {
            return Err(AddrError::NoNode(raw));
        }
        Ok(GlobalAddr(raw))
    }
}

impl From<GlobalAddr> for u64 {
    fn from(a: GlobalAddr) -> u64 {
        a.0
    }
}

impl fmt::Debug for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GlobalAddr({}+{:#x})", self.node().0, self.offset())
    }
}

impl fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x} ({} + {:#x})", self.0, self.node(), self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_stays_below_2_48() {
        for node in [0u16, 1, 2, 511, (MAX_NODES - 1) as u16] {
            for offset in [0, 1, 64, 0x1234_5678, MAX_OFFSET - 1] {
                let a = GlobalAddr::new(NodeId(node), offset).unwrap();
                assert_eq!((a.node(), a.offset()), (NodeId(node), offset));
                let raw = u64::from(a);
                assert_ne!(raw, 0);
                assert!(raw < 1 << 48);
                assert_eq!(GlobalAddr::try_from(raw), Ok(a));
            }
        }
    }

    #[test]
    fn local_addresses_round_trip_through_the_pool_base() {
        let base = 0x7f12_3400_0000;
        let a = GlobalAddr::of_local(NodeId(3), base + 0x40, base).unwrap();
        assert_eq!(a.local(base), base + 0x40);
        assert_eq!(a.plus(8).unwrap().local(base), base + 0x48);
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        assert_eq!(
            GlobalAddr::new(NodeId(0), MAX_OFFSET),
            Err(AddrError::OffsetTooLarge(MAX_OFFSET))
        );
        assert_eq!(
            GlobalAddr::new(NodeId(MAX_NODES as u16), 0),
            Err(AddrError::TooManyNodes(MAX_NODES + 1))
        );
        assert_eq!(
            GlobalAddr::of_local(NodeId(0), 0x1000, 0x2000),
            Err(AddrError::BelowPool {
                local: 0x1000,
                base: 0x2000
            })
        );
        assert_eq!(GlobalAddr::try_from(0), Err(AddrError::NoNode(0)));
        assert_eq!(
            GlobalAddr::try_from(1 << 48),
            Err(AddrError::TooWide(1 << 48))
        );
        let a = GlobalAddr::new(NodeId(0), MAX_OFFSET - 8).unwrap();
        assert!(a.plus(8).is_err());
    }
}
