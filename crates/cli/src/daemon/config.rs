//! The memory-node daemon's configuration: a TOML file (`serve --config`), every setting also
//! given by a flag or an environment variable (flag over variable over file over default).
//!
//! Invariants: a configuration that [`DaemonConfig::validate`] accepts starts a node (the
//! node's own checks — quotas against the pool — run too, and their refusal is an error, not
//! a panic); every refusal is one line naming the key and why.

use crate::serve::parse_secret;
use anyhow::{Result, anyhow, bail};
use patronus_core::manager::{
    Isolation, NodeConfig, NodeLimits, OneSidedConfig, Priority, PriorityPolicy, SlabConfig,
    TenantCertificate, TenantPriority, TenantRate, TenantSecret, TenantWeight,
};
use rnic::QpTiming;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// How clients are isolated (`isolation = "..."`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationSetting {
    /// One PD for every client, type-1 windows (the paper's mode; a key byte is guessable).
    SharedPd,
    /// A PD per client: another client's rkey fails on this client's QPs.
    #[default]
    PdPerClient,
    /// A PD per client and type-2 windows bound to the client's current QP.
    Type2,
}

impl From<IsolationSetting> for Isolation {
    fn from(i: IsolationSetting) -> Self {
        match i {
            IsolationSetting::SharedPd => Isolation::SharedPd,
            IsolationSetting::PdPerClient => Isolation::PdPerClient,
            IsolationSetting::Type2 => Isolation::Type2,
        }
    }
}

/// The RNIC (`provider = "..."`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderSetting {
    /// The software RNIC over TCP.
    #[default]
    Soft,
    /// An rdma-core device (ConnectX, Soft-RoCE, ...): see `patronus devices`.
    Rdma,
}

/// A tenant's priority (`[[tenant]] priority = "..."`; see `[priority]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrioritySetting {
    /// Its one-sided load is watched: while it is high, low-priority tenants are throttled.
    High,
    /// Neither watched nor throttled.
    #[default]
    Normal,
    /// Throttled while the high-priority load is high.
    Low,
}

impl From<PrioritySetting> for Priority {
    fn from(p: PrioritySetting) -> Self {
        match p {
            PrioritySetting::High => Priority::High,
            PrioritySetting::Normal => Priority::Normal,
            PrioritySetting::Low => Priority::Low,
        }
    }
}

/// `[one_sided]`: one-sided allocation (`NodeConfig::one_sided`, `docs/onesided.md`): clients
/// allocate chunks of an arena by SEND, with no CPU of the node on the path. Off while
/// `chunks` is 0; needs type-2 isolation and the soft provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OneSidedSetting {
    /// Chunks in the arena (0: off).
    pub chunks: u32,
    /// KiB of a chunk.
    pub chunk_kib: u64,
    /// Chunks each client may have queued and allocated together.
    pub per_client: u32,
}

impl Default for OneSidedSetting {
    fn default() -> Self {
        let d = OneSidedConfig::default();
        OneSidedSetting {
            chunks: 0,
            chunk_kib: d.chunk_bytes >> 10,
            per_client: d.per_client,
        }
    }
}

/// `[priority]`: the software priority policy, used when a tenant is not `normal`
/// (`NodeConfig::priority_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PriorityPolicySetting {
    /// How often the node decides, ms.
    pub period_ms: u64,
    /// High-priority one-sided operations a second at or above which low priority is
    /// throttled.
    pub high_load_ops_per_s: u64,
    /// Below this for `release_periods` periods in a row, the limit is lifted.
    pub release_ops_per_s: u64,
    /// See `release_ops_per_s`.
    pub release_periods: u32,
    /// Each low-priority data QP's operations a second while throttled (0: no operation
    /// limit).
    pub throttled_ops_per_s: u64,
    /// Its request bytes a second while throttled (0: no byte limit).
    pub throttled_bytes_per_s: u64,
}

impl Default for PriorityPolicySetting {
    fn default() -> Self {
        let d = PriorityPolicy::default();
        PriorityPolicySetting {
            period_ms: d.period_us / 1000,
            high_load_ops_per_s: d.high_load_ops_per_s,
            release_ops_per_s: d.release_ops_per_s,
            release_periods: d.release_periods,
            throttled_ops_per_s: d.throttled_ops_per_s.unwrap_or(0),
            throttled_bytes_per_s: d.throttled_bytes_per_s.unwrap_or(0),
        }
    }
}

impl From<PriorityPolicySetting> for PriorityPolicy {
    fn from(p: PriorityPolicySetting) -> Self {
        PriorityPolicy {
            period_us: p.period_ms.saturating_mul(1000),
            high_load_ops_per_s: p.high_load_ops_per_s,
            release_ops_per_s: p.release_ops_per_s,
            release_periods: p.release_periods,
            throttled_ops_per_s: (p.throttled_ops_per_s > 0).then_some(p.throttled_ops_per_s),
            throttled_bytes_per_s: (p.throttled_bytes_per_s > 0).then_some(p.throttled_bytes_per_s),
        }
    }
}

/// A tenant and its connection secret (`[[tenant]]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSetting {
    /// Tenant id (1 and up; 0 is the default tenant of a node without tenants).
    pub id: u32,
    /// Its secret: a 64-bit number, decimal or 0x-hex, as a string.
    pub secret: String,
    /// Common names of client certificates (`[tls]`) that act for this tenant without the
    /// secret.
    #[serde(default)]
    pub certificates: Vec<String>,
    /// Its share of the manager threads relative to the other tenants' (1 and up; default 1):
    /// while several tenants' requests wait, each is served in proportion to its weight.
    #[serde(default = "one")]
    pub weight: u32,
    /// One-sided operations each of its data QPs may have served a second (0: no limit;
    /// needs the soft provider over TCP).
    #[serde(default)]
    pub ops_per_s: u64,
    /// Request bytes each of its data QPs may have served a second (0: no limit).
    #[serde(default)]
    pub bytes_per_s: u64,
    /// Its priority for the NIC's one-sided service (`[priority]`; needs the soft provider
    /// over TCP unless `normal`).
    #[serde(default)]
    pub priority: PrioritySetting,
}

fn one() -> u32 {
    1
}

/// Slab classes (`[slab]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlabSetting {
    /// Smallest object class, bytes.
    pub min_class: u64,
    /// Largest object class, bytes.
    pub max_class: u64,
    /// Bytes carved for one slab.
    pub slab_bytes: u64,
}

impl Default for SlabSetting {
    fn default() -> Self {
        let d = SlabConfig::default();
        SlabSetting {
            min_class: d.min_class,
            max_class: d.max_class,
            slab_bytes: d.slab_bytes,
        }
    }
}

/// Timing of the node's QPs (`[qp]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QpSetting {
    /// Time without a response before a request is retransmitted, µs.
    pub ack_timeout_us: u64,
    /// Retransmissions before the QP fails (at most 7).
    pub retry_count: u8,
    /// Delay after a receiver-not-ready NAK, µs.
    pub rnr_timer_us: u64,
    /// RNR retries before the QP fails (at most 7).
    pub rnr_retry: u8,
}

impl Default for QpSetting {
    fn default() -> Self {
        let d = QpTiming::default();
        QpSetting {
            ack_timeout_us: d.ack_timeout_us,
            retry_count: d.retry_count,
            rnr_timer_us: d.rnr_timer_us,
            rnr_retry: d.rnr_retry,
        }
    }
}

/// Limits and quotas (`[limits]`; `docs/threat-model.md` says what each protects against).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSetting {
    /// Disconnect a client silent on the control path this long, ms.
    pub idle_timeout_ms: u64,
    /// Close a connection not authenticated this long after it was accepted, ms.
    pub hello_timeout_ms: u64,
    /// Control requests a client may have in flight per shard (0: one shared queue).
    pub control_credits: u32,
    /// Control connections per shard.
    pub max_connections: u32,
    /// Memory each tenant may own, MiB (0: the node's default share).
    pub quota_memory_mib: u64,
    /// Live permissions each tenant may hold (0: the node's default share).
    pub quota_permissions: u32,
    /// Live exclusive permissions each tenant may hold (0: as `quota_permissions`).
    pub quota_exclusive: u32,
    /// What one client may hold, as a percentage of the node: memory of the live objects it
    /// allocated, live permissions (0: no per-client limit).
    pub client_share_percent: u32,
    /// Clients each tenant may have connected (0: an equal share of the connections).
    pub sessions_per_tenant: u32,
    /// Clients that may be connected at once from one IP address (counted by prefix).
    pub sessions_per_address: u32,
    /// Bits of an IPv4 address `sessions_per_address` counts by (32: each address).
    pub address_prefix_v4: u8,
    /// Bits of an IPv6 address it counts by (64: each /64).
    pub address_prefix_v6: u8,
    /// New sessions the node accepts a second, all clients together.
    pub new_sessions_per_s: u32,
    /// New sessions it accepts at once.
    pub new_session_burst: u32,
    /// New sessions each tenant may open a second (0: an equal share of `new_sessions_per_s`).
    pub tenant_new_sessions_per_s: u32,
    /// Access faults a tenant may cause at once.
    pub fault_burst: u32,
    /// Access faults a tenant regains per second.
    pub faults_per_s: u32,
    /// Cost units a round of the manager's fair queue gives all connections that have not
    /// authenticated together (a tenant of weight 1 gets 4).
    pub unauthenticated_quantum: u32,
    /// Messages a second the NIC serves a control connection before its Hello (soft provider
    /// over TCP).
    pub unauthenticated_ops_per_s: u32,
}

impl Default for LimitsSetting {
    fn default() -> Self {
        let d = NodeLimits::default();
        LimitsSetting {
            idle_timeout_ms: d.idle_timeout_us / 1000,
            hello_timeout_ms: d.hello_timeout_us / 1000,
            control_credits: d.control_credits,
            max_connections: d.max_connections,
            quota_memory_mib: 0,
            quota_permissions: 0,
            quota_exclusive: 0,
            client_share_percent: 50,
            sessions_per_tenant: 0,
            sessions_per_address: d.sessions_per_address,
            address_prefix_v4: d.address_prefix_v4,
            address_prefix_v6: d.address_prefix_v6,
            new_sessions_per_s: d.new_sessions_per_s,
            new_session_burst: d.new_session_burst,
            tenant_new_sessions_per_s: 0,
            fault_burst: d.fault_burst,
            faults_per_s: d.faults_per_s,
            unauthenticated_quantum: d.unauthenticated_quantum,
            unauthenticated_ops_per_s: d.unauthenticated_ops_per_s,
        }
    }
}

/// Everything `patronus serve` is configured with.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Address clients connect to.
    pub listen: SocketAddr,
    /// Address of the admin endpoint (`/metrics`, `/status`); empty: none.
    pub admin: String,
    /// A file holding the bearer token `/metrics` and `/status` require (empty: none).
    pub admin_token_file: String,
    /// The RNIC.
    pub provider: ProviderSetting,
    /// RDMA device with `provider = "rdma"` (empty: the first).
    pub device: String,
    /// Buffer pool, MiB.
    pub pool_mib: u64,
    /// Back the pool with transparent huge pages where the kernel has them (soft RNIC).
    pub huge_pages: bool,
    /// Serve although the NIC protection self-check found window bounds unenforced
    /// (Soft-RoCE): clients are then not isolated within the pool region.
    pub allow_unenforced_window_bounds: bool,
    /// Manager threads (shards).
    pub shards: usize,
    /// How clients are isolated.
    pub isolation: IsolationSetting,
    /// Longest a permission lives (its lease can be extended up to this), ms.
    pub max_lease_ms: u64,
    /// Shortest lease granted (a shorter request gets this much), µs.
    pub min_lease_us: u64,
    /// How late an expired lease may be collected when no request comes to batch it with, µs.
    pub expiry_slack_us: u64,
    /// Longest a conflicting acquire waits for the holders to leave, ms.
    pub max_wait_ms: u64,
    /// Windows pre-allocated per client (PD per client).
    pub windows_per_client: u32,
    /// Soft RNIC: empty polls of a NIC engine before it sleeps.
    pub engine_spin_polls: u32,
    /// How long an idle manager thread polls before it sleeps, µs.
    pub manager_spin_us: u64,
    /// On SIGINT/SIGTERM: how long to let live leases end before stopping, ms.
    pub shutdown_grace_ms: u64,
    /// Slab classes.
    pub slab: SlabSetting,
    /// QP timing.
    pub qp: QpSetting,
    /// Limits and quotas.
    pub limits: LimitsSetting,
    /// Tenants (none: every client is the default tenant).
    pub tenant: Vec<TenantSetting>,
    /// The software priority policy (with tenants that are not `normal`).
    pub priority: PriorityPolicySetting,
    /// One-sided allocation (off while `chunks` is 0).
    pub one_sided: OneSidedSetting,
    /// TLS on every client connection (soft provider).
    pub tls: TlsSetting,
}

/// `[tls]`: the node's certificate and key, and the CA its clients' certificates must come
/// from. All three empty: plaintext.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSetting {
    /// The node's certificate chain (PEM).
    pub cert: String,
    /// Its key (PEM).
    pub key: String,
    /// The CA that signs clients' certificates (PEM).
    pub client_ca: String,
    /// Also serve clients that speak plaintext (migration only).
    pub allow_plaintext: bool,
}

impl TlsSetting {
    /// The transport's TLS options (`None`: plaintext).
    pub fn options(&self) -> Result<Option<rnic::soft::TlsOptions>> {
        if self.cert.is_empty() {
            return Ok(None);
        }
        let t = rnic::soft::TlsOptions::mutual_from_pem(
            Path::new(&self.cert),
            Path::new(&self.key),
            Path::new(&self.client_ca),
        )
        .map_err(|e| anyhow!("tls: {e}"))?;
        Ok(Some(t.allowing_plaintext(self.allow_plaintext)))
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        let node = NodeConfig::default();
        DaemonConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            admin: format!("127.0.0.1:{DEFAULT_ADMIN_PORT}"),
            admin_token_file: String::new(),
            provider: ProviderSetting::Soft,
            device: String::new(),
            pool_mib: 64,
            huge_pages: false,
            allow_unenforced_window_bounds: false,
            shards: 1,
            isolation: IsolationSetting::PdPerClient,
            max_lease_ms: 1000,
            min_lease_us: node.lease_floor_us,
            expiry_slack_us: node.expiry_slack_us,
            max_wait_ms: node.max_wait_us / 1000,
            windows_per_client: node.windows_per_client,
            // A served node sleeps when idle, engines and managers alike: its cores are few
            // and shared, and a spinning thread holds one its peers need (see
            // docs/tcp-transport.md). Each costs a wake-up per request that finds it asleep.
            engine_spin_polls: 0,
            manager_spin_us: 0,
            shutdown_grace_ms: 1000,
            slab: SlabSetting::default(),
            qp: QpSetting::default(),
            limits: LimitsSetting::default(),
            tenant: Vec::new(),
            priority: PriorityPolicySetting::default(),
            one_sided: OneSidedSetting::default(),
            tls: TlsSetting::default(),
        }
    }
}

/// The commented default file (`serve --print-default-config`).
pub const DEFAULT_FILE: &str = include_str!("default.toml");

/// The port a node listens on for clients unless configured otherwise.
pub const DEFAULT_PORT: u16 = 7471;

/// The port of the admin endpoint unless configured otherwise.
pub const DEFAULT_ADMIN_PORT: u16 = 9471;

impl DaemonConfig {
    /// Reads `path`: a missing, unreadable or malformed file is a one-line error naming the
    /// file, the line and the key.
    pub fn load(path: &Path) -> Result<DaemonConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("config {}: cannot read: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow!("config {}: {e}", path.display()))
    }

    /// Parses a TOML text (see [`DaemonConfig::load`]).
    pub fn parse(text: &str) -> Result<DaemonConfig> {
        toml::from_str::<DaemonConfig>(text).map_err(|e| anyhow!(one_line(text, &e)))
    }

    /// Refuses settings that cannot work together, naming the key and why.
    pub fn validate(&self) -> Result<()> {
        let t = &self.tls;
        let set = [&t.cert, &t.key, &t.client_ca].map(|s| !s.is_empty());
        if set.iter().any(|s| *s) && !set.iter().all(|s| *s) {
            bail!("tls: cert, key and client_ca go together (all three, or none for plaintext)");
        }
        let l = &self.limits;
        if l.address_prefix_v4 > 32 || l.address_prefix_v6 > 128 {
            bail!("limits.address_prefix_v4/_v6: at most 32 and 128 bits");
        }
        if l.client_share_percent > 100 {
            bail!("limits.client_share_percent: at most 100");
        }
        let o = &self.one_sided;
        if o.chunks > 0 {
            if self.isolation != IsolationSetting::Type2 {
                bail!(
                    "one_sided: needs isolation = \"type2\" (a chunk's window works on its client's data QP only)"
                );
            }
            if self.provider == ProviderSetting::Rdma {
                bail!(
                    "one_sided: needs the soft provider (cross-channel verbs; rdma-core offers none)"
                );
            }
            if o.chunk_kib == 0 || o.per_client == 0 {
                bail!("one_sided: chunk_kib and per_client are at least 1");
            }
        }
        if l.new_sessions_per_s == 0 || l.new_session_burst == 0 {
            bail!("limits.new_sessions_per_s and new_session_burst: at least 1 (0 admits nobody)");
        }
        if t.allow_plaintext && t.cert.is_empty() {
            bail!("tls.allow_plaintext: only with a certificate (without one, all is plaintext)");
        }
        if !t.cert.is_empty() && self.provider == ProviderSetting::Rdma {
            bail!(
                "tls: protects the soft provider's TCP connections; provider = \"rdma\" has none"
            );
        }
        if self.pool_mib == 0 {
            bail!("pool_mib: must be at least 1");
        }
        if self.shards == 0 {
            bail!("shards: must be at least 1");
        }
        if self.max_lease_ms == 0 {
            bail!("max_lease_ms: must be at least 1");
        }
        if self.min_lease_us > self.max_lease_ms.saturating_mul(1000) {
            bail!(
                "min_lease_us: {} µs is above max_lease_ms ({} ms)",
                self.min_lease_us,
                self.max_lease_ms
            );
        }
        let s = self.slab;
        if s.min_class == 0 || s.min_class > s.max_class {
            bail!(
                "slab.min_class: {} must be at least 1 and at most slab.max_class ({})",
                s.min_class,
                s.max_class
            );
        }
        if s.slab_bytes < s.max_class {
            bail!(
                "slab.slab_bytes: {} is below slab.max_class ({}): a slab holds at least one object",
                s.slab_bytes,
                s.max_class
            );
        }
        if s.max_class > self.pool_mib << 20 {
            bail!(
                "slab.max_class: {} is above the pool ({} MiB)",
                s.max_class,
                self.pool_mib
            );
        }
        if self.qp.retry_count > 7 || self.qp.rnr_retry > 7 {
            bail!("qp.retry_count / qp.rnr_retry: at most 7 (as in InfiniBand)");
        }
        if !self.admin.is_empty() && self.admin.parse::<SocketAddr>().is_err() {
            bail!("admin: `{}` is not an address (IP:PORT)", self.admin);
        }
        let mut seen = std::collections::HashSet::new();
        for t in &self.tenant {
            if t.id == 0 {
                bail!("tenant.id: 0 is the default tenant; configured tenants start at 1");
            }
            if !seen.insert(t.id) {
                bail!("tenant.id: {} appears twice", t.id);
            }
            parse_secret(&t.secret).map_err(|e| anyhow!("tenant {} secret: {e}", t.id))?;
            if t.weight == 0 {
                bail!("tenant {} weight: at least 1", t.id);
            }
            if (t.ops_per_s > 0 || t.bytes_per_s > 0) && self.provider == ProviderSetting::Rdma {
                bail!(
                    "tenant {} ops_per_s/bytes_per_s: enforced by the soft provider's NIC only",
                    t.id
                );
            }
            if t.priority != PrioritySetting::Normal && self.provider == ProviderSetting::Rdma {
                bail!(
                    "tenant {} priority: enforced by the soft provider's NIC only",
                    t.id
                );
            }
            if !t.certificates.is_empty() && self.tls.cert.is_empty() {
                bail!(
                    "tenant {} certificates: only with [tls] (TLS verifies the client's certificate)",
                    t.id
                );
            }
        }
        if self
            .tenant
            .iter()
            .any(|t| t.priority != PrioritySetting::Normal)
        {
            PriorityPolicy::from(self.priority)
                .validate()
                .map_err(|e| anyhow!("priority: {e}"))?;
        }
        let mut names = std::collections::HashMap::new();
        for t in &self.tenant {
            for name in &t.certificates {
                if let Some(other) = names.insert(name, t.id) {
                    bail!(
                        "tenant {} certificates: {name:?} is tenant {other}'s already",
                        t.id
                    );
                }
            }
        }
        self.node_config().map(|_| ())
    }

    /// The tenants and their secrets.
    pub fn tenants(&self) -> Result<Vec<TenantSecret>> {
        self.tenant
            .iter()
            .map(|t| {
                Ok(TenantSecret {
                    tenant: t.id,
                    secret: parse_secret(&t.secret)
                        .map_err(|e| anyhow!("tenant {} secret: {e}", t.id))?,
                })
            })
            .collect()
    }

    /// The memory node's configuration (its own consistency checks included: quotas that
    /// overcommit the node are refused with the reason).
    pub fn node_config(&self) -> Result<NodeConfig> {
        let d = NodeConfig::default();
        let l = self.limits;
        let nonzero = |v: u32| (v > 0).then_some(v);
        let mut cfg = NodeConfig {
            pool_bytes: self.pool_mib << 20,
            max_lifetime_us: self.max_lease_ms * 1000,
            lease_floor_us: self.min_lease_us,
            expiry_slack_us: self.expiry_slack_us,
            idle_spin_us: self.manager_spin_us,
            max_wait_us: self.max_wait_ms * 1000,
            windows_per_client: self.windows_per_client,
            isolation: self.isolation.into(),
            allow_unenforced_window_bounds: self.allow_unenforced_window_bounds,
            shards: self.shards,
            tenants: self.tenants()?,
            tenant_certificates: self
                .tenant
                .iter()
                .flat_map(|t| {
                    t.certificates.iter().map(|name| TenantCertificate {
                        name: name.clone(),
                        tenant: t.id,
                    })
                })
                .collect(),
            tenant_weights: self
                .tenant
                .iter()
                .map(|t| TenantWeight {
                    tenant: t.id,
                    weight: t.weight,
                })
                .collect(),
            tenant_rates: self
                .tenant
                .iter()
                .filter(|t| t.ops_per_s > 0 || t.bytes_per_s > 0)
                .map(|t| TenantRate {
                    tenant: t.id,
                    ops_per_s: (t.ops_per_s > 0).then_some(t.ops_per_s),
                    bytes_per_s: (t.bytes_per_s > 0).then_some(t.bytes_per_s),
                })
                .collect(),
            tenant_priorities: self
                .tenant
                .iter()
                .filter(|t| t.priority != PrioritySetting::Normal)
                .map(|t| TenantPriority {
                    tenant: t.id,
                    priority: t.priority.into(),
                })
                .collect(),
            priority_policy: self.priority.into(),
            one_sided: (self.one_sided.chunks > 0).then_some(OneSidedConfig {
                chunk_bytes: self.one_sided.chunk_kib << 10,
                chunks: self.one_sided.chunks,
                per_client: self.one_sided.per_client,
            }),
            slab: SlabConfig {
                min_class: self.slab.min_class,
                max_class: self.slab.max_class,
                slab_bytes: self.slab.slab_bytes,
            },
            qp_timing: QpTiming {
                ack_timeout_us: self.qp.ack_timeout_us,
                retry_count: self.qp.retry_count,
                rnr_timer_us: self.qp.rnr_timer_us,
                rnr_retry: self.qp.rnr_retry,
            },
            limits: NodeLimits {
                idle_timeout_us: l.idle_timeout_ms * 1000,
                hello_timeout_us: l.hello_timeout_ms * 1000,
                control_credits: l.control_credits,
                max_connections: l.max_connections,
                sessions_per_tenant: nonzero(l.sessions_per_tenant),
                sessions_per_address: l.sessions_per_address,
                address_prefix_v4: l.address_prefix_v4,
                address_prefix_v6: l.address_prefix_v6,
                new_sessions_per_s: l.new_sessions_per_s,
                new_session_burst: l.new_session_burst,
                tenant_new_sessions_per_s: nonzero(l.tenant_new_sessions_per_s),
                fault_burst: l.fault_burst,
                faults_per_s: l.faults_per_s,
                unauthenticated_quantum: l.unauthenticated_quantum,
                unauthenticated_ops_per_s: l.unauthenticated_ops_per_s,
                ..d.limits
            },
            ..d
        };
        if l.quota_memory_mib > 0 || l.quota_permissions > 0 || l.quota_exclusive > 0 {
            let base = cfg.tenant_quota().map_err(|e| anyhow!("limits: {e}"))?;
            let permissions = nonzero(l.quota_permissions).unwrap_or(base.permissions);
            cfg.limits.tenant_quota = Some(patronus_core::manager::TenantQuota {
                memory_bytes: if l.quota_memory_mib > 0 {
                    l.quota_memory_mib << 20
                } else {
                    base.memory_bytes
                },
                permissions,
                exclusive: nonzero(l.quota_exclusive).unwrap_or(permissions),
            });
        }
        cfg.tenant_quota().map_err(|e| anyhow!("limits: {e}"))?;
        if l.client_share_percent > 0 {
            cfg.limits.client_quota = Some(cfg.client_share(l.client_share_percent));
        }
        Ok(cfg)
    }
}

/// A TOML error as one line: where (line, column), the key on that line, and the message.
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().replace('\n', " ");
    let Some(span) = e.span() else {
        return message;
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    let line_text = text.lines().nth(line - 1).unwrap_or("");
    match line_text.split_once('=') {
        Some((key, _)) if !key.trim().is_empty() && !key.trim().starts_with('[') => format!(
            "line {line}, column {column}: key `{}`: {message}",
            key.trim()
        ),
        _ => format!("line {line}, column {column}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_file_is_the_default_config() {
        let parsed = DaemonConfig::parse(DEFAULT_FILE).unwrap();
        // What `--print-default-config` prints is what a node with no file and no flag runs
        // with, addresses included.
        assert_eq!(parsed, DaemonConfig::default());
        parsed.validate().unwrap();
    }

    #[test]
    fn the_sample_in_docs_is_valid() {
        let sample = include_str!("../../../../docs/deploy/mn.toml");
        let cfg = DaemonConfig::parse(sample).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.tenants().unwrap().len(), 2);
    }

    #[test]
    fn bad_files_name_the_problem_in_one_line() {
        let cases = [
            ("pool_mb = 5\n", "unknown field `pool_mb`"),
            ("pool_mib = -1\n", "key `pool_mib`"),
            ("pool_mib = \"lots\"\n", "key `pool_mib`"),
            ("[limits]\nfault_burst = -3\n", "key `fault_burst`"),
            ("listen = \"not an address\"\n", "key `listen`"),
            ("isolation = \"none\"\n", "key `isolation`"),
            ("[[tenant]]\nid = 1\n", "missing field `secret`"),
            ("pool_mib = \n", "line 1"),
        ];
        for (text, expect) in cases {
            let e = DaemonConfig::parse(text).unwrap_err().to_string();
            assert!(!e.contains('\n'), "one line: {e:?}");
            assert!(e.contains(expect), "{text:?}: {e}");
        }
    }

    #[test]
    fn priorities_reach_the_node() {
        let cfg = DaemonConfig::parse(
            "[priority]\nperiod_ms = 50\nthrottled_ops_per_s = 500\n\
             [[tenant]]\nid = 1\nsecret = \"1\"\npriority = \"high\"\n\
             [[tenant]]\nid = 2\nsecret = \"2\"\npriority = \"low\"\n\
             [[tenant]]\nid = 3\nsecret = \"3\"\n",
        )
        .unwrap();
        cfg.validate().unwrap();
        let node = cfg.node_config().unwrap();
        assert_eq!(
            node.tenant_priorities,
            vec![
                TenantPriority {
                    tenant: 1,
                    priority: Priority::High
                },
                TenantPriority {
                    tenant: 2,
                    priority: Priority::Low
                },
            ],
            "normal tenants are not listed"
        );
        assert_eq!(node.priority_policy.period_us, 50_000);
        assert_eq!(node.priority_policy.throttled_ops_per_s, Some(500));
        assert_eq!(node.priority_policy.throttled_bytes_per_s, None);
        let bad = DaemonConfig::parse("[priority]\nperiod_ms = 0\n").unwrap();
        bad.validate().unwrap(); // no tenant with a priority: the policy is not used
    }

    #[test]
    fn one_sided_allocation_is_off_by_default_and_needs_type_2() {
        assert_eq!(
            DaemonConfig::default().node_config().unwrap().one_sided,
            None
        );
        let on = DaemonConfig::parse(
            "isolation = \"type2\"\n[one_sided]\nchunks = 64\nchunk_kib = 4\nper_client = 8\n",
        )
        .unwrap();
        on.validate().unwrap();
        assert_eq!(
            on.node_config().unwrap().one_sided,
            Some(OneSidedConfig {
                chunk_bytes: 4096,
                chunks: 64,
                per_client: 8,
            })
        );
        let shared = DaemonConfig::parse("[one_sided]\nchunks = 64\n").unwrap();
        let e = shared.validate().unwrap_err().to_string();
        assert!(e.contains("one_sided") && e.contains("type2"), "{e}");
    }

    #[test]
    fn one_client_may_hold_half_the_node_by_default() {
        let cfg = DaemonConfig::default().node_config().unwrap();
        let q = cfg.limits.client_quota.expect("a per-client quota");
        let whole = cfg.client_share(100);
        assert_eq!(q.memory_bytes, whole.memory_bytes / 2);
        assert_eq!(q.permissions, whole.permissions / 2);
        assert!(whole.memory_bytes <= cfg.pool_bytes);
        let off = DaemonConfig::parse("[limits]\nclient_share_percent = 0\n").unwrap();
        assert_eq!(off.node_config().unwrap().limits.client_quota, None);
    }

    #[test]
    fn inconsistent_settings_are_refused_naming_the_key() {
        let cases: [(&str, &str); 16] = [
            ("pool_mib = 0\n", "pool_mib"),
            ("shards = 0\n", "shards"),
            ("max_lease_ms = 10\nmin_lease_us = 20000\n", "min_lease_us"),
            (
                "[slab]\nmin_class = 4096\nmax_class = 64\n",
                "slab.min_class",
            ),
            ("[qp]\nretry_count = 9\n", "retry_count"),
            ("[limits]\naddress_prefix_v4 = 33\n", "address_prefix_v4"),
            ("[limits]\nnew_sessions_per_s = 0\n", "new_sessions_per_s"),
            (
                "[limits]\nclient_share_percent = 101\n",
                "client_share_percent",
            ),
            ("admin = \"localhost\"\n", "admin"),
            (
                "[[tenant]]\nid = 1\nsecret = \"12\"\n[[tenant]]\nid = 1\nsecret = \"13\"\n",
                "appears twice",
            ),
            ("[[tenant]]\nid = 2\nsecret = \"0xZZ\"\n", "tenant 2 secret"),
            (
                "[[tenant]]\nid = 3\nsecret = \"3\"\nweight = 0\n",
                "tenant 3 weight",
            ),
            (
                "[[tenant]]\nid = 1\nsecret = \"1\"\ncertificates = [\"a\"]\n",
                "only with [tls]",
            ),
            (
                "provider = \"rdma\"\n[[tenant]]\nid = 4\nsecret = \"4\"\npriority = \"low\"\n",
                "tenant 4 priority",
            ),
            (
                "[priority]\nthrottled_ops_per_s = 0\n\
                 [[tenant]]\nid = 5\nsecret = \"5\"\npriority = \"high\"\n",
                "priority: configuration: the priority policy needs a throttled rate",
            ),
            (
                "[tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n\
                 [[tenant]]\nid = 1\nsecret = \"1\"\ncertificates = [\"a\"]\n\
                 [[tenant]]\nid = 2\nsecret = \"2\"\ncertificates = [\"a\"]\n",
                "is tenant 1's already",
            ),
        ];
        for (text, expect) in cases {
            let cfg = DaemonConfig::parse(text).unwrap();
            let e = cfg.validate().unwrap_err().to_string();
            assert!(!e.contains('\n'), "one line: {e:?}");
            assert!(e.contains(expect), "{text:?}: {e}");
        }
        // Quotas the node cannot honour: the node's own check, as an error.
        let cfg = DaemonConfig::parse(
            "pool_mib = 8\n[limits]\nquota_memory_mib = 8\n[[tenant]]\nid = 1\nsecret = \"1\"\n[[tenant]]\nid = 2\nsecret = \"2\"\n",
        )
        .unwrap();
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("limits") && e.contains("quotas"), "{e}");
    }
}
