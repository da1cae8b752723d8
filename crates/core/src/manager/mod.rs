//! The memory node's manager.
//!
//! - [`pool`]: header pool, slab buffer pool, memory-window pool.
//! - [`state`]: permission records, per-object holders and waiters, deadlines, counters.
//! - [`core`]: the sans-IO policy core (`begin` → `plan` → `finish` per batch).
//! - [`tenants`]: who owns which object, and with whom it is shared.
//! - [`keys`]: random key bytes for window binds.
pub mod core;
pub mod keys;
pub mod pool;
pub mod state;
pub mod tenants;

pub use self::core::{
    BindTarget, Chain, Checks, Finished, ManagerConfig, ManagerCore, NicExecutor, NicOp, NicResult,
    Occupancy, Outgoing, Scrub,
};
pub use pool::{MwId, SlabConfig};
pub use state::{ClientId, Counters, Techniques};
pub use tenants::{DEFAULT_TENANT, TenantId};
pub mod node;
pub use node::Isolation;
pub use node::{MemoryNode, NodeConfig, NodeError, NodeStats, TenantSecret};
