//! Handles of protection domains, buffers, memory regions and memory windows.
//!
//! Each handle keeps its parent alive (an MR holds its PD, a PD its device). Dropping an MR
//! deregisters it if no window is bound over it; dropping a window deallocates it, which
//! invalidates its binding first.
//!
//! These are the objects below the QPs (a QP holds its PD and uses MRs and MWs); the PD's
//! `ProtectionDomain` impl, which also makes SRQs and QPs, is wired in `soft/mod.rs`.

use super::device::{DeviceInner, ResourceCounts};
use super::mpt::MrEntry;
use crate::memory::MemoryBlock;
use crate::verbs::{
    AccessFlags, Lkey, MemoryKey, MemoryRegion, MemoryWindow, MwType, PdId, Resource, Rkey,
    VerbsError, VerbsResult, VirtAddr,
};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) struct PdInner {
    pub(crate) dev: Arc<DeviceInner>,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        ResourceCounts::give(&self.dev.counts.pds);
    }
}

/// A protection domain. Cloning shares it.
#[derive(Clone)]
pub struct SoftPd {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for SoftPd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SoftPd({})", self.inner.id.0)
    }
}

impl SoftPd {
    pub(crate) fn new(dev: &Arc<DeviceInner>) -> VerbsResult<Self> {
        ResourceCounts::take(
            &dev.counts.pds,
            dev.config.attr.max_pd,
            Resource::ProtectionDomain,
        )?;
        Ok(SoftPd {
            inner: Arc::new(PdInner {
                dev: dev.clone(),
                id: PdId(dev.new_pd_id()),
            }),
        })
    }
}

impl SoftPd {
    /// `ibv_reg_mr`: registers `len` bytes of `buffer` from `offset`.
    pub(crate) fn register_mr(
        &self,
        buffer: &SoftBuffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<SoftMr> {
        if offset.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(VerbsError::InvalidArgument("MR range outside the buffer"));
        }
        if access.needs_local_write() && !access.contains(AccessFlags::LOCAL_WRITE) {
            // ibv_reg_mr: REMOTE_WRITE / REMOTE_ATOMIC require LOCAL_WRITE (EINVAL).
            return Err(VerbsError::InvalidArgument(
                "remote write or atomic access needs LOCAL_WRITE",
            ));
        }
        let dev = &self.inner.dev;
        let entry = MrEntry::register(
            self.inner.id,
            buffer,
            offset,
            len,
            access,
            dev.config.pinning,
        )?;
        let addr = entry.addr;
        let key = match dev.mpt.insert_mr(entry) {
            Ok(k) => k,
            Err(e) => {
                buffer.unpin(offset, len);
                return Err(e);
            }
        };
        Ok(SoftMr {
            pd: self.clone(),
            key,
            addr,
            len,
            access,
            live: true,
        })
    }

    /// `ibv_alloc_mw`.
    pub(crate) fn allocate_mw(&self, mw_type: MwType) -> VerbsResult<SoftMw> {
        let dev = &self.inner.dev;
        let supported = match mw_type {
            MwType::Type1 => dev.config.attr.mw_type1,
            MwType::Type2 => dev.config.attr.mw_type2,
        };
        if !supported {
            return Err(VerbsError::InvalidArgument(
                "memory window type not supported",
            ));
        }
        let key = dev.mpt.alloc_mw(self.inner.id, mw_type)?;
        Ok(SoftMw {
            pd: self.clone(),
            key: AtomicU32::new(key.0),
            mw_type,
        })
    }
}

/// Registrable memory: a page-aligned anonymous mapping ([`MemoryBlock`], which implements
/// [`MemoryBuffer`](crate::verbs::MemoryBuffer) for every provider that registers it). Cloning
/// shares it.
pub type SoftBuffer = MemoryBlock;

/// A registered memory region. Not `Clone`: deregistration consumes it.
pub struct SoftMr {
    pd: SoftPd,
    key: MemoryKey,
    addr: VirtAddr,
    len: usize,
    access: AccessFlags,
    live: bool,
}

impl fmt::Debug for SoftMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftMr")
            .field("key", &self.key)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl SoftMr {
    /// The protection-table entry, if still registered.
    pub(crate) fn entry(&self) -> Option<Arc<MrEntry>> {
        self.pd.inner.dev.mpt.mr(self.key)
    }
    /// The PD the region belongs to.
    pub fn pd(&self) -> &SoftPd {
        &self.pd
    }
}

impl MemoryRegion for SoftMr {
    fn lkey(&self) -> Lkey {
        self.key
    }
    fn rkey(&self) -> Rkey {
        self.key
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
    fn deregister(mut self) -> Result<(), (Self, VerbsError)> {
        match self.pd.inner.dev.mpt.remove_mr(self.key) {
            Ok(()) => {
                self.live = false;
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        if self.live {
            // With windows still bound the entry stays registered (as a leaked ibv_mr would);
            // the windows keep working until unbound.
            let _ = self.pd.inner.dev.mpt.remove_mr(self.key);
        }
    }
}

/// A memory window.
pub struct SoftMw {
    pd: SoftPd,
    key: AtomicU32,
    mw_type: MwType,
}

impl fmt::Debug for SoftMw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftMw")
            .field("rkey", &self.rkey())
            .field("type", &self.mw_type)
            .finish()
    }
}

impl SoftMw {
    pub(crate) fn set_rkey(&self, key: MemoryKey) {
        self.key.store(key.0, Ordering::SeqCst);
    }
    /// The PD the window belongs to.
    pub fn pd(&self) -> &SoftPd {
        &self.pd
    }
}

impl MemoryWindow for SoftMw {
    fn rkey(&self) -> Rkey {
        MemoryKey(self.key.load(Ordering::SeqCst))
    }
    fn mw_type(&self) -> MwType {
        self.mw_type
    }
}

impl Drop for SoftMw {
    fn drop(&mut self) {
        self.pd.inner.dev.mpt.dealloc_mw(self.rkey());
    }
}
