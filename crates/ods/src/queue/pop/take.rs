//! Taking a filled slot: the claim (CAS `Filled → Taken`, then the head on), and reading it
//! back when a link failure hid the claim's outcome.

use super::{Pop, PopOp, Prelude};
use crate::memory::{MemOp, RemoteMemory};
use crate::queue::layout::{SegPtr, Slot, header};
use crate::queue::permits::{Fault, Reach, fault, word};
use crate::queue::{Queue, QueueError};
use std::task::Poll;

impl PopOp {
    pub(super) fn claim<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        index: u32,
        seen: u64,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            return self.relocate(q); // nothing was sent, or it was refused
        }
        let taken = Slot::Taken(self.token).word();
        let at = q.shape.state(index);
        let Some(out) = q.on_seg(seg, |mem, on| {
            mem.execute(&[
                MemOp::Cas {
                    on,
                    offset: at,
                    compare: seen,
                    swap: taken,
                },
                MemOp::Cas {
                    on,
                    offset: header::HEAD,
                    compare: u64::from(index),
                    swap: u64::from(index) + 1,
                },
            ])
        }) else {
            return Ok(Poll::Pending);
        };
        match out.first().map(word) {
            Some(Ok(old)) if old == seen || old == taken => {
                q.head_hint = Some((seg, index + 1));
                return Ok(Poll::Ready(Some(std::mem::take(&mut self.item))));
            }
            Some(Ok(_)) => self.look_at(q, seg, index + 1, Prelude::None),
            Some(Err(e)) => match fault(&e)? {
                Fault::Unknown => self.state = Pop::Recheck { seg, index, seen },
                Fault::Retry => {}
            },
            None => {}
        }
        Ok(Poll::Pending)
    }

    /// Reads back the state word after a claim with an unknown outcome.
    pub(super) fn recheck<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        index: u32,
        seen: u64,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            // Freed, so the slot was taken — by us or by another consumer: nobody can tell.
            return Err(QueueError::PopOutcomeUnknown {
                item: std::mem::take(&mut self.item),
            });
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
        match out.first().map(word) {
            Some(Ok(w)) if w == Slot::Taken(self.token).word() => {
                q.head_hint = Some((seg, index + 1));
                return Ok(Poll::Ready(Some(std::mem::take(&mut self.item))));
            }
            Some(Ok(w)) if w == seen => self.state = Pop::Claim { seg, index, seen },
            Some(Ok(_)) => self.look_at(q, seg, index, Prelude::None),
            Some(Err(e)) => {
                fault(&e)?;
            }
            None => {}
        }
        Ok(Poll::Pending)
    }
}
