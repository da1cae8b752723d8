//! Rights over KV blocks this client keeps for later operations: blocks it read (of any
//! writer) and blocks it linked itself, by address, oldest given up past the capacity.
//!
//! A kept right is used after a fresh read of the buckets names its block (a probe) — or,
//! with `ClientOptions::speculate`, on a guess, for a READ that goes in the same batch as
//! the buckets and counts only if they name the block (`guesses`). A right may have ended
//! without this client knowing (another client freed the block), and an access through it
//! is then refused by the NIC, which breaks the QP it was posted on (`ops::validate` reads
//! the block again under a new right); so guesses are read only while they have been holding.
//!
//! Each kept right remembers the entry (the slot word: fingerprint, length, address) that
//! named its block when the right was taken, and is used only for that same entry. Freed
//! addresses are reused: a slot naming the address for *another* key (another fingerprint or
//! length) means the block the right covered was freed — the right has ended — so the reader
//! acquires the new block instead of reading through a dead right (a refused READ: a broken
//! QP). Only the same key rewritten at the same address looks the same (the ABA case
//! `ops::validate` handles).

use super::layout::Slot;
use crate::memory::Region;
use patronus_core::proto::messages::Access;
use std::collections::{HashMap, VecDeque};

struct Kept<R> {
    right: R,
    access: Access,
    /// The entry that named the block when the right was taken (thawed).
    entry: u64,
}

/// See the module docs.
pub(crate) struct BlockRights<R> {
    map: HashMap<u64, Kept<R>>,
    order: VecDeque<u64>,
    cap: usize,
}

impl<R: Region> BlockRights<R> {
    pub(crate) fn new(cap: usize) -> Self {
        BlockRights {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    /// The right over the block `entry` names if one with `access` covering the entry's
    /// length is held, taken for that same entry.
    pub(crate) fn get(&self, entry: Slot, access: Access) -> Option<&R> {
        let entry = entry.thawed();
        self.map
            .get(&entry.ptr())
            .filter(|k| {
                k.entry == entry.0
                    && k.right.len() >= entry.len()
                    && (k.access == access || k.access == Access::ReadWrite)
            })
            .map(|k| &k.right)
    }

    /// Keeps `r`, taken for `entry` (`Slot::EMPTY`: for no entry, never found by `get`);
    /// returns the rights pushed out (to give up).
    pub(crate) fn put(&mut self, addr: u64, r: R, access: Access, entry: Slot) -> Vec<R> {
        let kept = Kept {
            right: r,
            access,
            entry: entry.thawed().0,
        };
        let mut out: Vec<R> = self
            .map
            .insert(addr, kept)
            .map(|k| k.right)
            .into_iter()
            .collect();
        self.order.retain(|a| *a != addr);
        self.order.push_back(addr);
        // Keep at least a few: an operation holds the rights it is validating.
        while self.order.len() > self.cap.max(8) {
            if let Some(a) = self.order.pop_front() {
                out.extend(self.map.remove(&a).map(|k| k.right));
            }
        }
        out
    }

    /// Takes the right over `addr` out.
    pub(crate) fn take(&mut self, addr: u64) -> Option<R> {
        self.order.retain(|a| *a != addr);
        self.map.remove(&addr).map(|k| k.right)
    }

    pub(crate) fn drain(&mut self) -> Vec<R> {
        self.order.clear();
        self.map.drain().map(|(_, k)| k.right).collect()
    }
}
