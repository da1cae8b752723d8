//! Work-request chains: what a NIC needs to run pre-posted logic with no CPU (CORE-Direct
//! cross-channel verbs, as RedN and OneSidedMW use them).
//!
//! - A *cross-channel* QP ([`ProtectionDomain::create_cross_channel_qp`]) may post
//!   [`SendOp::Wait`] and [`SendOp::Enable`]; either of its queues may be *managed*
//!   ([`CrossChannel`]): its requests run only up to the index another QP's ENABLE allows.
//! - Its send queue's work-queue entries live in host memory registered in the QP's PD, the
//!   [`WqeRing`], with the byte layout of [`wqe`]. A request that has not started yet (held by
//!   a WAIT, a managed queue or requests ahead of it) takes the patchable fields of its entry
//!   when it starts, so a RECV scatter, a READ response or any local write into the ring
//!   changes what it does — RedN's self-modifying chains. Requests of ordinary QPs take their
//!   fields at post time, as always.
//!
//! Devices say whether they have this in `DeviceAttr::cross_channel`; the semantics, and how
//! they map to ConnectX hardware, are in `docs/verbs-contract.md`, "Work-request chains".
//!
//! [`ProtectionDomain::create_cross_channel_qp`]: super::ProtectionDomain::create_cross_channel_qp
//! [`SendOp::Wait`]: super::SendOp::Wait
//! [`SendOp::Enable`]: super::SendOp::Enable

use super::types::{Lkey, VirtAddr};

/// Cross-channel attributes of a new QP (`IBV_EXP_QP_CREATE_CROSS_CHANNEL` with
/// `IBV_EXP_QP_CREATE_MANAGED_SEND` / `_MANAGED_RECV`). The default is a cross-channel QP
/// whose queues run as posted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrossChannel {
    /// Posted send requests run only up to the index an ENABLE of the send queue allows.
    pub managed_send: bool,
    /// Posted receives are consumed only up to the index an ENABLE of the receive queue
    /// allows: a SEND arriving with no enabled receive is answered receiver-not-ready. Not with
    /// a shared receive queue.
    pub managed_recv: bool,
}

/// Where a cross-channel QP's send-queue entries live: `slots` entries of
/// [`wqe::SLOT_SIZE`] bytes at `addr`, registered in the QP's PD with LOCAL_WRITE under
/// `lkey` (so a local SGE of any QP of that PD can name it: a RECV scatter, a READ or atomic
/// destination, a WRITE source). Request number `n` of the send queue (counted from 0 in
/// posting order since the QP was created or reset, WAIT and ENABLE included) lives in slot
/// `n % slots` from its post until it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeRing {
    /// Address of slot 0.
    pub addr: VirtAddr,
    /// Local key of the ring's region.
    pub lkey: Lkey,
    /// Number of slots (the QP's `max_send_wr`).
    pub slots: u32,
}

impl WqeRing {
    /// Address of the slot of send request number `index`.
    pub fn slot_addr(&self, index: u64) -> VirtAddr {
        self.addr + (index % u64::from(self.slots.max(1))) * wqe::SLOT_SIZE as u64
    }

    /// Address of `field` (one of the [`wqe`] offsets) of send request number `index`.
    pub fn field_addr(&self, index: u64, field: usize) -> VirtAddr {
        self.slot_addr(index) + field as u64
    }
}

/// The byte layout of a send-queue entry, version [`wqe::VERSION`]. Fields are little-endian
/// (an atomic's previous value lands in host order, the same on little-endian hosts).
/// Offsets not named here are reserved; what is not patchable is written at post time for
/// inspection only and never read back.
///
/// | offset | size | READ / WRITE / atomics   | SEND (with invalidate) | BIND_MW               |
/// |--------|------|--------------------------|------------------------|-----------------------|
/// | 0      | 8    | remote address           | —                      | window start address  |
/// | 8      | 4    | rkey                     | rkey to invalidate     | window's new rkey     |
/// | 12     | 4    | local SGE lkey           | local SGE lkey         | region's lkey         |
/// | 16     | 8    | local SGE address        | local SGE address      | —                     |
/// | 24     | 8    | local SGE length         | local SGE length       | window length         |
/// | 32     | 8    | compare (CAS) / add (FAA)| —                      | —                     |
/// | 40     | 8    | swap (CAS)               | —                      | —                     |
/// | 48     | 4    | —                        | —                      | access flags          |
/// | 52     | 1    | opcode (read-only)       |                        |                       |
/// | 53     | 1    | layout version (read-only)|                       |                       |
/// | 54     | 1    | flags (read-only)        |                        |                       |
/// | 60     | 4    | —                        | —                      | target QP (0: poster) |
///
/// A BIND's new rkey names the window by its index (high 24 bits) and gives its new key byte
/// (low 8 bits); the window start address and rkey are adjacent, as a window table entry
/// `{addr: u64, rkey: u32}` is, so one READ fills both. The target QP field ends the slot, so
/// a scatter can fill it and the first 12 bytes of the next slot in one go. WAIT and ENABLE
/// entries have no patchable field. A local SGE length above `u32::MAX` completes the request
/// with `LocalLengthError`.
pub mod wqe {
    /// Bytes per slot.
    pub const SLOT_SIZE: usize = 64;
    /// The layout version this module describes (stored at [`LAYOUT_VERSION`]).
    pub const VERSION: u8 = 1;
    /// `u64`: remote address; BIND: window start address.
    pub const REMOTE_ADDR: usize = 0;
    /// `u32`: rkey; SEND_WITH_INV: the rkey to invalidate; BIND: the window's new rkey.
    pub const RKEY: usize = 8;
    /// `u32`: local SGE lkey; BIND: the region's lkey.
    pub const LKEY: usize = 12;
    /// `u64`: local SGE address.
    pub const LOCAL_ADDR: usize = 16;
    /// `u64`: local SGE length; BIND: window length.
    pub const LENGTH: usize = 24;
    /// `u64`: CAS compare value, FAA addend.
    pub const COMPARE_ADD: usize = 32;
    /// `u64`: CAS swap value.
    pub const SWAP: usize = 40;
    /// `u32`: BIND access flags (`AccessFlags` bits).
    pub const ACCESS: usize = 48;
    /// `u8`: opcode, read-only (see [`Opcode`]).
    pub const OPCODE: usize = 52;
    /// `u8`: [`VERSION`], read-only.
    pub const LAYOUT_VERSION: usize = 53;
    /// `u8`: flags, read-only: [`FLAG_LOCAL_SGE`].
    pub const FLAGS: usize = 54;
    /// `u32`: BIND: the QP number the type-2 window is bound for; 0 is the posting QP.
    pub const TARGET_QP: usize = 60;
    /// Flag: the request has a local SGE (a SEND without one carries zero bytes).
    pub const FLAG_LOCAL_SGE: u8 = 1;

    /// Opcodes stored at [`OPCODE`].
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    #[repr(u8)]
    pub enum Opcode {
        /// RDMA READ.
        Read = 1,
        /// RDMA WRITE.
        Write = 2,
        /// Compare-and-swap.
        CompareSwap = 3,
        /// Fetch-and-add.
        FetchAdd = 4,
        /// SEND.
        Send = 5,
        /// SEND with invalidate.
        SendWithInvalidate = 6,
        /// Memory-window bind.
        BindMw = 7,
        /// Local invalidate.
        LocalInvalidate = 8,
        /// Cross-channel WAIT.
        Wait = 9,
        /// Cross-channel ENABLE.
        Enable = 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::MemoryKey;

    #[test]
    fn slots_wrap_around_the_ring() {
        let ring = WqeRing {
            addr: 0x1000,
            lkey: MemoryKey(1),
            slots: 4,
        };
        assert_eq!(ring.slot_addr(0), 0x1000);
        assert_eq!(ring.slot_addr(5), 0x1000 + 64);
        assert_eq!(ring.field_addr(2, wqe::RKEY), 0x1000 + 128 + 8);
    }

    #[test]
    fn a_window_table_entry_fits_the_bind_fields() {
        // {addr: u64, rkey: u32} read in one go lands on the window address and new rkey.
        assert_eq!(wqe::RKEY, wqe::REMOTE_ADDR + 8);
        assert_eq!(wqe::TARGET_QP + 4, wqe::SLOT_SIZE);
    }
}
