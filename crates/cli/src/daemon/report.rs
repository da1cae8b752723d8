//! The status report: what `/status` serves as JSON and `patronus status` prints.
//!
//! Invariant: built from [`NodeStatus`], which holds no rkeys and no secrets; nothing is
//! added here that could open memory.

use patronus_core::manager::{Class, NodeStats, NodeStatus};
use patronus_core::proto::messages::{Access, Mode};
use serde::{Deserialize, Serialize};

/// A lease ending within this is "about to expire".
pub const EXPIRING_MS: f64 = 1000.0;

/// The node as a whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// Where clients connect.
    pub listen: String,
    /// Since the daemon started, s.
    pub uptime_s: f64,
    /// Manager shards.
    pub shards: usize,
    /// Pool, bytes.
    pub pool_bytes: u64,
    /// Held by live objects and headers, bytes.
    pub pool_bytes_in_use: u64,
    /// Allocated objects.
    pub live_objects: usize,
    /// Live permissions (all of them, also those not listed).
    pub live_permissions: usize,
    /// Free / all permission headers.
    pub headers: (usize, usize),
    /// Free / all memory windows (of the shared pool's domain).
    pub windows: (usize, usize),
    /// Client sessions.
    pub sessions: usize,
    /// Manager CPU, s: all, and handling batches.
    pub manager_cpu_s: f64,
    /// See `manager_cpu_s`.
    pub manager_busy_cpu_s: f64,
    /// Permissions granted and ended so far.
    pub granted: u64,
    /// See `granted`.
    pub ended: u64,
    /// Whether the node is draining (shutting down).
    pub draining: bool,
    /// Whether it serves although its NIC does not enforce window bounds (started with
    /// `allow_unenforced_window_bounds` on Soft-RoCE): clients are not isolated within the
    /// pool region.
    #[serde(default)]
    pub unenforced_window_bounds: bool,
}

/// A live permission (no rkey).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PermissionRow {
    /// Shard.
    pub shard: usize,
    /// Holder.
    pub client: u32,
    /// Holder's tenant.
    pub tenant: Option<u32>,
    /// First byte, hex.
    pub addr: String,
    /// Bytes.
    pub len: u64,
    /// "read" or "read-write".
    pub access: String,
    /// "shared" or "exclusive".
    pub mode: String,
    /// Lease left, ms.
    pub lease_left_ms: f64,
    /// Maximum lifetime left, ms.
    pub hard_left_ms: f64,
    /// Whether its holder may still extend it (false: others wait, it ends with its lease).
    pub extendable: bool,
}

/// A client session on one shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Shard.
    pub shard: usize,
    /// Client.
    pub client: u32,
    /// Tenant (none: not authenticated yet).
    pub tenant: Option<u32>,
    /// Where it connected from.
    pub from: Option<String>,
    /// Connected for, s.
    pub connected_s: f64,
    /// Control QP state.
    pub control_qp: String,
    /// Data QPs, "slot:STATE".
    pub data_qps: Vec<String>,
}

/// What `/status` serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The node.
    pub node: NodeSummary,
    /// Live permissions, the soonest to end first (at most 1000).
    pub permissions: Vec<PermissionRow>,
    /// How many of them end within [`EXPIRING_MS`].
    pub expiring_soon: usize,
    /// Client sessions.
    pub sessions: Vec<SessionRow>,
    /// What the manager's fair queue gave each class of senders.
    #[serde(default)]
    pub shares: Vec<ShareRow>,
    /// The software priority policy's state (`None`: no tenant has a priority).
    #[serde(default)]
    pub priority: Option<PriorityRow>,
}

/// What the software priority policy did (tenants of high and low priority configured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriorityRow {
    /// Whether low-priority tenants' data QPs are throttled now.
    pub throttled: bool,
    /// The high-priority tenants' one-sided operations a second in the last period.
    pub high_ops_per_s: u64,
    /// Times it started throttling, and lifted the limit.
    pub engaged: u64,
    /// See `engaged`.
    pub lifted: u64,
    /// Periods it decided on.
    pub periods: u64,
}

/// One class of the manager's fair queue: a tenant, or the connections not authenticated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    /// `unauthenticated` or `tenant-N`.
    pub class: String,
    /// Control messages served.
    pub served: u64,
    /// Cost units charged for them.
    pub cost_units: u64,
    /// Messages dropped: their session had its share queued already.
    pub refused: u64,
    /// Mean time a served message waited in the queue, ms.
    pub mean_queue_delay_ms: f64,
    /// Longest, ms.
    pub max_queue_delay_ms: f64,
}

impl StatusReport {
    /// The report of `status`, `stats`, for a node listening at `listen`.
    pub fn new(
        listen: &str,
        uptime_s: f64,
        pool_bytes: u64,
        (draining, unenforced_window_bounds): (bool, bool),
        status: &NodeStatus,
        stats: &NodeStats,
    ) -> Self {
        let occ = stats.occupancy.unwrap_or_default();
        let permissions: Vec<PermissionRow> = status
            .permissions
            .iter()
            .map(|s| (s, &s.permission))
            .map(|(s, p)| PermissionRow {
                shard: s.shard,
                client: p.client,
                tenant: s.tenant,
                addr: format!("{:#x}", p.addr),
                len: p.len,
                access: match p.access {
                    Access::Read => "read",
                    Access::ReadWrite => "read-write",
                }
                .into(),
                mode: match p.mode {
                    Mode::Shared => "shared",
                    Mode::Exclusive => "exclusive",
                }
                .into(),
                lease_left_ms: p.lease_left.as_secs_f64() * 1e3,
                hard_left_ms: p.hard_left.as_secs_f64() * 1e3,
                extendable: p.extendable,
            })
            .collect();
        let expiring_soon = permissions
            .iter()
            .filter(|p| p.lease_left_ms < EXPIRING_MS)
            .count();
        StatusReport {
            node: NodeSummary {
                listen: listen.to_string(),
                uptime_s,
                shards: stats.shards,
                pool_bytes,
                pool_bytes_in_use: stats.pool_bytes_in_use,
                live_objects: occ.live_objects,
                live_permissions: status.permissions_total,
                headers: (occ.headers_free, occ.headers_capacity),
                windows: (occ.mw_free, occ.mw_capacity),
                sessions: stats.held.sessions,
                manager_cpu_s: stats.manager_cpu.as_secs_f64(),
                manager_busy_cpu_s: stats.busy_cpu.as_secs_f64(),
                granted: stats.counters.granted,
                ended: stats.counters.ended,
                draining,
                unenforced_window_bounds,
            },
            permissions,
            expiring_soon,
            sessions: status
                .sessions
                .iter()
                .map(|s| SessionRow {
                    shard: s.shard,
                    client: s.client,
                    tenant: s.tenant,
                    from: s.from.map(|a| a.to_string()),
                    connected_s: s.connected.as_secs_f64(),
                    control_qp: s.control_qp.name().into(),
                    data_qps: s
                        .data_qps
                        .iter()
                        .map(|(slot, st)| format!("{slot}:{}", st.name()))
                        .collect(),
                })
                .collect(),
            shares: stats
                .classes
                .iter()
                .map(|(class, c)| ShareRow {
                    class: match class {
                        Class::Unauthenticated => "unauthenticated".into(),
                        Class::Tenant(t) => format!("tenant-{t}"),
                    },
                    served: c.served,
                    cost_units: c.cost_units,
                    refused: c.refused,
                    mean_queue_delay_ms: c.queue_delay_us as f64 / 1e3 / c.served.max(1) as f64,
                    max_queue_delay_ms: c.max_queue_delay_us as f64 / 1e3,
                })
                .collect(),
            priority: (stats.priority.periods > 0).then_some(PriorityRow {
                throttled: stats.priority.throttled,
                high_ops_per_s: stats.priority.high_ops_per_s,
                engaged: stats.priority.engaged,
                lifted: stats.priority.lifted,
                periods: stats.priority.periods,
            }),
        }
    }
}
