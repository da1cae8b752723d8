//! Making and linking a new segment, and moving the root's tail on.
//!
//! A producer whose claim found its segment full (FAA ≥ N) and no successor writes the
//! segment it will link — a spare it owns — in full before linking it: the header (sequence
//! number, queue, tail = 1) and its own item, filled, in entry 0. One CAS `0 → ptr` on the
//! full segment's `next` then links it, item included; a producer that loses the race keeps
//! the spare for a later segment and claims in the winner's. The root's tail follows lazily.
//!
//! The spare is prefilled as the successor of `seg` only if `seg.next` was read 0 while the
//! spare was already allocated to this handle. Otherwise the successor could have been linked
//! meanwhile — at the spare's very address — drained and freed, and its memory handed to us:
//! a header with its sequence number would make our private spare pass for it to any client
//! still holding a pointer to it (the sequence number check is what tells segments apart at
//! one address). With the spare ours before the read, `next == 0` means no successor existed,
//! and none can appear at an address we hold. So a push without a spare allocates one and
//! claims again (FAA past N, and `next` read again), one round trip more per new segment.

use super::{Push, PushOp};
use crate::memory::{MemOp, RemoteMemory};
use crate::queue::layout::{SegPtr, first_bytes, header, root};
use crate::queue::permits::{Fault, Reach, fault, word};
use crate::queue::{Queue, QueueError};
use std::task::Poll;

impl PushOp {
    /// Gets a spare (allocating one if the handle holds none free), then claims again.
    pub(super) fn spare<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
    ) -> Result<Poll<()>, QueueError> {
        ready!(q.spare_ready(self.token, true));
        self.state = Push::Claim { seg };
        Ok(Poll::Pending)
    }

    /// Writes the spare's header and our item into its entry 0.
    pub(super) fn prefill<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
    ) -> Result<Poll<()>, QueueError> {
        let Some(addr) = ready!(q.spare_ready(self.token, false)) else {
            self.state = Push::Spare { seg }; // lost its permission and the object: get another
            return Ok(Poll::Pending);
        };
        let new = SegPtr {
            seq: seg.next_seq(),
            addr,
        };
        new.pack(q.root)?;
        let bytes = first_bytes(&q.shape, new.seq, q.root, self.token, &self.item);
        let Some(out) = q.on_spare(addr, |mem, on| {
            mem.execute(&[MemOp::Write {
                on,
                offset: 0,
                data: &bytes,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        match out.first() {
            Some(Ok(_)) => self.state = Push::Link { seg, new },
            // A WRITE to our own unlinked segment: simply written again.
            Some(Err(e)) => {
                fault(e)?;
            }
            None => {}
        }
        Ok(Poll::Pending)
    }

    pub(super) fn link<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        new: SegPtr,
    ) -> Result<Poll<()>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            q.disown_spare(self.token); // kept for later
            return self.relocate(q);
        }
        let ptr = new.pack(q.root)?;
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[MemOp::Cas {
                on,
                offset: header::NEXT,
                compare: 0,
                swap: ptr,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        let Some(r) = out.first() else {
            return Ok(Poll::Pending);
        };
        match word(r) {
            Ok(old) => self.linked_or_lost(q, seg, new, old)?,
            Err(e) => {
                if fault(&e)? == Fault::Unknown {
                    self.state = Push::Relink { seg, new };
                }
            }
        }
        Ok(Poll::Pending)
    }

    /// Reads back `next` after a link with an unknown outcome.
    pub(super) fn relink<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        new: SegPtr,
    ) -> Result<Poll<()>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            // The spare may be in the list: never reuse it, never free it.
            q.forget_spare(new.addr);
            return Err(QueueError::PushOutcomeUnknown);
        }
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[MemOp::Read {
                on,
                offset: header::NEXT,
                len: 8,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        let Some(r) = out.first() else {
            return Ok(Poll::Pending);
        };
        match word(r) {
            Ok(0) => self.state = Push::Link { seg, new },
            Ok(old) => self.linked_or_lost(q, seg, new, old)?,
            Err(e) => {
                fault(&e)?;
            }
        }
        Ok(Poll::Pending)
    }

    /// `old` is what `seg.next` held when our link CAS ran (0: ours went in).
    pub(super) fn linked_or_lost<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        new: SegPtr,
        old: u64,
    ) -> Result<(), QueueError> {
        let ptr = new.pack(q.root)?;
        if old == 0 || old == ptr {
            q.adopt_spare(new);
            q.tail_hint = Some(new);
            self.state = Push::AdvanceTail {
                from: seg,
                to: new,
                then_claim: false,
            };
            return Ok(());
        }
        q.disown_spare(self.token); // kept for later
        let to = SegPtr::unpack(old, q.root).ok_or(QueueError::Corrupt("a zero next pointer"))?;
        self.state = Push::AdvanceTail {
            from: seg,
            to,
            then_claim: true,
        };
        Ok(())
    }

    /// The root's tail follows the list lazily: whoever links a segment, or finds the tail
    /// segment full and linked, moves it on by CAS; a failed CAS means someone else did.
    pub(super) fn advance_tail<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        from: SegPtr,
        to: SegPtr,
        then_claim: bool,
    ) -> Result<Poll<()>, QueueError> {
        q.tail_hint = Some(to);
        let next = if then_claim {
            Push::Claim { seg: to }
        } else {
            Push::Done
        };
        // Best effort: the item may be in already, and the hint is only a hint.
        let ready = matches!(q.meta_ready(), Ok(Poll::Ready(())));
        if !ready && then_claim {
            return Ok(Poll::Pending);
        }
        if let (true, Ok(from), Ok(to)) = (ready, from.pack(q.root), to.pack(q.root)) {
            q.on_meta(|mem, on| {
                mem.execute(&[MemOp::Cas {
                    on,
                    offset: root::TAIL,
                    compare: from,
                    swap: to,
                }])
            });
        }
        if matches!(next, Push::Done) {
            return Ok(Poll::Ready(()));
        }
        self.state = next;
        Ok(Poll::Pending)
    }
}
