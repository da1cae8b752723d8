//! The second half of an insert: the CAS of a free slot (the buckets re-read behind it),
//! backing off from a concurrent insert of the key, finding its own entry again after a
//! wait or a split, and resolving a CAS whose outcome is unknown.

use super::{Insert, State};
use crate::memory::{MemError, MemOp, Region, RemoteMemory};
use crate::race::block;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::layout::{BucketHeader, Slot, SlotAt, word};
use crate::race::ops::probe::{Probe, Snapshot};
use crate::race::ops::wait::Wait;
use crate::race::split::Split;
use crate::race::stats::{atomic, bytes, ended, exec};
use std::task::Poll;

impl<M: RemoteMemory> Insert<M> {
    pub(super) fn take_block(&mut self, t: &mut TableClient<M>, b: M::Region) {
        self.nonce = t.nonce(b.addr());
        self.image = block::encode(
            &self.key,
            &self.value,
            self.h.primary,
            self.nonce,
            self.units,
        );
        self.mine = Slot::entry(self.h.fingerprint(), self.units, b.addr());
        self.written = false;
        self.block = Some(b);
    }

    /// Where to go once the key is known absent: a free slot, a wait, or a split.
    pub(super) fn place(&self, t: &TableClient<M>, snap: Snapshot) -> State<M> {
        if let Some(at) = snap.free_slot(t.geo.slots) {
            return State::Swap { snap, at };
        }
        if snap.frozen() {
            return State::Wait(Box::new(Wait::new(self.h)));
        }
        State::Split(Box::new(Split::new(
            t,
            snap.subtable,
            Some(snap.header.depth),
        )))
    }

    /// The CAS of a free slot, with the buckets re-read behind it in the same batch.
    pub(super) fn swap(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        at: SlotAt,
    ) -> Poll<Result<(), RaceError>> {
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
        ];
        let mut out = exec(&mut t.stats, mem, &ops).into_iter();
        let cas = atomic(out.next());
        let reread = (bytes(out.next()), bytes(out.next()), bytes(out.next()));
        match cas {
            Ok(0) => {
                self.linked = Some((subtable, at));
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
                            snap: Snapshot {
                                subtable,
                                header,
                                slots,
                                guessed: None,
                            },
                            v: None,
                        }
                    }
                    _ => State::Relocate(Probe::new(self.h)),
                };
            }
            Ok(v) if Slot(v).is_frozen() => self.state = State::Wait(Box::new(Wait::new(self.h))),
            Ok(_) => {
                if let Err(e) = self.retry(t) {
                    return Poll::Ready(Err(e));
                }
                self.state = State::Probe(Probe::new(self.h));
            }
            Err(MemError::OutcomeUnknown) => {
                t.stats.unknown_outcomes += 1;
                self.state = State::Resolve(Probe::new(self.h), subtable, at);
            }
            Err(e) if ended(&e) => {
                t.drop_subtable(mem, subtable);
                self.state = State::Probe(Probe::new(self.h));
            }
            Err(e) => return Poll::Ready(Err(e.into())),
        }
        Poll::Pending
    }

    /// Clears this insert's own slot after seeing another entry of the key, or (`claimed`
    /// false) an entry it linked in a subtable that no longer claims the key. A split that
    /// froze such an unclaimed entry clears it itself (its classification drops entries
    /// their subtable does not claim): the insert gives the block up then (left to that
    /// split, never freed by this client while a slot may still name it) instead of
    /// waiting on a subtable that is not the key's.
    pub(super) fn back_off(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        subtable: u64,
        at: SlotAt,
        claimed: bool,
    ) -> Poll<Result<(), RaceError>> {
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
            Ok(v) if Slot(v).thawed() == self.mine && claimed => {
                self.state = State::Wait(Box::new(Wait::new(self.h)));
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
    ///
    /// A split of the subtable it was linked in keeps it at the same position in the half
    /// that claims the key (T' gets a copy). If that half does not hold it there and the key's
    /// subtable is another one now, the entry may still sit in the old subtable, unclaimed:
    /// the CAS landed after the split had finished, so no split will clear it. It is taken
    /// back out (`BackOff` on the old subtable) before the insert starts over; otherwise it
    /// would stay behind for good, its block linked twice once the insert succeeds elsewhere.
    pub(super) fn relocated(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        snap: Snapshot,
    ) -> Poll<Result<(), RaceError>> {
        let here = self
            .linked
            .and_then(|(_, at)| snap.at(at.pos))
            .is_some_and(|s| s.slot.thawed() == self.mine);
        if here {
            self.state = State::Dedup { snap, v: None };
            return Poll::Pending;
        }
        if let Some((subtable, at)) = self.linked.filter(|(s, _)| *s != snap.subtable) {
            self.state = State::BackOff {
                subtable,
                at,
                claimed: false,
            };
            return Poll::Pending;
        }
        match self.lose_block(t, mem) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    pub(super) fn succeed(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<(), RaceError>> {
        if let Some(b) = self.block.take() {
            t.consume(mem, b, self.mine);
        }
        self.state = State::Done;
        Poll::Ready(Ok(()))
    }

    /// After an unknown outcome, with the buckets read again: is the entry in the slot?
    /// (`subtable`: where the CAS was tried. If the key's subtable is another one now, the
    /// entry may have landed there, unclaimed: `relocated` takes it back out.)
    pub(super) fn resolved(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        snap: Snapshot,
        subtable: u64,
        at: SlotAt,
    ) -> Poll<Result<(), RaceError>> {
        let now = snap.at(at.pos).map(|s| s.slot).unwrap_or_default();
        if now.thawed() == self.mine || subtable != snap.subtable {
            self.linked = Some((subtable, at));
            return self.relocated(t, mem, snap);
        }
        self.linked = None;
        self.state = if now == Slot::EMPTY {
            // It did not take effect: the slot is still free; try it again.
            State::Swap { snap, at }
        } else if now.is_frozen() {
            State::Wait(Box::new(Wait::new(self.h)))
        } else {
            // Someone else's now: ours never landed, or landed and was replaced (then
            // whoever replaced it frees the block). Free it either way; it is in no slot.
            if let Some(b) = self.block.take() {
                t.free_block(mem, b, self.nonce);
            }
            self.written = false;
            State::Block
        };
        Poll::Pending
    }
}

/// Entries with the key's fingerprint not known to be other keys' (nor this insert's own).
pub(super) fn candidates(h: &KeyHash, mine: Slot, others: &[Slot], snap: &Snapshot) -> Vec<SlotAt> {
    snap.candidates(h.fingerprint())
        .into_iter()
        .filter(|s| s.slot.thawed() != mine && !others.contains(&s.slot.thawed()))
        .collect()
}
