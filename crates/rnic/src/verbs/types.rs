//! Plain value types of the verbs contract: keys, access flags, queue-pair numbers, PSNs.
//!
//! Invariants:
//! - A [`MemoryKey`] is `index << 8 | key_byte`, as on every RNIC and in rdma-core's
//!   `ibv_inc_rkey`: the 24-bit index names a protection-table entry, the 8-bit key changes on
//!   every (re)bind so an old key stops matching at once.
//! - [`Psn`]s are 24-bit and compared modulo 2^24 (IB spec 9.7.1).

use bitflags::bitflags;
use std::fmt;

/// Number of bits of a key that name the protection-table entry.
pub const KEY_INDEX_BITS: u32 = 24;

/// A local or remote memory key (lkey / rkey): 24-bit table index ‖ 8-bit key byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MemoryKey(pub u32);

impl MemoryKey {
    /// Builds a key from a table index (low 24 bits used) and a key byte.
    pub const fn new(index: u32, key_byte: u8) -> Self {
        MemoryKey(((index & 0x00ff_ffff) << 8) | key_byte as u32)
    }
    /// The protection-table index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }
    /// The low 8 bits, which change on every bind.
    pub const fn key_byte(self) -> u8 {
        self.0 as u8
    }
    /// `ibv_inc_rkey`: same index, key byte + 1 (wrapping).
    pub const fn incremented(self) -> Self {
        MemoryKey::new(self.index(), self.key_byte().wrapping_add(1))
    }
}

impl fmt::Debug for MemoryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:#x}:{:02x})", self.index(), self.key_byte())
    }
}

/// A remote key, handed to peers so they can reach a memory region or window.
pub type Rkey = MemoryKey;
/// A local key, naming a registered buffer in a work request's scatter/gather entry.
pub type Lkey = MemoryKey;

bitflags! {
    /// Access rights of a memory region, memory window or queue pair (`ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The local NIC may write the memory (needed for READ destinations and RECV buffers).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Peers may issue CAS / FAA.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound over this region.
        const MW_BIND = 1 << 4;
        /// Zero-based addressing (rejected for windows, as rxe does).
        const ZERO_BASED = 1 << 5;
    }
}

impl AccessFlags {
    /// The three remote rights.
    pub const REMOTE_ALL: AccessFlags = AccessFlags::REMOTE_READ
        .union(AccessFlags::REMOTE_WRITE)
        .union(AccessFlags::REMOTE_ATOMIC);
    /// Whether these flags grant a remote right that requires LOCAL_WRITE on the MR (C10-74).
    pub fn needs_local_write(self) -> bool {
        self.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
    }
}

/// A queue-pair number (24 bits on the wire).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct QpNumber(pub u32);

/// A completion-queue number: names a CQ of its device in a cross-channel WAIT
/// ([`SendOp::Wait`](super::SendOp::Wait)), as the CQ number (`cqn`) does in a real NIC's WAIT
/// segment. Numbers are unique within a device; the soft NIC keeps them unique in the process,
/// so a number of another device's CQ names no CQ of this one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct CqNumber(pub u32);

/// A packet sequence number, 24 bits, compared modulo 2^24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = 0x00ff_ffff;
    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Psn(v & Self::MASK)
    }
    /// The raw 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }
    /// The next PSN.
    pub const fn next(self) -> Self {
        Psn::new(self.0.wrapping_add(1))
    }
    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Psn::new(self.0.wrapping_add(n))
    }
    /// Signed distance `self - other` in the 24-bit ring (positive: `self` is later).
    pub const fn distance(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & Self::MASK;
        // Sign-extend from 24 bits.
        ((d << 8) as i32) >> 8
    }
}

/// Memory window type (`IBV_MW_TYPE_1`, `IBV_MW_TYPE_2`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MwType {
    /// Bound with a bind call; valid on every QP of its PD.
    Type1,
    /// Bound by a BIND_MW work request; valid only on the QP that bound it.
    Type2,
}

/// Identifies a protection domain within one device.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PdId(pub u32);

/// A virtual address on the node that owns the memory (what `remote_addr` names).
pub type VirtAddr = u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_and_increment() {
        let k = MemoryKey::new(0x12_3456, 0xff);
        assert_eq!(k.0, 0x1234_56ff);
        assert_eq!(k.index(), 0x12_3456);
        let k2 = k.incremented();
        assert_eq!(k2.index(), k.index());
        assert_eq!(k2.key_byte(), 0);
    }

    #[test]
    fn psn_ring_distance() {
        let a = Psn::new(Psn::MASK);
        let b = a.next();
        assert_eq!(b.value(), 0);
        assert_eq!(b.distance(a), 1);
        assert_eq!(a.distance(b), -1);
        assert_eq!(Psn::new(5).add(10).distance(Psn::new(5)), 10);
    }
}
