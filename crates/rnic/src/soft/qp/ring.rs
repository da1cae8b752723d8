//! A cross-channel QP's send-queue entries in registered memory, in the byte layout of
//! [`crate::verbs::wqe`]: written when a request is posted, read back when it starts, so that
//! whatever a chain wrote into the entry meanwhile is what the request does.
//!
//! The ring is an ordinary registered buffer: peers' writes (a RECV scatter, a READ response)
//! and the QP's reads go through the memory block's atomic byte-wise copies, so concurrent
//! access is never undefined behaviour; ordering them is the chain's business (a WAIT).

use crate::soft::objects::{SoftBuffer, SoftMr, SoftPd};
use crate::verbs::{AccessFlags, MemoryRegion, VerbsResult, WqeRing, wqe};

/// The fields of one entry (see the table in [`crate::verbs::wqe`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WqeFields {
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) lkey: u32,
    pub(crate) local_addr: u64,
    pub(crate) length: u64,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) access: u32,
    pub(crate) target_qp: u32,
    /// Read-only: written at post, never read back for execution.
    pub(crate) opcode: u8,
    /// Read-only: [`wqe::FLAG_LOCAL_SGE`].
    pub(crate) flags: u8,
}

impl WqeFields {
    fn encode(&self) -> [u8; wqe::SLOT_SIZE] {
        let mut b = [0u8; wqe::SLOT_SIZE];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(wqe::REMOTE_ADDR, &self.remote_addr.to_le_bytes());
        put(wqe::RKEY, &self.rkey.to_le_bytes());
        put(wqe::LKEY, &self.lkey.to_le_bytes());
        put(wqe::LOCAL_ADDR, &self.local_addr.to_le_bytes());
        put(wqe::LENGTH, &self.length.to_le_bytes());
        put(wqe::COMPARE_ADD, &self.compare_add.to_le_bytes());
        put(wqe::SWAP, &self.swap.to_le_bytes());
        put(wqe::ACCESS, &self.access.to_le_bytes());
        put(wqe::OPCODE, &[self.opcode]);
        put(wqe::LAYOUT_VERSION, &[wqe::VERSION]);
        put(wqe::FLAGS, &[self.flags]);
        put(wqe::TARGET_QP, &self.target_qp.to_le_bytes());
        b
    }

    fn decode(b: &[u8; wqe::SLOT_SIZE]) -> Self {
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u32::from_le_bytes(w)
        };
        WqeFields {
            remote_addr: u64_at(wqe::REMOTE_ADDR),
            rkey: u32_at(wqe::RKEY),
            lkey: u32_at(wqe::LKEY),
            local_addr: u64_at(wqe::LOCAL_ADDR),
            length: u64_at(wqe::LENGTH),
            compare_add: u64_at(wqe::COMPARE_ADD),
            swap: u64_at(wqe::SWAP),
            access: u32_at(wqe::ACCESS),
            target_qp: u32_at(wqe::TARGET_QP),
            opcode: b[wqe::OPCODE],
            flags: b[wqe::FLAGS],
        }
    }
}

/// The ring: a buffer of `slots` entries registered in the QP's PD with LOCAL_WRITE.
pub(crate) struct WqeRingMem {
    buf: SoftBuffer,
    mr: SoftMr,
    slots: u32,
}

impl WqeRingMem {
    /// Allocates and registers a ring of `slots` entries in `pd`.
    pub(crate) fn new(pd: &SoftPd, slots: u32) -> VerbsResult<Self> {
        let len = slots.max(1) as usize * wqe::SLOT_SIZE;
        let buf = SoftBuffer::new(len)?;
        let mr = pd.register_mr(&buf, 0, len, AccessFlags::LOCAL_WRITE)?;
        Ok(WqeRingMem {
            buf,
            mr,
            slots: slots.max(1),
        })
    }

    /// What the verbs contract shows of it.
    pub(crate) fn ring(&self) -> WqeRing {
        WqeRing {
            addr: self.mr.addr(),
            lkey: self.mr.lkey(),
            slots: self.slots,
        }
    }

    fn offset(&self, index: u64) -> usize {
        (index % u64::from(self.slots)) as usize * wqe::SLOT_SIZE
    }

    /// Writes the entry of request `index` (at post).
    pub(crate) fn write(&self, index: u64, fields: &WqeFields) {
        // In range by construction: the offset is below `slots * SLOT_SIZE`, the buffer's size.
        let _ = self.buf.write(self.offset(index), &fields.encode());
    }

    /// Reads the entry of request `index` back (when it starts).
    pub(crate) fn read(&self, index: u64) -> WqeFields {
        let mut b = [0u8; wqe::SLOT_SIZE];
        // In range by construction, as for `write`.
        let _ = self.buf.read(self.offset(index), &mut b);
        WqeFields::decode(&b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_through_the_layout() {
        let f = WqeFields {
            remote_addr: 0x1122_3344_5566_7788,
            rkey: 0x0080_0102,
            lkey: 7,
            local_addr: 0x9000,
            length: 12,
            compare_add: 3,
            swap: 4,
            access: 6,
            target_qp: 0x00ab_cdef,
            opcode: wqe::Opcode::BindMw as u8,
            flags: wqe::FLAG_LOCAL_SGE,
        };
        let b = f.encode();
        assert_eq!(WqeFields::decode(&b), f);
        assert_eq!(b[wqe::LAYOUT_VERSION], wqe::VERSION);
        assert_eq!(&b[wqe::RKEY..wqe::RKEY + 4], &0x0080_0102u32.to_le_bytes());
    }
}
