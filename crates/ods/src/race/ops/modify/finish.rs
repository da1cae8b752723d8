//! The second half of an update or a delete: the CAS (with its guard READ), and what follows
//! it — verifying a refused guard, undoing a CAS that hit a reused address, resolving an
//! unknown outcome by reading, clearing other entries of the key, freeing the old blocks.

use super::{Found, Modify, State};
use crate::memory::{MemError, MemOp, MemOut, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::guesses::Guess;
use crate::race::layout::{BLOCK_HEADER, Slot, SlotAt};
use crate::race::ops::MAX_REFUSALS;
use crate::race::ops::probe::{Probe, Snapshot};
use crate::race::ops::validate::take_right;
use crate::race::ops::wait::Wait;
use crate::race::stats::{atomic, bytes, ended, exec, exec_or_start, poll_started};
use patronus_core::proto::messages::{Access, Mode};
use std::task::Poll;

impl<M: RemoteMemory> Modify<M> {
    /// The key's entries are known: change the first, clear the rest.
    pub(super) fn decide(
        &mut self,
        subtable: u64,
        mut found: Vec<Found>,
    ) -> Poll<Result<(), RaceError>> {
        if found.is_empty() {
            return Poll::Ready(Err(RaceError::NotFound));
        }
        let old = found.remove(0);
        if old.at.slot.is_frozen() || found.iter().any(|d| d.at.slot.is_frozen()) {
            self.state = State::Wait(Box::new(Wait::new(self.h)));
            return Poll::Pending;
        }
        self.state = State::Swap {
            subtable,
            old,
            dups: found,
        };
        Poll::Pending
    }

    /// The CAS of the key's slot, the guard READ of the old block behind it.
    pub(super) fn swap(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
    ) -> Poll<Result<(), RaceError>> {
        let s = old.at.slot;
        if self.swapping.is_some() {
            return match poll_started(&mut t.stats, mem, &mut self.swapping) {
                Some(Poll::Ready(out)) => self.swapped(t, mem, subtable, old, dups, out),
                _ => self.keep_swapping(subtable, old, dups),
            };
        }
        let Some(st) = t.subtables.get(&subtable) else {
            return self.keep_swapping(subtable, old, dups);
        };
        let mut ops = vec![MemOp::Cas {
            on: st,
            offset: old.at.offset,
            compare: s.0,
            swap: self.mine.0,
        }];
        if let Some(b) = t.blocks.get(s, Access::ReadWrite) {
            ops.push(MemOp::Read {
                on: b,
                offset: 0,
                len: 8,
            });
        }
        let pipeline = t.opts.pipeline;
        match exec_or_start(&mut t.stats, mem, pipeline, &mut self.swapping, &ops) {
            Poll::Ready(out) => self.swapped(t, mem, subtable, old, dups, out),
            Poll::Pending => self.keep_swapping(subtable, old, dups),
        }
    }

    /// The swap goes on at the next step (its CAS batch in flight, or its subtable's right
    /// not yet usable): back into its state with what it needs.
    fn keep_swapping(
        &mut self,
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
    ) -> Poll<Result<(), RaceError>> {
        self.state = State::Swap {
            subtable,
            old,
            dups,
        };
        Poll::Pending
    }

    /// What the CAS batch found: linked (free the old block, or verify it first if the guard
    /// READ was refused), frozen (wait), lost (retry) or unknown (resolve by reading).
    fn swapped(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
        out: Vec<Result<MemOut, MemError>>,
    ) -> Poll<Result<(), RaceError>> {
        let s = old.at.slot;
        let mut out = out.into_iter();
        let cas = atomic(out.next());
        let guard = out.next().map(|r| r.map(|_| ()));
        match cas {
            Ok(v) if v == s.0 => {
                self.linked = true;
                self.note_entry(t, subtable, old);
                self.state = match guard {
                    Some(Err(e)) if ended(&e) || e == MemError::NotFound => State::Verify {
                        subtable,
                        old,
                        dups,
                        right: None,
                        refusals: 0,
                    },
                    _ => {
                        let frees = vec![(s.ptr(), s.len(), old.nonce)];
                        State::Clear {
                            subtable,
                            dups,
                            frees,
                        }
                    }
                };
                Poll::Pending
            }
            Ok(v) if Slot(v).thawed() == s.thawed() => {
                self.state = State::Wait(Box::new(Wait::new(self.h)));
                Poll::Pending
            }
            Ok(_) => done(self.retry(t)),
            Err(MemError::OutcomeUnknown) => {
                t.stats.unknown_outcomes += 1;
                self.state = State::Resolve(Probe::new(self.h), old, dups);
                Poll::Pending
            }
            Err(e) if ended(&e) => {
                t.drop_subtable(mem, subtable);
                done(self.retry(t))
            }
            Err(e) => Poll::Ready(Err(e.into())),
        }
    }

    /// The guard READ was refused: reads the old block under a new right; if it is still the
    /// write validated, the CAS was right (free it); if not, undo the CAS. Only the node's
    /// `NotFound` or a READ that shows another write decides "not the same": a refused READ
    /// (the new right's lease ran out on the way) is tried again with a lease twice as long
    /// (see `ops::validate`), and undoing a CAS that was right would resurrect the old value.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn verify(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        old: Found,
        dups: Vec<Found>,
        right: Option<M::Region>,
        refusals: u8,
    ) -> Poll<Result<(), RaceError>> {
        let s = old.at.slot;
        let Some(r) = right else {
            t.stats.acquires += 1;
            let lease = t.opts.read_lease * (1u32 << refusals.min(11));
            self.state = match mem.acquire(s.ptr(), s.len(), lease, Access::ReadWrite, Mode::Shared)
            {
                Ok(r) => State::Verify {
                    subtable,
                    old,
                    dups,
                    right: Some(r),
                    refusals,
                },
                Err(MemError::NotFound | MemError::Invalid(_)) => State::Restore { subtable, old },
                Err(e) => return Poll::Ready(Err(e.into())),
            };
            return Poll::Pending;
        };
        let ops = [MemOp::Read {
            on: &r,
            offset: 0,
            len: BLOCK_HEADER as u32,
        }];
        let same = match bytes(exec(&mut t.stats, mem, &ops).pop()) {
            Ok(h) => block::nonce_of(&h) == old.nonce,
            Err(e) if ended(&e) || e == MemError::NotFound => {
                // Refused: nothing learnt. Ask again, for longer.
                t.give_up(mem, r);
                if refusals >= MAX_REFUSALS {
                    return Poll::Ready(Err(RaceError::LeaseTooShort {
                        refusals: u32::from(refusals) + 1,
                    }));
                }
                self.state = State::Verify {
                    subtable,
                    old,
                    dups,
                    right: None,
                    refusals: refusals + 1,
                };
                return Poll::Pending;
            }
            Err(e) => return Poll::Ready(Err(e.into())),
        };
        if same {
            // The write validated, not reused: the CAS was right. Free it.
            t.free_block(mem, r, old.nonce);
            self.state = State::Clear {
                subtable,
                dups,
                frees: Vec::new(),
            };
        } else {
            t.give_up(mem, r);
            self.state = State::Restore { subtable, old };
        }
        Poll::Pending
    }

    /// The CAS hit a reused address: put back what was there and start over. If someone
    /// changed the slot meanwhile, it is theirs now, and so is the new block (they free it):
    /// take another.
    pub(super) fn restore(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        old: Found,
    ) -> Poll<Result<(), RaceError>> {
        match t.ensure_subtable(mem, subtable) {
            Ok(true) => {}
            Ok(false) => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
        let Some(st) = t.subtables.get(&subtable) else {
            return Poll::Pending;
        };
        let ops = [MemOp::Cas {
            on: st,
            offset: old.at.offset,
            compare: self.mine.0,
            swap: old.at.slot.thawed().0,
        }];
        let back = atomic(exec(&mut t.stats, mem, &ops).pop());
        if back.is_ok_and(|v| v == self.mine.0) {
            self.linked = false;
        } else if let Some(b) = self.block.take() {
            t.consume(mem, b, self.mine);
            self.linked = false;
        }
        let r = self.retry(t);
        if self.new.is_some() && self.block.is_none() {
            self.state = State::Block;
        }
        done(r)
    }

    /// After an unknown outcome, with the buckets read again.
    pub(super) fn resolved(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        snap: Snapshot,
        old: Found,
        dups: Vec<Found>,
    ) -> Poll<Result<(), RaceError>> {
        let now = snap.at(old.at.pos).map(|s| s.slot).unwrap_or_default();
        let subtable = snap.subtable;
        if now.thawed() == old.at.slot.thawed() {
            // Not applied: do it again, or wait for the split that froze it.
            self.state = if now.is_frozen() {
                State::Wait(Box::new(Wait::new(self.h)))
            } else {
                State::Swap {
                    subtable,
                    old,
                    dups,
                }
            };
            return Poll::Pending;
        }
        // Applied (the slot holds the new entry), or overtaken by another client's change
        // (then this operation counts as done just before it). Either way the old block is
        // unlinked: free it if it is still that write; a new block that is not in the slot is
        // in none.
        let frees = vec![(old.at.slot.ptr(), old.at.slot.len(), old.nonce)];
        if now.thawed() == self.mine {
            self.linked = true;
            self.note_entry(t, subtable, old);
        } else if let Some(b) = self.block.take() {
            t.free_block(mem, b, self.nonce);
        }
        self.state = State::Clear {
            subtable,
            dups,
            frees,
        };
        Poll::Pending
    }

    /// The key's entry is now this operation's (`old`'s slot holds the new block's entry, or
    /// none after a delete): where the next operation on the key guesses it.
    fn note_entry(&self, t: &mut TableClient<M>, subtable: u64, old: Found) {
        if self.mine.is_empty() {
            t.guesses.forget(self.h.primary);
        } else {
            let at = SlotAt {
                slot: self.mine,
                ..old.at
            };
            t.guesses.remember(self.h.primary, Guess { subtable, at });
        }
    }

    /// Clears the key's other entries (left by concurrent inserts), then frees.
    pub(super) fn clear(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        dups: Vec<Found>,
        mut frees: Vec<(u64, u64, u64)>,
    ) -> Poll<Result<(), RaceError>> {
        if dups.is_empty() {
            self.state = State::Free(frees);
            return Poll::Pending;
        }
        let ready = t.ensure_subtable(mem, subtable);
        let (Ok(true), Some(st)) = (&ready, t.subtables.get(&subtable)) else {
            self.state = State::Clear {
                subtable,
                dups,
                frees,
            };
            return match ready {
                Err(e) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            };
        };
        let ops: Vec<_> = dups
            .iter()
            .map(|d| MemOp::Cas {
                on: st,
                offset: d.at.offset,
                compare: d.at.slot.0,
                swap: 0,
            })
            .collect();
        for (d, r) in dups.iter().zip(exec(&mut t.stats, mem, &ops)) {
            if atomic(Some(r)).is_ok_and(|v| v == d.at.slot.0) {
                frees.push((d.at.slot.ptr(), d.at.slot.len(), d.nonce));
            }
        }
        self.state = State::Free(frees);
        Poll::Pending
    }

    /// Frees one unlinked block per step (through the right validated, or a new one).
    pub(super) fn free(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        mut list: Vec<(u64, u64, u64)>,
    ) -> Poll<Result<(), RaceError>> {
        let Some((addr, len, nonce)) = list.pop() else {
            self.state = State::Done;
            return Poll::Ready(Ok(()));
        };
        match take_right(t, addr) {
            Some(r) => t.retire(mem, r, nonce),
            None => {
                t.stats.acquires += 1;
                let lease = t.opts.read_lease;
                if let Ok(r) = mem.acquire(addr, len, lease, Access::ReadWrite, Mode::Shared) {
                    t.keep_block_right(mem, addr, r, Access::ReadWrite, Slot::EMPTY);
                    list.push((addr, len, nonce));
                } // else: freed already
            }
        }
        self.state = State::Free(list);
        Poll::Pending
    }
}

pub(super) fn done(r: Result<(), RaceError>) -> Poll<Result<(), RaceError>> {
    match r {
        Ok(()) => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    }
}
