//! Finding a key's subtable and reading its two combined buckets.
//!
//! One batch: (an optional WRITE of the caller's new block,) READ of each combined bucket,
//! then a READ of one bucket header of the subtable. Operations on one QP execute in order,
//! so that header is read after the slots: a split changes every header (depth + 1) before
//! it changes any slot of the old subtable, so a header that still claims the key proves the
//! slots read before it were current for the key.
//!
//! With a guess (`race::guesses`), a READ of the block the guess names, through the right
//! this client holds for that entry, goes last in the batch. The block counts only where the
//! buckets read before it hold the guessed entry at the guessed position: the slot named that
//! block when it was read, as in `ops::validate`'s batch (its slot re-read, block, header),
//! so the block is judged exactly as a validation would judge it, one round trip earlier.

use super::validate::Verdict;
use crate::memory::{Executing, MemError, MemOp, MemOut, Region, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::guesses::Guess;
use crate::race::hash::KeyHash;
use crate::race::layout::{BucketHeader, SlotAt, word};
use crate::race::stats::{bytes, ended, exec_or_start, poll_started};
use patronus_core::proto::messages::Access;
use std::task::Poll;

/// Directory re-reads a probe makes before it calls the directory corrupt.
const MAX_REFRESHES: u32 = 32;

/// A key's two combined buckets, read from a subtable that claims the key.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    /// The subtable's address.
    pub subtable: u64,
    /// Its bucket header, read after the slots.
    pub header: BucketHeader,
    /// The slots of both combined buckets, by position (each once).
    pub slots: Vec<SlotAt>,
    /// The block a guess named, read after the buckets (see the module docs).
    pub guessed: Option<Box<(SlotAt, Vec<u8>)>>,
}

impl Snapshot {
    /// Entries with `fingerprint`, by position.
    pub fn candidates(&self, fingerprint: u8) -> Vec<SlotAt> {
        self.slots
            .iter()
            .filter(|s| !s.slot.is_empty() && s.slot.fingerprint() == fingerprint)
            .copied()
            .collect()
    }

    /// The slot at `pos`, if it is one of the key's.
    pub fn at(&self, pos: u32) -> Option<SlotAt> {
        self.slots.iter().find(|s| s.pos == pos).copied()
    }

    /// What the block read beside the buckets says of candidate `at`, if the guess named that
    /// very entry: the verdict a validation of `at` would give (`None`: validate it).
    pub fn judged(&self, at: SlotAt, key: &[u8]) -> Option<Verdict> {
        let (g, data) = self.guessed.as_deref()?;
        if g.pos != at.pos || g.slot.thawed() != at.slot.thawed() {
            return None;
        }
        match block::decode(data) {
            Some(b) if b.key == key => Some(Verdict::Key(b)),
            Some(_) => Some(Verdict::Other),
            None => None,
        }
    }

    /// Whether a split froze any of the slots.
    pub fn frozen(&self) -> bool {
        self.slots.iter().any(|s| s.slot.is_frozen())
    }

    /// A free slot for a new entry: in the main bucket with more free slots, else in an
    /// overflow bucket (RACE's choice: the less loaded of the two).
    pub fn free_slot(&self, slots_per_bucket: u8) -> Option<SlotAt> {
        let per = u32::from(slots_per_bucket.max(1));
        let free = |s: &&SlotAt| s.slot.0 == 0;
        let mut best: Option<(usize, SlotAt)> = None;
        for s in self.slots.iter().filter(|s| s.main).filter(free) {
            let bucket = s.pos / per;
            let n = self
                .slots
                .iter()
                .filter(|o| o.pos / per == bucket)
                .filter(free)
                .count();
            if best.is_none_or(|(m, b)| n > m || (n == m && s.pos < b.pos)) {
                best = Some((n, *s));
            }
        }
        best.map(|(_, s)| s)
            .or_else(|| self.slots.iter().filter(|s| !s.main).find(free).copied())
    }
}

/// What a probe found.
#[derive(Debug)]
pub(crate) enum Probed {
    /// The buckets.
    Snap(Snapshot),
    /// The caller's WRITE failed (its right over its block ended).
    WriteFailed(MemError),
}

/// The probe of one key.
#[derive(Debug)]
pub(crate) struct Probe {
    pub h: KeyHash,
    /// Read the directory this deep before the next probe.
    refresh: Option<u8>,
    refreshes: u32,
    /// The batch in flight (`ClientOptions::pipeline`), and what reading its results needs.
    started: Option<(Executing, Reading)>,
    /// The access a right over the block of the key's entry as last seen must grant to be
    /// read beside the buckets (taken by the first batch: a probe read again reads none).
    guess: Option<Access>,
}

/// What a probe's batch read: the subtable, the directory entry's depth, the combined
/// buckets' first buckets, and whether a WRITE went in front.
#[derive(Clone, Copy, Debug)]
struct Reading {
    subtable: u64,
    depth: u8,
    f1: u32,
    f2: u32,
    write: bool,
    /// The key's guess, to check against the buckets, and whether its block was read last.
    guessed: Option<(Guess, bool)>,
}

impl Probe {
    pub fn new(h: KeyHash) -> Self {
        Probe {
            h,
            refresh: None,
            refreshes: 0,
            started: None,
            guess: None,
        }
    }

    /// A probe that also reads the block of the key's entry as last seen, if this client
    /// guesses (`ClientOptions::speculate`) and holds a right granting `access` for it.
    pub fn guessing(h: KeyHash, access: Access) -> Self {
        Probe {
            guess: Some(access),
            ..Probe::new(h)
        }
    }

    /// One step; `pre` is a WRITE to put in front of the reads.
    pub fn step<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        pre: Option<(&M::Region, &[u8])>,
    ) -> Poll<Result<Probed, RaceError>> {
        // A batch in flight: its results, read as the step that started it would have.
        if let Some((e, reading)) = self.started.take() {
            let mut slot = Some(e);
            if let Some(Poll::Ready(out)) = poll_started(&mut t.stats, mem, &mut slot) {
                return self.read(t, mem, out, reading);
            }
            self.started = slot.map(|e| (e, reading));
            return Poll::Pending;
        }
        if t.dir.entries.is_empty() && self.refresh.is_none() {
            self.refresh = Some(t.dir.depth);
        }
        if let Some(want) = self.refresh.as_mut() {
            match t.refresh_step(mem, want) {
                Ok(true) => self.refresh = None,
                Ok(false) => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let Some(entry) = t.dir.entry(self.h.primary) else {
            self.refresh = Some(t.dir.depth);
            return Poll::Pending;
        };
        match t.ensure_subtable(mem, entry.subtable) {
            Ok(true) => {}
            Ok(false) => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
        let geo = t.geo;
        let [m1, m2] = self.h.mains(geo.mains());
        let (o1, l1, f1) = geo.combined(m1);
        let (o2, l2, f2) = geo.combined(m2);
        let Some(st) = t.subtables.get(&entry.subtable) else {
            return Poll::Pending;
        };
        let mut ops = Vec::with_capacity(4);
        if let Some((on, data)) = pre {
            ops.push(MemOp::Write {
                on,
                offset: 0,
                data,
            });
        }
        let reads = ops.len();
        ops.extend([
            MemOp::Read {
                on: st,
                offset: o1,
                len: l1,
            },
            MemOp::Read {
                on: st,
                offset: o2,
                len: l2,
            },
            MemOp::Read {
                on: st,
                offset: geo.bucket_offset(f1),
                len: 8,
            },
        ]);
        // The key's guess, checked against the buckets in any case; its block read last if
        // guesses have been holding and this client holds a right for that very entry.
        let mut guessed = None;
        let guess = match self.guess.take() {
            Some(access) if t.opts.speculate => {
                t.guesses.guess(self.h.primary).map(|g| (g, access))
            }
            _ => None,
        };
        if let Some((g, access)) = guess.filter(|(g, _)| g.subtable == entry.subtable) {
            let margin = t.opts.margin;
            let right = t
                .blocks
                .get(g.at.slot, access)
                .filter(|b| !mem.expires_within(b, margin));
            let read = match right {
                Some(b) if t.guesses.worth_reading() => {
                    ops.push(MemOp::Read {
                        on: b,
                        offset: 0,
                        len: g.at.slot.len().min(b.len()) as u32,
                    });
                    t.stats.guesses += 1;
                    true
                }
                _ => false,
            };
            guessed = Some((g, read));
        }
        let reading = Reading {
            subtable: entry.subtable,
            depth: entry.depth,
            f1,
            f2,
            write: reads == 1,
            guessed,
        };
        let mut slot = None;
        let pipeline = t.opts.pipeline;
        match exec_or_start(&mut t.stats, mem, pipeline, &mut slot, &ops) {
            Poll::Ready(out) => self.read(t, mem, out, reading),
            Poll::Pending => {
                if let Some(e) = slot {
                    self.started = Some((e, reading));
                }
                Poll::Pending
            }
        }
    }

    /// Reads the results of the probe's batch.
    fn read<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        out: Vec<Result<MemOut, MemError>>,
        reading: Reading,
    ) -> Poll<Result<Probed, RaceError>> {
        let Reading {
            subtable,
            depth,
            f1,
            f2,
            write,
            guessed,
        } = reading;
        let geo = t.geo;
        let mut out = out.into_iter();
        if write {
            if let Some(Err(e)) = out.next() {
                return Poll::Ready(Ok(Probed::WriteFailed(e)));
            }
        }
        let (b1, b2, hdr) = match (bytes(out.next()), bytes(out.next()), bytes(out.next())) {
            (Ok(a), Ok(b), Ok(h)) => (a, b, h),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                if ended(&e) {
                    t.drop_subtable(mem, subtable);
                    return Poll::Pending;
                }
                return Poll::Ready(Err(e.into()));
            }
        };
        let header = BucketHeader::decode(word(&hdr, 0));
        if !header.claims(self.h.primary) {
            // A stale cache entry: read the directory deep enough for what was seen.
            self.refreshes += 1;
            if self.refreshes > MAX_REFRESHES {
                return Poll::Ready(Err(RaceError::Corrupt(
                    "the directory does not lead to a subtable claiming the key",
                )));
            }
            let want = t.dir.depth.max(header.depth).max(depth);
            self.refresh = Some(want);
            return Poll::Pending;
        }
        let mut slots = geo.parse(f1, &b1);
        for s in geo.parse(f2, &b2) {
            if !slots.iter().any(|o| o.pos == s.pos) {
                slots.push(s);
            }
        }
        slots.sort_by_key(|s| s.pos);
        let guessed = guessed.and_then(|(g, read)| {
            let block = read.then(|| bytes(out.next()));
            self.judge_guess(t, mem, g, block, &slots)
        });
        Poll::Ready(Ok(Probed::Snap(Snapshot {
            subtable,
            header,
            slots,
            guessed,
        })))
    }

    /// The guessed block as read, if it was and the buckets still hold the guessed entry at
    /// its place. A guess that did not hold is forgotten; a refused READ also ends the right
    /// it went through.
    fn judge_guess<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        g: Guess,
        read: Option<Result<Vec<u8>, MemError>>,
        slots: &[SlotAt],
    ) -> Option<Box<(SlotAt, Vec<u8>)>> {
        let held = slots
            .iter()
            .any(|s| s.pos == g.at.pos && s.slot.thawed() == g.at.slot.thawed());
        t.guesses.checked(held);
        if !held {
            t.guesses.forget(self.h.primary);
        }
        let data = match read? {
            Ok(d) => d,
            Err(e) => {
                if ended(&e) || e == MemError::NotFound {
                    if let Some(old) = t.blocks.take(g.at.slot.ptr()) {
                        t.give_up(mem, old);
                    }
                }
                return None;
            }
        };
        if !held {
            return None;
        }
        t.stats.guesses_right += 1;
        Some(Box::new((g.at, data)))
    }
}
