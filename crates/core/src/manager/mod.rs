//! The memory node's manager.
//!
//! - [`pool`]: header pool, slab buffer pool, memory-window pool.
//! - [`state`]: permission records, per-object holders and waiters, deadlines, counters.
//! - [`core`]: the sans-IO policy core (`begin` → `plan` → `finish` per batch).
pub mod core;
pub mod pool;
pub mod state;

pub use self::core::{
    BindTarget, Finished, ManagerConfig, ManagerCore, NicOp, NicResult, Occupancy, Outgoing,
};
pub use pool::{MwId, SlabConfig};
pub use state::{ClientId, Counters, Techniques};
pub mod node;
pub use node::Isolation;
pub use node::{MemoryNode, NodeConfig, NodeError, NodeStats};
