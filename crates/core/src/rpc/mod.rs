//! The control channel: request/reply messages of at most one slot carried by two-sided
//! SEND/RECV. One implementation serves every protocol of the project — the Patronus control
//! protocol (client library ↔ manager) and the baselines' protocol of the evaluation — each
//! described by a [`Protocol`] (its slot size, codec, written with the checked views of
//! [`slot`], and how many bytes of an encoded message go on the wire).
//!
//! - [`Link`]: the client end's transport — a connected QP, its CQ and the registered slots;
//!   it sends a request under a given id and turns completions into decoded replies.
//! - [`RpcClient`]: a [`Link`] with a receive slot posted per answer it may be owed and a
//!   send slot per request id; submits, resends (retries under the same id), stashes replies
//!   that arrive while it waits for another, and hands back replies nobody waits for any more.
//! - [`RpcServer`]: request slots — a shared receive queue, or a block of credits per
//!   connection ([`ConnectionSlots`]) —, a ring of reply slots, and [`IdleWait`], the
//!   spin-then-park policy of a serving thread.
//!
//! Invariants:
//! - A client never has more answers owed than it has receive slots posted (a retry owes a
//!   second answer); [`RpcError::Busy`] otherwise, so the server never meets an RNR.
//! - Each answer is delivered at most once: the second answer to a retried request is dropped,
//!   and an answer to a request given up on is handed out as an [`Orphan`] once, so its owner
//!   can undo what the request did (a grant nobody will use), never mistaken for another reply.
//! - A message goes on the wire at its [`Protocol::wire_len`] (at most a slot; the whole slot
//!   unless the protocol says otherwise), and a receiver decodes only the bytes that arrived
//!   (the completion's `byte_len`), never what an earlier, longer message left in the slot.
//! - Waiting never spins for long: after a short spin, a waiting thread sleeps on the CQ's
//!   completion notification (`CompletionQueue::wait`) until work arrives or its deadline.

mod client;
mod link;
mod server;
pub mod slot;
mod slots;
mod stopwatch;

pub use client::{Orphan, RpcClient};
pub use link::{Arrival, Link};
pub use server::{ConnectionSlots, Incoming, RpcServer, SPIN_BUDGET};
pub use slot::{SlotError, SlotReader, SlotWriter};
pub(crate) use stopwatch::Stopwatch;

use rnic::{CompletionQueue, Timestamp, VerbsError, WcStatus};
use std::fmt::Debug;
use std::time::Duration;

/// A request/reply protocol carried in slots of a fixed size (the longest message).
pub trait Protocol: 'static {
    /// What clients send.
    type Request: Clone + Debug + Send;
    /// What the server answers.
    type Reply: Debug + Send;
    /// Bytes of a slot: the longest message.
    const SLOT_SIZE: usize;
    /// Writes `req` with its id into a slot of [`Self::SLOT_SIZE`] bytes.
    fn encode_request(req_id: u64, req: &Self::Request, slot: &mut [u8]);
    /// Parses a request slot; never panics on peer input.
    fn decode_request(slot: &[u8]) -> Result<(u64, Self::Request), SlotError>;
    /// Writes the reply to request `req_id` into a slot.
    fn encode_reply(req_id: u64, reply: &Self::Reply, slot: &mut [u8]);
    /// Parses a reply slot; never panics on peer input.
    fn decode_reply(slot: &[u8]) -> Result<(u64, Self::Reply), SlotError>;

    /// How many leading bytes of `message` — a slot an `encode_*` just wrote, request or
    /// reply — go on the wire (the channel sends at most [`Self::SLOT_SIZE`]). The decoders
    /// are then given exactly those bytes. Default: the whole slot, as for a fixed-size
    /// protocol.
    fn wire_len(message: &[u8]) -> usize {
        let _ = message;
        Self::SLOT_SIZE
    }
}

/// Failures of the control channel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// Every receive slot is owed an answer already: wait for replies first.
    #[error("too many outstanding control requests")]
    Busy,
    /// Every receive slot is owed an answer to a request given up on (timed out or detached):
    /// the server stopped answering this channel, which needs replacing.
    #[error("every control slot waits for an answer that does not come")]
    Wedged,
    /// No answer before the deadline. The request may or may not have been carried out; a
    /// late answer is handed out as an [`Orphan`].
    #[error("control RPC timed out")]
    Timeout,
    /// The control QP failed (the connection is lost); nothing more will arrive on it.
    #[error("control QP failed: {0}")]
    QpFailed(WcStatus),
    /// A verb call failed locally.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
}

/// How a thread with nothing to do waits for its CQ: a few polls' worth of spinning (the
/// latency path), then sleeping on the CQ's completion notification. Never `yield`: on a
/// machine with few cores, a yielding waiter steals the core the work it waits for needs.
#[derive(Clone, Copy, Debug)]
pub struct IdleWait {
    spins: u32,
    spin_limit: u32,
    /// Longest spin, µs of the caller's clock (see [`IdleWait::note_time`]).
    budget_us: u64,
    /// When the current spin began (the first idle turn noted since work).
    since: Option<Timestamp>,
}

impl IdleWait {
    /// Spins `spin_limit` idle turns before sleeping.
    pub const fn new(spin_limit: u32) -> Self {
        IdleWait {
            spins: 0,
            spin_limit,
            budget_us: u64::MAX,
            since: None,
        }
    }

    /// Spins at most `spin_limit` idle turns and at most `budget` of time (as noted with
    /// [`IdleWait::note_time`]) before sleeping. An idle turn costs what polling the
    /// transport costs — a few instructions in-process, socket reads over TCP — so a count
    /// alone spins for microseconds on one transport and for milliseconds on the other.
    pub fn with_budget(spin_limit: u32, budget: Duration) -> Self {
        IdleWait {
            budget_us: u64::try_from(budget.as_micros()).unwrap_or(u64::MAX),
            ..IdleWait::new(spin_limit)
        }
    }

    /// Work arrived: the next idle turn spins again.
    pub fn busy(&mut self) {
        self.spins = 0;
        self.since = None;
    }

    /// Notes the time of an idle turn: once the spin has lasted its budget, it is over.
    pub fn note_time(&mut self, now: Timestamp) {
        match self.since {
            None => self.since = Some(now),
            Some(start) if now.0.saturating_sub(start.0) >= self.budget_us => {
                self.spins = self.spin_limit;
            }
            Some(_) => {}
        }
    }

    /// Whether the spinning phase is over (the thread is about to sleep, a good moment for
    /// housekeeping).
    pub fn is_parking(&self) -> bool {
        self.spins >= self.spin_limit
    }

    /// One idle turn: spins, or sleeps on `cq` for at most `max` once the spin phase is over.
    pub fn idle<C: CompletionQueue>(&mut self, cq: &C, max: Duration) {
        self.idle_with(|| {
            cq.wait(max);
        });
    }

    /// One idle turn: spins, or calls `sleep` once the spin phase is over.
    pub fn idle_with(&mut self, sleep: impl FnOnce()) {
        if self.spins < self.spin_limit {
            self.spins += 1;
            std::hint::spin_loop();
        } else {
            sleep();
        }
    }
}

impl Default for IdleWait {
    fn default() -> Self {
        IdleWait::new(64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_spin_ends_at_its_turn_count_or_its_time_budget() {
        let mut w = IdleWait::with_budget(256, Duration::from_micros(50));
        w.note_time(Timestamp(1_000));
        assert!(!w.is_parking());
        w.note_time(Timestamp(1_049));
        assert!(!w.is_parking(), "within the budget");
        w.note_time(Timestamp(1_050));
        assert!(w.is_parking(), "the budget is spent, turns or not");
        w.busy();
        assert!(!w.is_parking(), "work restarts the spin");
        w.note_time(Timestamp(5_000));
        assert!(
            !w.is_parking(),
            "and its time counts from the next idle turn"
        );
        // Without a budget, only the turn count ends it.
        let mut n = IdleWait::new(2);
        n.note_time(Timestamp(0));
        n.note_time(Timestamp(u64::MAX / 2));
        assert!(!n.is_parking());
    }
}
