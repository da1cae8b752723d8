//! A probe client for a memory node in its own process (over TCP), the tenant flag (of
//! `serve` and of the clients), and `serve`'s closing report (the daemon itself: `daemon/`).

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
    let secret = parse_secret(secret).map_err(|e| format!("secret of tenant {tenant}: {e}"))?;
    Ok(TenantSecret { tenant, secret })
}

/// Parses a secret: a 64-bit number, decimal or 0x-hex.
pub fn parse_secret(s: &str) -> std::result::Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    }
    .map_err(|e| format!("`{s}` is not a 64-bit number (decimal or 0x-hex): {e}"))
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
pub fn probe(
    connect: SocketAddr,
    tenant: Option<TenantArg>,
    tls: &crate::tls::TlsArgs,
) -> Result<()> {
    let ctx = TcpNode::open_with(
        SoftConfig::default(),
        SocketAddr::from(([127, 0, 0, 1], 0)),
        tls.tcp()?,
    )?;
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
