//! One-sided data structures (ODS, §6.1 of the Patronus paper) on protected remote memory.
//!
//! The structures are written against [`RemoteMemory`], the small interface they need from a
//! remote-memory system: allocate (several objects per round trip), acquire, release and free
//! permissions, keep them alive, and run batches of READ/WRITE/CAS/FAA with one doorbell;
//! [`NamedRoots`] lets independent clients find a structure's root by name.
//! [`PatronusMemory`] implements both on the Patronus client library; the bench crate
//! implements them for the mechanisms Patronus is compared with (Unprot, MR, RPC), so the same
//! workload code runs on each.
//!
//! - [`memory`]: the interface, its operations and errors.
//! - [`patronus`]: the interface on the Patronus client library, over one memory node (a
//!   [`Client`](patronus_core::client::Client)) or several (a
//!   [`NodeSet`](patronus_core::nodes::NodeSet)), so every structure runs over several memory
//!   nodes unchanged (`docs/multi-node.md`).
//! - [`queue`]: a lock-free segmented FIFO queue (segments of N entries, FAA to claim a slot,
//!   CAS to publish and take it; drained segments freed).
//! - [`race`]: RACE hashing, an extendible hash table of one-sided operations.

#![warn(missing_docs)]

#[cfg(feature = "testing")]
pub mod conformance;
pub mod memory;
pub mod patronus;
pub mod queue;
pub mod race;

pub use memory::{Acquiring, Executing, MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
pub use patronus::PatronusMemory;
