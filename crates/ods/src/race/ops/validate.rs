//! Reading a candidate entry's block (the reader design of §6.1 on Patronus).
//!
//! A block is another client's object: the reader first gets a right of its own over it
//! (`acquire`, shared, started without blocking: `race::acquiring` — or reuses one it kept),
//! then in one batch re-reads the slot, reads the block and re-reads a bucket header, in that
//! order. It accepts the block only if the slot still names it, the subtable still claims the
//! key and the block's checksum and key hold.
//!
//! **A refused READ proves nothing about the block.** The NIC refuses a READ when the right
//! ended, and a right ends when its object is freed — or simply when its lease ran out
//! before the READ arrived (a short `read_lease` on a loaded machine or a slow link). So a
//! refusal is never taken for a freed block: the reader reads the slot again (changed: read
//! the buckets again) and, if it still names the address, acquires the address again with a
//! lease twice as long, up to [`MAX_REFUSALS`] times (then [`RaceError::LeaseTooShort`]:
//! an honest error, never a wrong answer). Only the node's answer to an acquire, `NotFound`,
//! proves the block freed; a right granted anew is over whatever block is there now, which
//! the batch validates like any other. (Taking a refusal for a freed block was the cause of
//! issue 25's lost updates: a reader whose 1 ms right ran out skipped the key's live entry —
//! as "another key's" after three tries, or at once when a split had frozen the slot — so a
//! lookup answered absent and an insert linked a second entry of a present key.)
//!
//! A slot that still names a freed address may name a *new* block there: the address was
//! freed, reused for the same key (same fingerprint and length, so the same slot word) and
//! linked again — the ABA case, common under a skewed update load where a hot key's blocks
//! cycle through few addresses. The reader then acquires the address again (a right over the
//! new block) and validates it anew, up to [`MAX_RENEWALS`] times (then
//! [`RaceError::Contended`]); only a *frozen* slot that still names a freed block (a copy a
//! split left behind) is skipped.

use crate::memory::{Executing, MemError, MemOp, MemOut, Region, RemoteMemory};
use crate::race::block::{self, KvBlock};
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::layout::{BucketHeader, SUBTABLE_HEADER, Slot, SlotAt, word};
use crate::race::stats::{bytes, ended, exec, exec_or_start, poll_started};
use patronus_core::proto::messages::Access;
use std::task::Poll;

/// What a candidate turned out to be.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The key's entry, and its block.
    Key(KvBlock),
    /// Another key's entry.
    Other,
    /// The slot changed, the block was freed or the subtable no longer claims the key: read
    /// the buckets again.
    Gone,
}

/// The validation of one candidate slot.
#[derive(Debug)]
pub(crate) struct Validate {
    pub at: SlotAt,
    subtable: u64,
    access: Access,
    /// Why the block could not be read, if it could not: read the slot again before
    /// deciding anything.
    lost: Option<Lost>,
    /// Times the address was acquired again because the slot still named it after the node
    /// answered that its block was freed (the address reused for the same key).
    renewed: u8,
    /// READs of the block refused so far (each re-acquire asks for a lease twice as long).
    refusals: u8,
    /// The reading batch in flight (`ClientOptions::pipeline`).
    started: Option<Executing>,
}

/// Why a candidate's block could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lost {
    /// The node answered `NotFound` to an acquire: the block was freed.
    Freed,
    /// The NIC refused the READ: the right ended — freed, or its lease ran out on the way.
    Refused,
}

/// How many times a validation acquires an address again whose slot still names it after
/// the node answered that its block was freed (each time needs another free and reuse of
/// that address by others: progress elsewhere).
pub(crate) const MAX_RENEWALS: u8 = 3;

/// How many refused READs of one candidate a validation takes (the lease doubling each
/// time: from `read_lease` to 2^11 times it) before it reports [`RaceError::LeaseTooShort`].
pub(crate) const MAX_REFUSALS: u8 = 12;

impl Validate {
    /// Validation of `at` in `subtable`, with a right granting `access` (read-write when the
    /// caller may free the block).
    pub fn new(at: SlotAt, subtable: u64, access: Access) -> Self {
        Validate {
            at,
            subtable,
            access,
            lost: None,
            renewed: 0,
            refusals: 0,
            started: None,
        }
    }

    /// Whether the right over the block is held (the next step is the reading batch).
    pub fn holds_right<M: RemoteMemory>(&self, t: &TableClient<M>) -> bool {
        let s = self.at.slot;
        t.blocks.get(s, self.access).is_some()
    }

    pub fn step<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        key: &[u8],
        h: &KeyHash,
    ) -> Poll<Result<Verdict, RaceError>> {
        let slot = self.at.slot;
        let (addr, len) = (slot.ptr(), slot.len());
        if self.started.is_some() {
            return match poll_started(&mut t.stats, mem, &mut self.started) {
                Some(Poll::Ready(out)) => self.judge(t, mem, out, key, h),
                _ => Poll::Pending,
            };
        }
        if let Some(lost) = self.lost {
            return self.recheck(t, mem, h, lost);
        }
        let margin = t.opts.margin;
        let usable = t
            .blocks
            .get(slot, self.access)
            .map(|r| !mem.expires_within(r, margin));
        match usable {
            Some(true) => {}
            Some(false) | None => {
                if let Some(old) = t.blocks.take(addr) {
                    t.give_up(mem, old);
                }
                // Without blocking: the operation waits (Pending) while the acquire is in
                // flight, and the next step reads through the right.
                // A longer lease after each refused READ: the path is slower than the last.
                let lease = t.opts.read_lease * (1u32 << self.refusals.min(11));
                return match t.poll_block_right(mem, slot, self.access, lease) {
                    Poll::Pending | Poll::Ready(Ok(())) => Poll::Pending,
                    // Freed: the slot changed, or it is a copy a split left to clear.
                    Poll::Ready(Err(MemError::NotFound | MemError::Invalid(_))) => {
                        self.lost = Some(Lost::Freed);
                        Poll::Pending
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
                };
            }
        }
        match t.ensure_subtable(mem, self.subtable) {
            Ok(true) => {}
            Ok(false) => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
        let (Some(st), Some(b)) = (
            t.subtables.get(&self.subtable),
            t.blocks.get(slot, self.access),
        ) else {
            return Poll::Pending;
        };
        let hdr_at = self.at.offset - (self.at.offset - SUBTABLE_HEADER) % t.geo.bucket_bytes();
        let ops = [
            MemOp::Read {
                on: st,
                offset: self.at.offset,
                len: 8,
            },
            MemOp::Read {
                on: b,
                offset: 0,
                len: len.min(b.len()) as u32,
            },
            MemOp::Read {
                on: st,
                offset: hdr_at,
                len: 8,
            },
        ];
        let pipeline = t.opts.pipeline;
        match exec_or_start(&mut t.stats, mem, pipeline, &mut self.started, &ops) {
            Poll::Ready(out) => self.judge(t, mem, out, key, h),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Judges the candidate from its reading batch's results (the slot, the block, a bucket
    /// header).
    fn judge<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        out: Vec<Result<MemOut, MemError>>,
        key: &[u8],
        h: &KeyHash,
    ) -> Poll<Result<Verdict, RaceError>> {
        let slot = self.at.slot;
        let addr = slot.ptr();
        let mut out = out.into_iter();
        let (now, data, hdr) = (bytes(out.next()), bytes(out.next()), bytes(out.next()));
        let (now, hdr) = match (now, hdr) {
            (Ok(n), Ok(h)) => (Slot(word(&n, 0)), BucketHeader::decode(word(&h, 0))),
            (Err(e), _) | (_, Err(e)) => {
                if ended(&e) {
                    t.drop_subtable(mem, self.subtable);
                    return Poll::Pending;
                }
                return Poll::Ready(Err(e.into()));
            }
        };
        let data = match data {
            Ok(d) => d,
            Err(e) if ended(&e) || e == MemError::NotFound => {
                // The right ended — the block freed, or the lease ran out on the way: never
                // read through it again, and decide nothing from the refusal alone.
                if let Some(old) = t.blocks.take(addr) {
                    t.give_up(mem, old);
                }
                self.lost = Some(Lost::Refused);
                return Poll::Pending;
            }
            Err(e) => return Poll::Ready(Err(e.into())),
        };
        if now.thawed() != slot.thawed() || !hdr.claims(h.primary) {
            return Poll::Ready(Ok(Verdict::Gone));
        }
        Poll::Ready(Ok(match block::decode(&data) {
            None => Verdict::Gone,
            Some(b) if b.key == key => Verdict::Key(b),
            Some(_) => Verdict::Other,
        }))
    }
}

impl Validate {
    /// The candidate's block could not be read. If its slot changed (or the subtable no
    /// longer claims the key), read the buckets again. If it still names the address:
    /// - after a refused READ, acquire the address again (a longer lease) and validate what
    ///   is there — the refusal may only mean the lease ran out on the way;
    /// - after the node said the block is freed, the address may have been reused for the
    ///   same key and linked again (ABA): acquire it again and validate the new block —
    ///   unless the slot is frozen (a copy an unfinished split left in the old subtable, its
    ///   block freed by a writer of the new one): no entry of the key's, skipped.
    ///
    /// Budgets spent give an error, never a verdict the reads did not show.
    fn recheck<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
        h: &KeyHash,
        lost: Lost,
    ) -> Poll<Result<Verdict, RaceError>> {
        match t.ensure_subtable(mem, self.subtable) {
            Ok(true) => {}
            Ok(false) => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
        let Some(st) = t.subtables.get(&self.subtable) else {
            return Poll::Pending;
        };
        let hdr_at = self.at.offset - (self.at.offset - SUBTABLE_HEADER) % t.geo.bucket_bytes();
        let ops = [
            MemOp::Read {
                on: st,
                offset: self.at.offset,
                len: 8,
            },
            MemOp::Read {
                on: st,
                offset: hdr_at,
                len: 8,
            },
        ];
        let mut out = exec(&mut t.stats, mem, &ops).into_iter();
        match (bytes(out.next()), bytes(out.next())) {
            (Ok(n), Ok(hd)) => {
                let now = Slot(word(&n, 0));
                let same = now.thawed() == self.at.slot.thawed();
                let claims = BucketHeader::decode(word(&hd, 0)).claims(h.primary);
                if !(same && claims) {
                    return Poll::Ready(Ok(Verdict::Gone));
                }
                match lost {
                    Lost::Freed if now.is_frozen() => return Poll::Ready(Ok(Verdict::Other)),
                    Lost::Freed if self.renewed >= MAX_RENEWALS => {
                        return Poll::Ready(Err(RaceError::Contended {
                            attempts: u32::from(self.renewed) + 1,
                        }));
                    }
                    Lost::Freed => self.renewed += 1,
                    Lost::Refused if self.refusals >= MAX_REFUSALS => {
                        return Poll::Ready(Err(RaceError::LeaseTooShort {
                            refusals: u32::from(self.refusals) + 1,
                        }));
                    }
                    Lost::Refused => self.refusals += 1,
                }
                self.lost = None;
                if let Some(old) = t.blocks.take(self.at.slot.ptr()) {
                    t.give_up(mem, old);
                }
                Poll::Pending
            }
            (Err(e), _) | (_, Err(e)) if ended(&e) => {
                t.drop_subtable(mem, self.subtable);
                Poll::Pending
            }
            (Err(e), _) | (_, Err(e)) => Poll::Ready(Err(e.into())),
        }
    }
}

/// The right over a block this client validated, taken out of the cache (to free it).
pub(crate) fn take_right<M: RemoteMemory>(t: &mut TableClient<M>, addr: u64) -> Option<M::Region> {
    t.blocks.take(addr).filter(|r| r.addr() == addr)
}
