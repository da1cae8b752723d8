//! One-sided data structures (ODS, §6.1 of the Patronus paper) on protected remote memory.
//!
//! The structures are written against [`RemoteMemory`], the small interface they need from a
//! remote-memory system: allocate (several objects per round trip), acquire, release and free
//! permissions, keep them alive, run batches of READ/WRITE/CAS/FAA with one doorbell, and
//! publish or look up named roots. [`PatronusMemory`] implements it on the Patronus client
//! library; the bench crate implements it for the mechanisms Patronus is compared with
//! (Unprot, MR, RPC), so the same workload code runs on each.
//!
//! - [`memory`]: the interface, its operations and errors.
//! - [`patronus`]: the interface on a Patronus [`Client`](patronus_core::client::Client).
//! - [`race`]: RACE hashing, an extendible hash table of one-sided operations.

pub mod memory;
pub mod patronus;
pub mod race;

pub use memory::{MemError, MemOp, MemOut, Region, RemoteMemory};
pub use patronus::PatronusMemory;
