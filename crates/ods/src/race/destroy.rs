//! Destroying a table: every object it is made of freed, for a table no other client uses.
//!
//! [`TableClient::destroy`] first finishes any split a stopped resizer left in progress (as a
//! waiting writer would), then takes every subtable's lock object exclusively, so no split
//! can start, and checks that none is under way (every record `Idle`, no lock word taken, no
//! frozen slot). Only then does it free: the root first (from then on nobody can open the
//! table), the directory, the KV blocks the subtables link, the subtables, and last their
//! lock objects. A block is freed only if it reads as a block of a key its subtable claims
//! (checksum, and the stored hash is its key's under the table's seed): a slot never makes
//! it free an object that is not the table's.
//!
//! Not freed, because no slot names them: blocks other live clients allocated and have not
//! linked (they free them when they close), and what stopped clients leaked (a block
//! allocated and never linked; a new subtable allocated by a resizer that stopped before it
//! recorded it). A destroy that fails part way (the connection lost) leaves the rest
//! allocated.

use super::block;
use super::client::TableClient;
use super::error::RaceError;
use super::hash::hash64;
use super::layout::{BucketHeader, SUBTABLE_HEADER, word};
use super::records::{LOCK_BYTES, LOCK_WORD, Phase, RECORD, RECORD_BYTES, ROOT_BYTES, SplitRecord};
use super::split::{Split, SplitOutcome};
use super::stats::{bytes, ended, exec};
use crate::memory::{MemError, MemOp, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::collections::HashSet;

/// Rounds of finishing splits before `destroy` gives up (a round finishes at least one).
const SETTLE_ROUNDS: usize = 64;
/// Steps to bring a right or the directory cache up to date before giving up.
const REFRESH_STEPS: usize = 64;

/// What [`TableClient::destroy`] freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Destroyed {
    /// Subtables freed (each with its lock object).
    pub subtables: u64,
    /// KV blocks freed.
    pub blocks: u64,
    /// Slots naming something that is no block of this table (left allocated).
    pub skipped: u64,
    /// Objects that were gone already.
    pub missing: u64,
}

/// A linked entry found by the scan before freeing: the block and its bucket's header.
struct Linked {
    ptr: u64,
    len: u64,
    header: BucketHeader,
}

impl<M: RemoteMemory> TableClient<M> {
    /// Frees the table (see the module docs), then gives up this client's rights and frees
    /// its spare blocks, as [`TableClient::close`] does.
    ///
    /// Meant for a table no other client uses: another client's operations fail once the
    /// objects they use are gone. [`RaceError::Busy`] (nothing freed) if another client
    /// holds a subtable's lock: a split in progress, or — with [`LockMode::Word`] — a lock
    /// word a stopped resizer never gave back.
    ///
    /// [`LockMode::Word`]: super::LockMode::Word
    pub fn destroy(mut self, mem: &mut M) -> Result<Destroyed, RaceError> {
        let result = self.destroy_all(mem);
        let closed = self.close(mem);
        let d = result?;
        closed?;
        Ok(d)
    }

    fn destroy_all(&mut self, mem: &mut M) -> Result<Destroyed, RaceError> {
        let subtables = self.settle(mem)?;
        let mut locks = Vec::new();
        let result = match self.lock_all(mem, &subtables, &mut locks) {
            Ok(()) => self.free_all(mem, &subtables, &mut locks),
            Err(e) => Err(e),
        };
        // Locks not freed (an error on the way) are given back at once.
        for r in locks {
            self.stats.releases += 1;
            let _ = mem.release(r);
        }
        result
    }

    /// Finishes every split left in progress; the distinct subtables of the directory once
    /// none is.
    fn settle(&mut self, mem: &mut M) -> Result<Vec<u64>, RaceError> {
        for _ in 0..SETTLE_ROUNDS {
            let subtables = self.all_subtables(mem)?;
            let mut settled = true;
            for &st in &subtables {
                let mut split = Split::new(self, st, None);
                match self.drive(mem, |t, m| split.step(t, m))? {
                    SplitOutcome::NotNeeded => {}
                    SplitOutcome::Split | SplitOutcome::LockLost => settled = false,
                    SplitOutcome::Busy => return Err(RaceError::Busy),
                }
            }
            if settled {
                return Ok(subtables);
            }
        }
        Err(RaceError::Busy)
    }

    /// The distinct subtables of the whole directory, read now.
    fn all_subtables(&mut self, mem: &mut M) -> Result<Vec<u64>, RaceError> {
        let mut want = self.root.config.max_depth;
        for _ in 0..REFRESH_STEPS {
            if self.refresh_step(mem, &mut want)? {
                let mut seen = HashSet::new();
                return Ok(self
                    .dir
                    .entries
                    .iter()
                    .map(|e| e.subtable)
                    .filter(|s| seen.insert(*s))
                    .collect());
            }
        }
        Err(RaceError::Corrupt("the directory could not be read"))
    }

    /// Takes every subtable's lock object exclusively (into `locks`) and checks that no
    /// split is recorded in it nor its lock word taken.
    fn lock_all(
        &mut self,
        mem: &mut M,
        subtables: &[u64],
        locks: &mut Vec<M::Region>,
    ) -> Result<(), RaceError> {
        for &st in subtables {
            let head = self.read_subtable(mem, st, SUBTABLE_HEADER as u32)?;
            let lock = word(&head, 0);
            if lock == 0 {
                return Err(RaceError::Corrupt("a subtable without a lock object"));
            }
            self.stats.acquires += 1;
            let r = match mem.acquire(
                lock,
                LOCK_BYTES,
                self.opts.lease,
                Access::ReadWrite,
                Mode::Exclusive,
            ) {
                Ok(r) => r,
                Err(MemError::Conflict) => return Err(RaceError::Busy),
                Err(e) => return Err(e.into()),
            };
            let ops = [MemOp::Read {
                on: &r,
                offset: 0,
                len: RECORD as u32 + RECORD_BYTES,
            }];
            let image = bytes(exec(&mut self.stats, mem, &ops).pop());
            locks.push(r);
            let image = image?;
            let record = SplitRecord::decode(image.get(RECORD as usize..).unwrap_or_default())?;
            if word(&image, LOCK_WORD as usize) != 0 || record.phase != Phase::Idle {
                return Err(RaceError::Busy);
            }
        }
        Ok(())
    }

    /// With every lock held: reads the entries, then frees everything.
    fn free_all(
        &mut self,
        mem: &mut M,
        subtables: &[u64],
        locks: &mut Vec<M::Region>,
    ) -> Result<Destroyed, RaceError> {
        let geo = self.geo;
        let per = u32::from(geo.slots.max(1));
        let mut linked = Vec::new();
        let mut seen = HashSet::new();
        for &st in subtables {
            let image = self.read_subtable(mem, st, geo.subtable_bytes() as u32)?;
            let slots = geo.parse(0, image.get(SUBTABLE_HEADER as usize..).unwrap_or_default());
            if slots.iter().any(|s| s.slot.is_frozen()) {
                return Err(RaceError::Busy);
            }
            for s in slots.iter().filter(|s| !s.slot.is_empty()) {
                if seen.insert(s.slot.ptr()) {
                    let at = geo.bucket_offset(s.pos / per) as usize;
                    linked.push(Linked {
                        ptr: s.slot.ptr(),
                        len: s.slot.len(),
                        header: BucketHeader::decode(word(&image, at)),
                    });
                }
            }
        }
        let mut d = Destroyed::default();
        // The root first: from here on nobody can open the table.
        let (root, dir, dir_len) = (
            self.root_addr,
            self.root.directory,
            self.root.directory_bytes(),
        );
        d.missing += u64::from(!self.free_at(mem, root, ROOT_BYTES)?);
        self.drop_directory(mem);
        d.missing += u64::from(!self.free_at(mem, dir, dir_len)?);
        for e in linked {
            match self.free_linked(mem, &e)? {
                Some(true) => d.blocks += 1,
                Some(false) => d.skipped += 1,
                None => d.missing += 1,
            }
        }
        for &st in subtables {
            let freed = match self.subtables.remove(&st) {
                Some(r) => self.free_through(mem, r)?,
                None => self.free_at(mem, st, geo.subtable_bytes())?,
            };
            d.subtables += u64::from(freed);
            d.missing += u64::from(!freed);
        }
        for r in std::mem::take(locks) {
            d.missing += u64::from(!self.free_through(mem, r)?);
        }
        Ok(d)
    }

    /// The first `len` bytes of subtable `addr`, through this client's right over it.
    fn read_subtable(&mut self, mem: &mut M, addr: u64, len: u32) -> Result<Vec<u8>, RaceError> {
        for _ in 0..REFRESH_STEPS {
            if !self.ensure_subtable(mem, addr)? {
                continue;
            }
            let Some(st) = self.subtables.get(&addr) else {
                continue;
            };
            let ops = [MemOp::Read {
                on: st,
                offset: 0,
                len,
            }];
            match bytes(exec(&mut self.stats, mem, &ops).pop()) {
                Ok(b) => return Ok(b),
                Err(e) if ended(&e) => self.drop_subtable(mem, addr),
                Err(e) => return Err(e.into()),
            }
        }
        Err(RaceError::Corrupt("a subtable could not be read"))
    }

    /// Frees a linked block if it is one of this table's: `Some(true)` freed, `Some(false)`
    /// not a block of the key its subtable claims (left alone), `None` gone already.
    fn free_linked(&mut self, mem: &mut M, e: &Linked) -> Result<Option<bool>, RaceError> {
        self.stats.acquires += 1;
        let r = match mem.acquire(
            e.ptr,
            e.len,
            self.opts.read_lease,
            Access::ReadWrite,
            Mode::Shared,
        ) {
            Ok(r) => r,
            Err(MemError::NotFound) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let ops = [MemOp::Read {
            on: &r,
            offset: 0,
            len: e.len as u32,
        }];
        let data = bytes(exec(&mut self.stats, mem, &ops).pop());
        let seed = self.root.config.seed;
        let ours = data
            .ok()
            .as_deref()
            .and_then(block::decode)
            .is_some_and(|b| e.header.claims(b.hash) && hash64(&b.key, seed) == b.hash);
        if !ours {
            self.give_up(mem, r);
            return Ok(Some(false));
        }
        self.stats.frees += 1;
        mem.free(r)?;
        Ok(Some(true))
    }

    /// Frees the object at `addr` through a new right; `Ok(false)` if it is gone already.
    fn free_at(&mut self, mem: &mut M, addr: u64, len: u64) -> Result<bool, RaceError> {
        self.stats.acquires += 1;
        let r = match mem.acquire(
            addr,
            len,
            self.opts.read_lease,
            Access::ReadWrite,
            Mode::Shared,
        ) {
            Ok(r) => r,
            Err(MemError::NotFound) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        self.stats.frees += 1;
        mem.free(r)?;
        Ok(true)
    }

    /// Frees the object `r` covers through it, or through a new right if `r` has ended.
    fn free_through(&mut self, mem: &mut M, r: M::Region) -> Result<bool, RaceError> {
        let (addr, len) = (r.addr(), r.len());
        self.stats.frees += 1;
        match mem.free(r) {
            Ok(()) => Ok(true),
            Err(MemError::NotFound | MemError::Rejected | MemError::Expired) => {
                self.free_at(mem, addr, len)
            }
            Err(e) => Err(e.into()),
        }
    }
}
