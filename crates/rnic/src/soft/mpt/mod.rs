//! The memory protection table (MPT): memory regions and memory windows, keyed by the 24-bit
//! index of their keys.
//!
//! Invariants:
//! - Region indexes are `0..max_mr`; window indexes have bit 23 set ([`MW_INDEX_BIT`]), so one
//!   key names exactly one kind of entry.
//! - Every entry has a [`KeyGate`]; an access holds the gate's guard from validation to the end
//!   of its copy, and every change of a binding closes and drains the gate first. So once a
//!   bind, unbind, invalidation or deregistration returns, no access through the old key can
//!   touch memory.
//! - A rejected access or bind changes nothing.
//! - Freed window indexes are reused first-in first-out, so a stale key can match again only
//!   after 256 rebinds of the same window.
//! - The type-2 windows bound to each QP are indexed (`qp_windows.rs`), so a QP's reset or
//!   destruction frees them without scanning the table.

mod access;
mod mr;
mod mw;
mod qp_windows;
#[cfg(test)]
mod tests;

pub use access::{AccessError, AccessGrant, LocalGrant, RemoteOp};
pub use mr::MrEntry;
pub use mw::{BindError, BindRequest, MwEntry, MwState};

use crate::soft::gate::KeyGate;
use crate::verbs::{DeviceAttr, MemoryKey, MwType, PdId, Resource, VerbsError, VerbsResult};
use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use qp_windows::QpWindows;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Arc;

/// Bit of a key index that marks a memory window.
pub const MW_INDEX_BIT: u32 = 1 << 23;

/// How the key byte changes on each bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KeyPolicy {
    /// +1 per bind, as `ibv_inc_rkey`.
    #[default]
    Increment,
    /// A random byte (never equal to the previous one), from a seeded generator.
    Random {
        /// Seed of the generator.
        seed: u64,
    },
}

struct MrSlot {
    gate: KeyGate,
    entry: ArcSwapOption<MrEntry>,
}

/// One slot of the window table.
pub(crate) struct MwSlot {
    pub(crate) gate: KeyGate,
    /// Serializes binders of this window.
    pub(crate) bind_lock: Mutex<()>,
    pub(crate) entry: ArcSwapOption<MwEntry>,
}

/// The device's memory protection table.
pub struct ProtectionTable {
    mrs: Box<[MrSlot]>,
    mws: Box<[MwSlot]>,
    free_mrs: Mutex<Vec<u32>>,
    free_mws: Mutex<VecDeque<u32>>,
    policy: KeyPolicy,
    rng: Mutex<StdRng>,
    /// The type-2 windows bound to each QP.
    qp_windows: QpWindows,
    /// Fault injection ([`SoftConfig::unchecked_window_bounds`](super::SoftConfig)): a window
    /// access is checked against the window's region only.
    unchecked_window_bounds: bool,
}

impl std::fmt::Debug for ProtectionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionTable")
            .field("max_mr", &self.mrs.len())
            .field("max_mw", &self.mws.len())
            .field("policy", &self.policy)
            .finish()
    }
}

impl ProtectionTable {
    /// The table, checking window accesses against the window's region only if `unchecked`
    /// (fault injection for tests).
    pub fn with_unchecked_window_bounds(mut self, unchecked: bool) -> Self {
        self.unchecked_window_bounds = unchecked;
        self
    }

    /// A table sized by `attr`.
    pub fn new(attr: &DeviceAttr, policy: KeyPolicy) -> Self {
        let max_mr = attr.max_mr.min(MW_INDEX_BIT);
        let max_mw = attr.max_mw.min(MW_INDEX_BIT);
        let seed = match policy {
            KeyPolicy::Random { seed } => seed,
            KeyPolicy::Increment => 0,
        };
        ProtectionTable {
            mrs: (0..max_mr)
                .map(|_| MrSlot {
                    gate: KeyGate::new(0),
                    entry: ArcSwapOption::empty(),
                })
                .collect(),
            mws: (0..max_mw)
                .map(|_| MwSlot {
                    gate: KeyGate::new(0),
                    bind_lock: Mutex::new(()),
                    entry: ArcSwapOption::empty(),
                })
                .collect(),
            free_mrs: Mutex::new((0..max_mr).rev().collect()),
            free_mws: Mutex::new((0..max_mw).collect()),
            policy,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            qp_windows: QpWindows::default(),
            unchecked_window_bounds: false,
        }
    }

    /// The key byte that follows `old` under this table's policy.
    pub fn next_key_byte(&self, old: u8) -> u8 {
        match self.policy {
            KeyPolicy::Increment => old.wrapping_add(1),
            KeyPolicy::Random { .. } => {
                let mut rng = self.rng.lock();
                loop {
                    let b: u8 = rng.random();
                    if b != old {
                        return b;
                    }
                }
            }
        }
    }

    fn initial_key_byte(&self) -> u8 {
        match self.policy {
            KeyPolicy::Increment => 0,
            KeyPolicy::Random { .. } => self.rng.lock().random(),
        }
    }

    // ---- memory regions ----

    /// Installs a registered region; returns its key (lkey = rkey).
    pub fn insert_mr(&self, entry: MrEntry) -> VerbsResult<MemoryKey> {
        let index = self
            .free_mrs
            .lock()
            .pop()
            .ok_or(VerbsError::Exhausted(Resource::MemoryRegion))?;
        let slot = &self.mrs[index as usize];
        let (old, _) = slot.gate.snapshot();
        let key = self.next_key_byte(old);
        slot.entry.store(Some(Arc::new(entry)));
        slot.gate.open(key);
        Ok(MemoryKey::new(index, key))
    }

    /// Deregisters the region named by `key`. Fails while windows are bound over it.
    pub fn remove_mr(&self, key: MemoryKey) -> VerbsResult<()> {
        let slot = self
            .mr_slot(key)
            .ok_or(VerbsError::InvalidArgument("unknown MR"))?;
        let Some(entry) = slot.entry.load_full() else {
            return Err(VerbsError::InvalidArgument("MR already deregistered"));
        };
        let bound = entry
            .bound_windows
            .load(std::sync::atomic::Ordering::SeqCst);
        if bound != 0 {
            return Err(VerbsError::MrHasBoundWindows(bound));
        }
        slot.gate.close();
        slot.gate.drain();
        slot.entry.store(None);
        entry.unpin();
        self.free_mrs.lock().push(key.index());
        Ok(())
    }

    fn mr_slot(&self, key: MemoryKey) -> Option<&MrSlot> {
        if key.index() & MW_INDEX_BIT != 0 {
            return None;
        }
        self.mrs.get(key.index() as usize)
    }

    /// The region named by `key`, if its key byte is current.
    pub fn mr(&self, key: MemoryKey) -> Option<Arc<MrEntry>> {
        let slot = self.mr_slot(key)?;
        let (byte, open) = slot.gate.snapshot();
        if !open || byte != key.key_byte() {
            return None;
        }
        slot.entry.load_full()
    }

    // ---- memory windows ----

    /// Allocates an unbound window of `pd`; returns its initial rkey.
    pub fn alloc_mw(&self, pd: PdId, mw_type: MwType) -> VerbsResult<MemoryKey> {
        let index = self
            .free_mws
            .lock()
            .pop_front()
            .ok_or(VerbsError::Exhausted(Resource::MemoryWindow))?;
        let slot = &self.mws[index as usize];
        let (old, _) = slot.gate.snapshot();
        // A fresh allocation never reuses the previous owner's key byte.
        let key = if self.policy == KeyPolicy::Increment {
            old.wrapping_add(1)
        } else {
            self.initial_key_byte()
        };
        slot.gate.set_closed_key(key);
        slot.entry
            .store(Some(Arc::new(MwEntry::unbound(pd, mw_type))));
        Ok(MemoryKey::new(index | MW_INDEX_BIT, key))
    }

    /// Deallocates a window (`ibv_dealloc_mw`), invalidating any binding first.
    pub fn dealloc_mw(&self, key: MemoryKey) {
        let Some(slot) = self.mw_slot(key) else {
            return;
        };
        let index = key.index() & !MW_INDEX_BIT;
        let _bind = slot.bind_lock.lock();
        slot.gate.close();
        slot.gate.drain();
        // A slot already free (a second deallocation) is not queued twice.
        if let Some(old) = slot.entry.swap(None) {
            self.qp_windows.rebound(index, old.bound_qp(), None);
            old.release_mr();
            self.free_mws.lock().push_back(index);
        }
    }

    pub(crate) fn mw_slot(&self, key: MemoryKey) -> Option<&MwSlot> {
        if key.index() & MW_INDEX_BIT == 0 {
            return None;
        }
        self.mws.get((key.index() & !MW_INDEX_BIT) as usize)
    }

    /// The window's current state, for diagnostics and tests.
    pub fn mw_state(&self, key: MemoryKey) -> Option<MwState> {
        let slot = self.mw_slot(key)?;
        let entry = slot.entry.load_full()?;
        Some(entry.state(slot.gate.snapshot()))
    }

    /// Number of allocated regions and windows (for leak checks): the table sizes less the
    /// free lists, so O(1).
    pub fn in_use(&self) -> (usize, usize) {
        (
            self.mrs.len().saturating_sub(self.free_mrs.lock().len()),
            self.mws.len().saturating_sub(self.free_mws.lock().len()),
        )
    }
}
