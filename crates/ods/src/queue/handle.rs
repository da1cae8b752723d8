//! [`Queue`]: one client's handle on a queue — its remote memory, the permissions it holds,
//! where it last saw the head and the tail, and its counts. Creating a queue, opening and
//! closing a handle, and the blocking push and pop.

use super::layout::{MAGIC, ROOT_LEN, SegPtr, Shape, Token, empty_header, root, word_at};
use super::permits::Permits;
use super::{PopOp, PushOp, QueueConfig, QueueError, QueueOptions, QueueStats};
use crate::memory::{MemError, MemOp, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use rnic::Timestamp;
use std::task::Poll;
use std::time::Duration;

/// The lease of the two permissions [`Queue::create`] allocates with (released before it
/// returns).
const CREATE_LEASE: Duration = Duration::from_millis(10);
/// The longest one sleep of a blocking push or pop for an acquire's answer (an answer that
/// does not come within the memory's RPC timeout fails the operation).
const ANSWER_WAIT: Duration = Duration::from_millis(10);

/// A claimed-but-unfilled slot a consumer of this handle is waiting on, since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stall {
    pub seg: SegPtr,
    pub index: u32,
    pub since: Timestamp,
}

/// One client's handle on a queue (see the [module docs](super)). Operations borrow it for
/// each step, so any number of [`PushOp`]s and [`PopOp`]s may be under way on one handle.
pub struct Queue<M: RemoteMemory> {
    pub(super) mem: M,
    pub(super) root: u64,
    pub(super) shape: Shape,
    pub(super) opts: QueueOptions,
    /// This client's number (from the root's counter): the high bits of its tokens.
    client: u32,
    next_op: u32,
    pub(super) permits: Permits<M::Region>,
    pub(super) stats: QueueStats,
    /// The segment this client last took for the tail.
    pub(super) tail_hint: Option<SegPtr>,
    /// The segment this client last took for the head, and its guess of the head's index.
    pub(super) head_hint: Option<(SegPtr, u32)>,
    pub(super) stall: Option<Stall>,
}

impl<M: RemoteMemory> std::fmt::Debug for Queue<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("root", &format_args!("{:#x}", self.root))
            .field("shape", &self.shape)
            .field("client", &self.client)
            .field("tail_hint", &self.tail_hint)
            .field("head_hint", &self.head_hint)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> Queue<M> {
    /// Makes a queue: its root and first segment in one `allocate`, both written in one batch.
    /// Returns the root's address, all that [`Queue::open`] needs. `mem`'s permissions on
    /// the two objects are released; the objects stay.
    pub fn create(mem: &mut M, config: &QueueConfig) -> Result<u64, QueueError> {
        let shape = config.shape();
        shape.check()?;
        let objects = mem.allocate(&[ROOT_LEN, shape.segment_len()], CREATE_LEASE, Mode::Shared)?;
        let mut objects = objects.into_iter();
        let (Some(meta), Some(first)) = (objects.next(), objects.next()) else {
            return Err(
                MemError::Failed("allocate returned fewer objects than asked".into()).into(),
            );
        };
        match Self::lay_out(mem, &meta, &first, shape) {
            Ok(()) => {
                let root = meta.addr();
                // Only the leases end here; a failed release ends with its lease anyway.
                let _ = mem.release(meta);
                let _ = mem.release(first);
                Ok(root)
            }
            Err(e) => {
                let _ = mem.free(meta);
                let _ = mem.free(first);
                Err(e)
            }
        }
    }

    fn lay_out(
        mem: &mut M,
        meta: &M::Region,
        first: &M::Region,
        shape: Shape,
    ) -> Result<(), QueueError> {
        let seg = SegPtr {
            seq: 1,
            addr: first.addr(),
        };
        let ptr = seg.pack(meta.addr())?;
        let mut bytes = [0u8; ROOT_LEN as usize];
        for (offset, value) in [
            (root::MAGIC, MAGIC),
            (root::SHAPE, shape.encode()),
            (root::HEAD, ptr),
            (root::TAIL, ptr),
        ] {
            bytes[offset as usize..][..8].copy_from_slice(&value.to_le_bytes());
        }
        let header = empty_header(seg.seq, meta.addr());
        for r in mem.execute(&[
            MemOp::Write {
                on: first,
                offset: 0,
                data: &header,
            },
            MemOp::Write {
                on: meta,
                offset: 0,
                data: &bytes,
            },
        ]) {
            r?;
        }
        Ok(())
    }

    /// Opens the queue whose root is at `root`: acquires the root (kept for the handle's
    /// life), reads it, and takes a client number from its counter.
    pub fn open(mut mem: M, root: u64, opts: QueueOptions) -> Result<Queue<M>, QueueError> {
        opts.check()?;
        let mut stats = QueueStats {
            acquires: 1,
            ..QueueStats::default()
        };
        let meta = mem
            .acquire(root, ROOT_LEN, opts.lease, Access::ReadWrite, Mode::Shared)
            .map_err(|e| match e {
                MemError::NotFound | MemError::Invalid(_) => QueueError::NotAQueue {
                    root,
                    why: "no object of a root's size there",
                },
                e => e.into(),
            })?;
        let bytes = mem.read(&meta, 0, ROOT_LEN as u32)?;
        stats.batches += 1;
        stats.ops += 1;
        if word_at(&bytes, root::MAGIC as usize) != MAGIC {
            return Err(QueueError::NotAQueue {
                root,
                why: "it does not start with a queue's magic",
            });
        }
        let shape = Shape::decode(word_at(&bytes, root::SHAPE as usize));
        shape.check().map_err(|_| QueueError::NotAQueue {
            root,
            why: "its shape is out of range",
        })?;
        let client = Self::number(&mut mem, &meta, &mut stats)?;
        Ok(Queue {
            mem,
            root,
            shape,
            opts,
            client,
            next_op: 0,
            permits: Permits {
                meta: Some(meta),
                ..Permits::default()
            },
            stats,
            tail_hint: None,
            head_hint: None,
            stall: None,
        })
    }

    /// A number from the root's counter. An FAA with an unknown outcome may have used one up:
    /// numbers need only be unique, so the next FAA is as good.
    fn number(mem: &mut M, meta: &M::Region, stats: &mut QueueStats) -> Result<u32, QueueError> {
        for _ in 0..16 {
            stats.batches += 1;
            stats.ops += 1;
            match mem.faa(meta, root::CLIENTS, 1) {
                Ok(n) => return Ok(n as u32),
                Err(MemError::OutcomeUnknown) => stats.unknown += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Err(MemError::OutcomeUnknown.into())
    }

    /// Gives up what the handle holds: frees its spare segments, releases its permissions.
    /// The handle stays usable (it acquires what it needs again).
    pub fn close(&mut self) -> Result<(), QueueError> {
        for (_, a) in std::mem::take(&mut self.permits.acquiring) {
            self.mem.abandon_acquire(a);
        }
        let mut result = Ok(());
        let (lease, margin) = (self.opts.lease, self.opts.renew_margin);
        let len = self.shape.segment_len();
        for spare in std::mem::take(&mut self.permits.spares) {
            // Freed through a live permission: the one held if its lease has not run out,
            // else a new one (nobody else knows an unlinked spare, so it is still there).
            let mut region = spare.region.filter(|r| !self.mem.expires_within(r, margin));
            for _ in 0..2 {
                let r = match region.take() {
                    Some(r) => r,
                    None => {
                        self.stats.acquires += 1;
                        match self.mem.acquire(
                            spare.addr,
                            len,
                            lease,
                            Access::ReadWrite,
                            Mode::Shared,
                        ) {
                            Ok(r) => r,
                            Err(_) => break,
                        }
                    }
                };
                self.stats.frees += 1;
                match self.mem.free(r) {
                    Ok(()) => break,
                    Err(MemError::Rejected | MemError::Expired | MemError::NotFound) => {}
                    Err(e) => {
                        result = Err(e.into());
                        break;
                    }
                }
            }
        }
        for held in std::mem::take(&mut self.permits.segs) {
            self.stats.releases += 1;
            // A freed segment's permission ended with it: nothing to release.
            let _ = self.mem.release(held.region);
        }
        if let Some(meta) = self.permits.meta.take() {
            self.stats.releases += 1;
            let _ = self.mem.release(meta);
        }
        result
    }

    /// Pushes `item` (exactly [`Shape::item_size`] bytes), step by step until it is in.
    pub fn push(&mut self, item: &[u8]) -> Result<(), QueueError> {
        let mut op = PushOp::new(self, item)?;
        self.drive(|q| op.step(q))
    }

    /// Pops the oldest item, or `None` if the queue is empty. Waits (stepping) on a claimed
    /// slot whose producer has not filled it, until it does or [`QueueOptions::skip_after`]
    /// passes on this client's clock.
    pub fn pop(&mut self) -> Result<Option<Vec<u8>>, QueueError> {
        let mut op = PopOp::new(self);
        self.drive(|q| op.step(q))
    }

    fn drive<T>(
        &mut self,
        mut step: impl FnMut(&mut Self) -> Result<Poll<T>, QueueError>,
    ) -> Result<T, QueueError> {
        for _ in 0..self.opts.max_steps {
            if let Poll::Ready(v) = step(self)? {
                return Ok(v);
            }
            // Nothing to do until an acquire's answer comes: sleep until it does.
            self.wait_for_answer(ANSWER_WAIT);
        }
        Err(QueueError::Stalled {
            steps: self.opts.max_steps,
        })
    }

    /// A token for a new operation.
    pub(super) fn token(&mut self) -> Token {
        let t = Token::new(self.client, self.next_op);
        self.next_op = self.next_op.wrapping_add(1);
        t
    }

    /// Whether the handle waits for an acquire's answer (its operation's next step has
    /// nothing to do until it comes).
    pub fn awaiting_answer(&self) -> bool {
        !self.permits.acquiring.is_empty()
    }

    /// Sleeps up to `max` until an answer to one of the handle's acquires arrives (returns at
    /// once if none is in flight).
    pub fn wait_for_answer(&mut self, max: Duration) {
        if self.awaiting_answer() {
            self.mem.wait(max);
        }
    }

    /// Arms the memory's completion channel if the handle waits for an acquire's answer (see
    /// [`RemoteMemory::arm`]); whether it did.
    pub fn arm(&mut self) -> bool {
        self.awaiting_answer() && self.mem.arm()
    }

    /// What this handle did so far.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// The root's address.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The queue's shape (from its root).
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// This client's number among those that opened the queue.
    pub fn client_number(&self) -> u32 {
        self.client
    }

    /// The segment this client last took for the tail (where its next push starts).
    pub fn tail_hint(&self) -> Option<SegPtr> {
        self.tail_hint
    }

    /// The segment this client last took for the head (where its next pop starts).
    pub fn head_hint(&self) -> Option<SegPtr> {
        self.head_hint.map(|(s, _)| s)
    }

    /// The remote memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The remote memory, mutably (its own operations; the queue's permissions stay).
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// The remote memory back (without [`Queue::close`], the permissions run out by lease
    /// and a spare segment stays allocated).
    pub fn into_memory(self) -> M {
        self.mem
    }
}
