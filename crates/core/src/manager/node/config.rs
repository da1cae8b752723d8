//! The memory node's configuration, its errors and what it reports.

#[cfg(doc)]
use super::super::core::ManagerCore;
use super::super::core::{Occupancy, Scrub};
use super::super::pool::SlabConfig;
use super::super::state::{Counters, Techniques};
use super::super::tenants::{TenantId, TenantQuota};
use super::fair::{Class, ClassCounters};
use super::sessions::SessionEnds;
use super::status::ServiceTimes;
use crate::proto::shards::ShardError;
use rnic::{QpTiming, VerbsError};
use std::collections::BTreeMap;
use std::time::Duration;

/// Memory-node configuration.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Bytes of buffer pool.
    pub pool_bytes: u64,
    /// Headers in the header pool.
    pub header_count: usize,
    /// Pre-allocated memory windows.
    pub mw_count: u32,
    /// §5.4 techniques.
    pub techniques: Techniques,
    /// Maximum lifetime of a permission, µs.
    pub max_lifetime_us: u64,
    /// Delay unbinding freed buffers only while this many bytes are free.
    pub buffer_watermark: u64,
    /// Receive slots in the shared receive queue (when `limits.control_credits` is 0).
    pub srq_depth: u32,
    /// Most requests handled in one batch.
    pub max_batch: usize,
    /// How long, µs, a manager thread with nothing to do keeps polling its completion queue
    /// before it sleeps on it (0: it sleeps at once). Spinning saves the wake-up of the
    /// next request that comes within it; it costs a core the node's NIC engines may need
    /// (the soft NIC's, which share the node's few cores), and over TCP each idle poll
    /// reads the sockets of QPs that await acknowledgements.
    pub idle_spin_us: u64,
    /// How late, µs, the manager may collect an expired lease when no request arrives to batch
    /// it with (the paper's manager polls for expired permissions periodically, §4.2). A lease
    /// is never collected early; a later collection lets expiries share a batch with grants
    /// (so their windows are handed over) instead of waking the manager once per expiry.
    pub expiry_slack_us: u64,
    /// Timing of the node's QPs.
    pub qp_timing: QpTiming,
    /// Slab classes.
    pub slab: SlabConfig,
    /// How clients are isolated from each other.
    pub isolation: Isolation,
    /// Serve although the NIC protection self-check found that the device does not check
    /// accesses against a window's own range (Soft-RoCE): a client can then reach the whole
    /// pool region its windows lie in. The node says so in its log, status and metrics.
    pub allow_unenforced_window_bounds: bool,
    /// Windows pre-allocated per client when each client has its own PD.
    pub windows_per_client: u32,
    /// When freed memory is zeroed ([`Scrub::Off`] only to measure what scrubbing costs).
    pub scrub: Scrub,
    /// Longest a conflicting acquire may wait for the holders to leave, µs.
    pub max_wait_us: u64,
    /// Tenants and their secrets. Empty: every client acts for the one default tenant (a
    /// single application); otherwise a client must present one of these to be served.
    pub tenants: Vec<TenantSecret>,
    /// Tenants known by their clients' certificates (mutual TLS): a client whose verified
    /// certificate has one of these common names acts for that tenant, with no secret. Each
    /// tenant must be one of [`NodeConfig::tenants`].
    pub tenant_certificates: Vec<TenantCertificate>,
    /// The manager draws each bind's key byte at random (none of the window's recent ones)
    /// instead of leaving the NIC to step it by one; see `manager::keys`.
    pub random_key_bytes: bool,
    /// Seed of those draws (`None`: from the OS; tests set one to replay exactly).
    pub key_seed: Option<u64>,
    /// The shortest lease the manager grants, µs (a shorter request gets this much, within
    /// the maximum lifetime).
    pub lease_floor_us: u64,
    /// The manager also keeps every lease above this many of its last busy turns, and refuses
    /// new permissions as overloaded when that exceeds the maximum lifetime (0: neither).
    pub lease_floor_turns: u32,
    /// Manager threads. Each owns a slice of the headers, buffers and windows and its own
    /// receive queue; clients connect to every shard and route requests by address (see
    /// `proto::shards`). Conflicts are per object, so shards never coordinate.
    pub shards: usize,
    /// What a client may hold and how long a silent one is kept (see `docs/threat-model.md`).
    pub limits: NodeLimits,
    /// Tenants' shares of the manager threads, relative to each other (a tenant not named
    /// here weighs 1): while several tenants' requests wait, each is served in proportion to
    /// its weight (deficit round robin, charged by what requests cost). Each must name a
    /// configured tenant (or the default tenant, when none is).
    pub tenant_weights: Vec<TenantWeight>,
    /// Tenants' one-sided rate limits, enforced by the NIC per data QP (a burst of a tenth of
    /// a second's worth). Needs a device that enforces QP rate limits
    /// (`DeviceAttr::qp_rate_limit`: the soft NIC over TCP); the node refuses to start
    /// without one. A tenant's weight also weighs its connections in the NIC's engines.
    pub tenant_rates: Vec<TenantRate>,
    /// Tenants' priorities for the NIC's one-sided service (a tenant not named here is
    /// [`Priority::Normal`]). With any configured, the node runs the software priority
    /// policy of [`NodeConfig::priority_policy`] (LITE's SW-Pri, §4.1): it rate-limits the
    /// data QPs of [`Priority::Low`] tenants while the [`Priority::High`] tenants' data QPs
    /// are busy, and lifts the limit when they are not. Needs a device that enforces QP rate
    /// limits and counts what it served per QP (`DeviceAttr::qp_rate_limit`,
    /// `QueuePair::served`: the soft NIC over TCP); the node refuses to start without one.
    /// Each must name a configured tenant (or the default tenant, when none is).
    pub tenant_priorities: Vec<TenantPriority>,
    /// The software priority policy (used only with [`NodeConfig::tenant_priorities`]).
    pub priority_policy: PriorityPolicy,
    /// One-sided allocation (`docs/onesided.md`): clients allocate chunks of a dedicated arena
    /// by SEND, with no CPU of the node on the path. `None` (the default): RPC allocation only.
    /// Needs type-2 isolation and a device with cross-channel verbs and binds for a named QP.
    pub one_sided: Option<OneSidedConfig>,
}

/// The one-sided allocator's arena and queues ([`NodeConfig::one_sided`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneSidedConfig {
    /// Bytes of a chunk.
    pub chunk_bytes: u64,
    /// Chunks in the arena.
    pub chunks: u32,
    /// Chunks each client may have queued and allocated together (its queue's slots).
    pub per_client: u32,
}

impl Default for OneSidedConfig {
    fn default() -> Self {
        OneSidedConfig {
            chunk_bytes: 8 << 10,
            chunks: 4096,
            per_client: 16,
        }
    }
}

/// A tenant's priority ([`NodeConfig::tenant_priorities`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Its one-sided load is watched: while it is high, low-priority tenants are throttled.
    High,
    /// Neither watched nor throttled (every tenant not named).
    #[default]
    Normal,
    /// Throttled while the high-priority load is high.
    Low,
}

/// A tenant's priority ([`NodeConfig::tenant_priorities`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantPriority {
    /// The tenant.
    pub tenant: TenantId,
    /// Its priority.
    pub priority: Priority,
}

/// The software priority policy ([`NodeConfig::priority_policy`]): every `period_us` of the
/// node's clock, shard 0 reads what the NIC served the high-priority tenants' data QPs
/// (`QueuePair::served`) and decides whether the low-priority tenants' data QPs are
/// throttled. It throttles when the high-priority tenants' one-sided operations reach
/// `high_load_ops_per_s` (LITE's policy 1), and lifts the limit once they stay below
/// `release_ops_per_s` for `release_periods` periods in a row (policy 2, with hysteresis so
/// that a pause of a few periods does not flap the limit). Lifting restores each tenant's
/// own rate ([`NodeConfig::tenant_rates`]) or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityPolicy {
    /// How often the decision is taken, µs of the node's clock (at least 1 ms; the manager
    /// looks at least every 10 ms, so a shorter period is taken as often as it looks).
    pub period_us: u64,
    /// High-priority one-sided operations a second (all its data QPs together) at or above
    /// which low-priority tenants are throttled.
    pub high_load_ops_per_s: u64,
    /// Below this (at most `high_load_ops_per_s`), for `release_periods` periods in a row,
    /// the limit is lifted.
    pub release_ops_per_s: u64,
    /// See `release_ops_per_s` (at least 1).
    pub release_periods: u32,
    /// The rate of each low-priority data QP while throttled: operations a second (`None`:
    /// no operation limit)...
    pub throttled_ops_per_s: Option<u64>,
    /// ...and request bytes a second (`None`: no byte limit). At least one is set; where the
    /// tenant has its own rate too, the stricter of the two holds in each dimension.
    pub throttled_bytes_per_s: Option<u64>,
}

impl Default for PriorityPolicy {
    fn default() -> Self {
        PriorityPolicy {
            period_us: 100_000,
            high_load_ops_per_s: 10_000,
            release_ops_per_s: 5_000,
            release_periods: 5,
            throttled_ops_per_s: Some(1_000),
            throttled_bytes_per_s: None,
        }
    }
}

impl PriorityPolicy {
    /// Checks the policy's own invariants (field docs).
    pub fn validate(&self) -> Result<(), NodeError> {
        if self.period_us < 1_000 {
            return Err(NodeError::Config(
                "the priority period must be at least 1 ms",
            ));
        }
        if self.high_load_ops_per_s == 0 || self.release_ops_per_s > self.high_load_ops_per_s {
            return Err(NodeError::Config(
                "the priority policy needs 0 < release_ops_per_s <= high_load_ops_per_s",
            ));
        }
        if self.release_periods == 0 {
            return Err(NodeError::Config(
                "the priority policy's release_periods must be at least 1",
            ));
        }
        match (self.throttled_ops_per_s, self.throttled_bytes_per_s) {
            (None, None) => Err(NodeError::Config(
                "the priority policy needs a throttled rate (operations or bytes a second)",
            )),
            (Some(0), _) | (_, Some(0)) => Err(NodeError::Config(
                "the priority policy's throttled rate must not be 0",
            )),
            _ => Ok(()),
        }
    }
}

/// A tenant's one-sided rate limits, per data QP ([`NodeConfig::tenant_rates`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantRate {
    /// The tenant.
    pub tenant: TenantId,
    /// One-sided operations each of its data QPs may have served a second (`None`: no limit).
    pub ops_per_s: Option<u64>,
    /// Request bytes each of its data QPs may have served a second (`None`: no limit).
    pub bytes_per_s: Option<u64>,
}

/// A tenant's weight in the manager's fair queue ([`NodeConfig::tenant_weights`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantWeight {
    /// The tenant.
    pub tenant: TenantId,
    /// Its weight, at least 1.
    pub weight: u32,
}

/// Limits that keep one client from holding the node's resources for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// A client silent on the control path of every shard this long, µs, is disconnected and
    /// everything it held is reclaimed (raised to twice the maximum lifetime: a client holding
    /// a permission talks to the node at least that often).
    pub idle_timeout_us: u64,
    /// A connection that has not authenticated (`Hello`) this long after it was accepted, µs,
    /// is closed.
    pub hello_timeout_us: u64,
    /// Control requests a client may have in flight per shard (flow control, enforced by the
    /// NIC: each control connection gets its own receive queue of this many slots, so a client
    /// that sends more meets receiver-not-ready on its own QP only). At least the client
    /// library's [`MAX_OUTSTANDING_RPCS`](crate::proto::messages::MAX_OUTSTANDING_RPCS). 0: one shared
    /// receive queue of `srq_depth` slots for all (the paper's design; one client's flood
    /// starves the others).
    pub control_credits: u32,
    /// Control connections per shard (each holds `control_credits` receive slots).
    pub max_connections: u32,
    /// What each configured tenant may hold: memory, live permissions, exclusive ones.
    /// `None`: with tenants configured, an equal share of the node each (three quarters of the
    /// memory pool's share, the rest being slab rounding; the headers and, with one PD for
    /// all, the windows); without, no limit (one application).
    /// Quotas are reservations: the node refuses to start if the configured tenants' quotas
    /// add up to more than it has, so a tenant within its quota is never refused because of
    /// another.
    pub tenant_quota: Option<TenantQuota>,
    /// What one client may hold at once, whatever its tenant: bytes of the live objects it
    /// allocated, live permissions, exclusive ones (its objects stay its tenant's, and count
    /// against no client, once it leaves). `None`: no per-client limit. `patronus serve`
    /// without tenants sets a share of the node ([`NodeConfig::client_share`]), since the
    /// default tenant's objects outlive their clients and anyone may connect.
    pub client_quota: Option<TenantQuota>,
    /// Access faults (data reconnections) a tenant may cause at once, and how many a second
    /// it regains: past them its reconnections are refused until the budget refills.
    pub fault_burst: u32,
    /// See `fault_burst`.
    pub faults_per_s: u32,
    /// Messages a second a control connection that has not authenticated may have the NIC
    /// serve (a burst of its credits first, enough for its `Hello`), where the device
    /// enforces QP rate limits (the soft NIC over TCP).
    pub unauthenticated_ops_per_s: u32,
    /// Clients (sessions) each tenant may have connected at once. `None`: with tenants
    /// configured, an equal share of `max_connections`; without, `max_connections`.
    pub sessions_per_tenant: Option<u32>,
    /// Clients (sessions) connected at once from one IP address, so that one host cannot
    /// take every connection (clients in the node's own process are not counted). Addresses
    /// are counted by prefix (`address_prefix_v4`, `address_prefix_v6`); every loopback
    /// address is one.
    pub sessions_per_address: u32,
    /// Bits of an IPv4 address that `sessions_per_address` counts by (32: each address; 24:
    /// each /24 network).
    pub address_prefix_v4: u8,
    /// Bits of an IPv6 address it counts by (64: a host's usual /64).
    pub address_prefix_v6: u8,
    /// Count loopback addresses (127.0.0.0/8, ::1) like any other, by prefix, instead of all
    /// as this one host: for tests and set-ups that play several hosts on one machine.
    pub loopback_hosts: bool,
    /// New sessions (clients' first control connections) the node accepts a second, all
    /// clients together, and at once: past them, first connections are refused at the
    /// handshake until the bucket refills.
    pub new_sessions_per_s: u32,
    /// See `new_sessions_per_s`.
    pub new_session_burst: u32,
    /// New sessions each tenant may open a second (the burst is twice this): past it, a
    /// session's first `Hello` is refused (`Overloaded`). `None`: with tenants configured, an
    /// equal share of `new_sessions_per_s`; without, `new_sessions_per_s`.
    pub tenant_new_sessions_per_s: Option<u32>,
    /// Cost units a round of the manager's fair queue gives all unauthenticated sessions
    /// together (a tenant of weight 1 gets 4; see `manager::node::fair`): what connections
    /// that have not said `Hello` may take of the manager while tenants are busy.
    pub unauthenticated_quantum: u32,
    /// The manager's fair queue (on by default). Off, each turn handles what it received in
    /// arrival order, as before the queue existed: only to measure what fairness costs.
    pub fair_shares: bool,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            idle_timeout_us: 30_000_000,
            hello_timeout_us: 2_000_000,
            control_credits: crate::proto::messages::MAX_OUTSTANDING_RPCS,
            max_connections: 1024,
            tenant_quota: None,
            client_quota: None,
            sessions_per_tenant: None,
            fault_burst: 1024,
            faults_per_s: 100,
            unauthenticated_ops_per_s: 100,
            sessions_per_address: 512,
            address_prefix_v4: 32,
            address_prefix_v6: 64,
            loopback_hosts: false,
            new_sessions_per_s: 200,
            new_session_burst: 400,
            tenant_new_sessions_per_s: None,
            unauthenticated_quantum: 1,
            fair_shares: true,
        }
    }
}

impl NodeConfig {
    /// Each tenant's quota (see [`NodeLimits::tenant_quota`]), checked against what the node
    /// has: the configured tenants' quotas must fit in it together.
    pub fn tenant_quota(&self) -> Result<TenantQuota, NodeError> {
        let tenants = self.tenants.len() as u64;
        // Permissions a node can hold at once: each needs a header (embedded or pooled) and
        // up to two windows, which with a PD per client are the client's own.
        let windows = if self.isolation == Isolation::SharedPd {
            u64::from(self.mw_count) / 2
        } else {
            u64::MAX
        };
        let permissions = (self.header_count as u64).min(windows);
        let quota = match (self.limits.tenant_quota, tenants) {
            (Some(q), _) => q,
            (None, 0) => return Ok(TenantQuota::UNLIMITED),
            // Three quarters of an equal share of the pool: objects come in slab classes, and
            // the slabs' partial fills and tails are room no tenant can count on.
            (None, n) => TenantQuota {
                memory_bytes: self.pool_bytes / n / 4 * 3,
                permissions: (permissions / n).min(u32::MAX as u64) as u32,
                exclusive: (permissions / n).min(u32::MAX as u64) as u32,
            },
        };
        let n = tenants.max(1);
        if quota.memory_bytes != u64::MAX && quota.memory_bytes.saturating_mul(n) > self.pool_bytes
        {
            return Err(NodeError::Config(
                "the tenants' memory quotas add up to more than the pool",
            ));
        }
        if quota.permissions != u32::MAX
            && u64::from(quota.permissions).saturating_mul(n) > permissions
        {
            return Err(NodeError::Config(
                "the tenants' permission quotas add up to more than the node's headers and windows",
            ));
        }
        Ok(quota)
    }

    /// `percent` of what the node can hold (three quarters of the pool, as a single tenant's
    /// default quota, and the permissions its headers and windows allow): a per-client quota
    /// ([`NodeLimits::client_quota`]).
    pub fn client_share(&self, percent: u32) -> TenantQuota {
        let whole = NodeConfig {
            tenants: vec![TenantSecret {
                tenant: 1,
                secret: 0,
            }],
            limits: NodeLimits {
                tenant_quota: None,
                ..self.limits
            },
            ..self.clone()
        };
        let q = whole.tenant_quota().unwrap_or(TenantQuota::UNLIMITED);
        let pct = u64::from(percent.min(100));
        let part = |v: u64| (v * pct / 100).max(1);
        TenantQuota {
            memory_bytes: part(q.memory_bytes),
            permissions: part(u64::from(q.permissions)) as u32,
            exclusive: part(u64::from(q.exclusive)) as u32,
        }
    }

    /// Sessions each tenant may have (see [`NodeLimits::sessions_per_tenant`]).
    pub fn sessions_per_tenant(&self) -> u32 {
        let n = (self.tenants.len() as u32).max(1);
        self.limits
            .sessions_per_tenant
            .unwrap_or(self.limits.max_connections / n)
            .max(1)
    }

    /// New sessions each tenant may open a second (see
    /// [`NodeLimits::tenant_new_sessions_per_s`]).
    pub fn tenant_new_sessions_per_s(&self) -> u32 {
        let n = (self.tenants.len() as u32).max(1);
        self.limits
            .tenant_new_sessions_per_s
            .unwrap_or(self.limits.new_sessions_per_s / n)
            .max(1)
    }
}

/// A tenant the memory node serves, and the secret its clients authenticate with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TenantSecret {
    /// The tenant.
    pub tenant: TenantId,
    /// Its secret.
    pub secret: u64,
}

impl std::fmt::Debug for TenantSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantSecret")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive() // the secret stays out of logs
    }
}

/// A tenant known by the common name of its clients' certificates (see
/// [`NodeConfig::tenant_certificates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantCertificate {
    /// The common name in the certificate's subject.
    pub name: String,
    /// The tenant its holder acts for.
    pub tenant: TenantId,
}

/// How clients are isolated from each other on the memory node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// One PD for every client, type-1 windows (the paper's design). Any client holding a
    /// window's rkey can use it from any of its QPs; a guessed key byte is the only barrier
    /// (a sweep of the 256 values finds it, at the cost of a QP fault per wrong guess).
    SharedPd,
    /// A PD (with its own registration of the pool and its own windows) per client: a window
    /// of client A fails on client B's QPs even with the right rkey (PD mismatch at the NIC).
    /// The default.
    #[default]
    PdPerClient,
    /// A PD per client and type-2 windows bound to the client's current QP: a window fails on
    /// any other QP, even the same client's. When the client switches to a spare QP it tells
    /// the manager (`UseQp`) and has its permissions' windows bound again (`Rebind`). MW
    /// handover is off in this mode (a type-2 window must be invalidated before a rebind).
    Type2,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            pool_bytes: 64 << 20,
            header_count: 1 << 14,
            mw_count: 1 << 14,
            techniques: Techniques::ALL,
            max_lifetime_us: 10_000,
            buffer_watermark: 8 << 20,
            srq_depth: 1024,
            max_batch: 64,
            idle_spin_us: crate::rpc::SPIN_BUDGET.as_micros() as u64,
            expiry_slack_us: 50,
            qp_timing: QpTiming::default(),
            slab: SlabConfig::default(),
            isolation: Isolation::PdPerClient,
            allow_unenforced_window_bounds: false,
            windows_per_client: 1024,
            scrub: Scrub::Idle,
            max_wait_us: 1_000_000,
            tenants: Vec::new(),
            tenant_certificates: Vec::new(),
            random_key_bytes: true,
            key_seed: None,
            lease_floor_us: 0,
            lease_floor_turns: 2,
            shards: 1,
            limits: NodeLimits::default(),
            tenant_weights: Vec::new(),
            tenant_rates: Vec::new(),
            tenant_priorities: Vec::new(),
            priority_policy: PriorityPolicy::default(),
            one_sided: None,
        }
    }
}

/// Errors starting a memory node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A verb failed.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
    /// Configuration is inconsistent.
    #[error("configuration: {0}")]
    Config(&'static str),
    /// The pools cannot be split into the shards asked for.
    #[error("configuration: {0}")]
    Shards(#[from] ShardError),
    /// The NIC protection self-check found the device unable to enforce the isolation asked
    /// for (the reason, in one line).
    #[error("{0}")]
    UnsafeNic(String),
}

/// What the node reports about itself (summed over its shards).
#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    /// Operation counters.
    pub counters: Counters,
    /// Pool occupancy.
    pub occupancy: Option<Occupancy>,
    /// CPU time of the manager threads (idle polling included).
    pub manager_cpu: Duration,
    /// CPU time of the manager threads spent handling batches.
    pub busy_cpu: Duration,
    /// Of `busy_cpu`, the time the manager threads spent inside NIC calls: polling for
    /// requests, reposting their slots, posting the chains of binds and lifetime CASes and
    /// waiting for them, posting replies. Wall time, estimated from one iteration in
    /// [`NIC_SAMPLE_EVERY`](crate::manager::NIC_SAMPLE_EVERY) of the busy streaks. On the
    /// software RNIC this is where the NIC's work runs inline; on a real one, only the driver's
    /// share of it.
    pub nic_calls: Duration,
    /// Batches run.
    pub batches: u64,
    /// Connected clients.
    pub clients: usize,
    /// Sessions ended, by reason.
    pub sessions_ended: SessionEnds,
    /// Data reconnections (access faults) counted against tenants' budgets, and refused.
    pub data_reconnects: u64,
    /// See `data_reconnects`.
    pub reconnects_refused: u64,
    /// New sessions refused for the node's session rate (at the handshake), and for their
    /// tenant's (at `Hello`).
    pub sessions_rate_refused: (u64, u64),
    /// What the node holds for its clients (a leak check: back to its starting values once
    /// every client left and its memory was freed).
    pub held: Held,
    /// Pool bytes held by live objects and headers in use.
    pub pool_bytes_in_use: u64,
    /// Estimated bytes of the manager's tables (see [`ManagerCore::metadata_bytes`]).
    pub metadata_bytes: u64,
    /// Manager shards that published this snapshot.
    pub shards: usize,
    /// How long the manager took to answer requests.
    pub service: ServiceTimes,
    /// What the manager's fair queue gave each class of senders (each tenant, and the
    /// sessions not yet authenticated).
    pub classes: BTreeMap<Class, ClassCounters>,
    /// What the software priority policy decided (shard 0's; all zero without priorities).
    pub priority: PriorityStats,
}

/// What the software priority policy decided ([`NodeConfig::tenant_priorities`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PriorityStats {
    /// Whether low-priority tenants' data QPs are throttled now.
    pub throttled: bool,
    /// Times the policy started throttling, and lifted the limit.
    pub engaged: u64,
    /// See `engaged`.
    pub lifted: u64,
    /// Periods the policy decided on.
    pub periods: u64,
    /// The high-priority tenants' one-sided operations a second in the last period.
    pub high_ops_per_s: u64,
    /// Low-priority data QPs whose service the policy set (each time it set one).
    pub services_set: u64,
    /// Of those, the ones the NIC refused (the QP had broken; it is looked at again).
    pub services_failed: u64,
}

impl PriorityStats {
    /// Two shards' snapshots together (only shard 0 runs the policy).
    pub fn plus(&self, o: &PriorityStats) -> PriorityStats {
        PriorityStats {
            throttled: self.throttled || o.throttled,
            engaged: self.engaged + o.engaged,
            lifted: self.lifted + o.lifted,
            periods: self.periods + o.periods,
            high_ops_per_s: self.high_ops_per_s.max(o.high_ops_per_s),
            services_set: self.services_set + o.services_set,
            services_failed: self.services_failed + o.services_failed,
        }
    }
}

impl NodeStats {
    /// The sum of two snapshots (e.g. of two shards).
    pub fn plus(&self, o: &NodeStats) -> NodeStats {
        NodeStats {
            counters: self.counters.plus(&o.counters),
            occupancy: match (self.occupancy, o.occupancy) {
                (Some(a), Some(b)) => Some(a.plus(&b)),
                (a, b) => a.or(b),
            },
            manager_cpu: self.manager_cpu + o.manager_cpu,
            busy_cpu: self.busy_cpu + o.busy_cpu,
            nic_calls: self.nic_calls + o.nic_calls,
            batches: self.batches + o.batches,
            clients: self.clients.max(o.clients),
            sessions_ended: self.sessions_ended.plus(&o.sessions_ended),
            data_reconnects: self.data_reconnects + o.data_reconnects,
            reconnects_refused: self.reconnects_refused + o.reconnects_refused,
            sessions_rate_refused: (
                self.sessions_rate_refused.0 + o.sessions_rate_refused.0,
                self.sessions_rate_refused.1 + o.sessions_rate_refused.1,
            ),
            held: self.held.plus(&o.held),
            pool_bytes_in_use: self.pool_bytes_in_use + o.pool_bytes_in_use,
            metadata_bytes: self.metadata_bytes + o.metadata_bytes,
            shards: self.shards + o.shards,
            service: self.service.plus(&o.service),
            classes: {
                let mut sum = self.classes.clone();
                for (class, c) in &o.classes {
                    let e = sum.entry(*class).or_default();
                    *e = e.plus(c);
                }
                sum
            },
            priority: self.priority.plus(&o.priority),
        }
    }
}

/// What the node holds for its clients, summed over the shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Client sessions (one per client and shard).
    pub sessions: usize,
    /// Clients' data QPs (per shard that knows them).
    pub data_qps: usize,
    /// Clients' own protection domains (per shard).
    pub client_domains: usize,
    /// Memory windows allocated (the shared pool's and every client domain's).
    pub windows: usize,
    /// Requests remembered for retries.
    pub recent_requests: usize,
    /// Blocks of control receive slots attached to connections (flow control).
    pub control_blocks: usize,
    /// Connections accepted and not yet taken up by their shard.
    pub pending_connections: usize,
    /// Node-wide client records (secrets, tenants, last-heard times, PDs): the largest of
    /// them, counted once.
    pub client_records: usize,
    /// Source addresses with a live session (node-wide, counted once).
    pub addresses: usize,
}

impl Held {
    /// The sum of two shards' counts (node-wide records are counted once).
    pub fn plus(&self, o: &Held) -> Held {
        Held {
            sessions: self.sessions + o.sessions,
            data_qps: self.data_qps + o.data_qps,
            client_domains: self.client_domains + o.client_domains,
            windows: self.windows + o.windows,
            recent_requests: self.recent_requests + o.recent_requests,
            control_blocks: self.control_blocks + o.control_blocks,
            pending_connections: self.pending_connections + o.pending_connections,
            client_records: self.client_records.max(o.client_records),
            addresses: self.addresses.max(o.addresses),
        }
    }
}
