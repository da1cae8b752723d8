//! Taking and giving back a subtable's lock, the split rights and their renewal.

use super::state::{Split, SplitOutcome, State};
use crate::memory::{MemError, MemOp, RemoteMemory};
use crate::race::client::TableClient;
use crate::race::config::LockMode;
use crate::race::error::RaceError;
use crate::race::layout::{BucketHeader, SUBTABLE_HEADER, word};
use crate::race::records::{LOCK_BYTES, LOCK_WORD};
use crate::race::stats::{SplitTime, atomic, bytes, ended, exec};
use patronus_core::proto::messages::{Access, Mode};
use std::task::Poll;

impl<M: RemoteMemory> Split<M> {
    pub(super) fn locate(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        if !t.ensure_subtable(mem, self.subtable)? {
            return Ok(State::Locate);
        }
        let Some(st) = t.subtables.get(&self.subtable) else {
            return Ok(State::Locate);
        };
        // A resizer that found T full reads all of it: if T has split meanwhile or another
        // split froze it, there is nothing to lock for (`load` decides the same under the
        // lock). Asking for a lock someone holds is not free: with a lease lock, the node
        // refuses the holder's extensions while an exclusive acquire waits, and a slow
        // split would be taken over from its live resizer.
        let len = match self.expect {
            Some(_) => t.geo.subtable_bytes() as u32,
            None => 8,
        };
        let ops = [MemOp::Read {
            on: st,
            offset: 0,
            len,
        }];
        match bytes(exec(&mut t.stats, mem, &ops).pop()) {
            Ok(b) => {
                self.lock_addr = word(&b, 0);
                if self.lock_addr == 0 {
                    return Err(RaceError::Corrupt("a subtable without a lock object"));
                }
                if let Some(d) = self.expect {
                    let header = BucketHeader::decode(word(&b, SUBTABLE_HEADER as usize));
                    if header.depth != d {
                        return Ok(self.finish(Ok(SplitOutcome::NotNeeded)));
                    }
                    if Self::parse_slots(t, &b).iter().any(|s| s.is_frozen()) {
                        return Ok(self.finish(Ok(SplitOutcome::Busy)));
                    }
                }
                Ok(State::Lock)
            }
            Err(e) if ended(&e) => {
                t.drop_subtable(mem, self.subtable);
                Ok(State::Locate)
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn take_lock(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let o = t.opts;
        t.stats.acquires += 1;
        match t.root.config.lock {
            LockMode::Lease => {
                let lease = o.split_lease + o.fence_gap;
                let (addr, access, mode) = (self.lock_addr, Access::ReadWrite, Mode::Exclusive);
                // A writer polling a frozen subtable only tries (`Split::trying`): a stopped
                // resizer's lock is free once its lease ended, and a waiting acquire would
                // make the node refuse a live resizer's extensions. A resizer that found T
                // full, or a destroy, waits a bounded time.
                let taken = if self.try_lock {
                    mem.try_acquire(addr, LOCK_BYTES, lease, access, mode)
                } else {
                    mem.acquire(addr, LOCK_BYTES, lease, access, mode)
                };
                match taken {
                    Ok(r) => {
                        self.lock = Some(r);
                        Ok(State::Rights)
                    }
                    Err(MemError::Conflict) => Ok(self.finish(Ok(SplitOutcome::Busy))),
                    Err(e) => Err(e.into()),
                }
            }
            LockMode::Word => {
                let r = mem.acquire(
                    self.lock_addr,
                    LOCK_BYTES,
                    o.split_lease,
                    Access::ReadWrite,
                    Mode::Shared,
                )?;
                self.lock = Some(r);
                Ok(State::TakeWord)
            }
        }
    }

    pub(super) fn take_word(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let Some(l) = self.lock.as_ref() else {
            return Ok(State::Lock);
        };
        let ops = [
            MemOp::Cas {
                on: l,
                offset: LOCK_WORD,
                compare: 0,
                swap: self.tag,
            },
            MemOp::Read {
                on: l,
                offset: LOCK_WORD,
                len: 8,
            },
        ];
        let mut out = exec(&mut t.stats, mem, &ops).into_iter();
        let (cas, now) = (atomic(out.next()), bytes(out.next()));
        match (cas, now) {
            (Ok(0), _) => {
                self.held = true;
                Ok(State::Rights)
            }
            // Unknown outcome: the word read after it says whose it is.
            (Err(MemError::OutcomeUnknown), Ok(w)) if word(&w, 0) == self.tag => {
                t.stats.unknown_outcomes += 1;
                self.held = true;
                Ok(State::Rights)
            }
            (Err(e), _) if ended(&e) => {
                self.release_lock_right(t, mem);
                Ok(State::Lock)
            }
            (Ok(_) | Err(MemError::OutcomeUnknown), _) => {
                self.release_lock_right(t, mem);
                Ok(self.finish(Ok(SplitOutcome::Busy)))
            }
            (Err(e), _) => Err(e.into()),
        }
    }

    pub(super) fn release_lock_right(&mut self, t: &mut TableClient<M>, mem: &mut M) {
        if let Some(r) = self.lock.take() {
            t.give_up(mem, r);
        }
    }

    pub(super) fn take_rights(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Result<State, RaceError> {
        let lease = t.opts.split_lease;
        t.stats.acquires += 1;
        if self.t_right.is_none() {
            let len = t.geo.subtable_bytes();
            self.t_right =
                Some(mem.acquire(self.subtable, len, lease, Access::ReadWrite, Mode::Shared)?);
            return Ok(State::Rights);
        }
        let (addr, len) = (t.root.directory, t.root.directory_bytes());
        self.dir_right = Some(mem.acquire(addr, len, lease, Access::ReadWrite, Mode::Shared)?);
        Ok(State::Load)
    }

    /// Keeps the lock and the split rights alive: when any runs low, the lock is extended
    /// first, then each right, by the same lease, so the rights keep ending `fence_gap`
    /// before the lock. With a lock word, the "lock" is the right over the lock object the
    /// word is written through: it is kept alive the same way (were it to end, the word could
    /// be neither recorded in nor given back — a live resizer would orphan it).
    /// `Ok(true)`: nothing to do; an error: the lock (or a right) is lost.
    pub(super) fn renew(&mut self, t: &mut TableClient<M>, mem: &mut M) -> Result<bool, RaceError> {
        let (lease, margin) = (t.opts.split_lease, t.opts.margin);
        let lease_mode = t.root.config.lock == LockMode::Lease;
        let rights = [&self.lock, &self.t_right, &self.dir_right, &self.new_right];
        let low = rights
            .iter()
            .any(|r| r.as_ref().is_some_and(|r| mem.expires_within(r, margin)));
        if !low {
            return Ok(true);
        }
        if lease_mode && self.lock.is_none() {
            return Err(RaceError::Memory(MemError::Expired));
        }
        for r in [&self.lock, &self.t_right, &self.dir_right, &self.new_right]
            .into_iter()
            .flatten()
        {
            t.stats.extends += 1;
            mem.extend(r, lease)?;
        }
        Ok(false)
    }

    /// Stops without another write to the table: the lock (Lease) or the split rights end by
    /// their leases; a lock word is given back so the next resizer can finish.
    pub(super) fn abandon(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<SplitOutcome, RaceError>> {
        self.outcome = Some(Ok(SplitOutcome::LockLost));
        self.state = State::Unlock;
        self.unlock(t, mem)
    }

    /// The right over the lock object ran out under a slow resizer that holds the word (it
    /// stops without another write to the table): the word is still its own, so it gives it
    /// back through a new right — the rare case where the unlock step takes a control request
    /// and a batch.
    fn give_back_word(&mut self, t: &mut TableClient<M>, mem: &mut M) {
        t.stats.acquires += 1;
        let lease = t.opts.split_lease;
        let Ok(r) = mem.acquire(
            self.lock_addr,
            LOCK_BYTES,
            lease,
            Access::ReadWrite,
            Mode::Shared,
        ) else {
            return;
        };
        let ops = [MemOp::Cas {
            on: &r,
            offset: LOCK_WORD,
            compare: self.tag,
            swap: 0,
        }];
        let _ = exec(&mut t.stats, mem, &ops);
        t.give_up(mem, r);
    }

    pub(super) fn unlock(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<SplitOutcome, RaceError>> {
        for (_, a) in self.blocks.pending.drain(..) {
            mem.abandon_acquire(a);
        }
        let rights: Vec<M::Region> = [
            self.t_right.take(),
            self.dir_right.take(),
            self.new_right.take(),
        ]
        .into_iter()
        .flatten()
        .chain(self.blocks.held.drain(..).map(|(_, r)| r))
        .collect();
        // The split rights go as the client's options say; lock objects are always released
        // (the next split acquires them exclusively) — all in one go.
        let mut release = Vec::new();
        if t.opts.lapse {
            t.give_up_many(mem, rights);
        } else {
            t.stats.releases += rights.len() as u64;
            release = rights;
        }
        if let Some(r) = self.child.take() {
            t.stats.releases += 1;
            release.push(r);
        }
        if let Some(l) = self.lock.take() {
            if self.held {
                let ops = [MemOp::Cas {
                    on: &l,
                    offset: LOCK_WORD,
                    compare: self.tag,
                    swap: 0,
                }];
                let out = exec(&mut t.stats, mem, &ops).pop();
                if matches!(&out, Some(Err(e)) if ended(e)) {
                    self.give_back_word(t, mem);
                }
                // If this fails otherwise the word stays taken: the vanilla design's stall.
                self.held = false;
            }
            t.stats.releases += 1;
            // Lease: released now (not left to expire) so the next resizer need not wait.
            release.push(l);
        }
        if !release.is_empty() {
            let _ = mem.release_many(release);
        }
        if let Some(parent) = self.redirect.take() {
            // Finish the parent's split, whose new half this subtable is (timed from here on
            // as part of this attempt).
            let (timing, try_lock) = (std::mem::take(&mut self.timing), self.try_lock);
            *self = Split::new(t, parent, None);
            (self.timing, self.try_lock) = (timing, try_lock);
            return Poll::Pending;
        }
        self.state = State::Done;
        let outcome = self.outcome.take().unwrap_or(Ok(SplitOutcome::NotNeeded));
        if outcome == Ok(SplitOutcome::Split) {
            if self.resumed {
                t.stats.recoveries += 1;
            } else {
                t.stats.splits += 1;
            }
            let time = self.timing.finish(mem.now(), self.record.phase, &t.stats);
            t.record_split_time(SplitTime {
                recovered: self.resumed,
                ..time
            });
        }
        Poll::Ready(outcome)
    }
}
