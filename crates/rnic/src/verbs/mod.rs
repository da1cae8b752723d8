//! The verbs contract: value types, work requests and completions, and the provider traits.
//!
//! Semantics follow rdma-core's documented behaviour (`ibv_post_send(3)`, `ibv_bind_mw(3)`,
//! `ibv_alloc_mw(3)`) and the InfiniBand specification; see `docs/verbs-contract.md`.

pub mod chain;
pub mod clock;
pub mod device;
pub mod error;
pub mod provider;
pub mod service;
pub mod types;
pub mod work;

pub use chain::{CrossChannel, WqeRing, wqe};
pub use clock::{
    Clock, RealClock, ThreadCpuClock, Timestamp, VirtualClock, process_cpu_time, thread_cpu_time,
};
pub use device::{AsyncEvent, DeviceAttr};
pub use error::{Resource, VerbsError, VerbsResult};
pub use provider::{
    AcceptPolicy, CompletionChannel, CompletionQueue, Context, MemoryBuffer, MemoryRegion,
    MemoryWindow, Peer, ProtectionDomain, Provider, QpInit, QpState, QpTiming, QueuePair,
    SharedReceiveQueue,
};
pub use service::{MAX_WEIGHT, QpServed, QpService, RateLimit, TokenRate};
pub use types::{
    AccessFlags, CqNumber, Lkey, MemoryKey, MwType, PdId, Psn, QpNumber, Rkey, VirtAddr,
};
pub use work::{
    BindInfo, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WorkQueue,
};
