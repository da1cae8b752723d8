//! What a table client counted: permission operations and one-sided operations, so a test or
//! a benchmark can check the costs of §6.1 per operation.

use crate::memory::{Executing, MemError, MemOp, MemOut, RemoteMemory};
use std::task::Poll;
use std::time::Duration;

/// Counts of one client's remote operations (take a difference around an operation with
/// [`RaceStats::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaceStats {
    /// `allocate` calls (one round trip each: KV blocks come `preallocate` at a time).
    pub allocations: u64,
    /// Objects those calls allocated.
    pub allocated: u64,
    /// `acquire` calls.
    pub acquires: u64,
    /// One-sided lease extensions.
    pub extends: u64,
    /// Rights given up (`release` or `relinquish`).
    pub releases: u64,
    /// Objects freed.
    pub frees: u64,
    /// Batches posted (one doorbell, one round trip each).
    pub batches: u64,
    /// READs.
    pub reads: u64,
    /// WRITEs.
    pub writes: u64,
    /// CASes.
    pub cas: u64,
    /// FAAs.
    pub faa: u64,
    /// Accesses refused because the right had ended (a freed block, an expired lease).
    pub rejected: u64,
    /// Restarts of an operation after losing a race (a slot changed, a block freed).
    pub retries: u64,
    /// Directory re-reads.
    pub refreshes: u64,
    /// Splits this client completed.
    pub splits: u64,
    /// Splits this client took over from another resizer and finished.
    pub recoveries: u64,
    /// Splits in progress — another resizer's — whose lock this client took (counted when it
    /// reads the recorded phase, before it finishes them).
    pub takeovers: u64,
    /// CASes whose outcome was unknown, resolved by reading.
    pub unknown_outcomes: u64,
    /// Polls spent waiting for another client's split.
    pub waits: u64,
    /// Blocks read beside the buckets on a guess of where the key's entry is
    /// (`ClientOptions::speculate`).
    pub guesses: u64,
    /// Of those, the guesses that held (the entry was still there: no validation batch).
    pub guesses_right: u64,
}

impl RaceStats {
    /// The counts since `earlier` (a snapshot of the same client).
    pub fn since(&self, earlier: &RaceStats) -> RaceStats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        RaceStats {
            allocations: d(self.allocations, earlier.allocations),
            allocated: d(self.allocated, earlier.allocated),
            acquires: d(self.acquires, earlier.acquires),
            extends: d(self.extends, earlier.extends),
            releases: d(self.releases, earlier.releases),
            frees: d(self.frees, earlier.frees),
            batches: d(self.batches, earlier.batches),
            reads: d(self.reads, earlier.reads),
            writes: d(self.writes, earlier.writes),
            cas: d(self.cas, earlier.cas),
            faa: d(self.faa, earlier.faa),
            rejected: d(self.rejected, earlier.rejected),
            retries: d(self.retries, earlier.retries),
            refreshes: d(self.refreshes, earlier.refreshes),
            splits: d(self.splits, earlier.splits),
            recoveries: d(self.recoveries, earlier.recoveries),
            takeovers: d(self.takeovers, earlier.takeovers),
            unknown_outcomes: d(self.unknown_outcomes, earlier.unknown_outcomes),
            waits: d(self.waits, earlier.waits),
            guesses: d(self.guesses, earlier.guesses),
            guesses_right: d(self.guesses_right, earlier.guesses_right),
        }
    }

    /// The sum of two clients' (or two operations') counts.
    pub fn plus(&self, other: &RaceStats) -> RaceStats {
        RaceStats {
            allocations: self.allocations + other.allocations,
            allocated: self.allocated + other.allocated,
            acquires: self.acquires + other.acquires,
            extends: self.extends + other.extends,
            releases: self.releases + other.releases,
            frees: self.frees + other.frees,
            batches: self.batches + other.batches,
            reads: self.reads + other.reads,
            writes: self.writes + other.writes,
            cas: self.cas + other.cas,
            faa: self.faa + other.faa,
            rejected: self.rejected + other.rejected,
            retries: self.retries + other.retries,
            refreshes: self.refreshes + other.refreshes,
            splits: self.splits + other.splits,
            recoveries: self.recoveries + other.recoveries,
            takeovers: self.takeovers + other.takeovers,
            unknown_outcomes: self.unknown_outcomes + other.unknown_outcomes,
            waits: self.waits + other.waits,
            guesses: self.guesses + other.guesses,
            guesses_right: self.guesses_right + other.guesses_right,
        }
    }

    /// One-sided operations (READs, WRITEs, CASes, FAAs).
    pub fn one_sided_ops(&self) -> u64 {
        self.reads + self.writes + self.cas + self.faa
    }

    /// Permission operations (allocations and acquisitions): the control-path cost.
    pub fn permission_ops(&self) -> u64 {
        self.allocations + self.acquires
    }
}

/// How long one split took, on its client's clock (the memory's [`RemoteMemory::now`]):
/// from its first step to its last, and that time by the phase recorded while each step ran.
/// A client keeps one per split it finished ([`TableClient::take_split_times`]), so a
/// benchmark can tell how long writers of the subtable waited on each split.
///
/// [`TableClient::take_split_times`]: crate::race::TableClient::take_split_times
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitTime {
    /// From the split's first step (locating T's lock) to its last (unlocked).
    pub total: Duration,
    /// Steps while no phase was recorded: taking the lock and the split rights, reading the
    /// record and T; at the end, recording `Idle` and giving everything back.
    pub lock: Duration,
    /// `Freezing`: CASing T's slots frozen, allocating T' and marking its lock object.
    pub freeze: Duration,
    /// `Copying`: classifying T's entries by their blocks' key hashes, writing T'.
    pub copy: Duration,
    /// `Publishing`: the directory entries, the global depth, T's bucket headers.
    pub publish: Duration,
    /// `Thawing`: thawing T' and T, clearing T''s mark.
    pub thaw: Duration,
    /// Steps the split took.
    pub steps: u32,
    /// Entries whose blocks it classified (acquires answered, including blocks found freed).
    pub classified: u32,
    /// It finished another resizer's split (a recovery), not one of its own.
    pub recovered: bool,
    /// What its client counted while it ran (acquires, releases, batches, …).
    pub counts: RaceStats,
}

/// Runs `ops` as one batch, counting it.
pub(crate) fn exec<M: RemoteMemory>(
    stats: &mut RaceStats,
    mem: &mut M,
    ops: &[MemOp<'_, M::Region>],
) -> Vec<Result<MemOut, MemError>> {
    count(stats, ops);
    let out = mem.execute(ops);
    count_refused(stats, &out);
    out
}

/// Runs `ops` as one batch, counting it — started without waiting when `pipeline`
/// (`ClientOptions::pipeline`): `Ready` with the results, or `Pending` with the batch in
/// `slot`, where the step that started it polls it ([`poll_started`]) when called again.
pub(crate) fn exec_or_start<M: RemoteMemory>(
    stats: &mut RaceStats,
    mem: &mut M,
    pipeline: bool,
    slot: &mut Option<Executing>,
    ops: &[MemOp<'_, M::Region>],
) -> Poll<Vec<Result<MemOut, MemError>>> {
    if !pipeline {
        return Poll::Ready(exec(stats, mem, ops));
    }
    count(stats, ops);
    *slot = Some(mem.start_execute(ops));
    poll_started(stats, mem, slot).unwrap_or(Poll::Pending)
}

/// Polls the batch a step started (`slot`): `None` if there is none, `Some(Ready)` with its
/// results (the slot emptied), `Some(Pending)` while in flight.
pub(crate) fn poll_started<M: RemoteMemory>(
    stats: &mut RaceStats,
    mem: &mut M,
    slot: &mut Option<Executing>,
) -> Option<Poll<Vec<Result<MemOut, MemError>>>> {
    let e = slot.take()?;
    Some(match mem.poll_execute(e) {
        Executing::Answered(out) => {
            count_refused(stats, &out);
            Poll::Ready(out)
        }
        in_flight => {
            *slot = Some(in_flight);
            Poll::Pending
        }
    })
}

fn count<R>(stats: &mut RaceStats, ops: &[MemOp<'_, R>]) {
    stats.batches += 1;
    for op in ops {
        match op {
            MemOp::Read { .. } => stats.reads += 1,
            MemOp::Write { .. } => stats.writes += 1,
            MemOp::Cas { .. } => stats.cas += 1,
            MemOp::Faa { .. } => stats.faa += 1,
        }
    }
}

fn count_refused(stats: &mut RaceStats, out: &[Result<MemOut, MemError>]) {
    stats.rejected += out
        .iter()
        .filter(|r| matches!(r, Err(MemError::Rejected | MemError::Expired)))
        .count() as u64;
}

/// A READ's bytes.
pub(crate) fn bytes(r: Option<Result<MemOut, MemError>>) -> Result<Vec<u8>, MemError> {
    match r {
        Some(Ok(MemOut::Read(b))) => Ok(b),
        Some(Err(e)) => Err(e),
        other => Err(MemError::Failed(format!(
            "expected a READ's bytes, got {other:?}"
        ))),
    }
}

/// A CAS's or FAA's previous value.
pub(crate) fn atomic(r: Option<Result<MemOut, MemError>>) -> Result<u64, MemError> {
    match r {
        Some(Ok(MemOut::Atomic(v))) => Ok(v),
        Some(Err(e)) => Err(e),
        other => Err(MemError::Failed(format!(
            "expected an atomic's value, got {other:?}"
        ))),
    }
}

/// Whether `e` says the right used has ended (refused by the NIC, or expired locally).
pub(crate) fn ended(e: &MemError) -> bool {
    matches!(e, MemError::Rejected | MemError::Expired)
}
