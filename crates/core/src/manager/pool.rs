//! The memory node's pools: headers, buffers (slab allocator with size classes) and memory
//! windows. Plain data structures over addresses and indexes; no verbs, no memory access.
//!
//! Invariants:
//! - Size classes are buffer sizes (powers of two from `min_class` to `max_class`). With a
//!   header slot configured, every object is `[32-byte header slot][buffer]`, so a 4 KiB buffer
//!   costs 4 KiB + 32 B of pool; the slot is the contiguity header (§5.4 #3) and returns with
//!   the object ("the hole in front of a freed buffer becomes a header again"). Without
//!   contiguity there is no slot.
//! - Free headers, objects and windows are reused first-in first-out, so memory that was just
//!   freed (and may still be covered by a delayed-unbound window) is reused as late as possible.
//! - A freed object is *dirty* (it may hold its last tenant's bytes) until the manager scrubs
//!   it; memory carved from the pool for the first time is clean (the pool is zeroed).
//! - A window in the stale list still covers freed memory (delayed unbinding, §5.4 #2); it must
//!   be unbound or handed over before that memory is reused.

use super::fast_hash::{FastMap, FastSet};
use crate::proto::header::HEADER_SIZE;
use std::collections::VecDeque;

/// Identifies a pre-allocated memory window.
pub type MwId = u32;

/// Size classes: buffer sizes, powers of two from `min_class` up to `max_class`.
#[derive(Clone, Debug)]
pub struct SlabConfig {
    /// Smallest buffer.
    pub min_class: u64,
    /// Largest buffer.
    pub max_class: u64,
    /// Bytes carved for one slab (at least one object).
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
    /// First byte (the header slot, if the pool has one; else the buffer).
    pub addr: u64,
    /// Bytes of the header slot in front of the buffer (0 or 32).
    pub slot: u64,
    /// Size class: bytes of the buffer.
    pub class: u64,
}

impl Object {
    /// The buffer (after the header slot) as (address, length).
    pub fn buffer(&self) -> (u64, u64) {
        (self.addr + self.slot, self.class)
    }
    /// Pool bytes the object occupies.
    pub fn footprint(&self) -> u64 {
        self.slot + self.class
    }
}

/// Slab allocator over `[base, base + len)`.
#[derive(Debug)]
pub struct BufferPool {
    cfg: SlabConfig,
    slot: u64,
    next_slab: u64,
    end: u64,
    slabs: Vec<Slab>,
    /// Free objects per class (FIFO).
    free: FastMap<u64, VecDeque<u64>>,
    /// Live objects by address → class.
    live: FastMap<u64, u64>,
    /// Free objects that may hold a former tenant's bytes, and the order they were freed in.
    dirty: FastSet<u64>,
    dirty_order: VecDeque<u64>,
    free_bytes: u64,
    /// Pool bytes of live objects (slots included).
    live_bytes: u64,
}

impl BufferPool {
    /// A pool over `[base, base + len)`; `header_slot` puts a 32-byte slot in front of every
    /// buffer (contiguity).
    pub fn new(base: u64, len: u64, cfg: SlabConfig, header_slot: bool) -> Self {
        BufferPool {
            slot: if header_slot { HEADER_SIZE as u64 } else { 0 },
            next_slab: base,
            end: base + len,
            slabs: Vec::new(),
            free: FastMap::default(),
            live: FastMap::default(),
            dirty: FastSet::default(),
            dirty_order: VecDeque::new(),
            free_bytes: len,
            live_bytes: 0,
            cfg,
        }
    }

    /// The class (buffer bytes) that holds `size` bytes.
    pub fn class_for(&self, size: u64) -> Option<u64> {
        let class = size.max(self.cfg.min_class).checked_next_power_of_two()?;
        (class <= self.cfg.max_class).then_some(class)
    }

    /// Pool bytes an object for `size` buffer bytes occupies (`None`: no class holds it).
    pub fn footprint_for(&self, size: u64) -> Option<u64> {
        Some(self.class_for(size)? + self.slot)
    }

    /// Allocates an object for `size` buffer bytes; the flag says whether it is dirty (must be
    /// scrubbed before its new owner sees it).
    pub fn alloc(&mut self, size: u64) -> Option<(Object, bool)> {
        let class = self.class_for(size)?;
        let addr = match self.free.get_mut(&class).and_then(VecDeque::pop_front) {
            Some(a) => a,
            None => {
                self.carve(class)?;
                self.free.get_mut(&class)?.pop_front()?
            }
        };
        self.live.insert(addr, class);
        let obj = Object {
            addr,
            slot: self.slot,
            class,
        };
        self.free_bytes -= obj.footprint();
        self.live_bytes += obj.footprint();
        Some((obj, self.dirty.remove(&addr)))
    }

    fn carve(&mut self, class: u64) -> Option<()> {
        let stride = class + self.slot;
        let bytes = self.cfg.slab_bytes.max(stride);
        if self.next_slab.checked_add(bytes)? > self.end {
            return None;
        }
        let base = self.next_slab;
        self.next_slab += bytes;
        self.slabs.push(Slab { base, class });
        let q = self.free.entry(class).or_default();
        let mut a = base;
        while a + stride <= base + bytes {
            q.push_back(a);
            a += stride;
        }
        // Bytes of the slab not divisible into objects stay accounted as used.
        self.free_bytes -= bytes - (bytes / stride) * stride;
        Some(())
    }

    /// Frees a live object (it becomes dirty); returns false if `addr` is not one.
    pub fn free(&mut self, addr: u64) -> bool {
        match self.live.remove(&addr) {
            Some(class) => {
                self.free.entry(class).or_default().push_back(addr);
                self.free_bytes += class + self.slot;
                self.live_bytes -= class + self.slot;
                if self.dirty.insert(addr) {
                    self.dirty_order.push_back(addr);
                }
                true
            }
            None => false,
        }
    }

    /// Takes up to `max` dirty free objects (oldest first) that `eligible` accepts, marking them
    /// clean; returns their buffers for the caller to zero before anything else happens. Looks
    /// at no more than `4 × max` objects per call.
    pub fn take_dirty(&mut self, max: usize, eligible: impl Fn(u64) -> bool) -> Vec<Object> {
        let mut out = Vec::new();
        let mut looked = 0;
        // Bounded work per call: objects still covered by a window go to the back.
        let budget = self.dirty_order.len().min(max.saturating_mul(4));
        while out.len() < max && looked < budget {
            let Some(addr) = self.dirty_order.pop_front() else {
                break;
            };
            looked += 1;
            if !self.dirty.contains(&addr) {
                continue; // reallocated (and scrubbed then) since it was freed
            }
            if !eligible(addr) {
                self.dirty_order.push_back(addr);
                continue;
            }
            self.dirty.remove(&addr);
            if let Some(class) = self.class_of_free(addr) {
                out.push(Object {
                    addr,
                    slot: self.slot,
                    class,
                });
            }
        }
        out
    }

    fn class_of_free(&self, addr: u64) -> Option<u64> {
        // Slabs are carved at increasing addresses.
        let i = self
            .slabs
            .partition_point(|s| s.base <= addr)
            .checked_sub(1)?;
        let slab = &self.slabs[i];
        (addr < slab.base + self.cfg.slab_bytes.max(slab.class + self.slot)).then_some(slab.class)
    }

    /// Free objects still waiting to be scrubbed.
    pub fn dirty_objects(&self) -> usize {
        self.dirty.len()
    }

    /// The live object starting at `addr`.
    pub fn object_at(&self, addr: u64) -> Option<Object> {
        self.live.get(&addr).map(|&class| Object {
            addr,
            slot: self.slot,
            class,
        })
    }

    /// The live object whose buffer starts at `addr`.
    pub fn object_with_buffer(&self, buffer_addr: u64) -> Option<Object> {
        self.object_at(buffer_addr.checked_sub(self.slot)?)
    }

    /// Bytes not held by live objects (carved-but-free and never-carved).
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Number of live objects.
    pub fn live_objects(&self) -> usize {
        self.live.len()
    }

    /// Pool bytes held by live objects (slots included).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Bytes of the allocator's own tables (by capacity).
    pub fn metadata_bytes(&self) -> u64 {
        let free: usize = self.free.values().map(VecDeque::capacity).sum();
        (self.live.capacity() * 17
            + free * 8
            + self.dirty.capacity() * 9
            + self.dirty_order.capacity() * 8
            + self.slabs.capacity() * std::mem::size_of::<Slab>()) as u64
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
    /// Bytes of the free list.
    pub fn metadata_bytes(&self) -> u64 {
        (self.free.capacity() * 8) as u64
    }
}

/// Pre-allocated windows: unbound ones (FIFO) and stale ones (still bound over freed memory).
#[derive(Debug)]
pub struct MwPool {
    free: VecDeque<MwId>,
    /// Delayed-unbound windows, oldest first; the first candidates for handover.
    stale: VecDeque<MwId>,
    capacity: usize,
    /// The first of the pool's windows (a pool's window ids are contiguous).
    first: MwId,
    /// The domain's client left; the windows wait for the next client (counted nowhere).
    retired: bool,
}

impl MwPool {
    /// Windows `0..count`.
    pub fn new(count: u32) -> Self {
        Self::with_ids(0..count)
    }

    fn with_ids(ids: std::ops::Range<MwId>) -> Self {
        MwPool {
            free: ids.clone().collect(),
            stale: VecDeque::new(),
            capacity: ids.len(),
            first: ids.start,
            retired: false,
        }
    }

    fn ids(&self) -> std::ops::Range<MwId> {
        self.first..self.first + self.capacity as MwId
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
    /// (free, stale, capacity); nothing for a retired pool.
    pub fn counts(&self) -> (usize, usize, usize) {
        if self.retired {
            return (0, 0, 0);
        }
        (self.free.len(), self.stale.len(), self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_classes_and_reuse_order() {
        let mut p = BufferPool::new(1 << 20, 4 << 20, SlabConfig::default(), true);
        assert_eq!(p.class_for(32), Some(64));
        assert_eq!(p.class_for(65), Some(128));
        assert_eq!(p.class_for(4096), Some(4096));
        assert_eq!(p.class_for((1 << 20) + 1), None);
        let (a, dirty) = p.alloc(32).unwrap();
        assert!(!dirty, "fresh memory is clean");
        let (b, _) = p.alloc(32).unwrap();
        assert_eq!(b.addr, a.addr + 96, "64-byte buffers behind 32-byte slots");
        assert_eq!(a.buffer(), (a.addr + 32, 64));
        assert!(p.free(a.addr));
        assert!(!p.free(a.addr), "double free refused");
        let (c, dirty) = p.alloc(32).unwrap();
        assert!(!dirty);
        assert_ne!(
            c.addr, a.addr,
            "FIFO: the just-freed object is not reused first"
        );
        assert_eq!(p.object_with_buffer(b.addr + 32), Some(b));
    }

    #[test]
    fn four_kib_costs_four_kib_plus_its_slot() {
        let mut p = BufferPool::new(0, 1 << 20, SlabConfig::default(), true);
        let (a, _) = p.alloc(4096).unwrap();
        let (b, _) = p.alloc(4096).unwrap();
        assert_eq!(b.addr - a.addr, 4096 + 32);
        let mut q = BufferPool::new(0, 1 << 20, SlabConfig::default(), false);
        let (a, _) = q.alloc(4096).unwrap();
        let (b, _) = q.alloc(4096).unwrap();
        assert_eq!((b.addr - a.addr, a.buffer().0), (4096, a.addr));
    }

    #[test]
    fn freed_objects_are_dirty_until_taken_for_scrubbing() {
        let cfg = SlabConfig {
            min_class: 64,
            max_class: 64,
            slab_bytes: 96 * 2,
        };
        let mut p = BufferPool::new(0, 96 * 2, cfg, true);
        let (a, _) = p.alloc(64).unwrap();
        let (b, _) = p.alloc(64).unwrap();
        p.free(a.addr);
        p.free(b.addr);
        assert_eq!(p.dirty_objects(), 2);
        let taken = p.take_dirty(8, |addr| addr != b.addr);
        assert_eq!(taken, vec![a]);
        assert_eq!(p.alloc(64), Some((a, false)), "scrubbed in the background");
        assert_eq!(
            p.alloc(64),
            Some((b, true)),
            "still dirty: scrub on the grant path"
        );
        assert_eq!(p.dirty_objects(), 0);
    }

    #[test]
    fn pool_exhaustion_is_reported() {
        let mut p = BufferPool::new(0, 1 << 20, SlabConfig::default(), false);
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
    clients: FastMap<u32, u32>,
    /// Domains whose client left, every window unbound: reused by the next client (their
    /// window ids with them), so departures do not grow the tables.
    retired: Vec<u32>,
}

impl WindowPools {
    /// The shared domain with windows `0..count`.
    pub fn new(count: u32) -> Self {
        WindowPools {
            pools: vec![MwPool::new(count)],
            owner: vec![0; count as usize],
            clients: FastMap::default(),
            retired: Vec::new(),
        }
    }

    /// Gives `client` a domain with `count` windows: a retired domain of that size if there
    /// is one (its window ids with it), else a new one. Returns the domain and its window ids.
    pub fn add_client_domain(&mut self, client: u32, count: u32) -> (u32, std::ops::Range<MwId>) {
        let reusable = self
            .retired
            .iter()
            .position(|&d| self.pools[d as usize].capacity == count as usize);
        if let Some(i) = reusable {
            let domain = self.retired.swap_remove(i);
            let pool = &mut self.pools[domain as usize];
            *pool = MwPool::with_ids(pool.ids());
            self.clients.insert(client, domain);
            return (domain, pool.ids());
        }
        let domain = self.pools.len() as u32;
        let first = self.owner.len() as MwId;
        let ids = first..first + count;
        self.pools.push(MwPool::with_ids(ids.clone()));
        self.owner
            .extend(std::iter::repeat_n(domain, count as usize));
        self.clients.insert(client, domain);
        (domain, ids)
    }

    /// Whether a client's domain (not the shared one) has every window unbound.
    pub fn all_unbound(&self, domain: u32) -> bool {
        domain != 0
            && self
                .pools
                .get(domain as usize)
                .is_some_and(|p| p.free.len() == p.capacity && p.stale.is_empty())
    }

    /// Retires `client`'s domain, every window of which is unbound (see
    /// [`all_unbound`](Self::all_unbound)): its windows leave the pool until a later client
    /// reuses the domain. Returns their ids (the driver deallocates them).
    pub fn retire(&mut self, client: u32) -> Option<std::ops::Range<MwId>> {
        let domain = *self.clients.get(&client)?;
        if !self.all_unbound(domain) {
            return None;
        }
        self.clients.remove(&client);
        let pool = &mut self.pools[domain as usize];
        pool.free.clear();
        pool.retired = true;
        self.retired.push(domain);
        Some(pool.ids())
    }

    /// Whether `client` has a domain of its own.
    pub fn has_domain(&self, client: u32) -> bool {
        self.clients.contains_key(&client)
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
    /// Bytes of the pools' lists and maps.
    pub fn metadata_bytes(&self) -> u64 {
        let lists: usize = self
            .pools
            .iter()
            .map(|p| (p.free.capacity() + p.stale.capacity()) * 4)
            .sum();
        (lists
            + self.owner.capacity() * 4
            + self.clients.capacity() * 9
            + self.retired.capacity() * 4) as u64
    }
    /// (free, stale, capacity) over all domains in use (retired ones are not counted).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.pools
            .iter()
            .map(MwPool::counts)
            .fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2))
    }
}
