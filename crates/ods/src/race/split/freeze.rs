//! `Freezing` and the allocation of T': freeze every slot of T (CAS to its frozen form),
//! then allocate T' and its lock object — or, with no memory left, undo the freeze.

use super::state::{Class, Split, State};
use super::{BATCH, FREEZE_ROUNDS};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::Slot;
use crate::race::records::LOCK_BYTES;
use crate::race::stats::exec;
use patronus_core::proto::messages::Mode;

impl<M: RemoteMemory> Split<M> {
    pub(super) fn freeze(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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

    pub(super) fn reload(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let Some(tr) = self.t_right.as_ref() else {
            return Err(RaceError::Memory(MemError::Expired));
        };
        let image = mem.read(tr, 0, t.geo.subtable_bytes() as u32);
        t.stats.batches += 1;
        t.stats.reads += 1;
        self.slots = Self::parse_slots(t, &image?);
        Ok(State::Freeze)
    }

    pub(super) fn allocate(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
}
