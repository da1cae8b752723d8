//! A memory node in its own process (over TCP), and a probe client for it.

use anyhow::{Context as _, Result, bail};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::{
    Isolation, MemoryNode, NodeConfig, NodeLimits, NodeStats, TenantQuota, TenantSecret,
};
use patronus_core::proto::messages::{Access, Mode};
use rnic::Provider;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode, TcpOptions};
use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

/// A tenant given on the command line.
pub type TenantArg = TenantSecret;

/// Parses `ID:SECRET` (SECRET decimal or 0x-hex).
pub fn parse_tenant(s: &str) -> std::result::Result<TenantArg, String> {
    let (id, secret) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected ID:SECRET"))?;
    let tenant = id
        .parse::<u32>()
        .map_err(|e| format!("tenant id `{id}`: {e}"))?;
    let secret = match secret.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => secret.parse::<u64>(),
    }
    .map_err(|e| format!("secret of tenant {tenant}: {e}"))?;
    Ok(TenantSecret { tenant, secret })
}

/// What `serve` runs.
#[derive(Debug)]
pub struct ServeOpts {
    /// Listening address.
    pub listen: SocketAddr,
    /// Buffer pool, MiB.
    pub pool_mib: u64,
    /// Maximum lifetime, ms.
    pub max_lifetime_ms: u64,
    /// Isolation mode.
    pub isolation: Isolation,
    /// Tenants (empty: one default tenant).
    pub tenants: Vec<TenantArg>,
    /// Manager shards.
    pub shards: usize,
    /// Soft RNIC: empty polls of a NIC engine before it sleeps.
    pub engine_spin_polls: u32,
    /// Limits and quotas.
    pub limits: LimitArgs,
}

/// The memory node's limits and quotas on the command line (`docs/threat-model.md` says what
/// each protects against). Unset: the node's defaults.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct LimitArgs {
    /// Disconnect a client silent on the control path this long, ms (default 30000).
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// Close a connection that has not authenticated this long after it was accepted, ms
    /// (default 2000).
    #[arg(long)]
    pub hello_timeout_ms: Option<u64>,
    /// Control requests a client may have in flight per shard (flow control enforced by the
    /// NIC; default 16). 0: one shared receive queue for all (the paper's design).
    #[arg(long)]
    pub control_credits: Option<u32>,
    /// Control connections per shard (default 1024).
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Memory each tenant may own, MiB (default with tenants: ¾ of an equal share).
    #[arg(long)]
    pub quota_memory_mib: Option<u64>,
    /// Live permissions each tenant may hold (default with tenants: an equal share).
    #[arg(long)]
    pub quota_permissions: Option<u32>,
    /// Live exclusive permissions each tenant may hold (default: as permissions).
    #[arg(long)]
    pub quota_exclusive: Option<u32>,
    /// Clients each tenant may have connected (default: an equal share of the connections).
    #[arg(long)]
    pub sessions_per_tenant: Option<u32>,
    /// Clients that may be connected at once from one IP address (default 512).
    #[arg(long)]
    pub sessions_per_address: Option<u32>,
    /// Access faults (data reconnections) a tenant may cause at once (default 1024).
    #[arg(long)]
    pub fault_burst: Option<u32>,
    /// Access faults a tenant regains per second (default 100).
    #[arg(long)]
    pub faults_per_s: Option<u32>,
}

impl LimitArgs {
    /// `cfg` with these limits applied: a quota given in part keeps the node's default for
    /// the rest.
    fn apply(&self, mut cfg: NodeConfig) -> Result<NodeConfig> {
        let d = cfg.limits;
        cfg.limits = NodeLimits {
            idle_timeout_us: self
                .idle_timeout_ms
                .map_or(d.idle_timeout_us, |ms| ms * 1000),
            hello_timeout_us: self
                .hello_timeout_ms
                .map_or(d.hello_timeout_us, |ms| ms * 1000),
            control_credits: self.control_credits.unwrap_or(d.control_credits),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            sessions_per_tenant: self.sessions_per_tenant.or(d.sessions_per_tenant),
            sessions_per_address: self.sessions_per_address.unwrap_or(d.sessions_per_address),
            fault_burst: self.fault_burst.unwrap_or(d.fault_burst),
            faults_per_s: self.faults_per_s.unwrap_or(d.faults_per_s),
            ..d
        };
        let given = self.quota_memory_mib.is_some()
            || self.quota_permissions.is_some()
            || self.quota_exclusive.is_some();
        if given {
            let base: TenantQuota = cfg.tenant_quota()?;
            cfg.limits.tenant_quota = Some(TenantQuota {
                memory_bytes: self.quota_memory_mib.map_or(base.memory_bytes, |m| m << 20),
                permissions: self.quota_permissions.unwrap_or(base.permissions),
                exclusive: self
                    .quota_exclusive
                    .or(self.quota_permissions)
                    .unwrap_or(base.exclusive),
            });
            // Refuses quotas that overcommit the node, with the reason.
            cfg.tenant_quota()?;
        }
        Ok(cfg)
    }
}

impl ServeOpts {
    /// The memory node's configuration (whatever the provider).
    pub fn node_config(&self) -> Result<NodeConfig> {
        self.limits.apply(NodeConfig {
            pool_bytes: self.pool_mib << 20,
            max_lifetime_us: self.max_lifetime_ms * 1000,
            isolation: self.isolation,
            tenants: self.tenants.clone(),
            shards: self.shards,
            ..NodeConfig::default()
        })
    }
}

/// Serves until stdin reaches end of file; prints `listening <addr>` first.
pub fn serve(opts: &ServeOpts) -> Result<()> {
    let tcp = TcpOptions {
        spin_polls: opts.engine_spin_polls,
        ..TcpOptions::default()
    };
    let ctx = TcpNode::open_with(SoftConfig::default(), opts.listen, tcp)
        .context("opening the TCP device")?;
    let node = MemoryNode::<SoftProvider>::start(ctx, opts.node_config()?)?;
    let SoftAddress::Tcp(addr) = node.address() else {
        bail!("TCP node without a TCP address");
    };
    println!("listening {addr}");
    serve_until_eof(node)
}

/// Keeps `node` serving until stdin reaches end of file, then prints what it served.
pub fn serve_until_eof<P: Provider>(node: MemoryNode<P>) -> Result<()> {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    print_served(&node.fresh_stats());
    Ok(())
}

/// What a node served, and how its clients left.
fn print_served(s: &NodeStats) {
    println!(
        "served: granted {} ended {} rpcs {}",
        s.counters.granted, s.counters.ended, s.counters.rpcs
    );
    let e = s.sessions_ended;
    println!(
        "sessions: {} connected now; ended {} closed, {} idle, {} without hello; \
         data reconnections {} ({} refused: fault budget)",
        s.held.sessions, e.closed, e.idle, e.no_hello, s.data_reconnects, s.reconnects_refused
    );
    println!(
        "pool: {} bytes in use (live objects and permission headers)",
        s.pool_bytes_in_use
    );
}

/// Connects (as `tenant`, if given), allocates, writes, reads, revokes.
pub fn probe(connect: SocketAddr, tenant: Option<TenantArg>) -> Result<()> {
    let ctx = TcpNode::open(SoftConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let text = probe_on::<SoftProvider>(&ctx, &SoftAddress::Tcp(connect), tenant)?;
    println!("probe ok: {text}");
    Ok(())
}

/// The probe's lifecycle on any provider: allocate, write, revoke, acquire, read, revoke.
/// Returns the text read back.
pub fn probe_on<P: Provider>(
    ctx: &P::Context,
    connect: &P::Address,
    tenant: Option<TenantArg>,
) -> Result<String> {
    let mut cfg = ClientConfig::default();
    if let Some(t) = tenant {
        cfg.tenant = t.tenant;
        cfg.tenant_secret = t.secret;
    }
    let mut c = Client::<P>::connect(ctx, connect, cfg).context("connecting to the memory node")?;
    let p = c.allocate(256, Duration::from_secs(1), Mode::Exclusive)?;
    c.write(&p, 0, b"across processes")?;
    let addr = p.addr();
    c.revoke(p)?;
    let q = c.acquire(addr, 16, Duration::from_secs(1), Access::Read, Mode::Shared)?;
    let mut buf = [0u8; 16];
    c.read(&q, 0, &mut buf)?;
    c.revoke(q)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
