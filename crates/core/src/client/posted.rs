//! CN-collaborated extensions posted without waiting ([`Op::Extend`](super::Op::Extend)):
//! the lifetime CAS is posted and its ticket returned at once; polling the ticket takes its
//! outcome later. A thread that drives many clients (the paper's coroutines) thereby overlaps
//! their extensions' round trips, as it overlaps their control RPCs.
//!
//! Invariants:
//! - A posted CAS has its own 8-byte result slot at the end of the staging buffer, which
//!   batches never use, and a work-request id tagged [`POSTED`]; a batch that polls the data CQ
//!   while extensions are in flight files their completions here instead of dropping them.
//! - Exactly once: a posted CAS is never posted again. A failed one reports `Denied` when the
//!   NIC refused it, and `OutcomeUnknown` otherwise (it may have executed); the broken QP is
//!   replaced before the next batch or post.
//! - A posted CAS belongs to the session whose data QP carried it. When that session is
//!   retired its QPs go to ERR and are dropped: a completion that arrived by then is reported
//!   as it is, one that never will is reported `OutcomeUnknown` (and a forgotten one frees its
//!   slot), as nothing of the old QP writes the slot any more.

use rnic::WorkCompletion;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Tag of posted extensions' work-request ids (batches' ids never set it).
pub(super) const POSTED: u64 = 1 << 63;
/// Extensions a client may have posted and not yet polled.
pub const MAX_POSTED: usize = 64;
/// Staging bytes reserved for posted extensions' results, at the end of the buffer.
pub(super) const POSTED_STAGING: usize = MAX_POSTED * 8;

/// Tickets of posted extensions carry this bit (control calls' ids never do; every ticket id
/// stays below 2^48, so a node set can tag it with the node).
pub(super) const POSTED_TICKET: u64 = 1 << 46;

/// An extension posted and not yet polled to its end or forgotten.
#[derive(Debug)]
pub(super) struct PostedExtend {
    pub(super) wr_id: u64,
    pub(super) slot: usize,
    pub(super) current: u64,
    pub(super) new: u64,
    /// The session whose data QP carried it.
    pub(super) session: u64,
    /// The permission's lifetime word as the client knows it (raised when the CAS succeeds).
    pub(super) lifetime_us: Arc<AtomicU64>,
}

/// Posted extensions in flight and their arrived completions.
#[derive(Debug, Default)]
pub(super) struct PostedOps {
    /// Bit `i`: result slot `i` is in use.
    pub(super) busy: u64,
    pub(super) next: u64,
    /// Completions of posted ops that arrived before their poll.
    pub(super) done: Vec<WorkCompletion>,
    /// Posted ops nobody will poll: their completion frees their slot and is dropped.
    pub(super) forgotten: Vec<u64>,
    /// Posted ops by ticket.
    pub(super) by_ticket: HashMap<u64, PostedExtend>,
}

impl PostedOps {
    /// Files `wc` if it is a posted op's completion; returns whether it was.
    pub(super) fn file(&mut self, wc: &WorkCompletion) -> bool {
        if wc.wr_id & POSTED == 0 {
            return false;
        }
        if let Some(i) = self.forgotten.iter().position(|&id| id == wc.wr_id) {
            self.forgotten.swap_remove(i);
            self.busy &= !(1 << (wc.wr_id & 0xff));
        } else {
            self.done.push(*wc);
        }
        true
    }

    /// The QPs forgotten ops were posted on are gone (their session was retired): nothing
    /// writes their result slots any more, which are free again.
    pub(super) fn release_forgotten(&mut self) {
        for wr_id in self.forgotten.drain(..) {
            self.busy &= !(1 << (wr_id & 0xff));
        }
    }

    /// A posted extension whose completion is here (or whose session is gone), if any.
    pub(super) fn any_ended(&self, session: u64) -> Option<u64> {
        self.by_ticket
            .iter()
            .find(|(_, p)| p.session != session || self.done.iter().any(|wc| wc.wr_id == p.wr_id))
            .map(|(&t, _)| t)
    }

    /// Result slots held (posted and not polled, or forgotten and not completed).
    pub(super) fn in_flight(&self) -> usize {
        self.busy.count_ones() as usize
    }
}
