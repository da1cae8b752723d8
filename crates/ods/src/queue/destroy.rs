//! Destroying a queue: its root and every segment linked from the root's head freed, for a
//! queue no client uses any more.
//!
//! The root is read, then freed first: from then on nobody can open the queue. The segments
//! are freed in list order, each only if its header says it is the segment the list expects
//! there (its sequence number, and this queue's root): a stale pointer never makes destroy
//! free an object that is not the queue's.
//!
//! Not freed, because nothing links them: spare segments other handles allocated and never
//! linked ([`Queue::close`] frees a handle's own). A destroy that fails part way (the
//! connection lost) leaves the rest allocated.

use super::layout::{MAGIC, ROOT_LEN, SegPtr, Shape, header, root, word_at};
use super::{Queue, QueueError};
use crate::memory::{MemError, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;

/// The lease of each permission destroy takes (the object is freed through it at once).
const DESTROY_LEASE: Duration = Duration::from_millis(10);

impl<M: RemoteMemory> Queue<M> {
    /// Frees the queue whose root is at `root` (see the module docs); returns how many
    /// segments it freed. Meant for a queue no other client uses: another handle's operations
    /// fail once the objects they use are gone.
    pub fn destroy(mem: &mut M, root: u64) -> Result<u64, QueueError> {
        let meta = mem
            .acquire(
                root,
                ROOT_LEN,
                DESTROY_LEASE,
                Access::ReadWrite,
                Mode::Shared,
            )
            .map_err(|e| match e {
                MemError::NotFound | MemError::Invalid(_) => QueueError::NotAQueue {
                    root,
                    why: "no object of a root's size there",
                },
                e => e.into(),
            })?;
        let bytes = match mem.read(&meta, 0, ROOT_LEN as u32) {
            Ok(b) => b,
            Err(e) => {
                let _ = mem.release(meta);
                return Err(e.into());
            }
        };
        let shape = Shape::decode(word_at(&bytes, root::SHAPE as usize));
        let why = if word_at(&bytes, root::MAGIC as usize) != MAGIC {
            Some("it does not start with a queue's magic")
        } else if shape.check().is_err() {
            Some("its shape is out of range")
        } else {
            None
        };
        if let Some(why) = why {
            let _ = mem.release(meta);
            return Err(QueueError::NotAQueue { root, why });
        }
        let mut next = SegPtr::unpack(word_at(&bytes, root::HEAD as usize), root);
        mem.free(meta)?;
        let len = shape.segment_len();
        let mut freed = 0;
        while let Some(seg) = next {
            let r = match mem.acquire(
                seg.addr,
                len,
                DESTROY_LEASE,
                Access::ReadWrite,
                Mode::Shared,
            ) {
                Ok(r) => r,
                // Gone already: nothing after it can be reached.
                Err(MemError::NotFound) => break,
                Err(e) => return Err(e.into()),
            };
            let head = match mem.read(&r, 0, header::READ_LEN) {
                Ok(h) => h,
                Err(e) => {
                    let _ = mem.release(r);
                    return Err(e.into());
                }
            };
            let seq = word_at(&head, header::SEQ as usize);
            if seq != u64::from(seg.seq) || word_at(&head, header::QUEUE as usize) != root {
                let _ = mem.release(r);
                return Err(QueueError::Corrupt(
                    "a linked segment's header names another queue or position",
                ));
            }
            next = SegPtr::unpack(word_at(&head, header::NEXT as usize), root);
            mem.free(r)?;
            freed += 1;
        }
        Ok(freed)
    }
}
