//! [`TableClient`]: one logical client of a table — its directory cache, the rights it keeps
//! and reuses (subtables, the directory, its pre-allocated KV blocks, recently read blocks),
//! and its counts. Many table clients may share one [`RemoteMemory`] (a benchmark thread
//! multiplexes them); each is driven by the operations' `step` functions.
//!
//! Rights are kept alive lazily: before a right is used, one whose lease ends within the
//! margin is extended one-sidedly, and one that cannot be extended is dropped and acquired
//! again. Each such action is one step of the operation that needed it.

use super::config::{ClientOptions, RaceConfig};
use super::error::RaceError;
use super::guesses::Guesses;
use super::hash::{hash64, mask};
use super::layout::{BLOCK_HEADER, DirEntry, Geometry, MAX_BLOCK_UNITS, Slot, UNIT};
use super::records::Root;
use super::rights::BlockRights;
use super::stats::{RaceStats, SplitTime};
use crate::memory::{Acquiring, MemError, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Split times a client keeps until they are taken ([`TableClient::take_split_times`]).
pub const SPLIT_TIMES_KEPT: usize = 4096;

/// Table clients made by this process (their lock-word tags differ).
static CLIENTS: AtomicU64 = AtomicU64::new(1);

/// The first `2^depth` directory entries, as last read (`directory.rs` reads them).
#[derive(Clone, Debug, Default)]
pub(crate) struct DirCache {
    /// How many entries are cached (`2^depth`); 0 entries before the first read.
    pub depth: u8,
    pub entries: Vec<DirEntry>,
}

impl DirCache {
    /// The cached entry for a key's primary hash.
    pub fn entry(&self, primary: u64) -> Option<DirEntry> {
        self.entries
            .get((primary & mask(self.depth)) as usize)
            .copied()
    }
}

/// One logical client of a RACE table (see the module docs).
pub struct TableClient<M: RemoteMemory> {
    pub(crate) root_addr: u64,
    pub(crate) root: Root,
    pub(crate) geo: Geometry,
    pub(crate) opts: ClientOptions,
    pub(crate) dir: DirCache,
    pub(crate) dir_right: Option<M::Region>,
    /// Rights over subtables (read-write, shared), by address.
    pub(crate) subtables: HashMap<u64, M::Region>,
    /// This client's allocated, not yet linked KV blocks.
    pub(crate) spare: Vec<M::Region>,
    /// Rights over blocks this client read (of any writer) or linked, by address.
    pub(crate) blocks: BlockRights<M::Region>,
    /// Where this client last saw keys' entries (`ClientOptions::speculate`).
    pub(crate) guesses: Guesses,
    /// Blocks this client unlinked, with the nonce of the write each held, waiting to be
    /// freed in a batch (`retire`).
    pub(crate) retired: Vec<(M::Region, u64)>,
    /// Acquires of block rights in flight, by address, with the access asked for
    /// (`acquiring.rs`).
    pub(crate) acquiring: HashMap<u64, (Access, Acquiring<M::Region>)>,
    /// The last step of an operation waited for an acquire's answer.
    pub(crate) awaiting: bool,
    /// The last step of a split waited for the answers to its classification acquires
    /// (`split/copy.rs`: the split's own, not in `acquiring`).
    pub(crate) split_awaiting: bool,
    pub(crate) stats: RaceStats,
    /// How long each split this client finished took, oldest first (at most
    /// [`SPLIT_TIMES_KEPT`]: the oldest go first).
    pub(crate) split_times: VecDeque<SplitTime>,
    /// Frozen slots the last scan saw.
    pub(crate) frozen: u64,
    /// Distinguishes this client's writes from others' (see `block`'s nonce).
    tag: u64,
    writes: u64,
    /// What this client writes into a lock word it takes.
    lock_tag: u64,
}

impl<M: RemoteMemory> fmt::Debug for TableClient<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableClient")
            .field("root", &format_args!("{:#x}", self.root_addr))
            .field("depth", &self.dir.depth)
            .field("subtables", &self.subtables.len())
            .field("spare", &self.spare.len())
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> TableClient<M> {
    pub(crate) fn new(root_addr: u64, root: Root, opts: ClientOptions) -> Self {
        TableClient {
            root_addr,
            geo: Geometry {
                groups: root.config.groups,
                slots: root.config.slots,
            },
            root,
            opts,
            dir: DirCache::default(),
            dir_right: None,
            subtables: HashMap::new(),
            spare: Vec::new(),
            blocks: BlockRights::new(opts.reader_cache),
            guesses: Guesses::new(if opts.speculate { opts.reader_cache } else { 0 }),
            retired: Vec::new(),
            acquiring: HashMap::new(),
            awaiting: false,
            split_awaiting: false,
            stats: RaceStats::default(),
            split_times: VecDeque::new(),
            frozen: 0,
            tag: 0,
            writes: 0,
            lock_tag: hash64(
                &CLIENTS.fetch_add(1, Ordering::Relaxed).to_le_bytes(),
                root_addr,
            ) | 1,
        }
    }

    /// The table's root address.
    pub fn root(&self) -> u64 {
        self.root_addr
    }

    /// The table's shape, as its root records it (`initial_depth` is not kept: 0).
    pub fn config(&self) -> RaceConfig {
        self.root.config
    }

    /// The longest value a KV block of this table holds beside a key of `key_len` bytes
    /// (`None`: not even the key fits).
    pub fn max_value_len(&self, key_len: usize) -> Option<usize> {
        let max = u64::from(self.root.config.block_size).min(MAX_BLOCK_UNITS * UNIT);
        max.checked_sub(BLOCK_HEADER + key_len as u64)
            .map(|v| v as usize)
    }

    /// What this client counted so far.
    pub fn stats(&self) -> RaceStats {
        self.stats
    }

    /// How long each split this client finished since the last call took (its own, and the
    /// ones it finished for a resizer that stopped), oldest first. At most the last
    /// [`SPLIT_TIMES_KEPT`] are kept between calls.
    pub fn take_split_times(&mut self) -> Vec<SplitTime> {
        self.split_times.drain(..).collect()
    }

    /// Keeps one split's time (dropping the oldest beyond [`SPLIT_TIMES_KEPT`]).
    pub(crate) fn record_split_time(&mut self, time: SplitTime) {
        if self.split_times.len() >= SPLIT_TIMES_KEPT {
            self.split_times.pop_front();
        }
        self.split_times.push_back(time);
    }

    /// The client's options.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// The depth of this client's directory cache.
    pub fn cached_depth(&self) -> u8 {
        self.dir.depth
    }

    /// Addresses of this client's pre-allocated, unused KV blocks.
    pub fn spare_blocks(&self) -> Vec<u64> {
        self.spare.iter().map(Region::addr).collect()
    }

    /// Frees the blocks it unlinked and has not freed yet (see
    /// [`ClientOptions::free_batch`]), gives up every right this client holds and frees its
    /// spare blocks (allocated, never linked). Every right is given up even if a spare
    /// cannot be freed; the first such failure is returned.
    pub fn close(mut self, mem: &mut M) -> Result<(), RaceError> {
        self.flush_retired(mem, true);
        let mut result = Ok(());
        for r in std::mem::take(&mut self.spare) {
            let freed = self.free_spare(mem, r);
            if result.is_ok() {
                result = freed;
            }
        }
        for (_, (_, a)) in self.acquiring.drain() {
            mem.abandon_acquire(a);
        }
        let subtables: Vec<M::Region> = self.subtables.drain().map(|(_, r)| r).collect();
        let rest = self.dir_right.take().into_iter().chain(self.blocks.drain());
        for r in subtables.into_iter().chain(rest) {
            self.give_up(mem, r);
        }
        result
    }

    /// Frees a spare block through its right or, if that right ended (its lease ran out),
    /// through a new one: nobody else knows an unlinked block, so it is still this client's.
    fn free_spare(&mut self, mem: &mut M, r: M::Region) -> Result<(), RaceError> {
        let (addr, len) = (r.addr(), r.len());
        self.stats.frees += 1;
        match mem.free(r) {
            Ok(()) => Ok(()),
            Err(MemError::NotFound | MemError::Rejected | MemError::Expired) => {
                self.stats.acquires += 1;
                let again =
                    mem.acquire(addr, len, self.opts.lease, Access::ReadWrite, Mode::Shared)?;
                self.stats.frees += 1;
                Ok(mem.free(again)?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A fresh nonce for a block this client writes.
    pub(crate) fn nonce(&mut self, block: u64) -> u64 {
        if self.tag == 0 {
            self.tag = hash64(&block.to_le_bytes(), self.root_addr) | 1;
        }
        self.writes += 1;
        hash64(&self.writes.to_le_bytes(), self.tag)
    }

    /// Gives up a right this client no longer needs (see [`ClientOptions::lapse`]).
    pub(crate) fn give_up(&mut self, mem: &mut M, r: M::Region) {
        self.stats.releases += 1;
        let _ = if self.opts.lapse {
            mem.relinquish(r)
        } else {
            mem.release(r)
        };
    }

    /// Gives up rights this client no longer needs, all at once (see
    /// [`ClientOptions::lapse`]): let lapse, or released in as few round trips as the memory
    /// allows ([`RemoteMemory::release_many`]).
    pub(crate) fn give_up_many(&mut self, mem: &mut M, rs: Vec<M::Region>) {
        self.stats.releases += rs.len() as u64;
        if self.opts.lapse {
            for r in rs {
                let _ = mem.relinquish(r);
            }
        } else if !rs.is_empty() {
            let _ = mem.release_many(rs);
        }
    }

    /// The value this client writes into a lock word it takes (never 0).
    pub(crate) fn lock_tag(&self) -> u64 {
        self.lock_tag
    }

    /// Makes sure a usable right over subtable `addr` is held: `Ok(true)` if one is, at no
    /// cost; `Ok(false)` after one step of work (an acquisition or an extension).
    pub(crate) fn ensure_subtable(&mut self, mem: &mut M, addr: u64) -> Result<bool, RaceError> {
        let (lease, margin) = (self.opts.lease, self.opts.margin);
        match self
            .subtables
            .get(&addr)
            .map(|r| mem.expires_within(r, margin))
        {
            Some(false) => Ok(true),
            Some(true) => {
                self.stats.extends += 1;
                let kept = self.subtables.get(&addr).is_some_and(|r| {
                    mem.extend(r, lease).is_ok() && !mem.expires_within(r, margin)
                });
                if !kept {
                    self.drop_subtable(mem, addr);
                }
                Ok(false)
            }
            None => {
                self.stats.acquires += 1;
                let len = self.geo.subtable_bytes();
                let r = mem
                    .acquire(addr, len, lease, Access::ReadWrite, Mode::Shared)
                    .map_err(|e| match e {
                        MemError::NotFound => RaceError::Corrupt("a subtable is gone"),
                        e => e.into(),
                    })?;
                self.subtables.insert(addr, r);
                Ok(false)
            }
        }
    }

    /// Drops the right over subtable `addr` (it ended): the next use acquires a new one.
    pub(crate) fn drop_subtable(&mut self, mem: &mut M, addr: u64) {
        if let Some(r) = self.subtables.remove(&addr) {
            self.give_up(mem, r);
        }
    }

    /// Makes sure a usable right over the directory is held (as `ensure_subtable`).
    pub(crate) fn ensure_directory(&mut self, mem: &mut M) -> Result<bool, RaceError> {
        let len = self.root.directory_bytes();
        let addr = self.root.directory;
        let (lease, margin) = (self.opts.lease, self.opts.margin);
        match &self.dir_right {
            Some(r) if !mem.expires_within(r, margin) => Ok(true),
            Some(r) => {
                self.stats.extends += 1;
                if mem.extend(r, lease).is_err() || mem.expires_within(r, margin) {
                    self.drop_directory(mem);
                }
                Ok(false)
            }
            None => {
                self.stats.acquires += 1;
                let r = mem.acquire(addr, len, lease, Access::Read, Mode::Shared)?;
                self.dir_right = Some(r);
                Ok(false)
            }
        }
    }

    /// Drops the right over the directory.
    pub(crate) fn drop_directory(&mut self, mem: &mut M) {
        if let Some(r) = self.dir_right.take() {
            self.give_up(mem, r);
        }
    }

    /// Makes sure `block` (one of this client's own) has a usable right: extends it, or
    /// acquires the object again (read-write, shared) if its lease ended. `Ok(true)` if it
    /// was usable already.
    pub(crate) fn refresh_own_block(
        &mut self,
        mem: &mut M,
        block: &mut Option<M::Region>,
    ) -> Result<bool, RaceError> {
        let (lease, margin) = (self.opts.lease, self.opts.margin);
        let Some(r) = block.as_ref() else {
            return Err(RaceError::Corrupt("no block to refresh"));
        };
        if !mem.expires_within(r, margin) {
            return Ok(true);
        }
        self.stats.extends += 1;
        if mem.extend(r, lease).is_ok() && !mem.expires_within(r, margin) {
            return Ok(false);
        }
        let (addr, len) = (r.addr(), r.len());
        if let Some(old) = block.take() {
            let _ = mem.relinquish(old);
        }
        self.stats.acquires += 1;
        let again = mem.acquire(addr, len, lease, Access::ReadWrite, Mode::Shared)?;
        *block = Some(again);
        Ok(false)
    }

    /// Acquires `block` (one of this client's own) again after its right ended under it (the
    /// NIC refused a write, or its lease ran out between steps): one control request.
    pub(crate) fn reacquire_own_block(
        &mut self,
        mem: &mut M,
        block: &mut Option<M::Region>,
    ) -> Result<(), RaceError> {
        let Some(b) = block.take() else {
            return Err(RaceError::Corrupt("no block to acquire again"));
        };
        let (addr, len) = (b.addr(), b.len());
        let _ = mem.relinquish(b);
        self.stats.acquires += 1;
        let lease = self.opts.lease;
        *block = Some(mem.acquire(addr, len, lease, Access::ReadWrite, Mode::Shared)?);
        Ok(())
    }

    /// Makes sure `block` (one of this client's own, about to be written) has a usable right:
    /// acquired again if `stale` (its right ended under a write), else extended or acquired
    /// again as its lease requires (`refresh_own_block`). `Ok(true)` if it was usable already;
    /// `Ok(false)` after one step of work.
    pub(crate) fn ready_own_block(
        &mut self,
        mem: &mut M,
        block: &mut Option<M::Region>,
        stale: &mut bool,
    ) -> Result<bool, RaceError> {
        if std::mem::take(stale) {
            self.reacquire_own_block(mem, block)?;
            return Ok(false);
        }
        self.refresh_own_block(mem, block)
    }

    /// A spare block: `Ok(Some)` at no cost, `Ok(None)` after allocating a batch of
    /// `preallocate` blocks in one round trip (take one at the next step).
    pub(crate) fn take_spare(&mut self, mem: &mut M) -> Result<Option<M::Region>, RaceError> {
        if let Some(r) = self.spare.pop() {
            return Ok(Some(r));
        }
        let n = self.opts.preallocate.max(1);
        let sizes = vec![u64::from(self.root.config.block_size); n];
        self.stats.allocations += 1;
        let blocks = mem.allocate(&sizes, self.opts.lease, Mode::Shared)?;
        self.stats.allocated += blocks.len() as u64;
        // Taken from the end: the first allocated is used first.
        self.spare.extend(blocks.into_iter().rev());
        Ok(None)
    }

    /// Returns an unused (never linked, or unlinked by this client's own back-off) block.
    pub(crate) fn return_spare(&mut self, block: M::Region) {
        self.spare.push(block);
    }

    /// Keeps the right over a block this client just linked, read-write, among the rights
    /// over blocks it reads: its next lookup of the key reads the block without an acquire,
    /// and its next update of the key frees the block without one (a reader's right over
    /// someone else's block is kept the same way). Whoever frees the block ends the right.
    /// `entry` is the slot word that names it.
    pub(crate) fn consume(&mut self, mem: &mut M, block: M::Region, entry: Slot) {
        let addr = block.addr();
        self.keep_block_right(mem, addr, block, Access::ReadWrite, entry);
    }

    /// Keeps a right over a block, taken for `entry` (see `race::rights`), for later use;
    /// gives up the ones pushed out of the cache.
    pub(crate) fn keep_block_right(
        &mut self,
        mem: &mut M,
        addr: u64,
        r: M::Region,
        access: Access,
        entry: Slot,
    ) {
        for old in self.blocks.put(addr, r, access, entry) {
            self.give_up(mem, old);
        }
    }
}
