//! A memory node in its own process (over TCP), and a probe client for it.

use anyhow::{Context as _, Result, bail};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, TenantSecret};
use patronus_core::proto::messages::{Access, Mode};
use rnic::Provider;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
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
}

impl ServeOpts {
    /// The memory node's configuration (whatever the provider).
    pub fn node_config(&self) -> NodeConfig {
        NodeConfig {
            pool_bytes: self.pool_mib << 20,
            max_lifetime_us: self.max_lifetime_ms * 1000,
            isolation: self.isolation,
            tenants: self.tenants.clone(),
            shards: self.shards,
            ..NodeConfig::default()
        }
    }
}

/// Serves until stdin reaches end of file; prints `listening <addr>` first.
pub fn serve(opts: &ServeOpts) -> Result<()> {
    let ctx =
        TcpNode::open(SoftConfig::default(), opts.listen).context("opening the TCP device")?;
    let node = MemoryNode::<SoftProvider>::start(ctx, opts.node_config())?;
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
    let s = node.fresh_stats();
    println!(
        "served: granted {} ended {} rpcs {}",
        s.counters.granted, s.counters.ended, s.counters.rpcs
    );
    Ok(())
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
