//! Which type-2 windows are bound to each QP, so that resetting or destroying a QP frees its
//! windows with work proportional to their number, not to the size of the window table (a
//! client reconnecting its QP thousands of times must not make the node scan the table each
//! time).
//!
//! Invariants:
//! - Every change of a window's binding happens under the window's `bind_lock`, and updates
//!   this index under that same lock (a type-2 bind adds the window, an invalidation or a
//!   deallocation removes it). So, apart from windows taken out by
//!   [`ProtectionTable::invalidate_type2_of_qp`] and not yet freed, window `w` is listed under
//!   `qp` exactly when `w` is bound to `qp`.
//! - `invalidate_type2_of_qp(qp)` first takes `qp`'s whole set out of the index, then frees
//!   each window under its `bind_lock`, after checking that it is still bound to `qp` (a
//!   concurrent `LOCAL_INV`, `SEND_WITH_INV` or deallocation may have freed it, and it may have
//!   been bound to another QP since). No bind *to* `qp` runs meanwhile: binds are posted on
//!   the QP they bind to, its reset holds its send lock, and a QP being destroyed posts
//!   nothing; so the set taken is complete.
//! - Lock order: a window's `bind_lock`, then the index lock, which is held only for one map
//!   update. The data path (key checks of remote accesses) never takes it.
//! - A QP with no windows has no entry, so the index stays as small as the bound windows
//!   however many QP numbers come and go.

use super::ProtectionTable;
use crate::verbs::QpNumber;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// Slot numbers (window index without [`MW_INDEX_BIT`](super::MW_INDEX_BIT)) of the type-2
/// windows bound to each QP.
#[derive(Debug, Default)]
pub(super) struct QpWindows {
    by_qp: Mutex<HashMap<QpNumber, HashSet<u32>>>,
}

impl QpWindows {
    /// Records the change of window `slot`'s owner QP from `old` to `new` (either `None`: not
    /// bound to a QP). Called under the window's `bind_lock`.
    pub(super) fn rebound(&self, slot: u32, old: Option<QpNumber>, new: Option<QpNumber>) {
        if old == new {
            return;
        }
        let mut by_qp = self.by_qp.lock();
        if let Some(qp) = old
            && let Some(set) = by_qp.get_mut(&qp)
        {
            set.remove(&slot);
            if set.is_empty() {
                by_qp.remove(&qp);
            }
        }
        if let Some(qp) = new {
            by_qp.entry(qp).or_default().insert(slot);
        }
    }

    /// Takes out every window listed under `qp`.
    fn take(&self, qp: QpNumber) -> HashSet<u32> {
        self.by_qp.lock().remove(&qp).unwrap_or_default()
    }

    /// The whole index (for tests).
    #[cfg(test)]
    pub(super) fn snapshot(&self) -> HashMap<QpNumber, HashSet<u32>> {
        self.by_qp.lock().clone()
    }
}

impl ProtectionTable {
    /// Returns to FREE every type-2 window bound to `qp` (the QP is being reset or destroyed:
    /// its number may come back on another connection, which must not inherit the windows).
    /// Each window keeps its key byte, closed: its next bind moves it on, so the old rkey never
    /// matches again.
    ///
    /// Returns how many windows it examined: those bound to `qp` when it was called, which
    /// bounds its work (it never scans the table).
    pub fn invalidate_type2_of_qp(&self, qp: QpNumber) -> usize {
        let slots = self.qp_windows.take(qp);
        for &index in &slots {
            let Some(slot) = self.mws.get(index as usize) else {
                continue;
            };
            let _bind = slot.bind_lock.lock();
            let Some(entry) = slot.entry.load_full() else {
                continue; // deallocated meanwhile
            };
            if entry.binding.as_ref().is_some_and(|b| b.qp == Some(qp)) {
                slot.free_locked(&entry);
            }
        }
        slots.len()
    }
}
