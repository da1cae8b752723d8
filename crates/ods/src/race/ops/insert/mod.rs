//! `Insert`: write the KV block (out of place, in the same batch as the bucket reads), check
//! the key is absent, CAS a free slot (the batch re-reads the buckets right after), and make
//! sure no other client inserted the key concurrently.
//!
//! Duplicates: if the re-read shows another entry of the key, this client backs off (clears
//! its own slot) and starts over — so of two concurrent inserts of a key at most one reports
//! success, and a client that acknowledged saw no other entry after linking (any later
//! inserter sees it and backs off). A CAS whose outcome is unknown is resolved by reading the
//! slot, never by repeating it blindly (see `Resolve`).

mod link;

use super::probe::{Probe, Probed, Snapshot};
use super::validate::{Validate, Verdict};
use super::wait::Wait;
use super::{Stage, ready, try_ready};
use crate::memory::{Region, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::layout::{Slot, SlotAt};
use crate::race::split::{Split, SplitOutcome};
use crate::race::stats::ended;
use link::candidates;
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
    /// Where it was linked (subtable, slot), if it may be in the table.
    linked: Option<(u64, SlotAt)>,
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
        v: Option<Validate>,
    },
    Swap {
        snap: Snapshot,
        at: SlotAt,
    },
    Dedup {
        snap: Snapshot,
        v: Option<Validate>,
    },
    /// Take this insert's entry back out of `subtable`; `claimed`: whether that subtable
    /// claims the key (false: the entry landed after a split moved the key away).
    BackOff {
        subtable: u64,
        at: SlotAt,
        claimed: bool,
    },
    /// Probe, then look for this insert's entry at its position.
    Relocate(Probe),
    /// The CAS (of a slot of the subtable named) had an unknown outcome: probe, then read
    /// the slot.
    Resolve(Probe, u64, SlotAt),
    Split(Box<Split<M>>),
    Wait(Box<Wait<M>>),
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
            t.consume(mem, b, self.mine);
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
                try_ready!(t.ready_own_block(mem, &mut self.block, &mut self.stale_block));
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
                        self.state = State::Check { snap, v: None };
                        Poll::Pending
                    }
                }
            }
            State::Check { snap, v } => {
                if v.is_none() {
                    let cands = candidates(&self.h, self.mine, &self.others, snap);
                    match cands.first() {
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
                        // Known now: the candidates left out the entries in `others`.
                        self.others.push(val.at.slot.thawed());
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
            State::Dedup { snap, v } => {
                if v.is_none() {
                    let cands = candidates(&self.h, self.mine, &self.others, snap);
                    match cands.first() {
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
                        let mine = self.linked.and_then(|(_, at)| snap.at(at.pos));
                        self.state = match mine {
                            Some(at) => State::BackOff {
                                subtable,
                                at,
                                claimed: true,
                            },
                            None => State::Relocate(Probe::new(self.h)),
                        };
                        Poll::Pending
                    }
                    Verdict::Other => {
                        // Known now: the candidates left out the entries in `others`.
                        self.others.push(val.at.slot.thawed());
                        *v = None;
                        Poll::Pending
                    }
                    Verdict::Gone => {
                        self.state = State::Relocate(Probe::new(self.h));
                        Poll::Pending
                    }
                }
            }
            State::BackOff {
                subtable,
                at,
                claimed,
            } => {
                let (subtable, at, claimed) = (*subtable, *at, *claimed);
                try_ready!(t.ensure_subtable(mem, subtable));
                self.back_off(t, mem, subtable, at, claimed)
            }
            State::Relocate(p) => {
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                self.relocated(t, mem, snap)
            }
            State::Resolve(p, subtable, at) => {
                let (subtable, at) = (*subtable, *at);
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                self.resolved(t, mem, snap, subtable, at)
            }
            State::Split(s) => match ready!(s.step(t, mem)) {
                SplitOutcome::Split | SplitOutcome::NotNeeded => {
                    self.state = State::Probe(Probe::new(self.h));
                    Poll::Pending
                }
                SplitOutcome::Busy | SplitOutcome::LockLost => {
                    self.state = State::Wait(Box::new(Wait::new(self.h)));
                    Poll::Pending
                }
            },
            State::Wait(w) => {
                let snap = ready!(w.step(t, mem));
                if self.linked.is_some() {
                    return self.relocated(t, mem, snap);
                }
                self.state = State::Check { snap, v: None };
                Poll::Pending
            }
            State::Done => Poll::Ready(Err(RaceError::Finished)),
        }
    }
}
