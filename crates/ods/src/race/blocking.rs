//! Blocking calls: each runs an operation's steps to completion (`scan` reads the whole
//! table). While another client's split makes an operation wait, the thread yields between
//! polls; after `max_wait_polls` such polls the call gives up with [`RaceError::Stalled`].

use super::block;
use super::client::TableClient;
use super::error::RaceError;
use super::layout::{BucketHeader, SUBTABLE_HEADER, word};
use super::ops::{Delete, Insert, Lookup, Update};
use super::stats::{bytes, exec};
use crate::memory::{MemError, MemOp, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::collections::{HashMap, HashSet};
use std::task::Poll;

/// Steps an operation may take without waiting before a blocking call calls it a bug.
const MAX_STEPS: u64 = 1 << 24;

impl<M: RemoteMemory> TableClient<M> {
    fn drive<T>(
        &mut self,
        mem: &mut M,
        mut step: impl FnMut(&mut Self, &mut M) -> Poll<Result<T, RaceError>>,
    ) -> Result<T, RaceError> {
        let waits = self.stats.waits;
        for _ in 0..MAX_STEPS {
            let before = self.stats.waits;
            match step(self, mem) {
                Poll::Ready(r) => return r,
                Poll::Pending if self.stats.waits > before => {
                    let polls = self.stats.waits - waits;
                    if polls > self.opts.max_wait_polls {
                        return Err(RaceError::Stalled { polls });
                    }
                    std::thread::yield_now();
                }
                Poll::Pending => {}
            }
        }
        Err(RaceError::Stalled { polls: self.stats.waits - waits })
    }

    /// The value of `key`, if present.
    pub fn get(&mut self, mem: &mut M, key: &[u8]) -> Result<Option<Vec<u8>>, RaceError> {
        let mut op = Lookup::new(self, key);
        self.drive(mem, |t, m| op.step(t, m))
    }

    /// Inserts `key` → `value`; [`RaceError::KeyExists`] if the key is present.
    pub fn insert(&mut self, mem: &mut M, key: &[u8], value: &[u8]) -> Result<(), RaceError> {
        let mut op = Insert::new(self, key, value)?;
        self.drive(mem, |t, m| op.step(t, m))
    }

    /// Replaces the value of `key`; [`RaceError::NotFound`] if the key is absent.
    pub fn update(&mut self, mem: &mut M, key: &[u8], value: &[u8]) -> Result<(), RaceError> {
        let mut op = Update::new(self, key, value)?;
        self.drive(mem, |t, m| op.step(t, m))
    }

    /// Removes `key`; [`RaceError::NotFound`] if the key is absent.
    pub fn delete(&mut self, mem: &mut M, key: &[u8]) -> Result<(), RaceError> {
        let mut op = Delete::new(self, key);
        self.drive(mem, |t, m| op.step(t, m))
    }

    /// Every key and value, in no order (one right per block read). Under concurrent writes
    /// and splits it is no snapshot: a key present throughout is returned once, with a
    /// value it had during the scan; keys written during it may or may not be.
    pub fn scan(&mut self, mem: &mut M) -> Result<Vec<(Vec<u8>, Vec<u8>)>, RaceError> {
        let mut want = self.root.config.max_depth;
        while !self.refresh_step(mem, &mut want)? {}
        let mut seen = HashSet::new();
        let subtables: Vec<u64> = self
            .dir
            .entries
            .iter()
            .map(|e| e.subtable)
            .filter(|s| seen.insert(*s))
            .collect();
        let mut found: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for st in subtables {
            for (k, v) in self.scan_subtable(mem, st)? {
                found.entry(k).or_insert(v);
            }
        }
        Ok(found.into_iter().collect())
    }

    fn scan_subtable(&mut self, mem: &mut M, addr: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>, RaceError> {
        while !self.ensure_subtable(mem, addr)? {}
        let geo = self.geo;
        let image = {
            let Some(st) = self.subtables.get(&addr) else {
                return Err(RaceError::Corrupt("a subtable right vanished"));
            };
            let ops = [MemOp::Read { on: st, offset: 0, len: geo.subtable_bytes() as u32 }];
            bytes(exec(&mut self.stats, mem, &ops).pop())?
        };
        let slots = geo.parse(0, image.get(SUBTABLE_HEADER as usize..).unwrap_or_default());
        let mut out = Vec::new();
        let per = u32::from(geo.slots.max(1));
        for s in slots.iter().filter(|s| !s.slot.is_empty()) {
            let header =
                BucketHeader::decode(word(&image, geo.bucket_offset(s.pos / per) as usize));
            let (ptr, len) = (s.slot.ptr(), s.slot.len());
            self.stats.acquires += 1;
            let r = match mem.acquire(ptr, len, self.opts.read_lease, Access::Read, Mode::Shared) {
                Ok(r) => r,
                Err(MemError::NotFound) => continue, // changed since the subtable was read
                Err(e) => return Err(e.into()),
            };
            let ops = [MemOp::Read { on: &r, offset: 0, len: len as u32 }];
            let data = bytes(exec(&mut self.stats, mem, &ops).pop());
            self.give_up(mem, r);
            if let Some(b) = data.ok().as_deref().and_then(block::decode) {
                // A copy left in the old subtable of a split is not this subtable's.
                if header.claims(b.hash) && !out.iter().any(|(k, _)| *k == b.key) {
                    out.push((b.key, b.value));
                }
            }
        }
        Ok(out)
    }
}
