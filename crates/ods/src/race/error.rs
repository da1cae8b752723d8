//! [`RaceError`]: everything a table operation can fail with, grouped by cause.

use crate::memory::MemError;

/// Why a RACE hashing operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RaceError {
    // ---- the request ----
    /// `insert` found the key present.
    #[error("the key is already in the table")]
    KeyExists,
    /// `update` or `delete` did not find the key.
    #[error("the key is not in the table")]
    NotFound,
    /// Key and value do not fit in one KV block.
    #[error("key and value take {need} bytes with the block header; a KV block holds {max}")]
    TooLarge {
        /// Bytes the block would need.
        need: u64,
        /// Bytes a block holds (the table's `block_size`).
        max: u64,
    },
    /// The configuration cannot describe a table (zero buckets, a depth past the limit...).
    #[error("invalid table configuration: {0}")]
    InvalidConfig(&'static str),

    /// `step` was called on an operation that had already finished.
    #[error("the operation has already finished")]
    Finished,

    // ---- the table ----
    /// A subtable at the maximum depth has no free slot for the key: the table cannot grow.
    #[error("the table is full: a subtable at the maximum depth {depth} has no free slot")]
    TableFull {
        /// The maximum depth.
        depth: u8,
    },
    /// The memory node ran out of memory (or the tenant's quota) for a block or a subtable.
    #[error("no memory for a new KV block or subtable: {0}")]
    OutOfMemory(MemError),
    /// The remote structure is not a RACE table, or broke an invariant this client relies on.
    #[error("the table's remote data is inconsistent: {0}")]
    Corrupt(&'static str),

    /// No table is published under the name given (see [`open_named`](super::open_named)).
    #[error("no table is published under this name")]
    NoSuchTable,

    // ---- other clients ----
    /// The operation kept losing races with other clients (retries exhausted).
    #[error("gave up after {attempts} attempts lost to concurrent changes")]
    Contended {
        /// Attempts made.
        attempts: u32,
    },
    /// The rights this client took over a block kept ending before its READ arrived, though
    /// each was asked for twice as long as the last: the path (a loaded machine, a slow link)
    /// is slower than the leases. Nothing was decided from the refused reads.
    #[error(
        "the right over a block ended before each of {refusals} reads arrived (leases up to \
         2^11 x `read_lease`): this machine or link is slower than the leases"
    )]
    LeaseTooShort {
        /// READs refused.
        refusals: u32,
    },
    /// A blocking call waited too long for a split by another client (a frozen resizer holding
    /// a lock word that never expires, or a live one slower than the caller's patience).
    #[error("waited {polls} polls for another client's split of a subtable")]
    Stalled {
        /// Polls made while waiting.
        polls: u64,
    },

    /// Another client holds a subtable's lock (a split in progress, or one a stopped resizer
    /// left behind a lock word that never frees): the table cannot be destroyed now.
    #[error("another client is splitting a subtable of the table (or left its lock taken)")]
    Busy,

    // ---- the remote memory ----
    /// The remote-memory system failed in a way the table cannot work around.
    #[error("remote memory: {0}")]
    Memory(MemError),
}

impl From<MemError> for RaceError {
    fn from(e: MemError) -> Self {
        match e {
            MemError::Exhausted => RaceError::OutOfMemory(e),
            other => RaceError::Memory(other),
        }
    }
}
