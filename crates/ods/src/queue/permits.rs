//! The permissions a handle holds, and the steps that keep them (each step at most one control
//! request or one batch):
//! - the root's: acquired at open and kept for the handle's life — extended one-sidedly when
//!   its lease nears its end, acquired again when it cannot be;
//! - the segments': acquired on first use (the creator's comes from its `allocate`; others'
//!   acquires start without blocking, and the step that needs one waits for its answer), then
//!   checked by reading the segment's sequence number and queue before anything else is done
//!   through them: once a segment is freed its address may hold a later segment or another
//!   object, and a permission covers whatever object is there when it is granted;
//! - the spare segments': allocated before a producer links a new segment, kept if it loses
//!   the race to link (for a later one), freed at close. A spare belongs to one push at a
//!   time (its token): two pushes of one handle must never prefill the same spare. A spare
//!   is prefilled as the successor of a segment only if the segment's `next` was read 0
//!   while the spare was already allocated to this handle (see `push::link`).
//!
//! Every batch goes through [`Queue::on_meta`], [`Queue::on_seg`] or [`Queue::on_spare`],
//! which count it and drop the permission the NIC (or the lease) refused, so that the next
//! step acquires it again — or finds the segment gone.

use super::layout::{ROOT_LEN, SegPtr, Token, header, word_at};
use super::{Queue, QueueError};
use crate::memory::{Acquiring, MemError, MemOut, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::task::Poll;

/// Acquires a handle keeps in flight; past this the oldest is abandoned (its operation
/// starts it again if it still needs it).
const MAX_ACQUIRING: usize = 8;

/// The results of one batch.
pub(super) type Results = Vec<Result<MemOut, MemError>>;

/// The permissions of a handle.
#[derive(Debug)]
pub(super) struct Permits<R> {
    /// The root's.
    pub meta: Option<R>,
    /// Segments', oldest first or not: looked up by pointer.
    pub segs: Vec<Held<R>>,
    /// Segments allocated but not linked.
    pub spares: Vec<Spare<R>>,
    /// Segments' permissions asked for and not yet answered (started without blocking, so
    /// that a thread driving many handles keeps their acquires in flight together), at most
    /// [`MAX_ACQUIRING`]; the operations of the handle that need them take the answers.
    pub acquiring: Vec<(SegPtr, Acquiring<R>)>,
}

impl<R> Default for Permits<R> {
    fn default() -> Self {
        Permits {
            meta: None,
            segs: Vec::new(),
            spares: Vec::new(),
            acquiring: Vec::new(),
        }
    }
}

/// A permission over a segment.
#[derive(Debug)]
pub(super) struct Held<R> {
    pub seg: SegPtr,
    pub region: R,
    /// Its sequence number and queue were read back and match.
    pub checked: bool,
}

/// The unlinked segment a producer prepared.
#[derive(Debug)]
pub(super) struct Spare<R> {
    pub addr: u64,
    /// `None` once its permission ended (acquired again before use).
    pub region: Option<R>,
    /// The push preparing it, if any.
    pub owner: Option<Token>,
}

/// Whether a segment can be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// A live, checked permission is held.
    Ready,
    /// The segment was freed (its memory may hold something else now).
    Gone,
}

/// What a failed one-sided operation means to the step that issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// Refused (the permission ended; dropped already): nothing happened, try again.
    Retry,
    /// Unknown outcome: settle it by reading.
    Unknown,
}

/// Classifies a one-sided failure; anything but a refusal or an unknown outcome is fatal.
pub(super) fn fault(e: &MemError) -> Result<Fault, QueueError> {
    match e {
        MemError::Rejected | MemError::Expired => Ok(Fault::Retry),
        MemError::OutcomeUnknown => Ok(Fault::Unknown),
        other => Err(QueueError::Memory(other.clone())),
    }
}

/// The value of an atomic, or the first 8 bytes of a read, as a word.
pub(super) fn word(r: &Result<MemOut, MemError>) -> Result<u64, MemError> {
    match r {
        Ok(MemOut::Atomic(v)) => Ok(*v),
        Ok(MemOut::Read(b)) => Ok(word_at(b, 0)),
        Ok(MemOut::Written) => Err(MemError::Failed("a write where a word was expected".into())),
        Err(e) => Err(e.clone()),
    }
}

/// The bytes of a read.
pub(super) fn bytes(r: &Result<MemOut, MemError>) -> Result<&[u8], MemError> {
    match r {
        Ok(MemOut::Read(b)) => Ok(b),
        Ok(other) => Err(MemError::Failed(format!(
            "{other:?} where a read was expected"
        ))),
        Err(e) => Err(e.clone()),
    }
}

/// A segment's address hands out something that is not the segment (gone, or reused).
fn gone(e: &MemError) -> bool {
    matches!(
        e,
        MemError::NotFound | MemError::Invalid(_) | MemError::Conflict
    )
}

impl<M: RemoteMemory> Queue<M> {
    /// One step towards a live permission on the root.
    pub(super) fn meta_ready(&mut self) -> Result<Poll<()>, QueueError> {
        let (lease, margin) = (self.opts.lease, self.opts.renew_margin);
        match &self.permits.meta {
            None => {
                self.stats.acquires += 1;
                let root = self.root;
                match self
                    .mem
                    .acquire(root, ROOT_LEN, lease, Access::ReadWrite, Mode::Shared)
                {
                    Ok(r) => self.permits.meta = Some(r),
                    Err(e) if gone(&e) => {
                        return Err(QueueError::NotAQueue {
                            root,
                            why: "the root is gone",
                        });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Some(r) if self.mem.expires_within(r, margin) => {
                self.stats.extends += 1;
                if self.mem.extend(r, lease).is_err() {
                    self.permits.meta = None;
                }
            }
            Some(_) => return Ok(Poll::Ready(())),
        }
        Ok(Poll::Pending)
    }

    /// One step towards a live, checked permission on `seg`, or the news that it is gone.
    pub(super) fn seg_ready(&mut self, seg: SegPtr) -> Result<Poll<Reach>, QueueError> {
        let (lease, margin) = (self.opts.lease, self.opts.renew_margin);
        let Some(i) = self.permits.segs.iter().position(|h| h.seg == seg) else {
            let pending = self.permits.acquiring.iter().position(|(s, _)| *s == seg);
            let answer = match pending {
                Some(j) => {
                    let (_, a) = self.permits.acquiring.remove(j);
                    self.mem.poll_acquire(a)
                }
                None => {
                    if self.permits.acquiring.len() >= MAX_ACQUIRING {
                        let (_, oldest) = self.permits.acquiring.remove(0);
                        self.mem.abandon_acquire(oldest);
                    }
                    self.stats.acquires += 1;
                    let len = self.shape.segment_len();
                    let a = self.mem.start_acquire(
                        seg.addr,
                        len,
                        lease,
                        Access::ReadWrite,
                        Mode::Shared,
                    );
                    self.mem.poll_acquire(a)
                }
            };
            match answer {
                Acquiring::Answered(Ok(region)) => self.keep(Held {
                    seg,
                    region,
                    checked: false,
                }),
                Acquiring::Answered(Err(e)) if gone(&e) => {
                    self.stats.gone += 1;
                    return Ok(Poll::Ready(Reach::Gone));
                }
                Acquiring::Answered(Err(e)) => return Err(e.into()),
                in_flight @ Acquiring::InFlight(_) => {
                    self.permits.acquiring.push((seg, in_flight));
                }
            }
            return Ok(Poll::Pending);
        };
        let held = &self.permits.segs[i];
        if !held.checked {
            let out = self.mem.execute(&[crate::MemOp::Read {
                on: &held.region,
                offset: header::SEQ,
                len: 16,
            }]);
            self.note(&out);
            let Some(first) = out.first() else {
                return Ok(Poll::Pending);
            };
            match bytes(first) {
                Ok(b) => {
                    if word_at(b, 0) == u64::from(seg.seq) && word_at(b, 8) == self.root {
                        self.permits.segs[i].checked = true;
                    } else {
                        self.permits.segs.remove(i);
                        self.stats.gone += 1;
                        return Ok(Poll::Ready(Reach::Gone));
                    }
                }
                Err(e) => {
                    if fault(&e)? == Fault::Retry {
                        self.permits.segs.remove(i);
                    }
                }
            }
            return Ok(Poll::Pending);
        }
        if self.mem.expires_within(&held.region, margin) {
            self.stats.extends += 1;
            if self.mem.extend(&held.region, lease).is_err() {
                self.permits.segs.remove(i);
            }
            return Ok(Poll::Pending);
        }
        Ok(Poll::Ready(Reach::Ready))
    }

    /// Reserves a spare segment this handle already holds for the push `owner` (its own, or
    /// a free one); whether there was one.
    pub(super) fn reserve_spare(&mut self, owner: Token) -> bool {
        let spares = &mut self.permits.spares;
        let i = spares
            .iter()
            .position(|s| s.owner == Some(owner))
            .or_else(|| spares.iter().position(|s| s.owner.is_none()));
        if let Some(i) = i {
            spares[i].owner = Some(owner);
        }
        i.is_some()
    }

    /// One step towards a spare segment reserved for the push `owner`, with a live
    /// permission: its address, or `None` if it holds none and may not `allocate` one.
    pub(super) fn spare_ready(
        &mut self,
        owner: Token,
        allocate: bool,
    ) -> Result<Poll<Option<u64>>, QueueError> {
        let (lease, margin) = (self.opts.lease, self.opts.renew_margin);
        let len = self.shape.segment_len();
        if !self.reserve_spare(owner) {
            if !allocate {
                return Ok(Poll::Ready(None));
            }
            self.stats.allocates += 1;
            let region = self
                .mem
                .allocate(&[len], lease, Mode::Shared)?
                .pop()
                .ok_or(QueueError::Memory(MemError::Failed(
                    "allocate returned no object".into(),
                )))?;
            self.permits.spares.push(Spare {
                addr: region.addr(),
                region: Some(region),
                owner: Some(owner),
            });
            return Ok(Poll::Pending);
        }
        let spares = &mut self.permits.spares;
        let Some(i) = spares.iter().position(|s| s.owner == Some(owner)) else {
            return Ok(Poll::Pending);
        };
        let spare = &mut spares[i];
        match &spare.region {
            None => {
                self.stats.acquires += 1;
                match self
                    .mem
                    .acquire(spare.addr, len, lease, Access::ReadWrite, Mode::Shared)
                {
                    Ok(r) => spare.region = Some(r),
                    Err(e) if gone(&e) => {
                        spares.remove(i);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Some(r) if self.mem.expires_within(r, margin) => {
                self.stats.extends += 1;
                if self.mem.extend(r, lease).is_err() {
                    spare.region = None;
                }
            }
            Some(_) => return Ok(Poll::Ready(Some(spare.addr))),
        }
        Ok(Poll::Pending)
    }

    /// Runs one batch through the root's permission (`None`: no permission held).
    pub(super) fn on_meta(
        &mut self,
        batch: impl FnOnce(&mut M, &M::Region) -> Results,
    ) -> Option<Results> {
        let out = batch(&mut self.mem, self.permits.meta.as_ref()?);
        if self.note(&out) {
            self.permits.meta = None;
        }
        Some(out)
    }

    /// Runs one batch through the permission on `seg` (`None`: no permission held).
    pub(super) fn on_seg(
        &mut self,
        seg: SegPtr,
        batch: impl FnOnce(&mut M, &M::Region) -> Results,
    ) -> Option<Results> {
        let i = self.permits.segs.iter().position(|h| h.seg == seg)?;
        let out = batch(&mut self.mem, &self.permits.segs[i].region);
        if self.note(&out) {
            self.permits.segs.remove(i);
        }
        Some(out)
    }

    /// Runs one batch through the permission of the spare at `addr` (`None`: none held).
    pub(super) fn on_spare(
        &mut self,
        addr: u64,
        batch: impl FnOnce(&mut M, &M::Region) -> Results,
    ) -> Option<Results> {
        let i = self.permits.spares.iter().position(|s| s.addr == addr)?;
        let out = batch(&mut self.mem, self.permits.spares[i].region.as_ref()?);
        if self.note(&out) {
            self.permits.spares[i].region = None;
        }
        Some(out)
    }

    /// The spare at `addr` was linked as `seg`: its permission becomes a (checked) segment
    /// permission.
    pub(super) fn adopt_spare(&mut self, seg: SegPtr) {
        self.stats.segments_linked += 1;
        let Some(i) = self.permits.spares.iter().position(|s| s.addr == seg.addr) else {
            return;
        };
        if let Some(region) = self.permits.spares.remove(i).region {
            self.keep(Held {
                seg,
                region,
                checked: true,
            });
        }
    }

    /// The push `owner` lost the race to link its spare: the spare is free for another.
    pub(super) fn disown_spare(&mut self, owner: Token) {
        for s in &mut self.permits.spares {
            if s.owner == Some(owner) {
                s.owner = None;
            }
        }
    }

    /// Forgets the spare at `addr` without freeing it (it may have been linked).
    pub(super) fn forget_spare(&mut self, addr: u64) {
        self.permits.spares.retain(|s| s.addr != addr);
    }

    /// Takes the permission on `seg` out of the handle (to free the segment through it).
    pub(super) fn take_seg(&mut self, seg: SegPtr) -> Option<M::Region> {
        let i = self.permits.segs.iter().position(|h| h.seg == seg)?;
        Some(self.permits.segs.remove(i).region)
    }

    /// Keeps a segment permission, giving up the oldest one beyond the cache's size as cheaply
    /// as the mechanism allows ([`RemoteMemory::relinquish`]: with leases it runs out on its
    /// own; without, it is released, or a queue of many small segments would hold a
    /// registration for every segment it ever used).
    fn keep(&mut self, held: Held<M::Region>) {
        let segs = &mut self.permits.segs;
        if segs.len() >= self.opts.cached_segments {
            let oldest =
                (0..segs.len()).reduce(|a, b| if segs[a].seg.after(segs[b].seg) { b } else { a });
            if let Some(i) = oldest {
                let evicted = segs.remove(i);
                // A right that cannot be given up is one the node already ended (its
                // segment freed): nothing is left to do for it.
                let _ = self.mem.relinquish(evicted.region);
            }
        }
        self.permits.segs.push(held);
    }

    /// Counts a batch; whether an operation in it was refused (its permission has ended).
    fn note(&mut self, out: &Results) -> bool {
        self.stats.batches += 1;
        self.stats.ops += out.len() as u64;
        let mut refused = false;
        for r in out {
            match r {
                Err(MemError::Rejected | MemError::Expired) => {
                    self.stats.rejected += 1;
                    refused = true;
                }
                Err(MemError::OutcomeUnknown) => self.stats.unknown += 1,
                _ => {}
            }
        }
        refused
    }
}
