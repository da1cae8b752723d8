//! Splitting a full subtable T (depth d, suffix s) into T (d+1, s) and a new T' (d+1,
//! s | 1<<d), by one resizer at a time, with readers never blocked and writers fenced.
//!
//! Protocol (phases are recorded in T's lock object, so whoever holds the lock next can
//! finish a split its resizer abandoned):
//!
//! 1. **Lock** T's lock object: an exclusive permission over it ([`LockMode::Lease`]), or a
//!    CAS of its lock word ([`LockMode::Word`], vanilla). Then take *split rights* over T
//!    and the directory, and allocate T' under one: their leases are `split_lease`, the
//!    lock's is `split_lease + fence_gap`, and they are extended together, so the split
//!    rights of a resizer that stops end before anyone else can hold the lock.
//! 2. `Freezing`: CAS every slot of T to its frozen form. A writer's CAS of a frozen slot
//!    fails (its expected value is the unfrozen one), so from now on T cannot change under the
//!    resizer; a writer that finds a frozen slot waits. Readers ignore the frozen bit.
//! 3. `Copying`: allocate T' (and its lock object) and record them; read the block header of
//!    every entry to learn its key's hash (the acquires of rights over the blocks pipelined,
//!    each block read as soon as its right comes); write T' whole: headers (d+1, s'), the entries
//!    whose hash has bit d set at the *same positions* (frozen), every other slot frozen
//!    empty. T' is not in the directory yet: nobody else reads it.
//! 4. `Publishing`: CAS every directory entry of T's suffix class to (T, d+1) or (T', d+1)
//!    (from (T, d): a late or repeated CAS fails harmlessly); raise the global depth; then
//!    CAS T's bucket headers to (d+1, s). From here a reader with a stale cache that reads T
//!    for a key of T' sees that T no longer claims it and re-reads the directory.
//! 5. `Thawing`: CAS T' slots to their thawed form (T' is writable from now on), then clear
//!    T's copies of T' entries and thaw the rest. Record `Idle`; unlock.
//!
//! Why readers stay correct: until the headers change (step 4), T holds every key of both
//! halves and nothing can change it (frozen); T' holds identical copies, frozen too. The
//! headers change before any slot of T or T' is thawed or cleared, and a reader re-reads a
//! header after the slots it read (see `ops::probe`), so it never trusts a slot of T read
//! after T stopped claiming the key.
//!
//! A resizer that stops (fail-stop: its connection open, it never releases) leaves the
//! record at some phase; its lock lasts until its lease ends (Lease) or forever (Word). The
//! next lock holder reads the record and finishes the split from that phase — every step is
//! idempotent (CAS from the known old value, or a rewrite of the same bytes computed from the
//! frozen T) — or, before T' exists, rolls it back (thaws T) when no memory is left. A lock
//! holder that finds frozen slots with an `Idle` record (a freeze that never got recorded)
//! thaws them.
//!
//! [`LockMode::Lease`]: crate::race::LockMode::Lease
//! [`LockMode::Word`]: crate::race::LockMode::Word

mod copy;
mod freeze;
mod lock;
mod publish;
mod record;
mod state;

pub use state::{Split, SplitOutcome};

/// Atomics per batch.
const BATCH: usize = 256;
/// Bytes per READ or WRITE batch of blocks or subtable images.
const BYTES: u64 = 64 << 10;
/// Freeze rounds before the resizer gives up on writers that keep changing slots.
const FREEZE_ROUNDS: usize = 4096;
/// Acquires of rights over T's blocks a resizer keeps in flight while it classifies T's
/// entries: half of what a Patronus client may have unanswered at once
/// (`MAX_OUTSTANDING_RPCS`, 16), so that releasing the rights it read meanwhile (as many, at
/// most) finds room beside them — a release that finds the channel full fails, and the right
/// would stay until its lease ends, holding the node's windows.
const CLASSIFY_IN_FLIGHT: usize = 8;
/// Block rights that ended before the resizer read their blocks, acquired again, before it
/// gives up (its read lease is then too short for its round trips).
const REACQUIRE_LIMIT: u32 = 4096;
