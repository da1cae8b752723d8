//! [`QueueError`]: what a queue operation can fail with, grouped by cause.

use crate::memory::MemError;

/// Why a queue operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    // --- Misuse by the caller ---
    /// A configuration or option is out of range.
    #[error("invalid queue configuration: {0}")]
    Config(&'static str),
    /// An item is not of the queue's item size.
    #[error("an item of this queue is {expected} bytes, not {got}")]
    ItemSize {
        /// The queue's item size.
        expected: u32,
        /// The item's length.
        got: usize,
    },
    /// An operation was stepped again after it had finished.
    #[error("the operation has finished already")]
    Finished,

    // --- The queue's memory ---
    /// The root address does not hold a queue (no object, or not a queue's root).
    #[error("no queue at {root:#x}: {why}")]
    NotAQueue {
        /// The address given.
        root: u64,
        /// What was wrong.
        why: &'static str,
    },
    /// A segment was allocated too far from the root for a segment pointer (4 TiB).
    #[error("a segment at {addr:#x} is too far from the root at {root:#x} to be linked")]
    OutOfRange {
        /// The segment.
        addr: u64,
        /// The root.
        root: u64,
    },
    /// A word of the queue holds a value no client writes.
    #[error("the queue's memory is corrupt: {0}")]
    Corrupt(&'static str),

    // --- Outcomes that reading back could not settle ---
    /// A push's publishing CAS (or its segment's link) had an unknown outcome, and its segment
    /// was reclaimed before the client could read the slot back, too late to tell by time:
    /// the item may or may not be in the queue.
    #[error(
        "push outcome unknown: the publish's outcome was lost and its segment reclaimed \
         before it could be read back; the item may or may not be in the queue"
    )]
    PushOutcomeUnknown,
    /// A pop's claiming CAS had an unknown outcome and its segment was reclaimed before the
    /// client could read the slot back: the item (here) was taken, by this client or by
    /// another one.
    #[error(
        "pop outcome unknown: the claim's outcome was lost and its segment reclaimed before \
         it could be read back; the item may have gone to another consumer"
    )]
    PopOutcomeUnknown {
        /// The item the claim was for.
        item: Vec<u8>,
    },

    // --- Progress ---
    /// A blocking operation ran its step budget out ([`QueueOptions::max_steps`]) without
    /// finishing: a pop waited on a producer that neither filled its slot nor was skipped
    /// (time did not pass), or the memory kept refusing.
    ///
    /// [`QueueOptions::max_steps`]: super::QueueOptions::max_steps
    #[error("gave up after {steps} steps without finishing")]
    Stalled {
        /// Steps taken.
        steps: u64,
    },
    /// The remote memory failed in a way the queue does not recover from (no memory, a
    /// quota, a lost connection that could not be reopened).
    #[error("remote memory: {0}")]
    Memory(#[from] MemError),
}
