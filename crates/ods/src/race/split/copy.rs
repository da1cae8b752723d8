//! `Copying`: classify T's entries by the split bit (their blocks' key hashes) and write T'
//! whole.

use super::state::{Class, Split, State};
use super::{BYTES, CLASSIFY_IN_FLIGHT, REACQUIRE_LIMIT};
use crate::memory::{Acquiring, MemError, MemOp, RemoteMemory};
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

    /// Classifies T's entries by the blocks' key hashes: keeps up to [`CLASSIFY_IN_FLIGHT`]
    /// acquires of rights over their blocks in flight (started without waiting for their
    /// answers, as readers do: `acquiring.rs`), and reads the blocks of the rights that came
    /// (`ReadBlocks`) as soon as they are here — they are short (`read_lease`). One step takes
    /// the answers that came and starts as many acquires as that frees (with a memory that
    /// answers an acquire at once — one that does not pipeline them — one acquire a step).
    /// Only an acquire answered `NotFound` marks an entry's block as freed (dropped); see
    /// `read_blocks` for a refused READ.
    pub(super) fn classify(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let in_flight = std::mem::take(&mut self.blocks.pending);
        let mut failed = None;
        for (p, a) in in_flight {
            if failed.is_some() {
                // Given up by `unlock`, with the rest of the split's rights.
                self.blocks.pending.push((p, a));
                continue;
            }
            match mem.poll_acquire(a) {
                Acquiring::Answered(r) => failed = self.answered(p, r).err(),
                a @ Acquiring::InFlight(_) => self.blocks.pending.push((p, a)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        while self.blocks.pending.len() < CLASSIFY_IN_FLIGHT {
            let Some(p) = self.next_unclassified() else {
                break;
            };
            let s = self.slots[p];
            self.class[p] = Class::Reading;
            t.stats.acquires += 1;
            let lease = t.opts.read_lease;
            match mem.start_acquire(s.ptr(), s.len(), lease, Access::Read, Mode::Shared) {
                a @ Acquiring::InFlight(_) => self.blocks.pending.push((p as u32, a)),
                // Answered at once: the memory ran the acquire blocking (one round trip).
                Acquiring::Answered(r) => {
                    self.answered(p as u32, r)?;
                    break;
                }
            }
        }
        if !self.blocks.held.is_empty() {
            return Ok(State::ReadBlocks);
        }
        if !self.blocks.pending.is_empty() {
            // Nothing to do until an answer comes: the driver may sleep on the memory.
            t.split_awaiting = true;
            return Ok(State::Classify);
        }
        Ok(match self.record.phase {
            Phase::Copying => State::WriteNew,
            Phase::Publishing => State::Publish,
            _ => State::ReadNew,
        })
    }

    /// Takes the answer to the acquire of entry `p`'s block: its right is kept to be read,
    /// or the node says the block is freed (the entry is dropped).
    fn answered(&mut self, p: u32, answer: Result<M::Region, MemError>) -> Result<(), RaceError> {
        self.timing.time.classified += 1;
        match answer {
            Ok(r) => self.blocks.held.push((p, r)),
            // Freed: a copy left in T whose block T' already replaced (or garbage).
            Err(MemError::NotFound | MemError::Invalid(_)) => {
                self.class[p as usize] = Class::Dangling;
            }
            Err(e) => {
                self.class[p as usize] = Class::Unknown;
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// The next entry of T left to classify (frozen, not empty, not started), from `scan` on.
    fn next_unclassified(&mut self) -> Option<usize> {
        while let Some(&s) = self.slots.get(self.blocks.scan) {
            let p = self.blocks.scan;
            if s.is_frozen() && !s.is_empty() && self.class[p] == Class::Unknown {
                return Some(p);
            }
            self.blocks.scan += 1;
        }
        None
    }

    /// Reads the blocks taken rights over and classifies their entries by the split bit. A
    /// READ refused because the right ended is no sign that the block was freed (the right
    /// may simply have run out before this slow resizer read it): the entry goes back to
    /// unclassified and `classify` acquires the block again — a freed one is `NotFound` then.
    /// The rights read are released together.
    pub(super) fn read_blocks(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        if self.blocks.held.is_empty() {
            return Ok(State::Classify);
        }
        let mut total = 0;
        let mut n = 0;
        for (p, _) in &self.blocks.held {
            total += self.slots[*p as usize].len();
            n += 1;
            if total >= BYTES {
                break;
            }
        }
        let taken: Vec<(u32, M::Region)> = self.blocks.held.drain(..n).collect();
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
        let claims = self.old_header();
        let mut failed = None;
        for ((p, _), r) in taken.iter().zip(out) {
            let p = *p as usize;
            self.class[p] = match r {
                Ok(o) => match o.bytes().and_then(block::decode) {
                    // Not T's key: an entry linked after an earlier split of T had finished
                    // (its inserter takes it back out) or a copy that split left. Cleared,
                    // never copied: its block is not this entry's to free.
                    Some(b) if !claims.claims(b.hash) => Class::Dangling,
                    Some(b) if (b.hash >> d) & 1 == 1 => Class::Upper,
                    Some(_) => Class::Lower,
                    None => Class::Dangling,
                },
                Err(e) if ended(&e) => {
                    self.reacquired += 1;
                    self.blocks.scan = self.blocks.scan.min(p);
                    Class::Unknown
                }
                Err(MemError::NotFound) => Class::Dangling,
                Err(e) => {
                    failed.get_or_insert(e);
                    Class::Unknown
                }
            };
        }
        // Released, never left to lapse: a split takes a right per entry of T, hundreds within
        // a few milliseconds, and rights left to lapse would hold as many windows at the node
        // (two each, for a read right) until their leases end — more than a client has with
        // a PD of its own (1024 by default).
        t.stats.releases += taken.len() as u64;
        let _ = mem.release_many(taken.into_iter().map(|(_, r)| r).collect());
        if let Some(e) = failed {
            return Err(e.into());
        }
        if self.reacquired > REACQUIRE_LIMIT {
            return Err(RaceError::Contended {
                attempts: self.reacquired,
            });
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
