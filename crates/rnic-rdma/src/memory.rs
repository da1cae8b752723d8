//! Protection domains, registrable memory, memory regions and memory windows.
//!
//! Invariants:
//! - An [`RdmaBuffer`] is a memory block of `rnic` ([`rnic::memory::MemoryBlock`], the software
//!   RNIC's buffer too): page-aligned anonymous memory touched by the CPU only through
//!   atomics, so the NIC writing it concurrently (DMA) is never a data race on the Rust side.
//! - An [`RdmaMr`] keeps its buffer mapped while it is registered (see `ffi`).
//! - An [`RdmaMw`]'s rkey is the rkey of the latest *posted* bind: a bind request names the new
//!   rkey itself (`bind_mw.rkey` = same index, new key byte) and the window records it when the
//!   request is posted, as rdma-core's `ibv_bind_mw` does — in the `ibv_mw` too, where
//!   providers read the window's current rkey when the next bind is posted (rxe refuses a bind
//!   that names a stale one). A bind that completes with an error (or flushed) did not change
//!   the window: its rkey goes back to the key of the window's last successful bind, unless
//!   another bind of the window was posted since.

use crate::context::{RdmaContext, alloc_error};
use crate::ffi;
use crate::record::MwKeys;
use crate::translate::{access_to_ibv, mw_type_to_ibv, verbs_error};
use rnic::memory::MemoryBlock;
use rnic::{
    AccessFlags, MemoryKey, MemoryRegion, MemoryWindow, MwType, PdId, Resource, Rkey, VerbsError,
    VerbsResult, VirtAddr,
};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Registrable memory: `rnic`'s memory block, whose `MemoryBuffer` implementation serves both
/// providers. Cloning shares it.
pub type RdmaBuffer = MemoryBlock;

/// A protection domain. Cloning shares it.
#[derive(Clone)]
pub struct RdmaPd {
    pub(crate) ctx: RdmaContext,
    pub(crate) raw: Arc<ffi::Pd>,
    pub(crate) id: PdId,
}

impl fmt::Debug for RdmaPd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RdmaPd({:?})", self.id)
    }
}

static NEXT_PD: AtomicU32 = AtomicU32::new(1);

impl RdmaPd {
    pub(crate) fn new(ctx: &RdmaContext) -> VerbsResult<RdmaPd> {
        let raw = ffi::alloc_pd(&ctx.inner.dev)
            .map_err(|e| alloc_error("ibv_alloc_pd", Resource::ProtectionDomain, e))?;
        Ok(RdmaPd {
            ctx: ctx.clone(),
            raw: Arc::new(raw),
            id: PdId(NEXT_PD.fetch_add(1, Ordering::Relaxed)),
        })
    }

    /// `ibv_reg_mr` of `len` bytes of `buffer` at `offset` (`ProtectionDomain::reg_mr`).
    pub(crate) fn register_mr(
        &self,
        buffer: &RdmaBuffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<RdmaMr> {
        if offset.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(VerbsError::InvalidArgument("region outside the buffer"));
        }
        let raw = ffi::reg_mr(&self.raw, buffer, offset, len, access_to_ibv(access))
            .map_err(|e| verbs_error("ibv_reg_mr", Resource::MemoryRegion, e))?;
        Ok(RdmaMr {
            _pd: self.clone(),
            raw: Some(raw),
            addr: buffer.addr() + offset as u64,
            len,
            access,
        })
    }

    /// `ibv_alloc_mw` of `mw_type`, if the device has such windows
    /// (`ProtectionDomain::alloc_mw`).
    pub(crate) fn allocate_mw(&self, mw_type: MwType) -> VerbsResult<RdmaMw> {
        let attr = &self.ctx.inner.attr;
        let supported = match mw_type {
            MwType::Type1 => attr.mw_type1,
            MwType::Type2 => attr.mw_type2,
        };
        if !supported {
            return Err(VerbsError::InvalidArgument(match mw_type {
                MwType::Type1 => "this device has no memory windows (IBV_DEVICE_MEM_WINDOW)",
                MwType::Type2 => {
                    "this device has no type-2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)"
                }
            }));
        }
        let raw = ffi::alloc_mw(&self.raw, mw_type_to_ibv(mw_type))
            .map_err(|e| verbs_error("ibv_alloc_mw", Resource::MemoryWindow, e))?;
        Ok(RdmaMw {
            keys: Arc::new(MwKeys::new(raw.initial_rkey())),
            raw,
            mw_type,
            _pd: self.clone(),
        })
    }
}

/// A registered memory region. Not `Clone`: deregistration consumes it.
pub struct RdmaMr {
    _pd: RdmaPd,
    pub(crate) raw: Option<ffi::Mr>,
    addr: VirtAddr,
    len: usize,
    access: AccessFlags,
}

impl fmt::Debug for RdmaMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaMr")
            .field("lkey", &self.lkey())
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl RdmaMr {
    pub(crate) fn raw(&self) -> Option<&ffi::Mr> {
        self.raw.as_ref()
    }
}

impl MemoryRegion for RdmaMr {
    fn lkey(&self) -> rnic::Lkey {
        MemoryKey(self.raw.as_ref().map_or(0, |m| m.lkey()))
    }
    fn rkey(&self) -> Rkey {
        MemoryKey(self.raw.as_ref().map_or(0, |m| m.rkey()))
    }
    fn addr(&self) -> VirtAddr {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
    /// `ibv_dereg_mr`. rdma-core reports bound windows as `EBUSY` without a count, so that
    /// case is [`VerbsError::Busy`] here, not `MrHasBoundWindows(n)`.
    fn deregister(mut self) -> Result<(), (Self, VerbsError)> {
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        match raw.deregister() {
            Ok(()) => Ok(()),
            Err((raw, e)) => {
                self.raw = Some(raw);
                let err = match e.raw_os_error() {
                    Some(libc::EBUSY) => {
                        VerbsError::Busy("ibv_dereg_mr: memory windows are still bound (EBUSY)")
                    }
                    _ => verbs_error("ibv_dereg_mr", Resource::MemoryRegion, e),
                };
                Err((self, err))
            }
        }
    }
}

/// A memory window.
pub struct RdmaMw {
    pub(crate) raw: ffi::Mw,
    mw_type: MwType,
    pub(crate) keys: Arc<MwKeys>,
    _pd: RdmaPd,
}

impl fmt::Debug for RdmaMw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaMw")
            .field("type", &self.mw_type)
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl RdmaMw {
    /// Records the rkey of a bind that was posted, here and in the `ibv_mw` (where the
    /// provider reads it when the next bind is posted).
    pub(crate) fn set_rkey(&self, rkey: u32) {
        self.raw.set_rkey(rkey);
        self.keys.posted(rkey);
    }

    /// Makes the `ibv_mw` name the window's recorded rkey again before a bind of it is
    /// posted (a failed bind rolled back only the recorded one).
    pub(crate) fn sync_raw_rkey(&self) {
        self.raw.set_rkey(self.keys.rkey());
    }
}

impl MemoryWindow for RdmaMw {
    fn rkey(&self) -> Rkey {
        MemoryKey(self.keys.rkey())
    }
    fn mw_type(&self) -> MwType {
        self.mw_type
    }
}

/// The rkey a bind gives a window whose current rkey is `current`: the same 24-bit index and
/// the chosen key byte, or `ibv_inc_rkey(current)` without a choice.
pub fn bind_rkey(current: u32, key: Option<u8>) -> u32 {
    let byte = key.unwrap_or_else(|| (current as u8).wrapping_add(1));
    (current & !0xff) | u32::from(byte)
}

#[cfg(test)]
mod tests {
    use super::bind_rkey;

    #[test]
    fn bind_keeps_index_and_sets_key_byte() {
        // ibv_inc_rkey: (rkey & ~0xff) | ((rkey + 1) & 0xff)  (verbs.h)
        assert_eq!(bind_rkey(0x1234_56ff, None), 0x1234_5600);
        assert_eq!(bind_rkey(0x1234_5601, None), 0x1234_5602);
        assert_eq!(bind_rkey(0x1234_5601, Some(0xab)), 0x1234_56ab);
    }
}
