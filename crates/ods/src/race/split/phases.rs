//! The phases of a split (see the module docs): each function does one batch or one control
//! request and returns the next state.

use super::state::{Class, Split, SplitOutcome, State};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::{BucketHeader, DirEntry, SUBTABLE_HEADER, Slot, word};
use crate::race::records::{LOCK_BYTES, Phase, RECORD, RECORD_BYTES, SplitRecord};
use crate::race::stats::{atomic, bytes, ended, exec};
use patronus_core::proto::messages::{Access, Mode};

/// Atomics per batch.
const BATCH: usize = 256;
/// Bytes per READ or WRITE batch of blocks or subtable images.
const BYTES: u64 = 64 << 10;
/// Freeze rounds before the resizer gives up on writers that keep changing slots.
const FREEZE_ROUNDS: usize = 4096;

impl<M: RemoteMemory> Split<M> {
    fn parse_slots(t: &TableClient<M>, image: &[u8]) -> Vec<Slot> {
        let at = SUBTABLE_HEADER as usize;
        t.geo
            .parse(0, image.get(at..).unwrap_or_default())
            .into_iter()
            .map(|s| s.slot)
            .collect()
    }

    fn old_header(&self) -> BucketHeader {
        BucketHeader {
            depth: self.record.depth,
            suffix: self.record.suffix,
        }
    }

    fn new_header(&self, upper: bool) -> BucketHeader {
        let d = self.record.depth;
        BucketHeader {
            depth: d + 1,
            suffix: self.record.suffix | (u32::from(upper) << d),
        }
    }

    pub(super) fn load(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let (Some(l), Some(tr)) = (self.lock.as_ref(), self.t_right.as_ref()) else {
            return Ok(State::Rights);
        };
        let ops = [
            MemOp::Read {
                on: l,
                offset: RECORD,
                len: RECORD_BYTES,
            },
            MemOp::Read {
                on: tr,
                offset: 0,
                len: t.geo.subtable_bytes() as u32,
            },
        ];
        let mut out = exec(&mut t.stats, mem, &ops).into_iter();
        let record = SplitRecord::decode(&bytes(out.next())?)?;
        let image = bytes(out.next())?;
        self.slots = Self::parse_slots(t, &image);
        self.class = vec![Class::Unknown; self.slots.len()];
        let header = BucketHeader::decode(word(&image, SUBTABLE_HEADER as usize));
        self.record = record;
        self.recorded = record.phase;
        if record.phase == Phase::NewHalf {
            self.redirect = Some(record.new);
            return Ok(self.finish(Ok(SplitOutcome::NotNeeded)));
        }
        if record.phase != Phase::Idle {
            // Another resizer's split, left in progress: finish it.
            self.resumed = true;
            return Ok(match record.phase {
                Phase::Freezing => State::Freeze,
                _ => State::OpenNew,
            });
        }
        if self.slots.iter().any(|s| s.is_frozen()) {
            // A freeze that was never recorded (a late freeze CAS): undo it.
            self.class = vec![Class::Lower; self.slots.len()];
            return Ok(State::Thaw);
        }
        let max = t.root.config.max_depth;
        Ok(match self.expect {
            None => self.finish(Ok(SplitOutcome::NotNeeded)),
            Some(d) if header.depth != d => self.finish(Ok(SplitOutcome::NotNeeded)),
            Some(_) if header.depth >= max => {
                self.finish(Err(RaceError::TableFull { depth: max }))
            }
            Some(_) => {
                self.record = SplitRecord {
                    phase: Phase::Freezing,
                    depth: header.depth,
                    suffix: header.suffix,
                    new: 0,
                    new_lock: 0,
                };
                State::Record(Box::new(State::Freeze))
            }
        })
    }

    pub(super) fn write_record(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        next: State,
    ) -> Result<State, RaceError> {
        let Some(l) = self.lock.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let data = self.record.encode();
        let ops = [MemOp::Write {
            on: l,
            offset: RECORD,
            data: &data,
        }];
        match exec(&mut t.stats, mem, &ops).pop() {
            Some(Ok(_)) => {
                self.recorded = self.record.phase;
                Ok(next)
            }
            Some(Err(e)) => Err(e.into()),
            None => Err(RaceError::Memory(MemError::Failed("no result".into()))),
        }
    }

    pub(super) fn freeze(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(tr) = self.t_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let todo: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&p| !self.slots[p as usize].is_frozen())
            .take(BATCH)
            .collect();
        if todo.is_empty() {
            self.cursor = 0;
            return Ok(State::Allocate);
        }
        self.cursor += 1;
        if self.cursor > FREEZE_ROUNDS {
            return Err(RaceError::Contended {
                attempts: FREEZE_ROUNDS as u32,
            });
        }
        let ops: Vec<_> = todo
            .iter()
            .map(|&p| {
                let s = self.slots[p as usize];
                MemOp::Cas {
                    on: tr,
                    offset: t.geo.slot_offset(p),
                    compare: s.0,
                    swap: s.frozen().0,
                }
            })
            .collect();
        let out = exec(&mut t.stats, mem, &ops);
        let mut reload = false;
        for (&p, r) in todo.iter().zip(out) {
            let s = &mut self.slots[p as usize];
            match r.map(|o| o.atomic()) {
                Ok(Some(old)) if old == s.0 => *s = s.frozen(),
                Ok(Some(old)) => *s = Slot(old),
                Err(MemError::OutcomeUnknown) => {
                    t.stats.unknown_outcomes += 1;
                    reload = true;
                }
                Err(e) => return Err(e.into()),
                Ok(None) => reload = true,
            }
        }
        Ok(if reload { State::Reload } else { State::Freeze })
    }

    pub(super) fn reload(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(tr) = self.t_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let image = mem.read(tr, 0, t.geo.subtable_bytes() as u32);
        t.stats.batches += 1;
        t.stats.reads += 1;
        self.slots = Self::parse_slots(t, &image?);
        Ok(State::Freeze)
    }

    pub(super) fn allocate(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let sizes = [t.geo.subtable_bytes(), LOCK_BYTES];
        t.stats.allocations += 1;
        match mem.allocate(&sizes, t.opts.split_lease, Mode::Shared) {
            Ok(v) => {
                t.stats.allocated += v.len() as u64;
                let mut v = v.into_iter();
                let (Some(new), Some(lock)) = (v.next(), v.next()) else {
                    return Err(RaceError::Corrupt("allocation returned too few objects"));
                };
                self.record.new = crate::memory::Region::addr(&new);
                self.record.new_lock = crate::memory::Region::addr(&lock);
                self.new_right = Some(new);
                self.child = Some(lock);
                Ok(State::MarkChild)
            }
            Err(MemError::Exhausted) => {
                // No memory for T': undo the freeze.
                self.rollback = Some(RaceError::OutOfMemory(MemError::Exhausted));
                self.class = vec![Class::Lower; self.slots.len()];
                Ok(State::Thaw)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks T''s lock object as the new half of this split (before T' is recorded), so a
    /// client that takes T''s lock while this split is unfinished finishes this split.
    pub(super) fn mark_child(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(c) = self.child.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let mark = SplitRecord {
            phase: Phase::NewHalf,
            depth: 0,
            suffix: 0,
            new: self.subtable,
            new_lock: 0,
        }
        .encode();
        let ops = [MemOp::Write { on: c, offset: RECORD, data: &mark }];
        if let Some(Err(e)) = exec(&mut t.stats, mem, &ops).pop() {
            return Err(e.into());
        }
        if let Some(c) = self.child.take() {
            // Released, not left to lapse: the next split of T' acquires it exclusively.
            t.stats.releases += 1;
            let _ = mem.release(c);
        }
        self.record.phase = Phase::Copying;
        Ok(State::Record(Box::new(State::Classify)))
    }

    /// Takes a right over T''s lock object (shared: it only CASes the mark away; a client
    /// holding it exclusively for a moment makes this wait a step).
    pub(super) fn child_lock(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        t.stats.acquires += 1;
        let (addr, lease) = (self.record.new_lock, t.opts.split_lease);
        match mem.acquire(addr, LOCK_BYTES, lease, Access::ReadWrite, Mode::Shared) {
            Ok(r) => {
                self.child = Some(r);
                Ok(State::ChildClear)
            }
            Err(MemError::Conflict) => Ok(State::ChildLock),
            Err(e) => Err(e.into()),
        }
    }

    /// Clears T''s `NewHalf` mark (only that: by now T' may be splitting on its own), then
    /// records this split done.
    pub(super) fn child_clear(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(c) = self.child.as_ref() else {
            return Ok(State::ChildLock);
        };
        let mark = SplitRecord {
            phase: Phase::NewHalf,
            depth: 0,
            suffix: 0,
            new: 0,
            new_lock: 0,
        }
        .encode();
        let ops = [MemOp::Cas { on: c, offset: RECORD, compare: word(&mark, 0), swap: 0 }];
        match exec(&mut t.stats, mem, &ops).pop() {
            Some(Ok(_)) => {}
            Some(Err(MemError::OutcomeUnknown)) => {
                t.stats.unknown_outcomes += 1;
                return Ok(State::ChildClear);
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Ok(State::ChildClear),
        }
        if let Some(c) = self.child.take() {
            t.stats.releases += 1;
            let _ = mem.release(c);
        }
        self.record = SplitRecord::IDLE;
        Ok(State::Record(Box::new(State::Unlock)))
    }

    pub(super) fn open_new(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let len = t.geo.subtable_bytes();
        t.stats.acquires += 1;
        let r = mem.acquire(self.record.new, len, t.opts.split_lease, Access::ReadWrite, Mode::Shared)?;
        self.new_right = Some(r);
        Ok(State::Classify)
    }

    /// Takes a right over the next unclassified entry's block (one per step).
    pub(super) fn classify(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let next = (0..self.slots.len()).find(|&p| {
            let s = self.slots[p];
            s.is_frozen()
                && !s.is_empty()
                && self.class[p] == Class::Unknown
                && !self.rights.iter().any(|(q, _)| *q as usize == p)
        });
        let Some(p) = next else {
            return Ok(State::ReadBlocks);
        };
        let s = self.slots[p];
        t.stats.acquires += 1;
        match mem.acquire(s.ptr(), s.len(), t.opts.read_lease, Access::Read, Mode::Shared) {
            Ok(r) => self.rights.push((p as u32, r)),
            // Freed: a copy left in T whose block T' already replaced (or garbage).
            Err(MemError::NotFound | MemError::Invalid(_)) => self.class[p] = Class::Dangling,
            Err(e) => return Err(e.into()),
        }
        Ok(State::Classify)
    }

    /// Reads the blocks taken rights over and classifies their entries by the split bit.
    pub(super) fn read_blocks(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        if self.rights.is_empty() {
            return Ok(match self.record.phase {
                Phase::Copying => State::WriteNew,
                Phase::Publishing => State::Publish,
                _ => State::ReadNew,
            });
        }
        let mut total = 0;
        let mut n = 0;
        for (p, _) in &self.rights {
            total += self.slots[*p as usize].len();
            n += 1;
            if total >= BYTES {
                break;
            }
        }
        let taken: Vec<(u32, M::Region)> = self.rights.drain(..n).collect();
        let ops: Vec<_> = taken
            .iter()
            .map(|(p, r)| MemOp::Read {
                on: r,
                offset: 0,
                len: self.slots[*p as usize].len() as u32,
            })
            .collect();
        let out = exec(&mut t.stats, mem, &ops);
        let d = self.record.depth;
        for ((p, _), r) in taken.iter().zip(out) {
            self.class[*p as usize] = match r {
                Ok(o) => match o.bytes().and_then(block::decode) {
                    Some(b) if (b.hash >> d) & 1 == 1 => Class::Upper,
                    Some(_) => Class::Lower,
                    None => Class::Dangling,
                },
                Err(e) if ended(&e) || e == MemError::NotFound => Class::Dangling,
                Err(e) => return Err(e.into()),
            };
        }
        for (_, r) in taken {
            t.give_up(mem, r);
        }
        Ok(State::ReadBlocks)
    }

    /// Writes T' whole (one chunk per step): header, bucket headers, the moving entries.
    pub(super) fn write_new(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(nr) = self.new_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let geo = t.geo;
        let mut img = vec![0u8; geo.subtable_bytes() as usize];
        img[..8].copy_from_slice(&self.record.new_lock.to_le_bytes());
        let h = self.new_header(true).encode().to_le_bytes();
        for p in 0..geo.buckets() {
            let at = geo.bucket_offset(p) as usize;
            img[at..at + 8].copy_from_slice(&h);
        }
        for (p, s) in self.slots.iter().enumerate() {
            let v = if self.class[p] == Class::Upper {
                s.frozen()
            } else {
                Slot::FROZEN_EMPTY
            };
            let at = geo.slot_offset(p as u32) as usize;
            img[at..at + 8].copy_from_slice(&v.0.to_le_bytes());
        }
        let from = self.cursor;
        let to = (from + BYTES as usize).min(img.len());
        let ops = [MemOp::Write {
            on: nr,
            offset: from as u64,
            data: &img[from..to],
        }];
        if let Some(Err(e)) = exec(&mut t.stats, mem, &ops).pop() {
            return Err(e.into());
        }
        if to < img.len() {
            self.cursor = to;
            return Ok(State::WriteNew);
        }
        self.cursor = 0;
        self.record.phase = Phase::Publishing;
        Ok(State::Record(Box::new(State::Publish)))
    }

    /// CASes the directory entries of T's suffix class to (T, d+1) or (T', d+1).
    pub(super) fn publish(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(dr) = self.dir_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let (d, s) = (self.record.depth, u64::from(self.record.suffix));
        let max = t.root.config.max_depth;
        let count = 1usize << (max - d);
        let old = DirEntry {
            subtable: self.subtable,
            depth: d,
        };
        let target = |i: u64| DirEntry {
            subtable: if (i >> d) & 1 == 1 {
                self.record.new
            } else {
                self.subtable
            },
            depth: d + 1,
        };
        let ks: Vec<u64> = (self.cursor..count.min(self.cursor + BATCH))
            .map(|k| s + ((k as u64) << d))
            .collect();
        let ops: Vec<_> = ks
            .iter()
            .map(|&i| MemOp::Cas {
                on: dr,
                offset: 8 + 8 * i,
                compare: old.encode(),
                swap: target(i).encode(),
            })
            .collect();
        let out = exec(&mut t.stats, mem, &ops);
        for (&i, r) in ks.iter().zip(out) {
            match atomic(Some(r)) {
                Ok(v) if v == old.encode() || v == target(i).encode() => {}
                Ok(_) => return Err(RaceError::Corrupt("a directory entry changed under a split")),
                // Unknown: the entry is checked again on the next pass.
                Err(MemError::OutcomeUnknown) => {
                    t.stats.unknown_outcomes += 1;
                    return Ok(State::Publish);
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.cursor += ks.len();
        if self.cursor < count {
            return Ok(State::Publish);
        }
        self.cursor = 0;
        Ok(State::Depth)
    }

    /// Raises the global depth to at least d+1 (`cursor`: the depth last read, plus one).
    pub(super) fn depth(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(dr) = self.dir_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let want = u64::from(self.record.depth) + 1;
        let ops = match self.cursor {
            0 => vec![MemOp::Read {
                on: dr,
                offset: 0,
                len: 8,
            }],
            known => vec![MemOp::Cas {
                on: dr,
                offset: 0,
                compare: known as u64 - 1,
                swap: want,
            }],
        };
        let seen = match exec(&mut t.stats, mem, &ops).pop() {
            Some(Ok(o)) => o
                .atomic()
                .or_else(|| o.bytes().map(|b| word(b, 0)))
                .unwrap_or(0),
            Some(Err(MemError::OutcomeUnknown)) => {
                self.cursor = 0;
                return Ok(State::Depth);
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Ok(State::Depth),
        };
        if seen >= want || (self.cursor != 0 && seen as usize == self.cursor - 1) {
            self.cursor = 0;
            return Ok(State::Flip);
        }
        self.cursor = seen as usize + 1;
        Ok(State::Depth)
    }

    /// CASes T's bucket headers from (d, s) to (d+1, s).
    pub(super) fn flip(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(tr) = self.t_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let (old, new) = (self.old_header().encode(), self.new_header(false).encode());
        let ps: Vec<u32> = (self.cursor as u32..t.geo.buckets())
            .take(BATCH)
            .collect();
        let ops: Vec<_> = ps
            .iter()
            .map(|&p| MemOp::Cas {
                on: tr,
                offset: t.geo.bucket_offset(p),
                compare: old,
                swap: new,
            })
            .collect();
        for r in exec(&mut t.stats, mem, &ops) {
            match atomic(Some(r)) {
                Ok(v) if v == old || v == new => {}
                Ok(_) => return Err(RaceError::Corrupt("a bucket header changed under a split")),
                Err(MemError::OutcomeUnknown) => {
                    t.stats.unknown_outcomes += 1;
                    return Ok(State::Flip);
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.cursor += ps.len();
        if self.cursor < t.geo.buckets() as usize {
            return Ok(State::Flip);
        }
        self.cursor = 0;
        self.record.phase = Phase::Thawing;
        Ok(State::Record(Box::new(State::ReadNew)))
    }

    pub(super) fn read_new(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(nr) = self.new_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let image = mem.read(nr, 0, t.geo.subtable_bytes() as u32);
        t.stats.batches += 1;
        t.stats.reads += 1;
        self.new_slots = Self::parse_slots(t, &image?);
        self.cursor = 0;
        Ok(State::Thaw)
    }

    /// Thaws T' and clears or thaws T's frozen slots (by their class), a batch per step.
    pub(super) fn thaw(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<State, RaceError> {
        let Some(tr) = self.t_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let n = self.slots.len();
        // Positions cursor.. over T' (first n) then T (next n).
        let mut ops = Vec::new();
        let mut at = self.cursor;
        while at < 2 * n && ops.len() < BATCH {
            let p = at % n;
            let offset = t.geo.slot_offset(p as u32);
            if at < n {
                let s = self.new_slots.get(p).copied().unwrap_or_default();
                if let (true, Some(nr)) = (s.is_frozen(), self.new_right.as_ref()) {
                    ops.push(MemOp::Cas {
                        on: nr,
                        offset,
                        compare: s.0,
                        swap: s.thawed().0,
                    });
                }
            } else {
                let s = self.slots[p];
                if s.is_frozen() {
                    let keep = self.class[p] == Class::Lower && !s.is_empty();
                    ops.push(MemOp::Cas {
                        on: tr,
                        offset,
                        compare: s.0,
                        swap: if keep { s.thawed().0 } else { 0 },
                    });
                }
            }
            at += 1;
        }
        for r in exec(&mut t.stats, mem, &ops) {
            match r {
                Ok(_) => {}
                Err(MemError::OutcomeUnknown) => t.stats.unknown_outcomes += 1,
                Err(e) => return Err(e.into()),
            }
        }
        self.cursor = at;
        if at < 2 * n {
            return Ok(State::Thaw);
        }
        self.cursor = 0;
        if self.record.phase == Phase::Idle && self.rollback.is_none() {
            // Stray frozen slots thawed; nothing was recorded.
            return Ok(self.finish(Ok(SplitOutcome::NotNeeded)));
        }
        if let Some(e) = self.rollback.take() {
            self.outcome = Some(Err(e));
            self.record = SplitRecord::IDLE;
            return Ok(State::Record(Box::new(State::Unlock)));
        }
        self.outcome = Some(Ok(SplitOutcome::Split));
        Ok(State::ChildLock)
    }
}
