//! Memory windows: bind and invalidation, with the checks of `rxe_check_bind_mw` /
//! `rxe_invalidate_mw` and their IB-spec rule numbers.
//!
//! A window's binding is an immutable [`MwEntry`] swapped as a whole; the swap happens only
//! between closing and reopening the slot's gate, after draining it (see `soft::gate`), and
//! under the slot's `bind_lock`, which also covers the update of the QP index
//! (`qp_windows.rs`).

use super::{MW_INDEX_BIT, MrEntry, MwSlot, ProtectionTable};
use crate::verbs::{AccessFlags, MemoryKey, MwType, PdId, QpNumber, VirtAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The current binding of a window.
#[derive(Debug)]
pub struct MwBinding {
    /// Region the window lies in.
    pub mr: Arc<MrEntry>,
    /// First covered address.
    pub addr: VirtAddr,
    /// Covered length (non-zero).
    pub len: u64,
    /// Remote rights granted.
    pub access: AccessFlags,
    /// For type 2: the only QP through which the window may be used.
    pub qp: Option<QpNumber>,
}

/// An allocated window and its binding.
#[derive(Debug)]
pub struct MwEntry {
    /// Owning protection domain.
    pub pd: PdId,
    /// Type 1 or 2.
    pub mw_type: MwType,
    /// `None` when unbound (type 1 after a zero-length bind, type 2 FREE).
    pub binding: Option<MwBinding>,
}

impl MwEntry {
    pub(super) fn unbound(pd: PdId, mw_type: MwType) -> Self {
        MwEntry {
            pd,
            mw_type,
            binding: None,
        }
    }

    /// The QP a type-2 binding ties the window to.
    pub(super) fn bound_qp(&self) -> Option<QpNumber> {
        self.binding.as_ref().and_then(|b| b.qp)
    }

    /// Drops this entry's reference on its region's bound-window count.
    pub(super) fn release_mr(&self) {
        if let Some(b) = &self.binding {
            b.mr.bound_windows.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub(super) fn state(&self, (key, open): (u8, bool)) -> MwState {
        match (&self.binding, open) {
            (Some(b), true) => MwState::Bound {
                key_byte: key,
                addr: b.addr,
                len: b.len,
                qp: b.qp,
            },
            _ => MwState::Unbound { key_byte: key },
        }
    }
}

impl MwSlot {
    /// Returns this slot's window (whose current entry is `entry`) to unbound, keeping its key
    /// byte closed: drains the gate, swaps in an unbound entry and drops the region reference.
    /// The caller holds `bind_lock` and updates the QP index.
    pub(super) fn free_locked(&self, entry: &MwEntry) {
        let (key, _) = self.gate.snapshot();
        self.gate.close();
        self.gate.drain();
        if let Some(old) = self
            .entry
            .swap(Some(Arc::new(MwEntry::unbound(entry.pd, entry.mw_type))))
        {
            old.release_mr();
        }
        self.gate.set_closed_key(key);
    }
}

/// Observable state of a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwState {
    /// Not bound (type 2: FREE).
    Unbound {
        /// Current key byte.
        key_byte: u8,
    },
    /// Bound and usable.
    Bound {
        /// Current key byte.
        key_byte: u8,
        /// First covered address.
        addr: VirtAddr,
        /// Covered length.
        len: u64,
        /// Type-2 owner QP.
        qp: Option<QpNumber>,
    },
}

/// A bind request, already resolved to table objects.
#[derive(Debug)]
pub struct BindRequest {
    /// The window (any key byte; only the index is used).
    pub mw: MemoryKey,
    /// The QP the bind is posted on, and its PD.
    pub qp: QpNumber,
    /// PD of that QP.
    pub qp_pd: PdId,
    /// The region, or `None` for a type-1 unbind.
    pub mr: Option<Arc<MrEntry>>,
    /// First address.
    pub addr: VirtAddr,
    /// Length (zero: type-1 unbind).
    pub len: u64,
    /// Requested rights.
    pub access: AccessFlags,
    /// Key byte of the new rkey, chosen by the consumer; `None`: the table's key policy.
    pub key: Option<u8>,
    /// Whether the consumer named the QP the window is for (`BindInfo::target_qp`), which
    /// only a type-2 window may be bound for.
    pub named_qp: bool,
}

/// Why a bind or invalidation failed (completes with `MwBindError` / a local error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The key names no allocated window.
    #[error("no such memory window")]
    NoSuchWindow,
    /// The region handle was deregistered.
    #[error("memory region is not registered")]
    NoSuchRegion,
    /// Zero-based windows are not supported for type 1 (o10-36.2.2).
    #[error("zero-based binding")]
    ZeroBased,
    /// A type-2 window must be FREE to be bound (o10-37.2.30).
    #[error("type-2 window is not free")]
    NotFree,
    /// Window, region and QP must share a PD (C10-72).
    #[error("protection domain mismatch")]
    PdMismatch,
    /// A type-2 window cannot be invalidated by a zero-length bind or NULL MR (o10-37.2.40).
    #[error("type-2 window needs a region and a non-zero length")]
    Type2ZeroLength,
    /// A non-zero-length bind needs a region.
    #[error("non-zero-length bind without a region")]
    MissingRegion,
    /// The region lacks MW_BIND (C10-73).
    #[error("region does not allow window binding")]
    NoBindRight,
    /// Remote write/atomic rights need LOCAL_WRITE on the region (C10-74).
    #[error("remote write or atomic needs LOCAL_WRITE on the region")]
    NeedsLocalWrite,
    /// The window must lie inside the region (C10-75).
    #[error("window range outside the region")]
    OutOfRange,
    /// Invalidation named a different key than the window's current one.
    #[error("key does not match the window")]
    KeyMismatch,
    /// The window is not bound, so there is nothing to invalidate.
    #[error("window is not bound")]
    NotBound,
    /// Type-1 windows cannot be invalidated by LOCAL_INV or SEND_WITH_INV (o10-37.2.26).
    #[error("type-1 windows cannot be invalidated by a work request")]
    Type1Invalidate,
    /// A remote invalidation arrived on a QP that does not own the window.
    #[error("window is bound to another QP")]
    WrongQp,
    /// A type-1 window belongs to its PD: a bind cannot name a QP for it.
    #[error("a type-1 window cannot be bound for a named QP")]
    TargetQpOnType1,
}

impl ProtectionTable {
    /// Binds (or, type 1 with zero length, unbinds) a window. On success the old key is dead
    /// and every access through it has finished; returns the new key.
    pub fn bind_mw(&self, req: BindRequest) -> Result<MemoryKey, BindError> {
        let slot = self.mw_slot(req.mw).ok_or(BindError::NoSuchWindow)?;
        let _serial = slot.bind_lock.lock();
        let entry = slot.entry.load_full().ok_or(BindError::NoSuchWindow)?;
        let unbind = req.len == 0;
        match entry.mw_type {
            MwType::Type1 => {
                if req.named_qp {
                    return Err(BindError::TargetQpOnType1);
                }
                if req.access.contains(AccessFlags::ZERO_BASED) {
                    return Err(BindError::ZeroBased);
                }
                if !unbind && req.mr.is_none() {
                    return Err(BindError::MissingRegion);
                }
            }
            MwType::Type2 => {
                if entry.binding.is_some() {
                    return Err(BindError::NotFree);
                }
                if req.qp_pd != entry.pd {
                    return Err(BindError::PdMismatch);
                }
                if unbind || req.mr.is_none() {
                    return Err(BindError::Type2ZeroLength);
                }
            }
        }
        let binding = if unbind {
            None
        } else {
            let mr = req.mr.ok_or(BindError::MissingRegion)?;
            if mr.pd != entry.pd {
                return Err(BindError::PdMismatch);
            }
            if mr.access.contains(AccessFlags::ZERO_BASED) {
                return Err(BindError::ZeroBased);
            }
            if !mr.access.contains(AccessFlags::MW_BIND) {
                return Err(BindError::NoBindRight);
            }
            if req.access.needs_local_write() && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
                return Err(BindError::NeedsLocalWrite);
            }
            if !mr.covers(req.addr, req.len) {
                return Err(BindError::OutOfRange);
            }
            Some(MwBinding {
                mr,
                addr: req.addr,
                len: req.len,
                access: req.access & AccessFlags::REMOTE_ALL,
                qp: (entry.mw_type == MwType::Type2).then_some(req.qp),
            })
        };
        let (old_key, _) = slot.gate.snapshot();
        let key = req.key.unwrap_or_else(|| self.next_key_byte(old_key));
        slot.gate.close();
        slot.gate.drain();
        if let Some(b) = &binding {
            b.mr.bound_windows.fetch_add(1, Ordering::SeqCst);
        }
        let bound = binding.is_some();
        let new_qp = binding.as_ref().and_then(|b| b.qp);
        let new_entry = MwEntry {
            pd: entry.pd,
            mw_type: entry.mw_type,
            binding,
        };
        let old = slot.entry.swap(Some(Arc::new(new_entry)));
        let old_qp = old.as_ref().and_then(|e| e.bound_qp());
        self.qp_windows
            .rebound(req.mw.index() & !MW_INDEX_BIT, old_qp, new_qp);
        if let Some(old) = old {
            old.release_mr();
        }
        if bound {
            slot.gate.open(key);
        } else {
            slot.gate.set_closed_key(key);
        }
        Ok(MemoryKey::new(req.mw.index() | MW_INDEX_BIT, key))
    }

    /// Invalidates a type-2 window (`LOCAL_INV`, or `SEND_WITH_INV` when `remote_qp` names
    /// the QP the SEND arrived on). The window returns to FREE.
    pub fn invalidate_mw(
        &self,
        rkey: MemoryKey,
        pd: PdId,
        remote_qp: Option<QpNumber>,
    ) -> Result<(), BindError> {
        let slot = self.mw_slot(rkey).ok_or(BindError::NoSuchWindow)?;
        let _serial = slot.bind_lock.lock();
        let entry = slot.entry.load_full().ok_or(BindError::NoSuchWindow)?;
        let (key, open) = slot.gate.snapshot();
        if key != rkey.key_byte() {
            return Err(BindError::KeyMismatch);
        }
        if entry.mw_type == MwType::Type1 {
            return Err(BindError::Type1Invalidate);
        }
        let Some(binding) = &entry.binding else {
            return Err(BindError::NotBound);
        };
        if !open {
            return Err(BindError::NotBound);
        }
        if entry.pd != pd {
            return Err(BindError::PdMismatch);
        }
        if let Some(qp) = remote_qp
            && binding.qp != Some(qp)
        {
            return Err(BindError::WrongQp);
        }
        slot.free_locked(&entry);
        self.qp_windows
            .rebound(rkey.index() & !MW_INDEX_BIT, binding.qp, None);
        Ok(())
    }
}
