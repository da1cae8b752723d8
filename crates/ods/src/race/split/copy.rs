//! `Copying`: classify T's entries by the split bit (their blocks' key hashes) and write T'
//! whole.

use super::state::{Class, Split, State};
use super::{BYTES, REACQUIRE_LIMIT};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::Slot;
use crate::race::records::Phase;
use crate::race::stats::{ended, exec};
use patronus_core::proto::messages::{Access, Mode};

impl<M: RemoteMemory> Split<M> {
    pub(super) fn open_new(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let len = t.geo.subtable_bytes();
        t.stats.acquires += 1;
        let r = mem.acquire(
            self.record.new,
            len,
            t.opts.split_lease,
            Access::ReadWrite,
            Mode::Shared,
        )?;
        self.new_right = Some(r);
        Ok(State::Classify)
    }

    /// Takes a right over the next unclassified entry's block (one per step); reads the
    /// blocks held once every entry has a right, or as soon as one of the rights runs low
    /// (they are short: `read_lease`).
    pub(super) fn classify(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let margin = t.opts.margin;
        if self
            .rights
            .iter()
            .any(|(_, r)| mem.expires_within(r, margin))
        {
            return Ok(State::ReadBlocks);
        }
        let next = (0..self.slots.len()).find(|&p| {
            let s = self.slots[p];
            s.is_frozen()
                && !s.is_empty()
                && self.class[p] == Class::Unknown
                && !self.rights.iter().any(|(q, _)| *q as usize == p)
        });
        let Some(p) = next else {
            if !self.rights.is_empty() {
                return Ok(State::ReadBlocks);
            }
            return Ok(match self.record.phase {
                Phase::Copying => State::WriteNew,
                Phase::Publishing => State::Publish,
                _ => State::ReadNew,
            });
        };
        let s = self.slots[p];
        t.stats.acquires += 1;
        let answer = mem.acquire(
            s.ptr(),
            s.len(),
            t.opts.read_lease,
            Access::Read,
            Mode::Shared,
        );
        self.time.classified += 1;
        match answer {
            Ok(r) => self.rights.push((p as u32, r)),
            // Freed: a copy left in T whose block T' already replaced (or garbage).
            Err(MemError::NotFound | MemError::Invalid(_)) => self.class[p] = Class::Dangling,
            Err(e) => return Err(e.into()),
        }
        Ok(State::Classify)
    }

    /// Reads the blocks taken rights over and classifies their entries by the split bit. A
    /// READ refused because the right ended is no sign that the block was freed (the right
    /// may simply have run out before this slow resizer read it): the entry stays
    /// unclassified and `classify` acquires the block again — a freed one is `NotFound` then.
    pub(super) fn read_blocks(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        if self.rights.is_empty() {
            return Ok(State::Classify);
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
                Err(e) if ended(&e) => {
                    self.reacquired += 1;
                    if self.reacquired > REACQUIRE_LIMIT {
                        return Err(RaceError::Contended {
                            attempts: self.reacquired,
                        });
                    }
                    Class::Unknown
                }
                Err(MemError::NotFound) => Class::Dangling,
                Err(e) => return Err(e.into()),
            };
        }
        for (_, r) in taken {
            t.give_up(mem, r);
        }
        Ok(State::ReadBlocks)
    }

    /// Writes T' whole (one chunk per step): header, bucket headers, the moving entries.
    pub(super) fn write_new(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
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
}
