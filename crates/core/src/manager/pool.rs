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

/// Window pools per protection domain. Domain 0 is the shared domain; with a PD per client,
/// each client gets its own domain and windows, and windows never move between domains (a
/// window can only be bound over a region of its own PD).
#[derive(Debug)]
pub struct WindowPools {
    pools: Vec<MwPool>,
    /// Domain of each window id.
    owner: Vec<u32>,
    /// Domain of each client (absent: the shared domain).
    clients: HashMap<u32, u32>,
}

impl WindowPools {
    /// The shared domain with windows `0..count`.
    pub fn new(count: u32) -> Self {
        WindowPools {
            pools: vec![MwPool::new(count)],
            owner: vec![0; count as usize],
            clients: HashMap::new(),
        }
    }

    /// Adds a domain for `client` with `count` new windows; returns their ids.
    pub fn add_client_domain(&mut self, client: u32, count: u32) -> std::ops::Range<MwId> {
        let domain = self.pools.len() as u32;
        let first = self.owner.len() as MwId;
        let ids = first..first + count;
        self.pools.push(MwPool {
            free: ids.clone().collect(),
            stale: VecDeque::new(),
            capacity: count as usize,
        });
        self.owner
            .extend(std::iter::repeat_n(domain, count as usize));
        self.clients.insert(client, domain);
        ids
    }

    /// The domain `client` binds in.
    pub fn domain_of_client(&self, client: u32) -> u32 {
        self.clients.get(&client).copied().unwrap_or(0)
    }

    /// The domain of window `mw`.
    pub fn domain_of(&self, mw: MwId) -> u32 {
        self.owner.get(mw as usize).copied().unwrap_or(0)
    }

    fn pool(&mut self, domain: u32) -> Option<&mut MwPool> {
        self.pools.get_mut(domain as usize)
    }

    /// Takes an unbound window of `domain`.
    pub fn take_free(&mut self, domain: u32) -> Option<MwId> {
        self.pool(domain)?.take_free()
    }
    /// Returns an unbound window to its domain.
    pub fn give_free(&mut self, mw: MwId) {
        let d = self.domain_of(mw);
        if let Some(p) = self.pool(d) {
            p.give_free(mw);
        }
    }
    /// Records a delayed-unbound window.
    pub fn push_stale(&mut self, mw: MwId) {
        let d = self.domain_of(mw);
        if let Some(p) = self.pool(d) {
            p.push_stale(mw);
        }
    }
    /// Takes the oldest stale window of `domain`.
    pub fn take_stale(&mut self, domain: u32) -> Option<MwId> {
        self.pool(domain)?.take_stale()
    }
    /// Removes a specific stale window.
    pub fn remove_stale(&mut self, mw: MwId) -> bool {
        let d = self.domain_of(mw);
        self.pool(d).is_some_and(|p| p.remove_stale(mw))
    }
    /// (free, stale, capacity) of one domain.
    pub fn counts_in(&self, domain: u32) -> (usize, usize, usize) {
        self.pools
            .get(domain as usize)
            .map_or((0, 0, 0), MwPool::counts)
    }
    /// (free, stale, capacity) over all domains.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.pools
            .iter()
            .map(MwPool::counts)
            .fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2))
    }
}
