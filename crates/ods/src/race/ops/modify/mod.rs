//! `Update` and `Delete`: find the key's entry (the lowest-positioned, validated under a
//! read-write right of this client's own over its block, so it can free it), CAS the slot
//! from that entry to the new block's (update, copy-on-write) or to empty (delete), then free
//! the old block. Other entries of the key (left by concurrent inserts) are cleared too. A
//! candidate whose block the probe read on a guess (`race::guesses`) is judged from that
//! read, without a validation batch: an update of an unchanged entry is two round trips.
//!
//! The CAS batch also re-reads the old block through the right validated: if that READ is
//! refused, the block was freed (and maybe reused) since validation, so the slot the CAS hit
//! might have been another write reusing the address (ABA); the block is read again under a
//! new right, and if it is not the write validated, the CAS is undone. A CAS whose outcome is
//! unknown is resolved by reading the slot: never repeated blindly.

mod finish;

use super::probe::{Probe, Probed, Snapshot};
use super::validate::{Validate, Verdict};
use super::wait::Wait;
use super::{Stage, ready, try_ready};
use crate::memory::{Executing, Region, RemoteMemory};
use crate::race::block::{self, KvBlock};
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::layout::{Slot, SlotAt};
use crate::race::stats::ended;
use finish::done;
use patronus_core::proto::messages::Access;
use std::task::Poll;

/// An update of one key's value (an error if the key is absent).
#[derive(Debug)]
pub struct Update<M: RemoteMemory>(Modify<M>);

/// A deletion of one key (an error if the key is absent).
#[derive(Debug)]
pub struct Delete<M: RemoteMemory>(Modify<M>);

impl<M: RemoteMemory> Update<M> {
    /// An update of `key` to `value` (an error if they do not fit in a block).
    pub fn new(t: &TableClient<M>, key: &[u8], value: &[u8]) -> Result<Self, RaceError> {
        let units = block::units_for(key.len(), value.len(), t.root.config.block_size)?;
        Ok(Update(Modify::new(t, key, Some((value.to_vec(), units)))))
    }
    /// One step (see the module docs of `ops`).
    pub fn step(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        self.0.step(t, mem)
    }
    /// Where the update is.
    pub fn stage(&self) -> Stage {
        self.0.stage()
    }

    /// The address of the block this update writes (once it took one).
    pub fn block_addr(&self) -> Option<u64> {
        self.0.block.as_ref().map(Region::addr)
    }
}

impl<M: RemoteMemory> Delete<M> {
    /// A deletion of `key`.
    pub fn new(t: &TableClient<M>, key: &[u8]) -> Self {
        Delete(Modify::new(t, key, None))
    }
    /// One step (see the module docs of `ops`).
    pub fn step(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        self.0.step(t, mem)
    }
    /// Where the deletion is.
    pub fn stage(&self) -> Stage {
        self.0.stage()
    }
}

/// A found entry: where, and the write it holds.
#[derive(Clone, Copy, Debug)]
struct Found {
    at: SlotAt,
    nonce: u64,
}

pub(crate) struct Modify<M: RemoteMemory> {
    key: Vec<u8>,
    h: KeyHash,
    /// The new value and its units (`None`: delete).
    new: Option<(Vec<u8>, u8)>,
    block: Option<M::Region>,
    /// The right over the block must be acquired again (it ended before the block was
    /// written: refused by the NIC, or its lease ran out between steps).
    stale_block: bool,
    image: Vec<u8>,
    nonce: u64,
    written: bool,
    /// The new entry (empty for a delete).
    mine: Slot,
    /// The new block may be linked: it is never reused, only consumed.
    linked: bool,
    /// The CAS batch in flight (`ClientOptions::pipeline`).
    swapping: Option<Executing>,
    state: State<M>,
    attempts: u32,
}

enum State<M: RemoteMemory> {
    Block,
    Probe(Probe),
    Check {
        snap: Snapshot,
        next: usize,
        v: Option<Box<Validate>>,
        found: Vec<Found>,
    },
    Swap {
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
    },
    /// The guard READ was refused: is the old block still the write validated?
    Verify {
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
        right: Option<M::Region>,
        /// Verifying READs refused so far (a right that ran out on the way proves nothing).
        refusals: u8,
    },
    Restore {
        subtable: u64,
        old: Found,
    },
    Resolve(Probe, Found, Vec<Found>),
    Clear {
        subtable: u64,
        dups: Vec<Found>,
        frees: Vec<(u64, u64, u64)>,
    },
    Free(Vec<(u64, u64, u64)>),
    Wait(Box<Wait<M>>),
    Done,
}

impl<M: RemoteMemory> std::fmt::Debug for Modify<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Modify")
            .field("key", &self.key)
            .field("delete", &self.new.is_none())
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> Modify<M> {
    fn new(t: &TableClient<M>, key: &[u8], new: Option<(Vec<u8>, u8)>) -> Self {
        let h = KeyHash::of(key, t.root.config.seed);
        let state = if new.is_some() {
            State::Block
        } else {
            State::Probe(Probe::guessing(h, Access::ReadWrite))
        };
        Modify {
            key: key.to_vec(),
            h,
            new,
            block: None,
            stale_block: false,
            image: Vec::new(),
            nonce: 0,
            written: false,
            mine: Slot::EMPTY,
            linked: false,
            swapping: None,
            state,
            attempts: 0,
        }
    }

    fn stage(&self) -> Stage {
        match &self.state {
            State::Block => Stage::Block,
            State::Probe(_) => Stage::Probing,
            State::Check { .. } => Stage::Acquiring,
            State::Swap { .. } | State::Restore { .. } | State::Clear { .. } => Stage::Swapping,
            State::Verify { .. } | State::Resolve(..) => Stage::Resolving,
            State::Free(_) => Stage::Freeing,
            State::Wait(_) => Stage::Waiting,
            State::Done => Stage::Done,
        }
    }

    fn step(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Poll<Result<(), RaceError>> {
        let r = self.advance(t, mem);
        if let Poll::Ready(res) = &r {
            // A block never linked is this client's to use again; a linked one is consumed.
            if let Some(b) = self.block.take() {
                if res.is_ok() || self.linked {
                    t.consume(mem, b, self.mine);
                } else {
                    t.return_spare(b);
                }
            }
            self.state = State::Done;
        }
        r
    }

    fn retry(&mut self, t: &mut TableClient<M>) -> Result<(), RaceError> {
        self.attempts += 1;
        t.stats.retries += 1;
        self.state = State::Probe(Probe::new(self.h));
        if self.attempts > t.opts.max_attempts {
            return Err(RaceError::Contended {
                attempts: self.attempts,
            });
        }
        Ok(())
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
                self.state = State::Probe(Probe::guessing(self.h, Access::ReadWrite));
                Poll::Pending
            }
            State::Probe(p) => {
                let pre = match (&self.block, self.written) {
                    (Some(b), false) => Some((b, &self.image[..])),
                    _ => None,
                };
                match ready!(p.step(t, mem, pre)) {
                    // The block's right ended before the write: acquire it again, write again.
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
                            found: Vec::new(),
                        };
                        Poll::Pending
                    }
                }
            }
            State::Check {
                snap,
                next,
                v,
                found,
            } => {
                if v.is_none() {
                    let cands = snap.candidates(self.h.fingerprint());
                    let at = cands.get(*next).copied();
                    // The block read beside the buckets, if a guess named this entry.
                    match at.and_then(|at| snap.judged(at, &self.key).map(|j| (at, j))) {
                        Some((at, Verdict::Key(KvBlock { nonce, .. }))) => {
                            found.push(Found { at, nonce });
                            *next += 1;
                            return Poll::Pending;
                        }
                        Some(_) => {
                            *next += 1;
                            return Poll::Pending;
                        }
                        None => {}
                    }
                    match at {
                        Some(at) => {
                            *v = Some(Box::new(Validate::new(
                                at,
                                snap.subtable,
                                Access::ReadWrite,
                            )));
                        }
                        None => {
                            let (subtable, found) = (snap.subtable, std::mem::take(found));
                            return self.decide(subtable, found);
                        }
                    }
                }
                let Some(val) = v.as_mut() else {
                    return Poll::Pending;
                };
                match ready!(val.step(t, mem, &self.key, &self.h)) {
                    Verdict::Key(KvBlock { nonce, .. }) => {
                        found.push(Found { at: val.at, nonce });
                        *next += 1;
                        *v = None;
                        Poll::Pending
                    }
                    Verdict::Other => {
                        *next += 1;
                        *v = None;
                        Poll::Pending
                    }
                    Verdict::Gone => done(self.retry(t)),
                }
            }
            State::Swap {
                subtable,
                old,
                dups,
            } => {
                let (subtable, old) = (*subtable, *old);
                try_ready!(t.ensure_subtable(mem, subtable));
                let dups = std::mem::take(dups);
                self.swap(t, mem, subtable, old, dups)
            }
            State::Verify {
                subtable,
                old,
                dups,
                right,
                refusals,
            } => {
                let (subtable, old, dups, right, refusals) = (
                    *subtable,
                    *old,
                    std::mem::take(dups),
                    right.take(),
                    *refusals,
                );
                self.verify(t, mem, subtable, old, dups, right, refusals)
            }
            State::Restore { subtable, old } => {
                let (subtable, old) = (*subtable, *old);
                self.restore(t, mem, subtable, old)
            }
            State::Resolve(p, old, dups) => {
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                let (old, dups) = (*old, std::mem::take(dups));
                self.resolved(t, mem, snap, old, dups)
            }
            State::Clear {
                subtable,
                dups,
                frees,
            } => {
                let (subtable, dups, frees) =
                    (*subtable, std::mem::take(dups), std::mem::take(frees));
                self.clear(t, mem, subtable, dups, frees)
            }
            State::Free(list) => {
                let list = std::mem::take(list);
                self.free(t, mem, list)
            }
            State::Wait(w) => {
                let snap = ready!(w.step(t, mem));
                self.state = State::Check {
                    snap,
                    next: 0,
                    v: None,
                    found: Vec::new(),
                };
                Poll::Pending
            }
            State::Done => Poll::Ready(Err(RaceError::Finished)),
        }
    }

    fn take_block(&mut self, t: &mut TableClient<M>, b: M::Region) {
        if let Some((value, units)) = &self.new {
            self.nonce = t.nonce(b.addr());
            self.image = block::encode(&self.key, value, self.h.primary, self.nonce, *units);
            self.mine = Slot::entry(self.h.fingerprint(), *units, b.addr());
        }
        self.written = false;
        self.block = Some(b);
    }
}
