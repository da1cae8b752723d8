//! Access validation: the responder's rkey checks (`rxe_lookup_mw` + `check_rkey`) and the
//! requester's lkey checks, returning a grant that holds the entry's gate for the copy.
//!
//! Check order for a window rkey (all give a remote access error): index names a window, the
//! full key matches and the window is valid, PD of window = PD of QP, type-2 window bound to
//! this QP, non-zero length, rights cover the operation, range inside the window and its region.
//! For a region rkey: index, key, PD, rights, range. Memory is touched only through a grant.

use super::mw::MwEntry;
use super::{MW_INDEX_BIT, MrEntry, ProtectionTable};
use crate::soft::gate::GateGuard;
use crate::verbs::{AccessFlags, MemoryKey, PdId, QpNumber, VirtAddr};
use arc_swap::Guard;
use std::sync::Arc;

/// The kind of remote access, which decides the right needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteOp {
    /// RDMA READ: REMOTE_READ.
    Read,
    /// RDMA WRITE: REMOTE_WRITE.
    Write,
    /// CAS / FAA: REMOTE_ATOMIC.
    Atomic,
}

impl RemoteOp {
    /// The access right this operation needs.
    pub fn right(self) -> AccessFlags {
        match self {
            RemoteOp::Read => AccessFlags::REMOTE_READ,
            RemoteOp::Write => AccessFlags::REMOTE_WRITE,
            RemoteOp::Atomic => AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Why an access was refused. Remote refusals map to `RemoteAccessError`, local ones to
/// `LocalProtectionError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The key's index names no live entry.
    #[error("unknown key index")]
    UnknownKey,
    /// The key byte is stale or the entry is not valid (revoked, unbound, rebinding).
    #[error("stale or invalid key")]
    StaleKey,
    /// The entry belongs to another protection domain.
    #[error("protection domain mismatch")]
    PdMismatch,
    /// A type-2 window bound to another QP.
    #[error("window bound to another QP")]
    WrongQp,
    /// The window has zero length.
    #[error("zero-length window")]
    ZeroLength,
    /// The entry does not grant the needed right.
    #[error("access right missing")]
    RightMissing,
    /// The range is outside the window or region.
    #[error("out of bounds")]
    OutOfBounds,
}

enum Source {
    Window(Guard<Option<Arc<MwEntry>>>),
    Region(Guard<Option<Arc<MrEntry>>>),
}

/// Permission to touch `[va, va + len)` of one region; the entry cannot be rebound, invalidated
/// or deregistered while the grant lives.
pub struct AccessGrant<'a> {
    source: Source,
    _guard: GateGuard<'a>,
}

/// A grant over a local buffer (same guarantees).
pub type LocalGrant<'a> = AccessGrant<'a>;

impl std::fmt::Debug for AccessGrant<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessGrant").finish_non_exhaustive()
    }
}

impl AccessGrant<'_> {
    /// The region to copy through (its page table translates every access).
    pub fn region(&self) -> &MrEntry {
        match &self.source {
            Source::Window(g) => match g.as_ref().and_then(|e| e.binding.as_ref()) {
                Some(b) => &b.mr,
                // A window grant is only built for a bound entry, which the gate pins.
                None => unreachable_region(),
            },
            Source::Region(g) => match g.as_ref() {
                Some(mr) => mr,
                None => unreachable_region(),
            },
        }
    }
}

#[cold]
fn unreachable_region() -> &'static MrEntry {
    // Grants are constructed only after checking the entry is present, and the gate keeps it.
    panic!("access grant without a region: protection-table invariant broken")
}

impl ProtectionTable {
    /// Validates a remote access through `rkey` arriving on QP `qp` (whose PD is `qp_pd`).
    pub fn check_remote(
        &self,
        rkey: MemoryKey,
        va: VirtAddr,
        len: u64,
        op: RemoteOp,
        qp_pd: PdId,
        qp: QpNumber,
    ) -> Result<AccessGrant<'_>, AccessError> {
        if rkey.index() & MW_INDEX_BIT != 0 {
            let slot = self.mw_slot(rkey).ok_or(AccessError::UnknownKey)?;
            let guard = slot
                .gate
                .enter(rkey.key_byte())
                .ok_or(AccessError::StaleKey)?;
            let entry = slot.entry.load();
            let e = entry.as_ref().ok_or(AccessError::StaleKey)?;
            if e.pd != qp_pd {
                return Err(AccessError::PdMismatch);
            }
            let b = e.binding.as_ref().ok_or(AccessError::StaleKey)?;
            if b.qp.is_some_and(|owner| owner != qp) {
                return Err(AccessError::WrongQp);
            }
            if b.len == 0 {
                return Err(AccessError::ZeroLength);
            }
            if !b.access.contains(op.right()) {
                return Err(AccessError::RightMissing);
            }
            let in_window =
                va >= b.addr && va.checked_add(len).is_some_and(|end| end <= b.addr + b.len);
            if !(in_window || self.unchecked_window_bounds) || !b.mr.covers(va, len) {
                return Err(AccessError::OutOfBounds);
            }
            Ok(AccessGrant {
                source: Source::Window(entry),
                _guard: guard,
            })
        } else {
            self.check_region(rkey, va, len, op.right(), qp_pd)
        }
    }

    /// Validates a local buffer named by `lkey` for a request on a QP of `pd`.
    pub fn check_local(
        &self,
        lkey: MemoryKey,
        va: VirtAddr,
        len: u64,
        write: bool,
        pd: PdId,
    ) -> Result<LocalGrant<'_>, AccessError> {
        let need = if write {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        self.check_region(lkey, va, len, need, pd)
    }

    fn check_region(
        &self,
        key: MemoryKey,
        va: VirtAddr,
        len: u64,
        need: AccessFlags,
        pd: PdId,
    ) -> Result<AccessGrant<'_>, AccessError> {
        if key.index() & MW_INDEX_BIT != 0 {
            return Err(AccessError::UnknownKey);
        }
        let slot = self
            .mrs
            .get(key.index() as usize)
            .ok_or(AccessError::UnknownKey)?;
        let guard = slot
            .gate
            .enter(key.key_byte())
            .ok_or(AccessError::StaleKey)?;
        let entry = slot.entry.load();
        let mr = entry.as_ref().ok_or(AccessError::StaleKey)?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::RightMissing);
        }
        if !mr.covers(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        Ok(AccessGrant {
            source: Source::Region(entry),
            _guard: guard,
        })
    }
}
