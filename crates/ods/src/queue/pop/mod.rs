//! [`PopOp`]: a pop as a state machine, one batch or one control request per step.
//!
//! ```text
//! Locate ─► Look ─(head slot filled)─► Claim ─(won)─► done(item)
//!   ▲ (gone)  │ ▲ ▲                      │ lost ─► Look(next slot)   │ unknown ─► Recheck
//!   └─────────┤ │ └─(final: help the head on; claimed but empty: wait, then skip)
//!             ├─(head ≥ tail, or drained with no next)─► done(None)
//!             └─(drained, next linked)─► Retire ─(won)─► Free ─► Look(next)
//!                                                 └─(lost)─► Look(the root's head)
//! ```
//!
//! `Look` is one batch on the head segment — READ header, READ the state word of the guessed
//! head slot, READ its item — in that order on one permission, so if the state read `Filled`
//! the item read after it is complete (its producer wrote it before its publishing CAS). The
//! claim is then a CAS of the state word from that exact `Filled` word to `Taken(token)`,
//! followed in the same batch by a CAS of the segment's head from the slot to the next (safe
//! either way: if the claim lost, another consumer took the slot, which is then final too).
//!
//! A slot claimed but still empty (`index < tail`) is waited on; once this client has seen it
//! empty for [`QueueOptions::skip_after`](super::QueueOptions::skip_after), it CASes it
//! `Empty → Skipped` and re-reads (the producer may have won; the head moves only past a
//! final slot). A drained segment (head = N) with a successor is retired: a CAS moves the
//! root's head to the successor, and the client whose CAS did so frees the segment.

mod reclaim;
mod take;

use super::handle::Stall;
use super::layout::{Header, SegPtr, Slot, Token, header, root};
use super::permits::{Reach, bytes, fault, word};
use super::{Queue, QueueError, QueueStats};
use crate::memory::{MemOp, RemoteMemory};
use std::task::Poll;

/// Where a pop is (see [`PopOp::phase`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopPhase {
    /// Reading the root for the head segment.
    Locating,
    /// Reading the head segment.
    Looking,
    /// Waiting on a claimed slot its producer has not filled.
    Waiting,
    /// Has read a filled slot and is about to take it.
    Claiming,
    /// Reading back a claim or retirement whose outcome was unknown.
    Checking,
    /// Moving the root's head past a drained segment, or freeing it.
    Reclaiming,
    /// Finished.
    Done,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Pop {
    Locate,
    /// Reads the head segment at `at`, after the prelude.
    Look {
        seg: SegPtr,
        at: u32,
        prelude: Prelude,
    },
    Claim {
        seg: SegPtr,
        index: u32,
        seen: u64,
    },
    Recheck {
        seg: SegPtr,
        index: u32,
        seen: u64,
    },
    Retire {
        seg: SegPtr,
        next: SegPtr,
    },
    RetireCheck {
        seg: SegPtr,
        next: SegPtr,
    },
    Free {
        seg: SegPtr,
        next: SegPtr,
    },
    Done,
}

/// A CAS sent ahead of a look's reads, in its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prelude {
    None,
    /// Moves the head from this (final) slot to the next.
    Help(u32),
    /// Skips this slot: `Empty → Skipped`.
    Skip(u32),
}

/// A pop under way: a state machine that takes at most one batch or one control request per
/// [`step`](PopOp::step) (Look, Claim, waiting on or skipping a claimed empty slot, retiring a
/// drained segment; `docs/data-structures.md`, "Pop").
#[derive(Debug)]
pub struct PopOp {
    token: Token,
    state: Pop,
    /// The last look found the head slot claimed but empty.
    waiting: bool,
    /// The item read with its `Filled` state, while it is being claimed.
    item: Vec<u8>,
    cost: QueueStats,
}

impl PopOp {
    /// A pop on `q`.
    pub fn new<M: RemoteMemory>(q: &mut Queue<M>) -> PopOp {
        let state = match q.head_hint {
            Some((seg, at)) => Pop::Look {
                seg,
                at,
                prelude: Prelude::None,
            },
            None => Pop::Locate,
        };
        PopOp {
            token: q.token(),
            state,
            waiting: false,
            item: Vec::new(),
            cost: QueueStats::default(),
        }
    }

    /// Where the pop is.
    pub fn phase(&self) -> PopPhase {
        match self.state {
            Pop::Locate => PopPhase::Locating,
            Pop::Look { .. } if self.waiting => PopPhase::Waiting,
            Pop::Look { .. } => PopPhase::Looking,
            Pop::Claim { .. } => PopPhase::Claiming,
            Pop::Recheck { .. } | Pop::RetireCheck { .. } => PopPhase::Checking,
            Pop::Retire { .. } | Pop::Free { .. } => PopPhase::Reclaiming,
            Pop::Done => PopPhase::Done,
        }
    }

    /// What the pop's steps did so far.
    pub fn cost(&self) -> QueueStats {
        self.cost
    }

    /// One step: at most one batch or one control request. `Ready(Some(item))` once an item
    /// is taken, `Ready(None)` if the queue was empty.
    pub fn step<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        if matches!(self.state, Pop::Done) {
            return Err(QueueError::Finished);
        }
        let before = q.stats;
        q.stats.steps += 1;
        let r = self.advance(q);
        match &r {
            Ok(Poll::Ready(item)) => {
                if item.is_some() {
                    q.stats.pops += 1;
                } else {
                    q.stats.empty_pops += 1;
                }
                self.state = Pop::Done;
            }
            Err(_) => self.state = Pop::Done,
            Ok(Poll::Pending) => {}
        }
        self.cost.add(&q.stats.since(&before));
        r
    }

    fn advance<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        match self.state {
            Pop::Locate => self.locate(q),
            Pop::Look { seg, at, prelude } => self.look(q, seg, at, prelude),
            Pop::Claim { seg, index, seen } => self.claim(q, seg, index, seen),
            Pop::Recheck { seg, index, seen } => self.recheck(q, seg, index, seen),
            Pop::Retire { seg, next } => self.retire(q, seg, next),
            Pop::RetireCheck { seg, next } => self.retire_check(q, seg, next),
            Pop::Free { seg, next } => self.free(q, seg, next),
            Pop::Done => Err(QueueError::Finished),
        }
    }

    pub(super) fn look_at<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        at: u32,
        prelude: Prelude,
    ) {
        q.head_hint = Some((seg, at));
        self.state = Pop::Look { seg, at, prelude };
    }

    /// Gone segment: start again from the root.
    pub(super) fn relocate<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        q.head_hint = None;
        self.state = Pop::Locate;
        Ok(Poll::Pending)
    }

    fn locate<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        ready!(q.meta_ready());
        let Some(out) = q.on_meta(|mem, on| {
            mem.execute(&[MemOp::Read {
                on,
                offset: root::HEAD,
                len: 8,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        match out.first().map(word) {
            Some(Ok(w)) => {
                let seg =
                    SegPtr::unpack(w, q.root).ok_or(QueueError::Corrupt("the root has no head"))?;
                self.look_at(q, seg, 0, Prelude::None);
            }
            Some(Err(e)) => {
                fault(&e)?;
            }
            None => {}
        }
        Ok(Poll::Pending)
    }

    fn look<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        at: u32,
        prelude: Prelude,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            return self.relocate(q);
        }
        let shape = q.shape;
        let read_slot = at < shape.entries;
        let skipped = Slot::Skipped(self.token).word();
        let Some(out) = q.on_seg(seg, |mem, on| {
            let mut ops = Vec::with_capacity(4);
            match prelude {
                Prelude::None => {}
                Prelude::Help(i) => ops.push(MemOp::Cas {
                    on,
                    offset: header::HEAD,
                    compare: u64::from(i),
                    swap: u64::from(i) + 1,
                }),
                Prelude::Skip(i) => ops.push(MemOp::Cas {
                    on,
                    offset: shape.state(i),
                    compare: Slot::Empty.word(),
                    swap: skipped,
                }),
            }
            ops.push(MemOp::Read {
                on,
                offset: 0,
                len: header::READ_LEN,
            });
            if read_slot {
                ops.push(MemOp::Read {
                    on,
                    offset: shape.state(at),
                    len: 8,
                });
                ops.push(MemOp::Read {
                    on,
                    offset: shape.item(at),
                    len: shape.item_size,
                });
            }
            mem.execute(&ops)
        }) else {
            return Ok(Poll::Pending);
        };
        let k = usize::from(prelude != Prelude::None);
        if let (Prelude::Skip(_), Some(Ok(prev))) = (prelude, out.first().map(word)) {
            if prev == Slot::Empty.word() {
                q.stats.slots_skipped += 1;
                self.state = Pop::Look {
                    seg,
                    at,
                    prelude: Prelude::None,
                };
            }
        }
        // A failure anywhere: look again (the prelude's CASes are harmless to repeat).
        if let Some(e) = out.iter().find_map(|r| r.as_ref().err()) {
            fault(e)?;
            return Ok(Poll::Pending);
        }
        let h = out.get(k).map(bytes).transpose()?.map(Header::parse);
        let Some(h) = h else {
            return Ok(Poll::Pending);
        };
        self.waiting = false;
        let entries = u64::from(shape.entries);
        if h.head >= entries {
            return match SegPtr::unpack(h.next, q.root) {
                None => Ok(Poll::Ready(None)),
                Some(next) => {
                    self.state = Pop::Retire { seg, next };
                    Ok(Poll::Pending)
                }
            };
        }
        if h.head >= h.tail {
            q.head_hint = Some((seg, h.head as u32));
            return Ok(Poll::Ready(None));
        }
        let head = h.head as u32;
        if head != at || !read_slot {
            self.look_at(q, seg, head, Prelude::None);
            return Ok(Poll::Pending);
        }
        let state = out.get(k + 1).map(word).transpose()?.unwrap_or(0);
        match Slot::from_word(state) {
            Some(Slot::Filled(_)) => {
                self.item = out
                    .get(k + 2)
                    .map(bytes)
                    .transpose()?
                    .unwrap_or(&[])
                    .to_vec();
                self.state = Pop::Claim {
                    seg,
                    index: at,
                    seen: state,
                };
            }
            Some(Slot::Taken(_) | Slot::Skipped(_)) => {
                self.look_at(q, seg, at + 1, Prelude::Help(at));
            }
            Some(Slot::Empty) => self.wait(q, seg, at),
            None => return Err(QueueError::Corrupt("a state word no client writes")),
        }
        Ok(Poll::Pending)
    }

    /// The head slot is claimed but empty: wait, until this client has seen it so for
    /// `skip_after`; then skip it.
    fn wait<M: RemoteMemory>(&mut self, q: &mut Queue<M>, seg: SegPtr, at: u32) {
        let now = q.mem.now();
        match q.stall {
            Some(s) if s.seg == seg && s.index == at => {
                if now.since(s.since) >= q.opts.skip_after {
                    self.look_at(q, seg, at, Prelude::Skip(at));
                    return;
                }
            }
            _ => {
                q.stall = Some(Stall {
                    seg,
                    index: at,
                    since: now,
                })
            }
        }
        q.stats.waits += 1;
        self.waiting = true;
        self.look_at(q, seg, at, Prelude::None);
    }
}
