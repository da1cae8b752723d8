//! `Publishing` and `Thawing`: the directory entries, the global depth, T's headers; then
//! the thaw of T' and of T.

use super::BATCH;
use super::state::{Class, Split, SplitOutcome, State};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::{DirEntry, word};
use crate::race::records::{Phase, SplitRecord};
use crate::race::stats::{atomic, exec};

impl<M: RemoteMemory> Split<M> {
    /// CASes the directory entries of T's suffix class to (T, d+1) or (T', d+1).
    pub(super) fn publish(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
                Ok(_) => {
                    return Err(RaceError::Corrupt(
                        "a directory entry changed under a split",
                    ));
                }
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
    pub(super) fn depth(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
        let ps: Vec<u32> = (self.cursor as u32..t.geo.buckets()).take(BATCH).collect();
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

    pub(super) fn read_new(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
