//! # patronus-core — protective remote memory
//!
//! The system layer of the project (FAST'23 *Patronus*): a **manager** on the memory node that
//! grants, extends and revokes permissions by binding memory windows, and a **client library**
//! on compute nodes that reaches remote memory with one-sided verbs through those windows.
//!
//! ```text
//!  client (CN-lib)  ── control RPC (SEND/RECV, SRQ) ──▶  manager (memory node)
//!       │                                                   │ binds windows, leases
//!       └──── one-sided READ/WRITE/CAS/FAA through MWs ─────┘ (NIC only, no MN CPU)
//! ```
//!
//! Everything here is written against `rnic`'s provider traits.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod cluster;
pub mod manager;
pub mod proto;
pub mod rpc;
