//! The verbs layer's error type: what a verb call (not a work completion) can fail with.
//!
//! Work requests that fail report a [`WcStatus`](super::work::WcStatus) in their completion
//! instead; these errors are returned synchronously, like the errno of an rdma-core call.

use super::types::QpNumber;
use std::io;

/// A device resource with a fixed capacity from [`DeviceAttr`](super::device::DeviceAttr).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Resource {
    /// Protection domains.
    ProtectionDomain,
    /// Memory regions.
    MemoryRegion,
    /// Memory windows.
    MemoryWindow,
    /// Queue pairs.
    QueuePair,
    /// Completion queues.
    CompletionQueue,
    /// Shared receive queues.
    SharedReceiveQueue,
    /// Slots of a send or receive queue.
    QueueSlot,
    /// Pinned memory (the memlock limit under `Pinning::Require`).
    PinnedMemory,
}

/// Errors of verb calls (`EINVAL`, `ENOMEM`, `EPERM`, `EBUSY`, ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    // ---- API misuse ----
    /// An argument is out of range or inconsistent (`EINVAL`).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The device or transport does not offer this (`EOPNOTSUPP`).
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// Objects from different protection domains were combined (`EPERM`).
    #[error("protection domain mismatch")]
    PdMismatch,
    /// The QP is not in a state that allows this call.
    #[error("QP {qpn:?} is in state {state}, which does not allow {action}")]
    InvalidQpState {
        /// The QP.
        qpn: QpNumber,
        /// Its current state.
        state: &'static str,
        /// What was attempted.
        action: &'static str,
    },
    /// `dereg_mr` on a region that still has windows bound over it (`EBUSY`).
    #[error("memory region still has {0} bound memory window(s)")]
    MrHasBoundWindows(u32),
    /// The object is still in use by children (e.g. destroying a CQ with attached QPs).
    #[error("resource is busy: {0}")]
    Busy(&'static str),

    // ---- resources ----
    /// A fixed-capacity table is full (`ENOMEM`).
    #[error("out of {0:?}")]
    Exhausted(Resource),
    /// Memory could not be mapped or pinned.
    #[error("memory: {0}")]
    Memory(String),

    // ---- connection management ----
    /// The peer refused or failed the connection handshake.
    #[error("connection refused: {0}")]
    ConnectionRefused(String),
    /// The peer spoke a protocol we do not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An I/O error of the transport.
    #[error("transport I/O: {0}")]
    Io(#[from] io::Error),
}

/// Result of verb calls.
pub type VerbsResult<T> = Result<T, VerbsError>;
