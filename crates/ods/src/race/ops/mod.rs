//! The operations, each a steppable state machine: a `step` does at most one batch (one
//! doorbell) or one control request (besides giving up rights no longer needed, and the
//! frees that clean up after an unknown outcome) and returns `Poll::Pending` until done,
//! so one thread can interleave many logical clients' operations (and a test can stop one
//! between any two steps).
//!
//! - `probe`: find the key's subtable (directory cache, refreshed when a bucket header says
//!   it is stale) and read its two combined buckets in one batch;
//! - `validate`: read a candidate entry's block under a right of the reader's own;
//! - [`Lookup`], [`Insert`], [`Update`], [`Delete`]: the operations;
//! - `wait`: what a writer does while a split has frozen the slots it needs.

mod insert;
mod lookup;
mod modify;
mod probe;
mod validate;
mod wait;

pub use insert::Insert;
pub use lookup::Lookup;
pub use modify::{Delete, Update};
pub(crate) use validate::MAX_REFUSALS;

/// Where an operation is, for tests that stop it at a given point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Taking a pre-allocated block (or allocating a batch of them).
    Block,
    /// Finding the key's subtable and reading its buckets.
    Probing,
    /// Reading a candidate block: next comes the acquisition of a right over it.
    Acquiring,
    /// Reading a candidate block under a right held: next comes the one batch that re-reads
    /// the slot and reads the block.
    Reading,
    /// About to CAS the key's slot (link, replace or clear an entry).
    Swapping,
    /// Checking, after linking, whether another client inserted the key too.
    Deduplicating,
    /// Resolving a CAS whose outcome was unknown, by reading.
    Resolving,
    /// Freeing the replaced block.
    Freeing,
    /// Splitting a full subtable.
    Splitting,
    /// Waiting for another client's split.
    Waiting,
    /// Done.
    Done,
}

/// `try_ready!(e)`: `e` is `Result<bool, RaceError>` from a preparatory action; `Ok(false)`
/// means it did this step's work, so the step returns `Pending`.
macro_rules! try_ready {
    ($e:expr) => {
        match $e {
            Ok(true) => {}
            Ok(false) => return std::task::Poll::Pending,
            Err(e) => return std::task::Poll::Ready(Err(e)),
        }
    };
}
pub(crate) use try_ready;

/// `ready!(poll)`: the value of a `Poll<Result<T, _>>` sub-step, or return its pending/error.
macro_rules! ready {
    ($e:expr) => {
        match $e {
            std::task::Poll::Ready(Ok(v)) => v,
            std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
            std::task::Poll::Pending => return std::task::Poll::Pending,
        }
    };
}
pub(crate) use ready;
