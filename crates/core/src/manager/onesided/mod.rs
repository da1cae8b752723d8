//! One-sided allocation (OneSidedMW): allocating and freeing with no CPU of the memory node.
//!
//! The node carves an arena into equal chunks, each with a type-2 window and an entry in a
//! window table. Every client that allocates one-sided has a queue of its own: a ring of
//! slots the manager fills in the background (its *tail*), each with a chunk and an
//! allocation chain pre-posted on the NIC for it, and a *head*: the allocations the client's
//! chains have run, with no CPU of the node (`docs/onesided.md` has the design and why the
//! queue is per client). So:
//!
//! - a chunk between the head and the tail is *reserved* for its client (charged to the
//!   client's tenant when queued: the queue is the client's budget);
//! - a chunk behind the head is *allocated*: its chain bound its window for the client's
//!   access QP and told the client; the manager learns it when it reads the head
//!   ([`OneSidedChunks::observe_head`]);
//! - a chunk its client freed (a SEND_WITH_INV of its key arriving on the access QP it is
//!   bound to: the NIC refuses anyone else's) is *dirty* until the manager has zeroed it, then
//!   *free* for any client's queue.
//!
//! A head past the tail means allocations that found no slot filled (an overrun: counted, and
//! the caller repairs the queue). A client that leaves gives back everything it had queued or
//! allocated, zeroed before reuse.
//!
//! Invariants: every chunk is in exactly one state; a client never has more than its budget
//! reserved and allocated together; a chunk reaches another client's queue only after it was
//! zeroed; a window's key byte changes every time its chunk is queued again, so a key of an
//! earlier allocation never works on a later one.

//! `chunks` keeps the bookkeeping (sans-IO); `chains` posts the NIC's part: the arena's
//! windows and, on each client's allocation QP, one chain per filled slot.

mod chains;
mod chunks;

pub use chains::{AllocChains, Arena, ChunkGrant, GRANT_BYTES};
pub use chunks::{ChunkId, ChunkState, FreeError, HeadSeen, OneSidedChunks, Refill};
