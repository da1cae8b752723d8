//! The memory node's pools: headers, buffers (slab allocator with size classes) and memory
//! windows. Plain data structures over addresses and indexes; no verbs, no memory access.
//!
//! Invariants:
//! - Every object the buffer pool hands out is `[32-byte header slot][buffer]`; the slot in
//!   front is the contiguity header (§5.4 #3) and returns with the object ("the hole in front of
//!   a freed buffer becomes a header again").
//! - Free headers, objects and windows are reused first-in first-out, so memory that was just
//!   freed (and may still be covered by a delayed-unbound window) is reused as late as possible.
//! - A window in the stale list still covers freed memory (delayed unbinding, §5.4 #2); it must
//!   be unbound or handed over before that memory is reused.

use crate::proto::header::HEADER_SIZE;
use std::collections::{HashMap, VecDeque};

/// Identifies a pre-allocated memory window.
pub type MwId = u32;

/// Size classes: powers of two from 64 B up to `max_class`.
#[derive(Clone, Debug)]
pub struct SlabConfig {
    /// Smallest object.
    pub min_class: u64,
    /// Largest object.
    pub max_class: u64,
    /// Bytes carved for one slab.
    pub slab_bytes: u64,
}

impl Default for SlabConfig {
    fn default() -> Self {
        SlabConfig {
            min_class: 64,
            max_class: 1 << 20,
            slab_bytes: 1 << 20,
        }
    }
}

#[derive(Debug)]
struct Slab {
    base: u64,
    class: u64,
}

/// An allocated object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object {
    /// First byte (the header slot).
    pub addr: u64,
    /// Size class in bytes (header slot included).
    pub class: u64,
}

impl Object {
    /// The buffer that follows the header slot.
    pub fn buffer(&self) -> (u64, u64) {
        (
            self.addr + HEADER_SIZE as u64,
            self.class - HEADER_SIZE as u64,
        )
    }
}

/// Slab allocator over `[base, base + len)`.
#[derive(Debug)]
pub struct BufferPool {
    cfg: SlabConfig,
    next_slab: u64,
    end: u64,
    slabs: Vec<Slab>,
    /// Free objects per class (FIFO).
    free: HashMap<u64, VecDeque<u64>>,
    /// Live objects by address → class.
    live: HashMap<u64, u64>,
    free_bytes: u64,
}

impl BufferPool {
    /// A pool over `[base, base + len)`.
    pub fn new(base: u64, len: u64, cfg: SlabConfig) -> Self {
        BufferPool {
            next_slab: base,
            end: base + len,
            slabs: Vec::new(),
            free: HashMap::new(),
            live: HashMap::new(),
            free_bytes: len,
            cfg,
        }
    }

    /// The class that holds `size` buffer bytes behind a header slot.
    pub fn class_for(&self, size: u64) -> Option<u64> {
        let need = size
            .checked_add(HEADER_SIZE as u64)?
            .max(self.cfg.min_class);
        let class = need.checked_next_power_of_two()?;
        (class <= self.cfg.max_class).then_some(class)
    }

    /// Allocates an object for `size` buffer bytes.
    pub fn alloc(&mut self, size: u64) -> Option<Object> {
        let class = self.class_for(size)?;
        let addr = match self.free.get_mut(&class).and_then(VecDeque::pop_front) {
            Some(a) => a,
            None => {
                self.carve(class)?;
                self.free.get_mut(&class)?.pop_front()?
            }
        };
        self.live.insert(addr, class);
        self.free_bytes -= class;
        Some(Object { addr, class })
    }

    fn carve(&mut self, class: u64) -> Option<()> {
        let bytes = self.cfg.slab_bytes.max(class);
        if self.next_slab + bytes > self.end {
            return None;
        }
        let base = self.next_slab;
        self.next_slab += bytes;
        self.slabs.push(Slab { base, class });
        let q = self.free.entry(class).or_default();
        let mut a = base;
        while a + class <= base + bytes {
            q.push_back(a);
            a += class;
        }
        // Bytes of the slab not divisible into objects stay accounted as used.
        self.free_bytes -= bytes - (bytes / class) * class;
        Some(())
    }

    /// Frees a live object; returns false if `addr` is not one.
    pub fn free(&mut self, addr: u64) -> bool {
        match self.live.remove(&addr) {
            Some(class) => {
                self.free.entry(class).or_default().push_back(addr);
                self.free_bytes += class;
                true
            }
            None => false,
        }
    }

    /// The live object starting at `addr`.
    pub fn object_at(&self, addr: u64) -> Option<Object> {
        self.live.get(&addr).map(|&class| Object { addr, class })
    }

    /// The live object whose buffer starts at `addr`.
    pub fn object_with_buffer(&self, buffer_addr: u64) -> Option<Object> {
        self.object_at(buffer_addr.checked_sub(HEADER_SIZE as u64)?)
    }

    /// Bytes not held by live objects (carved-but-free and never-carved).
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Number of live objects.
    pub fn live_objects(&self) -> usize {
        self.live.len()
    }

    /// Slabs carved so far, as (base, class).
    pub fn slabs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slabs.iter().map(|s| (s.base, s.class))
    }
}

/// A pool of 32-byte headers (FIFO reuse).
#[derive(Debug)]
pub struct HeaderPool {
    free: VecDeque<u64>,
    capacity: usize,
}

impl HeaderPool {
    /// `count` headers starting at `base`.
    pub fn new(base: u64, count: usize) -> Self {
        HeaderPool {
            free: (0..count as u64)
                .map(|i| base + i * HEADER_SIZE as u64)
                .collect(),
            capacity: count,
        }
    }
    /// Takes the least recently freed header.
    pub fn take(&mut self) -> Option<u64> {
        self.free.pop_front()
    }
    /// Returns a header.
    pub fn give(&mut self, addr: u64) {
        self.free.push_back(addr);
    }
    /// Free headers.
    pub fn available(&self) -> usize {
        self.free.len()
    }
    /// All headers.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Pre-allocated windows: unbound ones (FIFO) and stale ones (still bound over freed memory).
#[derive(Debug)]
pub struct MwPool {
    free: VecDeque<MwId>,
    /// Delayed-unbound windows, oldest first; the first candidates for handover.
    stale: VecDeque<MwId>,
    capacity: usize,
}

impl MwPool {
    /// Windows `0..count`.
    pub fn new(count: u32) -> Self {
        MwPool {
            free: (0..count).collect(),
            stale: VecDeque::new(),
            capacity: count as usize,
        }
    }
    /// Takes an unbound window.
    pub fn take_free(&mut self) -> Option<MwId> {
        self.free.pop_front()
    }
    /// Returns an unbound window.
    pub fn give_free(&mut self, mw: MwId) {
        self.free.push_back(mw);
    }
    /// Records a window left bound over freed memory.
    pub fn push_stale(&mut self, mw: MwId) {
        self.stale.push_back(mw);
    }
    /// Takes the oldest stale window (it must be rebound or unbound before reuse of its memory).
    pub fn take_stale(&mut self) -> Option<MwId> {
        self.stale.pop_front()
    }
    /// Removes a specific stale window (its memory is about to be reused).
    pub fn remove_stale(&mut self, mw: MwId) -> bool {
        match self.stale.iter().position(|&m| m == mw) {
            Some(i) => {
                self.stale.remove(i);
                true
            }
            None => false,
        }
    }
    /// (free, stale, capacity).
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.free.len(), self.stale.len(), self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_classes_and_reuse_order() {
        let mut p = BufferPool::new(1 << 20, 4 << 20, SlabConfig::default());
        assert_eq!(p.class_for(32), Some(64));
        assert_eq!(p.class_for(33), Some(128));
        assert_eq!(p.class_for(1 << 20), None);
        let a = p.alloc(32).unwrap();
        let b = p.alloc(32).unwrap();
        assert_eq!(b.addr, a.addr + 64);
        assert_eq!(a.buffer(), (a.addr + 32, 32));
        assert!(p.free(a.addr));
        assert!(!p.free(a.addr), "double free refused");
        let c = p.alloc(32).unwrap();
        assert_ne!(
            c.addr, a.addr,
            "FIFO: the just-freed object is not reused first"
        );
        assert_eq!(p.object_with_buffer(b.addr + 32), Some(b));
    }

    #[test]
    fn pool_exhaustion_is_reported() {
        let mut p = BufferPool::new(0, 1 << 20, SlabConfig::default());
        let mut n = 0;
        while p.alloc(4000).is_some() {
            n += 1;
        }
        assert_eq!(n, (1 << 20) / 4096);
        assert_eq!(p.free_bytes(), 0);
    }
}
