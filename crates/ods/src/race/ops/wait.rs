//! What a writer does when a split has frozen the slots it needs: read the buckets again
//! until they thaw; every `takeover_after` polls, or once [`TAKEOVER_LEASES`] lock leases
//! (`split_lease + fence_gap`) passed since the wait began or last tried, try the subtable's
//! lock — if its resizer stopped (and, with a lease, the lease ended), this client finishes
//! the split.
//!
//! Polls alone are a poor clock: each is a round trip, and on a loaded machine 1,024 of them
//! took a minute while the lock was free (its resizer had stopped) and every writer of the
//! subtable waited. Trying by time is safe for a live resizer because a takeover only *tries*
//! the lock ([`RemoteMemory::try_acquire`]): with Patronus, a waiting exclusive acquire would
//! make the node refuse the holder's extensions and so take its split from it.

use super::probe::{Probe, Probed, Snapshot};
use super::ready;
use crate::memory::RemoteMemory;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::hash::KeyHash;
use crate::race::split::Split;
use rnic::Timestamp;
use std::task::Poll;

/// Lock leases a writer waits on a frozen subtable before it tries the split's lock (again):
/// a live resizer extends its lock well within one; a stopped one's has ended after one.
pub(crate) const TAKEOVER_LEASES: u32 = 2;

/// Waiting for a key's buckets to thaw.
pub(crate) struct Wait<M: RemoteMemory> {
    probe: Probe,
    polls: u64,
    split: Option<Split<M>>,
    /// When this wait began or last tried the lock (on the memory's clock).
    tried: Option<Timestamp>,
}

impl<M: RemoteMemory> std::fmt::Debug for Wait<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("polls", &self.polls)
            .field("split", &self.split)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> Wait<M> {
    pub fn new(h: KeyHash) -> Self {
        Wait {
            probe: Probe::new(h),
            polls: 0,
            split: None,
            tried: None,
        }
    }

    /// One step; the buckets once none of them is frozen.
    pub fn step(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<Snapshot, RaceError>> {
        if let Some(s) = self.split.as_mut() {
            // Whatever the outcome (finished, busy, lost), look at the buckets again.
            let _ = ready!(s.step(t, mem));
            self.split = None;
            self.probe = Probe::new(self.probe.h);
            return Poll::Pending;
        }
        let snap = match ready!(self.probe.step(t, mem, None)) {
            Probed::Snap(s) => s,
            Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
        };
        if !snap.frozen() {
            return Poll::Ready(Ok(snap));
        }
        self.polls += 1;
        t.stats.waits += 1;
        self.probe = Probe::new(self.probe.h);
        let now = mem.now();
        let since = *self.tried.get_or_insert(now);
        let lock_lease = t.opts.split_lease + t.opts.fence_gap;
        if self.polls % u64::from(t.opts.takeover_after.max(1)) == 0
            || now.since(since) >= lock_lease * TAKEOVER_LEASES
        {
            self.tried = Some(now);
            self.split = Some(Split::new(t, snap.subtable, None).trying());
        }
        Poll::Pending
    }
}
