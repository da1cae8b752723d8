//! Reclaiming a drained segment: moving the root's head past it (one CAS: its winner frees
//! the segment), and freeing it through a checked permission.
//!
//! A segment whose head reached N holds only final slots (taken or skipped): nobody needs it.
//! Once the root's head has moved past it nobody can reach it from the root either; clients
//! still holding a permission or a hint to it are refused by the NIC after the free, and find
//! the segment gone when they acquire its address again (nothing there, or a later segment
//! with another sequence number).

use super::{Pop, PopOp, Prelude};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::queue::layout::{SegPtr, root};
use crate::queue::permits::{Fault, Reach, fault, word};
use crate::queue::{Queue, QueueError};
use std::task::Poll;

impl PopOp {
    /// Moves the root's head from the drained `seg` to `next` (CAS).
    pub(super) fn retire<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        next: SegPtr,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        ready!(q.meta_ready());
        let (from, to) = (seg.pack(q.root)?, next.pack(q.root)?);
        let Some(out) = q.on_meta(|mem, on| {
            mem.execute(&[MemOp::Cas {
                on,
                offset: root::HEAD,
                compare: from,
                swap: to,
            }])
        }) else {
            return Ok(Poll::Pending);
        };
        match out.first().map(word) {
            Some(Ok(old)) => self.moved_or_not(q, seg, next, from, old)?,
            Some(Err(e)) => match fault(&e)? {
                Fault::Unknown => self.state = Pop::RetireCheck { seg, next },
                Fault::Retry => {}
            },
            None => {}
        }
        Ok(Poll::Pending)
    }

    /// Reads the root's head back after a retirement with an unknown outcome.
    pub(super) fn retire_check<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        next: SegPtr,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        ready!(q.meta_ready());
        let from = seg.pack(q.root)?;
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
            Some(Ok(w)) if w == from => self.state = Pop::Retire { seg, next },
            // Moved on, by us or another: free it either way. A second free of a segment
            // goes through a permission that ended with the first, and changes nothing.
            Some(Ok(_)) => self.state = Pop::Free { seg, next },
            Some(Err(e)) => {
                fault(&e)?;
            }
            None => {}
        }
        Ok(Poll::Pending)
    }

    pub(super) fn moved_or_not<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        next: SegPtr,
        from: u64,
        old: u64,
    ) -> Result<(), QueueError> {
        if old == from {
            self.state = Pop::Free { seg, next };
        } else {
            let head =
                SegPtr::unpack(old, q.root).ok_or(QueueError::Corrupt("the root has no head"))?;
            self.look_at(q, head, 0, Prelude::None);
        }
        Ok(())
    }

    /// Frees the retired `seg` through a (checked) permission on it.
    pub(super) fn free<M: RemoteMemory>(
        &mut self,
        q: &mut Queue<M>,
        seg: SegPtr,
        next: SegPtr,
    ) -> Result<Poll<Option<Vec<u8>>>, QueueError> {
        if ready!(q.seg_ready(seg)) == Reach::Gone {
            self.look_at(q, next, 0, Prelude::None);
            return Ok(Poll::Pending);
        }
        let Some(region) = q.take_seg(seg) else {
            return Ok(Poll::Pending);
        };
        q.stats.frees += 1;
        match q.mem.free(region) {
            Ok(()) => {
                q.stats.segments_freed += 1;
                self.look_at(q, next, 0, Prelude::None);
            }
            // The permission had ended: try again with a new one (or find the segment gone).
            Err(MemError::NotFound | MemError::Rejected | MemError::Expired) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Poll::Pending)
    }
}
