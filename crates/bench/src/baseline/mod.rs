//! The mechanisms Patronus is compared with in §7, on the same software RNIC:
//!
//! | scheme | one-sided access gated by | control request per permission |
//! |--------|---------------------------|--------------------------------|
//! | [`Scheme::Unprot`] | nothing (one whole-pool MR, every right) | none |
//! | [`Scheme::Mr`] | a real MR per permission | `RegisterMr` / `DeregisterMr` |
//! | [`Scheme::Qp`] | the client's QP access flags | `OpenQp` / `CloseQp` |
//! | [`Scheme::Rpc`] | — (no one-sided access) | every `Read` / `Write` is an RPC |
//!
//! - [`proto`]: the fixed-slot request/reply codec and the connection's scheme byte.
//! - [`node`]: [`BaselineNode`], the memory node: a pool, one server thread, an SRQ.
//! - [`client`]: [`BaselineClient`], one RC QP carrying both RPCs and one-sided verbs.
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
