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
//!
//! What an application needs is at the root: a [`Client`] (control channel plus data path)
//! with its [`ClientConfig`], the [`Perm`]issions it holds with their [`Access`] and
//! [`Mode`], [`Batch`]es of one-sided ops, and the errors; a [`MemoryNode`] with its
//! [`NodeConfig`]; a [`NodeSet`] over several memory nodes, with [`GlobalAddr`]esses
//! ([`nodes`], `docs/multi-node.md`); with the feature `cluster`, an embedded cluster for
//! tests, demos and benchmarks (`cluster`). The modules hold the rest:
//! [`proto`] (wire formats), [`rpc`] (the control channel), [`manager`] (the policy core and
//! the memory node's driver).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod manager;
pub mod nic_check;
pub mod nodes;
pub mod proto;
pub mod rpc;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{Batch, Client, ClientConfig, ClientError, LongLease, OpResult, Perm};
#[cfg(feature = "cluster")]
pub use cluster::{ClusterError, DeviceRole, EmbeddedCluster, Link};
pub use manager::{
    Isolation, MemoryNode, NodeConfig, NodeError, NodeStats, TenantCertificate, TenantId,
    TenantSecret,
};
pub use nodes::{GlobalAddr, NodeId, NodePerm, NodeSet, NodeSetConfig, NodeSetError};
pub use proto::messages::{Access, Mode, PermissionId};
pub use rpc::RpcError;
