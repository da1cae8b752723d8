//! A lock-free segmented FIFO queue on remote memory (§6.1 of the paper, after folly's
//! `UnboundedQueue`): a linked list of segments of N fixed-size entries, a small root
//! (metadata block) with a possibly stale head and tail, producers that claim slots with FAA,
//! consumers that take them with CAS. The design and why it is safe are in
//! `docs/data-structures.md` ("Lock-free queue"); the byte layout is in [`layout`].
//!
//! - [`Queue`]: one client's handle (its remote memory, its permissions, its counts);
//!   [`Queue::create`] makes a queue and returns its root address, [`Queue::open`] joins one,
//!   [`Queue::destroy`] frees one nobody uses any more.
//! - [`PushOp`], [`PopOp`]: operations as state machines, one batch or one control request per
//!   [`step`](PushOp::step), so a driver can multiplex many logical clients on one thread;
//!   [`Queue::push`] and [`Queue::pop`] run one to completion.
//! - [`QueueStats`]: permission operations and one-sided operations, per handle or operation.
//!
//! Invariants (each kept by a CAS or by the permission that covers the memory):
//! - an entry's state goes `Empty → Filled → Taken` or `Empty → Skipped`, each by CAS; a
//!   consumer reads an item only after it read its state `Filled` (one batch, in order), and
//!   takes it by CAS from that exact word;
//! - a segment's `head` passes only entries whose state is final (taken or skipped), so a
//!   segment whose head reached N holds nothing anyone still needs;
//! - the root's head moves from a segment to its successor only when the segment is drained,
//!   by one CAS; the client whose CAS moved it frees the segment; every access to a freed
//!   segment is refused by the NIC (its permissions ended with it), and a segment reached
//!   again by address is checked by its sequence number before it is used;
//! - a producer never writes an item into a slot it did not claim, and publishes by CAS, so a
//!   skipped slot stays skipped and an unknown outcome is settled by reading the state word;
//! - a segment header (sequence number, queue) is written only into a spare that was already
//!   this handle's when the segment it will follow was read without a successor, so no stale
//!   pointer to a freed segment ever finds a matching header at its old address.
//!
//! Guarantees: every item whose push returned `Ok` is returned by exactly one pop (unless an
//! outcome-unknown error says otherwise); items are taken in slot order, so the items of one
//! producer (pushing one at a time) are taken in the order it pushed them. A pop waits for a
//! claimed slot's producer, at most [`QueueOptions::skip_after`]: a producer that stalls past
//! that loses its slot (and claims another), one that crashed leaves a hole that is skipped.

/// `ready!(step)`: the value of a sub-step that is ready, or returns `Ok(Poll::Pending)` from
/// the calling step (the sub-step used the step's one request).
macro_rules! ready {
    ($e:expr) => {
        match $e? {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => return Ok(std::task::Poll::Pending),
        }
    };
}

mod destroy;
mod error;
mod handle;
pub mod layout;
mod permits;
mod pop;
mod push;
mod stats;

pub use error::QueueError;
pub use handle::Queue;
pub use layout::{SegPtr, Shape};
pub use pop::{PopOp, PopPhase};
pub use push::{PushOp, PushPhase};
pub use stats::QueueStats;

use std::time::Duration;

/// What a queue is made with ([`Queue::create`]): fixed for its life, kept in its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Entries per segment (N): 2..=65536; the paper uses 64 to 1024.
    pub entries: u32,
    /// Bytes of one item: a multiple of 8 within 8..=1024.
    pub item_size: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            entries: 1024,
            item_size: 8,
        }
    }
}

impl QueueConfig {
    /// The shape stored in the root.
    pub fn shape(&self) -> Shape {
        Shape {
            entries: self.entries,
            item_size: self.item_size,
        }
    }
}

/// How one client uses a queue ([`Queue::open`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueOptions {
    /// The lease asked for each permission (the root's, each segment's).
    pub lease: Duration,
    /// A permission whose lease ends within this is extended (one-sided) before use, or
    /// acquired again if it cannot be.
    pub renew_margin: Duration,
    /// How long, on this client's clock, a pop waits on a claimed-but-unfilled slot before it
    /// skips it. Safety never depends on it (publishing and skipping are CASes on one word);
    /// it should exceed the longest a live producer takes from its claim to its publish. The
    /// default is the memory node's default maximum lease.
    pub skip_after: Duration,
    /// Segment permissions kept at once (the oldest goes first).
    pub cached_segments: usize,
    /// Steps a blocking [`Queue::push`] or [`Queue::pop`] takes at most before it gives up
    /// with [`QueueError::Stalled`].
    pub max_steps: u64,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            lease: Duration::from_millis(5),
            renew_margin: Duration::from_millis(1),
            skip_after: Duration::from_millis(10),
            cached_segments: 4,
            max_steps: 1 << 20,
        }
    }
}

impl QueueOptions {
    /// Refuses options a handle cannot work with.
    pub fn check(&self) -> Result<(), QueueError> {
        if self.lease.is_zero() || self.renew_margin >= self.lease {
            return Err(QueueError::Config(
                "the lease must be positive and longer than the renew margin",
            ));
        }
        if self.cached_segments < 2 {
            return Err(QueueError::Config("keep at least two segment permissions"));
        }
        if self.max_steps == 0 {
            return Err(QueueError::Config("a blocking operation needs steps"));
        }
        Ok(())
    }
}
