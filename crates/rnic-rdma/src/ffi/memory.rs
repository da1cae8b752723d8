//! PD, MR and MW handles.

use super::Device;
use super::{check, last_error};
use rdma_mummy_sys as sys;
use rnic::memory::MemoryBlock;
use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

/// A protection domain (`ibv_pd`).
#[derive(Debug)]
pub struct Pd {
    pub(super) ptr: NonNull<sys::ibv_pd>,
    _dev: Arc<Device>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: children hold an Arc of this PD, so none is alive.
        unsafe { sys::ibv_dealloc_pd(self.ptr.as_ptr()) };
    }
}

/// `ibv_alloc_pd`.
pub fn alloc_pd(dev: &Arc<Device>) -> io::Result<Pd> {
    // SAFETY: valid context.
    let ptr = unsafe { sys::ibv_alloc_pd(dev.ctx.as_ptr()) };
    Ok(Pd {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _dev: dev.clone(),
    })
}

/// A registered memory region (`ibv_mr`); keeps its memory mapped.
#[derive(Debug)]
pub struct Mr {
    pub(super) ptr: NonNull<sys::ibv_mr>,
    _pd: Arc<Pd>,
    block: Option<MemoryBlock>,
}

// SAFETY: verbs objects are thread-safe; the block is Send + Sync.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

/// `ibv_reg_mr` over `[offset, offset + len)` of `block`.
pub fn reg_mr(
    pd: &Arc<Pd>,
    block: &MemoryBlock,
    offset: usize,
    len: usize,
    access: u32,
) -> io::Result<Mr> {
    if offset.checked_add(len).is_none_or(|end| end > block.len()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let addr = (block.addr() + offset as u64) as *mut c_void;
    // SAFETY: `[addr, addr + len)` lies inside the mapping of `block`, which this MR keeps
    // alive (a clone is stored below) for as long as the registration exists.
    let ptr = unsafe { sys::ibv_reg_mr(pd.ptr.as_ptr(), addr, len, access as c_int) };
    Ok(Mr {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
        block: Some(block.clone()),
    })
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is valid while `self` is.
        unsafe { self.ptr.as_ref().lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.ptr.as_ref().rkey }
    }
    /// `ibv_dereg_mr`; on failure the handle is returned unchanged.
    pub fn deregister(mut self) -> Result<(), (Mr, io::Error)> {
        // SAFETY: the MR is valid; on success it is never used again (the block is dropped
        // after the NIC has released it).
        match check(unsafe { sys::ibv_dereg_mr(self.ptr.as_ptr()) }) {
            Ok(()) => {
                self.block = None;
                std::mem::forget(self);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR is valid and deregistered once.
        let ret = unsafe { sys::ibv_dereg_mr(self.ptr.as_ptr()) };
        if ret != 0 {
            // The NIC may still reach the pages: never unmap them.
            std::mem::forget(self.block.take());
        }
    }
}

/// A memory window (`ibv_mw`).
#[derive(Debug)]
pub struct Mw {
    pub(super) ptr: NonNull<sys::ibv_mw>,
    _pd: Arc<Pd>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

/// `ibv_alloc_mw`; `mw_type` is `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
pub fn alloc_mw(pd: &Arc<Pd>, mw_type: u32) -> io::Result<Mw> {
    // SAFETY: valid PD; the inline wrapper checks that the provider implements alloc_mw.
    let ptr = unsafe { sys::ibv_alloc_mw(pd.ptr.as_ptr(), mw_type) };
    Ok(Mw {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
    })
}

impl Mw {
    /// The rkey the device assigned at allocation.
    pub fn initial_rkey(&self) -> u32 {
        // SAFETY: the MW is valid while `self` is.
        unsafe { self.ptr.as_ref().rkey }
    }

    /// Records `rkey` in the `ibv_mw` as the window's current rkey, as libibverbs'
    /// `ibv_bind_mw` does once it has posted a bind. Providers name the window of a later
    /// bind request by it: rxe sends `mw->rkey` and the kernel refuses a bind whose window
    /// rkey is not the current one (`MW_BIND_ERR`); hardware looks only at the index.
    /// Called for a posted bind, under the posting QP's doorbell lock, while no other bind of
    /// this window is being posted (binds of a window come from one QP at a time).
    pub fn set_rkey(&self, rkey: u32) {
        // SAFETY: the MW is valid while `self` is; the provider reads `rkey` only inside a
        // post of a bind of this window, and none runs concurrently with this store (above).
        unsafe { (*self.ptr.as_ptr()).rkey = rkey }
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: the MW is valid and deallocated once.
        unsafe { sys::ibv_dealloc_mw(self.ptr.as_ptr()) };
    }
}
