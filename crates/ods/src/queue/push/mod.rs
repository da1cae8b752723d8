//! [`PushOp`]: a push as a state machine, one batch or one control request per step.
//!
//! ```text
//! Locate ─► Claim ─(index < N)─► Fill ─(published)─► done
//!   ▲  (gone) │  ▲ (skipped)      │ unknown ─► Recheck ─► done | Fill | Claim
//!   └─────────┤  └────────────────┘
//!             ├─(full, next linked)─► AdvanceTail ─► Claim(next)
//!             └─(full, no next)─► Prefill(spare) ─► Link ─(won)─► AdvanceTail ─► done
//!                  │ no spare held        ▲          └─(lost)─► AdvanceTail ─► Claim(winner's)
//!                  └─► Spare(allocate) ─► Claim (read next again)
//! ```
//!
//! The claim is an FAA on the segment's tail; the fill is one batch, a WRITE of the item then
//! a CAS of the entry's state word `Empty → Filled(token)`. Both go through one permission on
//! one queue pair, so the NIC applies them in order: a consumer that reads `Filled` (and then
//! the item, in the same order) reads the whole item. The CAS, not a plain WRITE, publishes,
//! so a consumer's skip (`Empty → Skipped`) and the publish exclude each other.
//!
//! A full segment (FAA ≥ N) is followed by its `next`; with none yet, the producer writes its
//! item into entry 0 of a spare segment (header: seq, queue, tail = 1), then links it with a
//! CAS `0 → ptr` on the full segment's `next` — the item is in when the link is.

mod link;

use super::layout::{SegPtr, Slot, Token, header, root};
use super::permits::{Fault, Reach, fault, word};
use super::{Queue, QueueError, QueueStats};
use crate::memory::{MemOp, RemoteMemory};
use rnic::Timestamp;
use std::task::Poll;

/// Where a push is (see [`PushOp::phase`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushPhase {
    /// Reading the root for the tail segment.
    Locating,
    /// Claiming a slot (FAA), or following a full segment's successor.
    Claiming,
    /// Holding a claimed slot it has not published yet.
    Filling,
    /// Reading back a publish or link whose outcome was unknown.
    Checking,
    /// Preparing and linking a new segment.
    Linking,
    /// Finished.
    Done,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Push {
    Locate,
    Claim {
        seg: SegPtr,
    },
    Fill {
        seg: SegPtr,
        index: u32,
        claimed_at: Timestamp,
    },
    Recheck {
        seg: SegPtr,
        index: u32,
        claimed_at: Timestamp,
    },
    /// Get a spare (allocate one), then claim again: see `link`.
    Spare {
        seg: SegPtr,
    },
    Prefill {
        seg: SegPtr,
    },
    Link {
        seg: SegPtr,
        new: SegPtr,
    },
    Relink {
        seg: SegPtr,
        new: SegPtr,
    },
    /// CAS the root's tail `from → to` (lazily: failure is fine), then claim in `to` or finish.
    AdvanceTail {
        from: SegPtr,
        to: SegPtr,
        then_claim: bool,
    },
    Done,
}

/// A push under way: a state machine that takes at most one batch or one control request per
/// [`step`](PushOp::step) (Locate, Claim, Fill, linking a new segment when the last is full;
/// `docs/data-structures.md`, "Push").
#[derive(Debug)]
pub struct PushOp {
    item: Vec<u8>,
    token: Token,
    state: Push,
    cost: QueueStats,
}

impl PushOp {
    /// A push of `item` (exactly the queue's item size) on `q`.
    pub fn new<M: RemoteMemory>(q: &mut Queue<M>, item: &[u8]) -> Result<PushOp, QueueError> {
        if item.len() != q.shape.item_size as usize {
            return Err(QueueError::ItemSize {
                expected: q.shape.item_size,
                got: item.len(),
            });
        }
        let state = match q.tail_hint {
            Some(seg) => Push::Claim { seg },
            None => Push::Locate,
        };
        Ok(PushOp {
            item: item.to_vec(),
            token: q.token(),
            state,
            cost: QueueStats::default(),
        })
    }

    /// Where the push is.
    pub fn phase(&self) -> PushPhase {
        match self.state {
            Push::Locate => PushPhase::Locating,
            Push::Claim { .. } | Push::AdvanceTail { .. } => PushPhase::Claiming,
            Push::Fill { .. } => PushPhase::Filling,
            Push::Recheck { .. } | Push::Relink { .. } => PushPhase::Checking,
            Push::Spare { .. } | Push::Prefill { .. } | Push::Link { .. } => PushPhase::Linking,
            Push::Done => PushPhase::Done,
        }
    }

    /// What the push's steps did so far.
    pub fn cost(&self) -> QueueStats {
        self.cost
    }

    /// One step: at most one batch or one control request. `Ready(())` once the item is in
    /// the queue; an error ends the push (the item is not in the queue, unless the error is
    /// [`QueueError::PushOutcomeUnknown`]).
    pub fn step<M: RemoteMemory>(&mut self, q: &mut Queue<M>) -> Result<Poll<()>, QueueError> {
        if matches!(self.state, Push::Done) {
            return Err(QueueError::Finished);
        }
        let before = q.stats;
        q.stats.steps += 1;
        let r = self.advance(q);
        match r {
            Ok(Poll::Ready(())) => {
                q.stats.pushes += 1;
                self.state = Push::Done;
            }
            Err(_) => self.state = Push::Done,
            Ok(Poll::Pending) => {}
        }
        if matches!(self.state, Push::Done) {
            // A spare it got but did not link (a successor appeared meanwhile) serves the
            // handle's next new segment.
            q.disown_spare(self.token);
        }
        self.cost.add(&q.stats.since(&before));
        r
    }

    fn advance<M: RemoteMemory>(&mut self, q: &mut Queue<M>) -> Result<Poll<()>, QueueError> {
        match self.state {
            Push::Locate => self.locate(q),
            Push::Claim { seg } => self.claim(q, seg),
            Push::Fill {
                seg,
                index,
                claimed_at,
            } => self.fill(q, seg, index, claimed_at),
            Push::Recheck {
                seg,
                index,
                claimed_at,
            } => self.recheck(q, seg, index, claimed_at),
            Push::Spare { seg } => self.spare(q, seg),
            Push::Prefill { seg } => self.prefill(q, seg),
            Push::Link { seg, new } => self.link(q, seg, new),
            Push::Relink { seg, new } => self.relink(q, seg, new),
            Push::AdvanceTail {
                from,
                to,
                then_claim,
            } => self.advance_tail(q, from, to, then_claim),
            Push::Done => Err(QueueError::Finished),
        }
    }

    /// Reads the root's head and tail; the later of the two is where claiming starts (the
    /// tail may lag behind the head, even point at a freed segment).
    fn locate<M: RemoteMemory>(&mut self, q: &mut Queue<M>) -> Result<Poll<()>, QueueError> {
        ready!(q.meta_ready());
        let Some(out) = q.on_meta(|mem, on| {
            mem.execute(&[MemOp::Read {
                on,
                offset: root::HEAD,
                len: 16,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        let Some(r) = out.first() else {
            return Ok(Poll::Pending);
        };
        match super::permits::bytes(r) {
            Ok(b) => {
                let head = SegPtr::unpack(super::layout::word_at(b, 0), q.root);
                let tail = SegPtr::unpack(super::layout::word_at(b, 8), q.root);
                let seg = match (head, tail) {
                    (Some(h), Some(t)) if t.after(h) => t,
                    (Some(h), _) => h,
                    (None, _) => return Err(QueueError::Corrupt("the root has no head")),
                };
                q.tail_hint = Some(seg);
                self.state = Push::Claim { seg };
            }
            Err(e) => {
                fault(&e)?;
            }
        }
        Ok(Poll::Pending)
    }

    /// Gone segment: start again from the root.
    pub(super) fn relocate<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
    ) -> Result<Poll<()>, QueueError> {
        q.tail_hint = None;
        self.state = Push::Locate;
        Ok(Poll::Pending)
    }

    fn claim<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
    ) -> Result<Poll<()>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            return self.relocate(q);
        }
        let claimed_at = q.mem.now();
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[
                MemOp::Faa {
                    on,
                    offset: header::TAIL,
                    add: 1,
                },
                MemOp::Read {
                    on,
                    offset: header::NEXT,
                    len: 8,
                },
            ])
        }) else {
            return Ok(Poll::Pending);
        };
        let (Some(faa), Some(next)) = (out.first(), out.get(1)) else {
            return Ok(Poll::Pending);
        };
        match word(faa) {
            Ok(i) if i < u64::from(q.shape.entries) => {
                self.state = Push::Fill {
                    seg,
                    index: i as u32,
                    claimed_at,
                };
            }
            // Full: follow the successor, or make one. (A failed read: claim again; FAAs past
            // N use nothing up.)
            Ok(_) => match word(next) {
                Ok(w) => {
                    self.state = match SegPtr::unpack(w, q.root) {
                        Some(to) => Push::AdvanceTail {
                            from: seg,
                            to,
                            then_claim: true,
                        },
                        // A spare held before this read may be prefilled; else get one
                        // and read again (see `link`).
                        None if q.reserve_spare(self.token) => Push::Prefill { seg },
                        None => Push::Spare { seg },
                    }
                }
                Err(e) => {
                    fault(&e)?;
                }
            },
            // Refused: claim again (with a new permission, or from the root if the segment is
            // gone). Unknown: the FAA may have used an index up — a hole, skipped like a
            // crashed producer's claim — so claim again; never repeat it to find out.
            Err(e) => {
                fault(&e)?;
            }
        }
        Ok(Poll::Pending)
    }

    fn fill<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        index: u32,
        claimed_at: Timestamp,
    ) -> Result<Poll<()>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            // Freed: every slot was final, so this one was skipped (nothing of ours landed).
            q.stats.claims_lost += 1;
            return self.relocate(q);
        }
        let filled = Slot::Filled(self.token).word();
        let (state_at, item_at) = (q.shape.state(index), q.shape.item(index));
        let item = &self.item;
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[
                MemOp::Write {
                    on,
                    offset: item_at,
                    data: item,
                },
                MemOp::Cas {
                    on,
                    offset: state_at,
                    compare: Slot::Empty.word(),
                    swap: filled,
                },
            ])
        }) else {
            return Ok(Poll::Pending);
        };
        let (Some(write), Some(cas)) = (out.first(), out.get(1)) else {
            return Ok(Poll::Pending);
        };
        match word(cas) {
            // The CAS ran after the WRITE on one queue pair; a WRITE that failed while the CAS
            // went through (same permission) would have published a torn item.
            Ok(old) if write.is_err() && old == Slot::Empty.word() => {
                return Err(QueueError::Corrupt("published an item whose write failed"));
            }
            Ok(old) if old == Slot::Empty.word() || old == filled => return Ok(Poll::Ready(())),
            Ok(old) => match Slot::from_word(old) {
                Some(Slot::Skipped(_)) => {
                    q.stats.claims_lost += 1;
                    self.state = Push::Claim { seg };
                }
                _ => return Err(QueueError::Corrupt("a claimed slot holds another's item")),
            },
            Err(e) => {
                if fault(&e)? == Fault::Unknown {
                    self.state = Push::Recheck {
                        seg,
                        index,
                        claimed_at,
                    };
                }
            }
        }
        Ok(Poll::Pending)
    }

    /// Reads back the state word after a publish with an unknown outcome.
    fn recheck<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        index: u32,
        claimed_at: Timestamp,
    ) -> Result<Poll<()>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            // Freed, so the slot was final: skipped (our CAS did not land) or taken (it did).
            // No consumer skips a slot before `skip_after` from its claim; with half of that
            // not passed on our clock, it was taken.
            return if q.mem.now().since(claimed_at) < q.opts.skip_after / 2 {
                Ok(Poll::Ready(()))
            } else {
                Err(QueueError::PushOutcomeUnknown)
            };
        }
        let at = q.shape.state(index);
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[MemOp::Read {
                on,
                offset: at,
                len: 8,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        let Some(r) = out.first() else {
            return Ok(Poll::Pending);
        };
        match word(r).map(Slot::from_word) {
            Ok(Some(Slot::Empty)) => {
                self.state = Push::Fill {
                    seg,
                    index,
                    claimed_at,
                }
            }
            Ok(Some(Slot::Filled(t))) if t == self.token => return Ok(Poll::Ready(())),
            // Only this push ever fills this slot: a taken item is ours.
            Ok(Some(Slot::Taken(_))) => return Ok(Poll::Ready(())),
            Ok(Some(Slot::Skipped(_))) => {
                q.stats.claims_lost += 1;
                self.state = Push::Claim { seg };
            }
            Ok(_) => return Err(QueueError::Corrupt("a claimed slot holds another's item")),
            Err(e) => {
                fault(&e)?;
            }
        }
        Ok(Poll::Pending)
    }
}
