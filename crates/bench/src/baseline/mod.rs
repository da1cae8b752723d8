//! The mechanisms Patronus is compared with in §7, on the same software RNIC:
//!
//! | scheme | one-sided access gated by | control request per permission | data structures ([`memory`]) |
//! |--------|---------------------------|--------------------------------|------------------------------|
//! | [`Scheme::Unprot`] | nothing (one whole-pool MR, every right) | none | one-sided under the pool's rkey |
//! | [`Scheme::Mr`] | a real MR per permission | `RegisterMr` / `DeregisterMr` | one-sided under a region's rkey; `Alloc` registers one |
//! | [`Scheme::Qp`] | the client's QP access flags | `OpenQp` / `CloseQp` | — (flags gate a QP, not a region) |
//! | [`Scheme::Rpc`] | — (no one-sided access) | every data op is an RPC | `Read` / `Write` / `Cas` / `Faa` RPCs, pipelined |
//!
//! Every scheme allocates and frees objects with `Alloc` / `Free` (the node's allocator:
//! power-of-two size classes with free lists, zeroed memory) and shares roots by name
//! (`Publish` / `Lookup` / `Unpublish`).
//!
//! - [`proto`]: the request/reply codec (messages up to a 4 KiB payload, sent at their used
//!   length) and the connection's scheme byte.
//! - [`node`]: [`BaselineNode`], the memory node: a pool and its allocator, one server thread,
//!   an SRQ.
//! - [`client`]: [`BaselineClient`], one RC QP carrying both RPCs and one-sided verbs (batches
//!   with one doorbell).
//! - [`memory`]: [`BaselineMemory`], the data structures' `RemoteMemory` and `NamedRoots` on
//!   Unprot, MR and RPC.
//! - [`heartbeat`]: the §7.2.4 "QP polling" failure detector (memory node READs a counter).

pub mod client;
pub mod heartbeat;
pub mod memory;
pub mod node;
pub mod proto;

pub use client::{BaselineClient, BaselineClientConfig};
pub use heartbeat::{
    HeartbeatDescriptor, HeartbeatPoller, HeartbeatStats, HeartbeatTarget, SuspectCallback,
};
pub use memory::{BaselineMemory, BaselineRegion};
pub use node::{BaselineConfig, BaselineNode, BaselineStats};
pub use proto::{BaselineReply, BaselineRequest, FailCode, ProtoError, Scheme, Welcome};

use rnic::{VerbsError, WcStatus};

/// Errors of the baseline mechanisms, grouped by cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BaselineError {
    // ---- local verbs ----
    /// A verb call failed locally.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
    /// The API was misused (too many outstanding requests, oversized buffer).
    #[error("invalid use: {0}")]
    InvalidUse(&'static str),
    // ---- the peer ----
    /// A message could not be decoded.
    #[error("protocol: {0}")]
    Proto(#[from] ProtoError),
    /// No reply or completion within the configured time.
    #[error("timed out")]
    Timeout,
    /// A one-sided operation (or the QP under it) failed with this completion status.
    #[error("remote operation failed: {0}")]
    Remote(WcStatus),
    /// The memory node refused the request.
    #[error("refused by the memory node: {0}")]
    Failed(FailCode),
    /// The memory node answered with a reply that does not fit the request.
    #[error("unexpected reply: {0:?}")]
    Unexpected(BaselineReply),
}

/// CPU time the calling thread has used so far (server and poller threads report theirs).
pub(crate) use rnic::thread_cpu_time as thread_cpu;
