//! Configuration: the table's shape ([`RaceConfig`], fixed when the table is created and
//! stored in its root) and one client's policy ([`ClientOptions`]: leases, patience).

use super::error::RaceError;
use super::layout::{BLOCK_HEADER, Geometry, MAX_BLOCK_UNITS, UNIT};
use std::time::Duration;

/// How a resizer excludes the others from a subtable's split (Fig 8a compares the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LockMode {
    /// An exclusive permission on the subtable's lock object (Patronus): a resizer that stops
    /// holds it only until its lease ends; the next one then finishes the split.
    #[default]
    Lease,
    /// A lock word in the lock object, taken by CAS (vanilla RACE): a resizer that stops
    /// holds it forever, and writers to that subtable stall.
    Word,
}

impl LockMode {
    pub(crate) fn code(self) -> u8 {
        match self {
            LockMode::Lease => 0,
            LockMode::Word => 1,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(LockMode::Lease),
            1 => Some(LockMode::Word),
            _ => None,
        }
    }
}

/// The shape of a table, fixed at `create` and stored in its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaceConfig {
    /// Depth of the directory at creation: the table starts with `2^initial_depth` subtables.
    pub initial_depth: u8,
    /// The deepest a subtable may split to; the directory holds `2^max_depth` entries.
    pub max_depth: u8,
    /// Bucket groups per subtable (each: two main buckets and the overflow bucket they share).
    pub groups: u32,
    /// Slots per bucket (each bucket also has an 8-byte header).
    pub slots: u8,
    /// Bytes of one KV block object (header, key and value); at most 127 × 64.
    pub block_size: u32,
    /// How resizers lock a subtable.
    pub lock: LockMode,
    /// Seed of the key hash.
    pub seed: u64,
}

impl Default for RaceConfig {
    fn default() -> Self {
        RaceConfig {
            initial_depth: 1,
            max_depth: 12,
            groups: 64,
            slots: 7,
            block_size: 256,
            lock: LockMode::Lease,
            seed: 0x005a_ce0f_ba5e,
        }
    }
}

/// The deepest directory a table may have (an 8-byte entry each: 512 KiB).
pub const MAX_DEPTH_LIMIT: u8 = 16;
/// The largest subtable (a resizer reads one whole).
const MAX_SUBTABLE_BYTES: u64 = 256 << 10;

impl RaceConfig {
    /// Checks that the shape describes a table.
    pub fn validate(&self) -> Result<(), RaceError> {
        if self.max_depth > MAX_DEPTH_LIMIT {
            return Err(RaceError::InvalidConfig("max_depth is at most 16"));
        }
        if self.initial_depth > self.max_depth {
            return Err(RaceError::InvalidConfig(
                "initial_depth is larger than max_depth",
            ));
        }
        if self.groups == 0 || self.groups > 1 << 20 {
            return Err(RaceError::InvalidConfig("groups must be in 1..=2^20"));
        }
        if self.slots == 0 || self.slots > 63 {
            return Err(RaceError::InvalidConfig("slots must be in 1..=63"));
        }
        let geo = Geometry {
            groups: self.groups,
            slots: self.slots,
        };
        if geo.subtable_bytes() > MAX_SUBTABLE_BYTES {
            return Err(RaceError::InvalidConfig(
                "a subtable must fit in 256 KiB (a resizer reads it in one READ)",
            ));
        }
        let b = u64::from(self.block_size);
        if !(BLOCK_HEADER + 1..=MAX_BLOCK_UNITS * UNIT).contains(&b) || b % UNIT != 0 {
            return Err(RaceError::InvalidConfig(
                "block_size must be a multiple of 64 bytes in 64..=8128",
            ));
        }
        Ok(())
    }
}

/// One client's policy: how long its rights last and how patient it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Lease of the rights the client keeps and reuses: subtables, the directory, its own
    /// pre-allocated KV blocks. Renewed one-sidedly when they run low.
    pub lease: Duration,
    /// Lease of a right over another client's KV block, taken to read it.
    pub read_lease: Duration,
    /// A right whose lease ends within this margin is renewed before it is used.
    pub margin: Duration,
    /// KV blocks allocated per allocation round trip (§7.3.1: four).
    pub preallocate: usize,
    /// Rights over blocks kept for later lookups and updates: other clients' blocks it read,
    /// and its own it linked (0: none kept).
    pub reader_cache: usize,
    /// Blocks an update or delete unlinked that are freed together, in one round trip (1:
    /// each as soon as it is unlinked). Up to this many minus one stay allocated, unlinked,
    /// until the batch fills, a lease among them runs low, or the client closes.
    pub free_batch: usize,
    /// Lease of a resizer's rights over the subtables and the directory it changes. Its lock
    /// lasts `fence_gap` longer, so those rights end before anyone else can take the lock.
    pub split_lease: Duration,
    /// See `split_lease`.
    pub fence_gap: Duration,
    /// Polls of a subtable frozen by another client's split before this client tries the
    /// split's lock (to finish the split if its resizer stopped); it also tries once two
    /// lock leases (`split_lease + fence_gap`) passed, whichever comes first. The try does
    /// not wait ([`RemoteMemory::try_acquire`](crate::memory::RemoteMemory::try_acquire)), so
    /// a live resizer keeps its lock; each try is one control round trip to the node.
    pub takeover_after: u32,
    /// Give up rights no longer needed by letting their leases run out (no round trip,
    /// §5.4) rather than releasing them (a revoke RPC each). Lock objects are always
    /// released. Tests on a virtual clock, where leases never run out, turn it off.
    pub lapse: bool,
    /// Attempts an operation makes when it keeps losing races before it gives up.
    pub max_attempts: u32,
    /// Polls a blocking call spends waiting on another client's split before it gives up.
    pub max_wait_polls: u64,
    /// An operation's main batches (the buckets, a block's validation, the slot's CAS) are
    /// started without waiting ([`RemoteMemory::start_execute`]): the step returns `Pending`
    /// while one is in flight, so one thread keeps many logical clients' batches in flight
    /// together (their driver polls them). Off by default: a step then waits for its batch,
    /// as the blocking calls expect.
    ///
    /// [`RemoteMemory::start_execute`]: crate::memory::RemoteMemory::start_execute
    pub pipeline: bool,
    /// A lookup or update reads the block of the key's entry where this client last saw it
    /// in the same batch as the key's buckets (through the right it kept for that entry),
    /// and skips the validation batch when the buckets show the entry unchanged: a hot key's
    /// lookup is one round trip, its update two. A wrong guess costs one READ (or, if its
    /// right had ended, a refused READ), and pauses guessing for a while. Off by default.
    pub speculate: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            lease: Duration::from_millis(2),
            read_lease: Duration::from_millis(1),
            margin: Duration::from_micros(200),
            preallocate: 4,
            reader_cache: 64,
            free_batch: 1,
            split_lease: Duration::from_millis(2),
            fence_gap: Duration::from_millis(2),
            takeover_after: 1024,
            lapse: true,
            max_attempts: 256,
            max_wait_polls: 1 << 20,
            pipeline: false,
            speculate: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert_eq!(RaceConfig::default().validate(), Ok(()));
        let bad = [
            RaceConfig {
                groups: 0,
                ..RaceConfig::default()
            },
            RaceConfig {
                block_size: 100,
                ..RaceConfig::default()
            },
            RaceConfig {
                block_size: 128 * 64,
                ..RaceConfig::default()
            },
            RaceConfig {
                max_depth: 17,
                ..RaceConfig::default()
            },
            RaceConfig {
                initial_depth: 5,
                max_depth: 4,
                ..RaceConfig::default()
            },
            RaceConfig {
                groups: 2048,
                ..RaceConfig::default()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(RaceError::InvalidConfig(_))),
                "{c:?}"
            );
        }
    }
}
