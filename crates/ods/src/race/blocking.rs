//! Blocking calls: each runs an operation's steps to completion (`scan` reads the whole
//! table). While another client's split makes an operation wait, the thread yields between
//! polls; after `max_wait_polls` such polls the call gives up with [`RaceError::Stalled`].
//! While it waits for an acquire's answer, the thread sleeps on the memory
//! ([`RemoteMemory::wait`]).

use super::block;
use super::client::TableClient;
use super::error::RaceError;
use super::layout::{BucketHeader, SUBTABLE_HEADER, word};
use super::ops::MAX_REFUSALS;
use super::ops::{Delete, Insert, Lookup, Update};
use super::stats::{bytes, ended, exec};
use crate::memory::{MemError, MemOp, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::collections::{HashMap, HashSet};
use std::task::Poll;

/// Steps an operation may take without waiting before a blocking call calls it a bug.
const MAX_STEPS: u64 = 1 << 24;
/// The longest one sleep for an acquire's answer (the memory gives up on an answer that does
/// not come within its RPC timeout, and the operation then fails).
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

impl<M: RemoteMemory> TableClient<M> {
    pub(super) fn drive<T>(
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
                // Nothing to do until an acquire's answer comes: sleep until it does.
                Poll::Pending if self.awaiting_answer() => mem.wait(ANSWER_WAIT),
                Poll::Pending => {}
            }
        }
        Err(RaceError::Stalled {
            polls: self.stats.waits - waits,
        })
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
    pub fn scan(&mut self, mem: &mut M) -> Result<KeyValues, RaceError> {
        let mut found: HashMap<Vec<u8>, (u32, Vec<u8>)> = HashMap::new();
        for e in self.entries(mem)?.into_iter().filter(|e| e.claimed) {
            // Of two entries of a key, the lower-positioned one is the key's.
            let keep = found.get(&e.key).is_none_or(|(pos, _)| e.pos < *pos);
            if keep {
                found.insert(e.key, (e.pos, e.value));
            }
        }
        Ok(found.into_iter().map(|(k, (_, v))| (k, v)).collect())
    }

    /// Checks the table's invariants (meant for a quiescent table: no operation or split in
    /// progress) and counts what it found.
    pub fn audit(&mut self, mem: &mut M) -> Result<Audit, RaceError> {
        let entries = self.entries(mem)?;
        let mut a = Audit {
            subtables: 0,
            entries: 0,
            keys: 0,
            duplicates: 0,
            unclaimed: 0,
            unreadable: 0,
            frozen: self.frozen,
        };
        let mut keys = HashSet::new();
        for e in &entries {
            if !e.readable {
                a.unreadable += 1;
                continue;
            }
            a.entries += 1;
            if !e.claimed {
                a.unclaimed += 1;
            } else if !keys.insert(e.key.clone()) {
                a.duplicates += 1;
            }
        }
        a.keys = keys.len() as u64;
        a.subtables = self
            .dir
            .entries
            .iter()
            .map(|e| e.subtable)
            .collect::<HashSet<_>>()
            .len() as u64;
        Ok(a)
    }

    /// Every entry of every subtable, its block read under a right of this client's own.
    fn entries(&mut self, mem: &mut M) -> Result<Vec<Entry>, RaceError> {
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
        self.frozen = 0;
        let mut out = Vec::new();
        for st in subtables {
            self.scan_subtable(mem, st, &mut out)?;
        }
        Ok(out)
    }

    fn scan_subtable(
        &mut self,
        mem: &mut M,
        addr: u64,
        out: &mut Vec<Entry>,
    ) -> Result<(), RaceError> {
        while !self.ensure_subtable(mem, addr)? {}
        let geo = self.geo;
        let image = {
            let Some(st) = self.subtables.get(&addr) else {
                return Err(RaceError::Corrupt("a subtable right vanished"));
            };
            let ops = [MemOp::Read {
                on: st,
                offset: 0,
                len: geo.subtable_bytes() as u32,
            }];
            bytes(exec(&mut self.stats, mem, &ops).pop())?
        };
        let slots = geo.parse(0, image.get(SUBTABLE_HEADER as usize..).unwrap_or_default());
        self.frozen += slots.iter().filter(|s| s.slot.is_frozen()).count() as u64;
        let per = u32::from(geo.slots.max(1));
        for s in slots.iter().filter(|s| !s.slot.is_empty()) {
            let header =
                BucketHeader::decode(word(&image, geo.bucket_offset(s.pos / per) as usize));
            let data = self.read_block(mem, s.slot.ptr(), s.slot.len())?;
            let entry = match data.as_deref().and_then(block::decode) {
                // A copy left in the old subtable of a split is not this subtable's.
                Some(b) => Entry {
                    readable: true,
                    pos: s.pos,
                    claimed: header.claims(b.hash),
                    key: b.key,
                    value: b.value,
                },
                None => Entry {
                    readable: false,
                    pos: s.pos,
                    claimed: false,
                    key: Vec::new(),
                    value: Vec::new(),
                },
            };
            out.push(entry);
        }
        Ok(())
    }
}

/// Keys and their values, as [`TableClient::scan`] returns them.
pub type KeyValues = Vec<(Vec<u8>, Vec<u8>)>;

/// An entry found by a scan.
struct Entry {
    /// Whether its block could be read (and its checksum held).
    readable: bool,
    pos: u32,
    /// Whether its subtable claims its key (false: a copy left by a split, or unreadable).
    claimed: bool,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// What [`TableClient::audit`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Distinct subtables in the directory.
    pub subtables: u64,
    /// Entries whose block could be read.
    pub entries: u64,
    /// Distinct keys in entries their subtables claim.
    pub keys: u64,
    /// Claimed entries of a key already seen (should be 0).
    pub duplicates: u64,
    /// Entries whose subtable does not claim their key (should be 0 once splits finish).
    pub unclaimed: u64,
    /// Slots naming a block that is gone or damaged (should be 0).
    pub unreadable: u64,
    /// Frozen slots (should be 0 once splits finish).
    pub frozen: u64,
}

impl<M: RemoteMemory> TableClient<M> {
    /// A linked block's bytes under a right of this client's own; `None` if the node says it
    /// was freed. A refused READ is no sign of that (the right's lease may have run out on
    /// the way): the block is acquired again with a lease twice as long, a bounded number of
    /// times (see `ops::validate`).
    fn read_block(
        &mut self,
        mem: &mut M,
        ptr: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, RaceError> {
        for refusals in 0..=MAX_REFUSALS {
            self.stats.acquires += 1;
            let lease = self.opts.read_lease * (1u32 << refusals.min(11));
            let r = match mem.acquire(ptr, len, lease, Access::Read, Mode::Shared) {
                Ok(r) => r,
                Err(MemError::NotFound) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let ops = [MemOp::Read {
                on: &r,
                offset: 0,
                len: len as u32,
            }];
            let data = bytes(exec(&mut self.stats, mem, &ops).pop());
            self.give_up(mem, r);
            match data {
                Ok(d) => return Ok(Some(d)),
                Err(e) if ended(&e) || e == MemError::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(RaceError::LeaseTooShort {
            refusals: u32::from(MAX_REFUSALS) + 1,
        })
    }
}
