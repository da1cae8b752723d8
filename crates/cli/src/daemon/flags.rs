//! `patronus serve`'s flags: each overrides the configuration file's setting of the same
//! name, and each may come from an environment variable instead (flag over variable over
//! file over default).

use super::config::{
    DaemonConfig, IsolationSetting, LimitsSetting, PrioritySetting, ProviderSetting, TenantSetting,
};
use crate::serve::{TenantArg, parse_tenant};
use anyhow::Result;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `patronus serve`.
// The field docs are the `--help` text, where `[file: [limits]]` names a TOML table, not a
// link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServeFlags {
    /// Configuration file (TOML; `--print-default-config` prints a commented one).
    #[arg(long, env = "PATRONUS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the commented default configuration file and exit.
    #[arg(long)]
    pub print_default_config: bool,
    /// Address clients connect to; port 0 picks a free one [file: listen; default
    /// 127.0.0.1:7471].
    #[arg(long, env = "PATRONUS_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address of the admin endpoint: /metrics, /status; "" serves none [file: admin;
    /// default 127.0.0.1:9471].
    #[arg(long, env = "PATRONUS_ADMIN", value_name = "ADDR")]
    pub admin: Option<String>,
    /// A file holding the bearer token `/metrics` and `/status` require (`/healthz` stays
    /// open) [file: admin_token_file].
    #[arg(long, env = "PATRONUS_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<String>,
    /// The RNIC: the software one over TCP, or an rdma-core device [file: provider].
    #[arg(long, value_enum, env = "PATRONUS_PROVIDER")]
    pub provider: Option<ProviderSetting>,
    /// RDMA device name with `--provider rdma` [file: device; default: the first].
    #[arg(long, env = "PATRONUS_DEVICE")]
    pub device: Option<String>,
    /// Buffer pool, MiB [file: pool_mib].
    #[arg(long, env = "PATRONUS_POOL_MIB")]
    pub pool_mib: Option<u64>,
    /// Back the pool with transparent huge pages where the kernel has them [file:
    /// huge_pages].
    #[arg(long, env = "PATRONUS_HUGE_PAGES")]
    pub huge_pages: Option<bool>,
    /// Serve although the NIC protection self-check finds that the device does not enforce
    /// window bounds (Soft-RoCE): clients can then reach the whole pool region [file:
    /// allow_unenforced_window_bounds].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", env = "PATRONUS_ALLOW_UNENFORCED_WINDOW_BOUNDS")]
    pub allow_unenforced_window_bounds: Option<bool>,
    /// Manager threads (shards), each owning a slice of the pools [file: shards].
    #[arg(long, env = "PATRONUS_SHARDS")]
    pub shards: Option<usize>,
    /// How clients are isolated from each other [file: isolation].
    #[arg(long, value_enum, env = "PATRONUS_ISOLATION")]
    pub isolation: Option<IsolationSetting>,
    /// Longest a permission lives, ms [file: max_lease_ms].
    #[arg(long, visible_alias = "max-lifetime-ms", env = "PATRONUS_MAX_LEASE_MS")]
    pub max_lease_ms: Option<u64>,
    /// Shortest lease granted, µs [file: min_lease_us].
    #[arg(long, env = "PATRONUS_MIN_LEASE_US")]
    pub min_lease_us: Option<u64>,
    /// How late an expired lease may be collected, µs [file: expiry_slack_us].
    #[arg(long, env = "PATRONUS_EXPIRY_SLACK_US")]
    pub expiry_slack_us: Option<u64>,
    /// Longest a conflicting acquire waits, ms [file: max_wait_ms].
    #[arg(long, env = "PATRONUS_MAX_WAIT_MS")]
    pub max_wait_ms: Option<u64>,
    /// Windows pre-allocated per client [file: windows_per_client].
    #[arg(long, env = "PATRONUS_WINDOWS_PER_CLIENT")]
    pub windows_per_client: Option<u32>,
    /// Soft RNIC: empty polls of a NIC engine before it sleeps (0: at once)
    /// [file: engine_spin_polls].
    #[arg(long, env = "PATRONUS_ENGINE_SPIN_POLLS")]
    pub engine_spin_polls: Option<u32>,
    /// How long an idle manager thread polls before it sleeps, µs (0: at once)
    /// [file: manager_spin_us].
    #[arg(long, env = "PATRONUS_MANAGER_SPIN_US")]
    pub manager_spin_us: Option<u64>,
    /// On SIGINT/SIGTERM, how long live leases may run on before the node stops, ms
    /// [file: shutdown_grace_ms].
    #[arg(long, env = "PATRONUS_SHUTDOWN_GRACE_MS")]
    pub shutdown_grace_ms: Option<u64>,
    /// Chunks of the one-sided allocation arena (0: off; needs `--isolation type2`)
    /// [file: one_sided.chunks].
    #[arg(long, env = "PATRONUS_ONE_SIDED_CHUNKS")]
    pub one_sided_chunks: Option<u32>,
    /// QP retransmission timeout, µs (not on soft TCP connections, which adapt theirs)
    /// [file: qp.ack_timeout_us].
    #[arg(long, env = "PATRONUS_QP_ACK_TIMEOUT_US")]
    pub qp_ack_timeout_us: Option<u64>,
    /// QP retransmissions before it fails, at most 7 (not on soft TCP connections)
    /// [file: qp.retry_count].
    #[arg(long, env = "PATRONUS_QP_RETRY_COUNT")]
    pub qp_retry_count: Option<u8>,
    /// Smallest object class, bytes [file: slab.min_class].
    #[arg(long, env = "PATRONUS_SLAB_MIN_CLASS")]
    pub slab_min_class: Option<u64>,
    /// Largest object class, bytes [file: slab.max_class].
    #[arg(long, env = "PATRONUS_SLAB_MAX_CLASS")]
    pub slab_max_class: Option<u64>,
    /// A tenant the node serves, as ID:SECRET (repeatable; SECRET a 64-bit number, decimal
    /// or 0x-hex); replaces the file's tenants [file: [[tenant]]; env: comma-separated].
    #[arg(long = "tenant", value_parser = parse_tenant, env = "PATRONUS_TENANTS", value_delimiter = ',')]
    pub tenants: Vec<TenantArg>,
    /// Limits and quotas [file: [limits]].
    #[command(flatten)]
    pub limits: LimitArgs,
    /// The node's certificate (PEM): with --tls-key and --tls-client-ca, every client
    /// connection is mutually authenticated TLS 1.3 and plaintext clients are refused
    /// [file: tls.cert].
    #[arg(long, env = "PATRONUS_TLS_CERT")]
    pub tls_cert: Option<String>,
    /// The key of --tls-cert (PEM) [file: tls.key].
    #[arg(long, env = "PATRONUS_TLS_KEY")]
    pub tls_key: Option<String>,
    /// The CA whose certificates clients must present (PEM) [file: tls.client_ca].
    #[arg(long, env = "PATRONUS_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<String>,
    /// With TLS, also serve clients that speak plaintext (migration only)
    /// [file: tls.allow_plaintext].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", env = "PATRONUS_TLS_ALLOW_PLAINTEXT")]
    pub tls_allow_plaintext: Option<bool>,
    /// A client certificate's common name that acts for a tenant without its secret, as
    /// ID:NAME (repeatable; the tenant must be configured; TLS only)
    /// [file: tenant.certificates; env: comma-separated].
    #[arg(long = "tenant-certificate", value_parser = parse_tenant_certificate, env = "PATRONUS_TENANT_CERTIFICATES", value_delimiter = ',')]
    pub tenant_certificates: Vec<(u32, String)>,
    /// A tenant's share of the manager threads relative to the others', as ID:WEIGHT
    /// (repeatable; the tenant must be configured; default 1)
    /// [file: tenant.weight; env: comma-separated].
    #[arg(long = "tenant-weight", value_parser = parse_tenant_weight, env = "PATRONUS_TENANT_WEIGHTS", value_delimiter = ',')]
    pub tenant_weights: Vec<(u32, u32)>,
    /// A tenant's priority for the NIC's one-sided service, as ID:high, ID:normal or ID:low
    /// (repeatable; the tenant must be configured; the policy is `[priority]` in the file)
    /// [file: tenant.priority; env: comma-separated].
    #[arg(long = "tenant-priority", value_parser = parse_tenant_priority, env = "PATRONUS_TENANT_PRIORITIES", value_delimiter = ',')]
    pub tenant_priorities: Vec<(u32, PrioritySetting)>,
    /// A tenant's one-sided operations a second on each of its data QPs, as ID:OPS
    /// (repeatable; the tenant must be configured; soft provider over TCP)
    /// [file: tenant.ops_per_s; env: comma-separated].
    #[arg(long = "tenant-ops-rate", value_parser = parse_tenant_rate, env = "PATRONUS_TENANT_OPS_RATES", value_delimiter = ',')]
    pub tenant_ops_rates: Vec<(u32, u64)>,
    /// A tenant's one-sided request bytes a second on each of its data QPs, as ID:BYTES
    /// (repeatable; the tenant must be configured; soft provider over TCP)
    /// [file: tenant.bytes_per_s; env: comma-separated].
    #[arg(long = "tenant-bytes-rate", value_parser = parse_tenant_rate, env = "PATRONUS_TENANT_BYTES_RATES", value_delimiter = ',')]
    pub tenant_bytes_rates: Vec<(u32, u64)>,
}

/// Splits `ID:REST` (`rest` names the second part in errors) into the tenant id and the rest.
fn split_tenant<'a>(s: &'a str, rest: &str) -> std::result::Result<(u32, &'a str), String> {
    let (id, value) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected ID:{rest}"))?;
    let tenant = id
        .parse::<u32>()
        .map_err(|e| format!("tenant id `{id}`: {e}"))?;
    Ok((tenant, value))
}

fn parse_tenant_weight(s: &str) -> std::result::Result<(u32, u32), String> {
    let (tenant, weight) = split_tenant(s, "WEIGHT")?;
    match weight.parse::<u32>() {
        Ok(w) if w > 0 => Ok((tenant, w)),
        _ => Err(format!("`{s}`: the weight is a whole number from 1")),
    }
}

fn parse_tenant_priority(s: &str) -> std::result::Result<(u32, PrioritySetting), String> {
    let (tenant, priority) = split_tenant(s, "PRIORITY")?;
    let p = match priority {
        "high" => PrioritySetting::High,
        "normal" => PrioritySetting::Normal,
        "low" => PrioritySetting::Low,
        _ => return Err(format!("`{s}`: the priority is high, normal or low")),
    };
    Ok((tenant, p))
}

fn parse_tenant_rate(s: &str) -> std::result::Result<(u32, u64), String> {
    let (tenant, rate) = split_tenant(s, "RATE")?;
    match rate.parse::<u64>() {
        Ok(r) if r > 0 => Ok((tenant, r)),
        _ => Err(format!(
            "`{s}`: the rate is a whole number from 1 (a second)"
        )),
    }
}

fn parse_tenant_certificate(s: &str) -> std::result::Result<(u32, String), String> {
    let (tenant, name) = split_tenant(s, "NAME")?;
    if name.is_empty() {
        return Err(format!("`{s}`: the certificate name is empty"));
    }
    Ok((tenant, name.to_owned()))
}

impl ServeFlags {
    /// The configuration: the file (or the defaults), with every flag given laid over it.
    pub fn config(&self) -> Result<DaemonConfig> {
        let mut c = match &self.config {
            Some(path) => DaemonConfig::load(path)?,
            None => DaemonConfig::default(),
        };
        macro_rules! over {
            ($($flag:ident => $field:expr),* $(,)?) => {
                $(if let Some(v) = self.$flag.clone() { $field = v; })*
            };
        }
        over!(
            listen => c.listen,
            admin_token_file => c.admin_token_file,
            provider => c.provider,
            device => c.device,
            pool_mib => c.pool_mib,
            huge_pages => c.huge_pages,
            allow_unenforced_window_bounds => c.allow_unenforced_window_bounds,
            shards => c.shards,
            isolation => c.isolation,
            max_lease_ms => c.max_lease_ms,
            min_lease_us => c.min_lease_us,
            expiry_slack_us => c.expiry_slack_us,
            max_wait_ms => c.max_wait_ms,
            windows_per_client => c.windows_per_client,
            engine_spin_polls => c.engine_spin_polls,
            manager_spin_us => c.manager_spin_us,
            shutdown_grace_ms => c.shutdown_grace_ms,
            one_sided_chunks => c.one_sided.chunks,
            qp_ack_timeout_us => c.qp.ack_timeout_us,
            qp_retry_count => c.qp.retry_count,
            slab_min_class => c.slab.min_class,
            slab_max_class => c.slab.max_class,
            tls_cert => c.tls.cert,
            tls_key => c.tls.key,
            tls_client_ca => c.tls.client_ca,
            tls_allow_plaintext => c.tls.allow_plaintext,
        );
        if let Some(a) = &self.admin {
            c.admin = a.clone();
        }
        if !self.tenants.is_empty() {
            c.tenant = self
                .tenants
                .iter()
                .map(|t| TenantSetting {
                    id: t.tenant,
                    secret: t.secret.to_string(),
                    certificates: Vec::new(),
                    weight: 1,
                    ops_per_s: 0,
                    bytes_per_s: 0,
                    priority: Default::default(),
                })
                .collect();
        }
        for (id, weight) in &self.tenant_weights {
            let Some(t) = c.tenant.iter_mut().find(|t| t.id == *id) else {
                anyhow::bail!("--tenant-weight {id}:{weight}: tenant {id} is not configured");
            };
            t.weight = *weight;
        }
        for (id, p) in &self.tenant_priorities {
            let Some(t) = c.tenant.iter_mut().find(|t| t.id == *id) else {
                anyhow::bail!("--tenant-priority {id}: tenant {id} is not configured");
            };
            t.priority = *p;
        }
        for (id, rate) in &self.tenant_ops_rates {
            let Some(t) = c.tenant.iter_mut().find(|t| t.id == *id) else {
                anyhow::bail!("--tenant-ops-rate {id}:{rate}: tenant {id} is not configured");
            };
            t.ops_per_s = *rate;
        }
        for (id, rate) in &self.tenant_bytes_rates {
            let Some(t) = c.tenant.iter_mut().find(|t| t.id == *id) else {
                anyhow::bail!("--tenant-bytes-rate {id}:{rate}: tenant {id} is not configured");
            };
            t.bytes_per_s = *rate;
        }
        for (id, name) in &self.tenant_certificates {
            let Some(t) = c.tenant.iter_mut().find(|t| t.id == *id) else {
                anyhow::bail!("--tenant-certificate {id}:{name}: tenant {id} is not configured");
            };
            t.certificates.push(name.clone());
        }
        self.limits.lay_over(&mut c.limits);
        c.validate().map_err(|e| match &self.config {
            Some(path) => anyhow::anyhow!(
                "configuration ({} with flags and environment): {e}",
                path.display()
            ),
            None => anyhow::anyhow!("configuration (flags and environment): {e}"),
        })?;
        Ok(c)
    }
}

/// The memory node's limits and quotas on the command line (`docs/threat-model.md` says what
/// each protects against). Unset: the node's defaults.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct LimitArgs {
    /// Disconnect a client silent on the control path this long, ms (default 30000).
    #[arg(long, env = "PATRONUS_IDLE_TIMEOUT_MS")]
    pub idle_timeout_ms: Option<u64>,
    /// Close a connection that has not authenticated this long after it was accepted, ms
    /// (default 2000).
    #[arg(long, env = "PATRONUS_HELLO_TIMEOUT_MS")]
    pub hello_timeout_ms: Option<u64>,
    /// Control requests a client may have in flight per shard (flow control enforced by the
    /// NIC; default 16). 0: one shared receive queue for all (the paper's design).
    #[arg(long, env = "PATRONUS_CONTROL_CREDITS")]
    pub control_credits: Option<u32>,
    /// Control connections per shard (default 1024).
    #[arg(long, env = "PATRONUS_MAX_CONNECTIONS")]
    pub max_connections: Option<u32>,
    /// Memory each tenant may own, MiB (default with tenants: ¾ of an equal share).
    #[arg(long, env = "PATRONUS_QUOTA_MEMORY_MIB")]
    pub quota_memory_mib: Option<u64>,
    /// Live permissions each tenant may hold (default with tenants: an equal share).
    #[arg(long, env = "PATRONUS_QUOTA_PERMISSIONS")]
    pub quota_permissions: Option<u32>,
    /// Live exclusive permissions each tenant may hold (default: as permissions).
    #[arg(long, env = "PATRONUS_QUOTA_EXCLUSIVE")]
    pub quota_exclusive: Option<u32>,
    /// Clients each tenant may have connected (default: an equal share of the connections).
    #[arg(long, env = "PATRONUS_SESSIONS_PER_TENANT")]
    pub sessions_per_tenant: Option<u32>,
    /// Clients that may be connected at once from one IP address (default 512).
    #[arg(long, env = "PATRONUS_SESSIONS_PER_ADDRESS")]
    pub sessions_per_address: Option<u32>,
    /// Bits of an IPv4 address the per-address limit counts by (default 32: each address; 24:
    /// each /24). Every loopback address counts as one.
    #[arg(long, env = "PATRONUS_ADDRESS_PREFIX_V4")]
    pub address_prefix_v4: Option<u8>,
    /// Bits of an IPv6 address the per-address limit counts by (default 64).
    #[arg(long, env = "PATRONUS_ADDRESS_PREFIX_V6")]
    pub address_prefix_v6: Option<u8>,
    /// New sessions the node accepts a second, all clients together (default 200); past it
    /// (and its burst), first connections are refused at the handshake.
    #[arg(long, env = "PATRONUS_NEW_SESSIONS_PER_S")]
    pub new_sessions_per_s: Option<u32>,
    /// New sessions the node accepts at once (default 400).
    #[arg(long, env = "PATRONUS_NEW_SESSION_BURST")]
    pub new_session_burst: Option<u32>,
    /// New sessions each tenant may open a second (default: an equal share of the node's).
    #[arg(long, env = "PATRONUS_TENANT_NEW_SESSIONS_PER_S")]
    pub tenant_new_sessions_per_s: Option<u32>,
    /// Access faults (data reconnections) a tenant may cause at once (default 1024).
    #[arg(long, env = "PATRONUS_FAULT_BURST")]
    pub fault_burst: Option<u32>,
    /// Access faults a tenant regains per second (default 100).
    #[arg(long, env = "PATRONUS_FAULTS_PER_S")]
    pub faults_per_s: Option<u32>,
    /// What one client may hold, as a percentage of the node (default 50; 0: no limit).
    #[arg(long, env = "PATRONUS_CLIENT_SHARE_PERCENT")]
    pub client_share_percent: Option<u32>,
    /// Cost units a round of the manager's fair queue gives all connections that have not
    /// authenticated together; a tenant of weight 1 gets 4 (default 1).
    #[arg(long, env = "PATRONUS_UNAUTHENTICATED_QUANTUM")]
    pub unauthenticated_quantum: Option<u32>,
    /// Messages a second the NIC serves a control connection before its Hello (default 100;
    /// soft provider over TCP).
    #[arg(long, env = "PATRONUS_UNAUTHENTICATED_OPS_PER_S")]
    pub unauthenticated_ops_per_s: Option<u32>,
}

impl LimitArgs {
    /// Lays the limits given over `l` (a configuration file's, or the defaults).
    pub fn lay_over(&self, l: &mut LimitsSetting) {
        let set = |v: Option<u32>, to: &mut u32| {
            if let Some(v) = v {
                *to = v;
            }
        };
        if let Some(ms) = self.idle_timeout_ms {
            l.idle_timeout_ms = ms;
        }
        if let Some(ms) = self.hello_timeout_ms {
            l.hello_timeout_ms = ms;
        }
        if let Some(m) = self.quota_memory_mib {
            l.quota_memory_mib = m;
        }
        set(self.control_credits, &mut l.control_credits);
        set(self.max_connections, &mut l.max_connections);
        set(self.quota_permissions, &mut l.quota_permissions);
        set(self.quota_exclusive, &mut l.quota_exclusive);
        set(self.sessions_per_tenant, &mut l.sessions_per_tenant);
        set(self.sessions_per_address, &mut l.sessions_per_address);
        set(self.fault_burst, &mut l.fault_burst);
        set(self.faults_per_s, &mut l.faults_per_s);
        set(self.unauthenticated_quantum, &mut l.unauthenticated_quantum);
        set(self.client_share_percent, &mut l.client_share_percent);
        set(
            self.unauthenticated_ops_per_s,
            &mut l.unauthenticated_ops_per_s,
        );
        set(self.new_sessions_per_s, &mut l.new_sessions_per_s);
        set(self.new_session_burst, &mut l.new_session_burst);
        set(
            self.tenant_new_sessions_per_s,
            &mut l.tenant_new_sessions_per_s,
        );
        if let Some(bits) = self.address_prefix_v4 {
            l.address_prefix_v4 = bits;
        }
        if let Some(bits) = self.address_prefix_v6 {
            l.address_prefix_v6 = bits;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_flags_parse_or_say_what_is_wrong() {
        assert_eq!(parse_tenant_weight("3:2"), Ok((3, 2)));
        assert_eq!(
            parse_tenant_certificate("1:tenant-1"),
            Ok((1, "tenant-1".to_owned()))
        );
        for (bad, says) in [
            ("3", "expected ID:WEIGHT"),
            ("x:2", "tenant id `x`"),
            ("3:0", "from 1"),
            ("3:-1", "from 1"),
        ] {
            let e = parse_tenant_weight(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = parse_tenant_certificate("1:").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        assert_eq!(
            parse_tenant_priority("2:low"),
            Ok((2, PrioritySetting::Low))
        );
        assert_eq!(parse_tenant_rate("2:5000"), Ok((2, 5000)));
        let e = parse_tenant_priority("2:urgent").unwrap_err();
        assert!(e.contains("high, normal or low"), "{e}");
        for bad in ["2:0", "2:x", "2"] {
            assert!(parse_tenant_rate(bad).is_err(), "{bad}");
        }
    }
}
