//! The memory node's manager.
//!
//! - `pool`: header pool, slab buffer pool, memory-window pool.
//! - `state`: permission records, per-object holders and waiters, deadlines, counters.
//! - `core`: the sans-IO policy core ([`ManagerCore`]: `begin` → `plan` → `finish` per batch).
//! - `tenants`: who owns which object, and with whom it is shared.
//! - `keys`: random key bytes for window binds.
//! - `fast_hash`: the hot path's hash maps (foldhash, seeded at random).
//! - `names`: named roots, per tenant.
//! - [`onesided`]: one-sided allocation's chunks and per-client free queues (OneSidedMW).
//! - [`node`]: the memory node, the driver that pumps the core with verbs.
//!
//! The internal modules are private: what a user (or a test driving the core with a simulated
//! NIC) needs is re-exported here.
mod core;
mod fast_hash;
mod keys;
mod names;
pub mod onesided;
mod pool;
mod state;
mod tenants;

#[cfg(feature = "testing")]
pub use self::core::Mutation;
pub use self::core::{
    BindTarget, Chain, Checks, Finished, LivePermission, ManagerConfig, ManagerCore, NicExecutor,
    NicOp, NicResult, Occupancy, Outgoing, Scrub,
};
pub use keys::RECENT as RECENT_KEYS;
pub use names::NAMES_PER_TENANT;
pub use pool::{MwId, SlabConfig};
pub use state::{ClientId, Counters, Techniques};
pub use tenants::{DEFAULT_TENANT, TenantId, TenantQuota, Usage};
pub mod node;
pub use node::Isolation;
#[cfg(feature = "testing")]
pub use node::ManagerHold;
pub use node::{
    Class, ClassCounters, Held, MemoryNode, NIC_SAMPLE_EVERY, NodeConfig, NodeError, NodeLimits,
    NodeStats, NodeStatus, OneSidedConfig, OneSidedStats, PermissionStatus, Priority,
    PriorityPolicy, PriorityStats, SERVICE_BUCKETS, STATUS_PERMISSIONS, ServiceTimes, SessionEnds,
    SessionStatus, TenantCertificate, TenantPriority, TenantRate, TenantSecret, TenantWeight,
};
