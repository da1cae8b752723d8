//! A probe client for a memory node in its own process (over TCP), the tenant and limit
//! flags of `serve`, and its closing report (the daemon itself: `daemon/`).

use crate::daemon::config::LimitsSetting;
use anyhow::{Context as _, Result};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::{NodeStats, TenantSecret};
use patronus_core::proto::messages::{Access, Mode};
use rnic::Provider;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
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
    let secret = crate::daemon::config::parse_secret(secret)
        .map_err(|e| format!("secret of tenant {tenant}: {e}"))?;
    Ok(TenantSecret { tenant, secret })
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
    /// Access faults (data reconnections) a tenant may cause at once (default 1024).
    #[arg(long, env = "PATRONUS_FAULT_BURST")]
    pub fault_burst: Option<u32>,
    /// Access faults a tenant regains per second (default 100).
    #[arg(long, env = "PATRONUS_FAULTS_PER_S")]
    pub faults_per_s: Option<u32>,
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
    }
}

/// What a node served, and how its clients left.
pub fn print_served(s: &NodeStats) {
    println!(
        "served: granted {} ended {} rpcs {}",
        s.counters.granted, s.counters.ended, s.counters.rpcs
    );
    let e = s.sessions_ended;
    println!(
        "sessions: {} connected now; ended {} closed, {} broken, {} idle, {} without hello; \
         data reconnections {} ({} refused: fault budget)",
        s.held.sessions,
        e.closed,
        e.broken,
        e.idle,
        e.no_hello,
        s.data_reconnects,
        s.reconnects_refused
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

/// The probe's lifecycle on any provider: allocate, write, revoke, acquire, read, free — the
/// object it made is freed before it returns, so probing leaves nothing behind on the node.
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
    let lease = c.status().max_lease().min(Duration::from_secs(1));
    let p = c.allocate(256, lease, Mode::Exclusive)?;
    c.write(&p, 0, b"across processes")?;
    let addr = p.addr();
    c.revoke(p)?;
    let q = c.acquire(addr, 16, lease, Access::ReadWrite, Mode::Shared)?;
    let mut buf = [0u8; 16];
    let read = c.read(&q, 0, &mut buf);
    // Freed whether or not the read worked; a read error is reported over a free error.
    let freed = c.free(q).context("freeing the probe's object");
    read?;
    freed?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
