//! Reading the record and T, writing the record, and the lock objects of the new half
//! (its `NewHalf` mark, set when T' is allocated and cleared when the split ends).

use super::state::{Class, Split, SplitOutcome, State};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::{BucketHeader, SUBTABLE_HEADER, Slot, word};
use crate::race::records::{LOCK_BYTES, Phase, RECORD, RECORD_BYTES, SplitRecord};
use crate::race::stats::{bytes, exec};
use patronus_core::proto::messages::{Access, Mode};

impl<M: RemoteMemory> Split<M> {
    pub(super) fn parse_slots(t: &TableClient<M>, image: &[u8]) -> Vec<Slot> {
        let at = SUBTABLE_HEADER as usize;
        t.geo
            .parse(0, image.get(at..).unwrap_or_default())
            .into_iter()
            .map(|s| s.slot)
            .collect()
    }

    pub(super) fn old_header(&self) -> BucketHeader {
        BucketHeader {
            depth: self.record.depth,
            suffix: self.record.suffix,
        }
    }

    pub(super) fn new_header(&self, upper: bool) -> BucketHeader {
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
            t.stats.takeovers += 1;
            return Ok(match record.phase {
                Phase::Freezing => State::Freeze,
                // T' may be its own by now: see `child_check`.
                Phase::Thawing => State::ChildLock,
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
            Some(_) if header.depth >= max => self.finish(Err(RaceError::TableFull { depth: max })),
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

    /// Marks T''s lock object as the new half of this split (before T' is recorded), so a
    /// client that takes T''s lock while this split is unfinished finishes this split.
    pub(super) fn mark_child(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
        let ops = [MemOp::Write {
            on: c,
            offset: RECORD,
            data: &mark,
        }];
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
    pub(super) fn child_lock(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        t.stats.acquires += 1;
        let (addr, lease) = (self.record.new_lock, t.opts.split_lease);
        match mem.acquire(addr, LOCK_BYTES, lease, Access::ReadWrite, Mode::Shared) {
            Ok(r) => {
                self.child = Some(r);
                // Not thawed yet by this resizer: a resumed `Thawing` split checks first.
                Ok(if self.outcome.is_some() {
                    State::ChildClear
                } else {
                    State::ChildCheck
                })
            }
            Err(MemError::Conflict) => Ok(State::ChildLock),
            Err(e) => Err(e.into()),
        }
    }

    /// A split resumed in `Thawing`: is T' still marked the new half of this split? The
    /// resizer before may have thawed both halves and cleared the mark, then stopped before
    /// it recorded the split done. T' is then a subtable like any other, possibly frozen by
    /// a split of its own, and thawing it again would thaw that split's frozen slots under
    /// it (whose classification then misses their entries: keys lost at its flip). Marked:
    /// the thaw goes on (the right is given up; `ChildLock` takes another after the thaw).
    /// Not marked: both halves were thawed before the mark was cleared; record the split
    /// done.
    pub(super) fn child_check(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let Some(c) = self.child.as_ref() else {
            return Ok(State::ChildLock);
        };
        let ops = [MemOp::Read {
            on: c,
            offset: RECORD,
            len: RECORD_BYTES,
        }];
        let mark = SplitRecord::decode(&bytes(exec(&mut t.stats, mem, &ops).pop())?)?;
        if let Some(c) = self.child.take() {
            t.stats.releases += 1;
            let _ = mem.release(c);
        }
        if mark.phase == Phase::NewHalf && mark.new == self.subtable {
            return Ok(State::OpenNew);
        }
        self.outcome = Some(Ok(SplitOutcome::Split));
        self.record = SplitRecord::IDLE;
        Ok(State::Record(Box::new(State::Unlock)))
    }

    /// Clears T''s `NewHalf` mark (only that: by now T' may be splitting on its own), then
    /// records this split done.
    pub(super) fn child_clear(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
        let ops = [MemOp::Cas {
            on: c,
            offset: RECORD,
            compare: word(&mark, 0),
            swap: 0,
        }];
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
}
