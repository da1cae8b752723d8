//! `Insert`: write the KV block (out of place, in the same batch as the bucket reads), check
//! the key is absent, CAS a free slot (the batch re-reads the buckets right after), and make
//! sure no other client inserted the key concurrently.
//!
//! Duplicates: if the re-read shows another entry of the key, this client backs off (clears
//! its own slot) and starts over — so of two concurrent inserts of a key at most one reports
//! success, and a client that acknowledged saw no other entry after linking (any later
//! inserter sees it and backs off). A CAS whose outcome is unknown is resolved by reading the
//! slot, never by repeating it blindly (see `Resolve`).

use super::probe::{Probe, Probed, Snapshot};
use super::validate::{Validate, Verdict};
use super::wait::Wait;
use super::{Stage, ready, try_ready};
use crate::memory::{MemError, MemOp, Region, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::layout::{BucketHeader, Slot, SlotAt, word};
use crate::race::split::{Split, SplitOutcome};
use crate::race::stats::{atomic, bytes, ended, exec};
use patronus_core::proto::messages::Access;
use std::task::Poll;

/// An insertion of one key (an error if it is present).
pub struct Insert<M: RemoteMemory> {
    key: Vec<u8>,
    value: Vec<u8>,
    h: KeyHash,
    units: u8,
    block: Option<M::Region>,
    /// The right over the block must be acquired again (the NIC refused it).
    stale_block: bool,
    image: Vec<u8>,
    nonce: u64,
    written: bool,
    /// This insert's entry (valid once a block is held).
    mine: Slot,
    /// Where it was linked, if it may be in the table.
    linked: Option<u32>,
    /// Entries known to be other keys'.
    others: Vec<Slot>,
    state: State<M>,
    attempts: u32,
}

enum State<M: RemoteMemory> {
    Block,
    Probe(Probe),
    Check {
        snap: Snapshot,
        next: usize,
        v: Option<Validate>,
    },
    Swap {
        snap: Snapshot,
        at: SlotAt,
    },
    Dedup {
        snap: Snapshot,
        next: usize,
        v: Option<Validate>,
    },
    BackOff {
        subtable: u64,
        at: SlotAt,
    },
    /// Probe, then look for this insert's entry at its position.
    Relocate(Probe),
    /// The CAS's outcome is unknown: probe, then read the slot.
    Resolve(Probe, SlotAt),
    Split(Split<M>),
    Wait(Wait<M>),
    Done,
}

impl<M: RemoteMemory> std::fmt::Debug for Insert<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Insert")
            .field("key", &self.key)
            .field("linked", &self.linked)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> Insert<M> {
    /// An insertion of `key` → `value` (an error if they do not fit in a block).
    pub fn new(t: &TableClient<M>, key: &[u8], value: &[u8]) -> Result<Self, RaceError> {
        let units = block::units_for(key.len(), value.len(), t.root.config.block_size)?;
        Ok(Insert {
            key: key.to_vec(),
            value: value.to_vec(),
            h: KeyHash::of(key, t.root.config.seed),
            units,
            block: None,
            stale_block: false,
            image: Vec::new(),
            nonce: 0,
            written: false,
            mine: Slot::EMPTY,
            linked: None,
            others: Vec::new(),
            state: State::Block,
            attempts: 0,
        })
    }

    /// Where the insertion is.
    pub fn stage(&self) -> Stage {
        match &self.state {
            State::Block => Stage::Block,
            State::Probe(_) | State::Relocate(_) => Stage::Probing,
            State::Check { .. } => Stage::Acquiring,
            State::Swap { .. } | State::BackOff { .. } => Stage::Swapping,
            State::Dedup { .. } => Stage::Deduplicating,
            State::Resolve(..) => Stage::Resolving,
            State::Split(_) => Stage::Splitting,
            State::Wait(_) => Stage::Waiting,
            State::Done => Stage::Done,
        }
    }

    /// The address of the block this insertion writes (once it took one).
    pub fn block_addr(&self) -> Option<u64> {
        self.block.as_ref().map(Region::addr)
    }

    /// The split this insertion is running, if any.
    pub fn split(&self) -> Option<&Split<M>> {
        match &self.state {
            State::Split(s) => Some(s),
            _ => None,
        }
    }

    /// One step (see the module docs of `ops`).
    pub fn step(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        match self.advance(t, mem) {
            Poll::Ready(Err(e)) => {
                // Not linked: the block is this client's to use again.
                if self.linked.is_none() {
                    if let Some(b) = self.block.take() {
                        t.return_spare(b);
                    }
                }
                self.state = State::Done;
                Poll::Ready(Err(e))
            }
            other => other,
        }
    }

    fn retry(&mut self, t: &mut TableClient<M>) -> Result<(), RaceError> {
        // What was learned about other entries may be stale by now (a block reused).
        self.others.clear();
        self.attempts += 1;
        t.stats.retries += 1;
        if self.attempts > t.opts.max_attempts {
            return Err(RaceError::Contended {
                attempts: self.attempts,
            });
        }
        Ok(())
    }

    /// Gives up the block (it may be another client's to free now) and starts over.
    fn lose_block(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<(), RaceError> {
        if let Some(b) = self.block.take() {
            t.consume(mem, b);
        }
        self.linked = None;
        self.written = false;
        self.state = State::Block;
        self.retry(t)
    }

    fn advance(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        match &mut self.state {
            State::Block => {
                if self.block.is_none() {
                    match t.take_spare(mem) {
                        Ok(Some(b)) => self.take_block(t, b),
                        Ok(None) => return Poll::Pending,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                if self.stale_block {
                    self.stale_block = false;
                    if let Some(b) = self.block.take() {
                        let (addr, len) = (b.addr(), b.len());
                        let _ = mem.relinquish(b);
                        t.stats.acquires += 1;
                        let o = t.opts;
                        match mem.acquire(addr, len, o.lease, Access::ReadWrite, patronus_core::proto::messages::Mode::Shared) {
                            Ok(r) => self.block = Some(r),
                            Err(e) => return Poll::Ready(Err(e.into())),
                        }
                        return Poll::Pending;
                    }
                }
                try_ready!(t.refresh_own_block(mem, &mut self.block));
                self.state = State::Probe(Probe::new(self.h));
                Poll::Pending
            }
            State::Probe(p) => {
                let pre = match (&self.block, self.written) {
                    (Some(b), false) => Some((b, &self.image[..])),
                    _ => None,
                };
                match ready!(p.step(t, mem, pre)) {
                    Probed::WriteFailed(e) if ended(&e) => {
                        self.stale_block = true;
                        self.state = State::Block;
                        Poll::Pending
                    }
                    Probed::WriteFailed(e) => Poll::Ready(Err(e.into())),
                    Probed::Snap(snap) => {
                        self.written = true;
                        self.state = State::Check {
                            snap,
                            next: 0,
                            v: None,
                        };
                        Poll::Pending
                    }
                }
            }
            State::Check { snap, next, v } => {
                if v.is_none() {
                    let cands = candidates(&self.h, self.mine, &self.others, snap);
                    match cands.get(*next) {
                        Some(at) => *v = Some(Validate::new(*at, snap.subtable, Access::Read)),
                        None => {
                            let snap = snap.clone();
                            self.state = self.place(t, snap);
                            return Poll::Pending;
                        }
                    }
                }
                let Some(val) = v.as_mut() else {
                    return Poll::Pending;
                };
                match ready!(val.step(t, mem, &self.key, &self.h)) {
                    Verdict::Key(_) => {
                        if let Some(b) = self.block.take() {
                            t.return_spare(b);
                        }
                        self.state = State::Done;
                        Poll::Ready(Err(RaceError::KeyExists))
                    }
                    Verdict::Other => {
                        self.others.push(val.at.slot.thawed());
                        *next += 1;
                        *v = None;
                        Poll::Pending
                    }
                    Verdict::Gone => {
                        if let Err(e) = self.retry(t) {
                            return Poll::Ready(Err(e));
                        }
                        self.state = State::Probe(Probe::new(self.h));
                        Poll::Pending
                    }
                }
            }
            State::Swap { snap, at } => {
                let (subtable, at) = (snap.subtable, *at);
                try_ready!(t.ensure_subtable(mem, subtable));
                self.swap(t, mem, subtable, at)
            }
            State::Dedup { snap, next, v } => {
                if v.is_none() {
                    let cands = candidates(&self.h, self.mine, &self.others, snap);
                    match cands.get(*next) {
                        Some(at) => *v = Some(Validate::new(*at, snap.subtable, Access::Read)),
                        None => return self.succeed(t, mem),
                    }
                }
                let Some(val) = v.as_mut() else {
                    return Poll::Pending;
                };
                match ready!(val.step(t, mem, &self.key, &self.h)) {
                    Verdict::Key(_) => {
                        // Another entry of the key: back off.
                        let subtable = snap.subtable;
                        let mine = self.linked.and_then(|p| snap.at(p));
                        self.state = match mine {
                            Some(at) => State::BackOff { subtable, at },
                            None => State::Relocate(Probe::new(self.h)),
                        };
                        Poll::Pending
                    }
                    Verdict::Other => {
                        self.others.push(val.at.slot.thawed());
                        *next += 1;
                        *v = None;
                        Poll::Pending
                    }
                    Verdict::Gone => {
                        self.state = State::Relocate(Probe::new(self.h));
                        Poll::Pending
                    }
                }
            }
            State::BackOff { subtable, at } => {
                let (subtable, at) = (*subtable, *at);
                try_ready!(t.ensure_subtable(mem, subtable));
                self.back_off(t, mem, subtable, at)
            }
            State::Relocate(p) => {
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                self.relocated(t, mem, snap)
            }
            State::Resolve(p, at) => {
                let at = *at;
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                let now = snap.at(at.pos).map(|s| s.slot).unwrap_or_default();
                if now.thawed() == self.mine {
                    self.linked = Some(at.pos);
                    return self.relocated(t, mem, snap);
                }
                self.linked = None;
                self.state = if now == Slot::EMPTY {
                    // It did not take effect: the slot is still free; try it again.
                    State::Swap { snap, at }
                } else if now.is_frozen() {
                    State::Wait(Wait::new(self.h))
                } else {
                    // Someone else's now: ours never landed, or landed and was replaced
                    // (then whoever replaced it frees the block). Free it either way; it
                    // is in no slot.
                    if let Some(b) = self.block.take() {
                        t.free_block(mem, b, self.nonce);
                    }
                    self.written = false;
                    State::Block
                };
                Poll::Pending
            }
            State::Split(s) => match ready!(s.step(t, mem)) {
                SplitOutcome::Split | SplitOutcome::NotNeeded => {
                    self.state = State::Probe(Probe::new(self.h));
                    Poll::Pending
                }
                SplitOutcome::Busy | SplitOutcome::LockLost => {
                    self.state = State::Wait(Wait::new(self.h));
                    Poll::Pending
                }
            },
            State::Wait(w) => {
                let snap = ready!(w.step(t, mem));
                if self.linked.is_some() {
                    return self.relocated(t, mem, snap);
                }
                self.state = State::Check {
                    snap,
                    next: 0,
                    v: None,
                };
                Poll::Pending
            }
            State::Done => Poll::Ready(Err(RaceError::Finished)),
        }
    }

    fn take_block(&mut self, t: &mut TableClient<M>, b: M::Region) {
        self.nonce = t.nonce(b.addr());
        self.image = block::encode(&self.key, &self.value, self.h.primary, self.nonce, self.units);
        self.mine = Slot::entry(self.h.fingerprint(), self.units, b.addr());
        self.written = false;
        self.block = Some(b);
    }

    /// Where to go once the key is known absent: a free slot, a wait, or a split.
    fn place(&self, t: &TableClient<M>, snap: Snapshot) -> State<M> {
        if let Some(at) = snap.free_slot(t.geo.slots) {
            return State::Swap { snap, at };
        }
        if snap.frozen() {
            return State::Wait(Wait::new(self.h));
        }
        State::Split(Split::new(t, snap.subtable, Some(snap.header.depth)))
    }

    /// The CAS of a free slot, with the buckets re-read behind it in the same batch.
    fn swap(&mut self, t: &mut TableClient<M>, mem: &mut M, subtable: u64, at: SlotAt) -> Poll<Result<(), RaceError>> {
        let geo = t.geo;
        let [m1, m2] = self.h.mains(geo.mains());
        let ((o1, l1, f1), (o2, l2, f2)) = (geo.combined(m1), geo.combined(m2));
        let Some(st) = t.subtables.get(&subtable) else {
            return Poll::Pending;
        };
        let ops = [
            MemOp::Cas {
                on: st,
                offset: at.offset,
                compare: 0,
                swap: self.mine.0,
            },
            MemOp::Read { on: st, offset: o1, len: l1 },
            MemOp::Read { on: st, offset: o2, len: l2 },
            MemOp::Read { on: st, offset: geo.bucket_offset(f1), len: 8 },
        ];
        let mut out = exec(&mut t.stats, mem, &ops).into_iter();
        let cas = atomic(out.next());
        let reread = (bytes(out.next()), bytes(out.next()), bytes(out.next()));
        match cas {
            Ok(0) => {
                self.linked = Some(at.pos);
                self.state = match reread {
                    (Ok(b1), Ok(b2), Ok(h))
                        if BucketHeader::decode(word(&h, 0)).claims(self.h.primary) =>
                    {
                        let mut slots = geo.parse(f1, &b1);
                        for s in geo.parse(f2, &b2) {
                            if !slots.iter().any(|o| o.pos == s.pos) {
                                slots.push(s);
                            }
                        }
                        slots.sort_by_key(|s| s.pos);
                        let header = BucketHeader::decode(word(&h, 0));
                        State::Dedup {
                            snap: Snapshot { subtable, header, slots },
                            next: 0,
                            v: None,
                        }
                    }
                    _ => State::Relocate(Probe::new(self.h)),
                };
            }
            Ok(v) if Slot(v).is_frozen() => self.state = State::Wait(Wait::new(self.h)),
            Ok(_) => {
                if let Err(e) = self.retry(t) {
                    return Poll::Ready(Err(e));
                }
                self.state = State::Probe(Probe::new(self.h));
            }
            Err(MemError::OutcomeUnknown) => {
                t.stats.unknown_outcomes += 1;
                self.state = State::Resolve(Probe::new(self.h), at);
            }
            Err(e) if ended(&e) => {
                t.drop_subtable(mem, subtable);
                self.state = State::Probe(Probe::new(self.h));
            }
            Err(e) => return Poll::Ready(Err(e.into())),
        }
        Poll::Pending
    }

    /// Clears this insert's own slot after seeing another entry of the key.
    fn back_off(&mut self, t: &mut TableClient<M>, mem: &mut M, subtable: u64, at: SlotAt) -> Poll<Result<(), RaceError>> {
        let Some(st) = t.subtables.get(&subtable) else {
            return Poll::Pending;
        };
        let ops = [MemOp::Cas {
            on: st,
            offset: at.offset,
            compare: self.mine.0,
            swap: 0,
        }];
        let r = atomic(exec(&mut t.stats, mem, &ops).pop());
        let step = match r {
            Ok(v) if v == self.mine.0 => {
                // Unlinked by this client: the block is still its own (and still written).
                self.linked = None;
                self.state = State::Probe(Probe::new(self.h));
                self.retry(t)
            }
            Ok(v) if Slot(v).thawed() == self.mine => {
                self.state = State::Wait(Wait::new(self.h));
                Ok(())
            }
            // Replaced or cleared by another client, who frees the block.
            Ok(_) => self.lose_block(t, mem),
            Err(MemError::OutcomeUnknown) => {
                t.stats.unknown_outcomes += 1;
                self.state = State::Relocate(Probe::new(self.h));
                Ok(())
            }
            Err(e) if ended(&e) => {
                t.drop_subtable(mem, subtable);
                Ok(())
            }
            Err(e) => Err(e.into()),
        };
        match step {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// After a probe: is this insert's entry where it was linked?
    fn relocated(&mut self, t: &mut TableClient<M>, mem: &mut M, snap: Snapshot) -> Poll<Result<(), RaceError>> {
        let here = self
            .linked
            .and_then(|p| snap.at(p))
            .is_some_and(|s| s.slot.thawed() == self.mine);
        if here {
            self.state = State::Dedup { snap, next: 0, v: None };
            return Poll::Pending;
        }
        match self.lose_block(t, mem) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn succeed(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        if let Some(b) = self.block.take() {
            t.consume(mem, b);
        }
        self.state = State::Done;
        Poll::Ready(Ok(()))
    }
}

/// Entries with the key's fingerprint not known to be other keys' (nor this insert's own).
fn candidates(h: &KeyHash, mine: Slot, others: &[Slot], snap: &Snapshot) -> Vec<SlotAt> {
    snap.candidates(h.fingerprint())
        .into_iter()
        .filter(|s| s.slot.thawed() != mine && !others.contains(&s.slot.thawed()))
        .collect()
}
