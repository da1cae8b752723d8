//! `serve` and `probe` on the rdma-core provider (`--provider rdma --device NAME`): the same
//! memory node and client library as on the software RNIC, generic over the provider.

use crate::serve::{ServeOpts, TenantArg};
use anyhow::{Context as _, Result};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::MemoryNode;
use patronus_core::proto::messages::{Access, Mode};
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};
use std::io::Read;
use std::net::SocketAddr;

fn open(device: Option<String>, listen: SocketAddr) -> Result<RdmaContext> {
    let name = device.clone().unwrap_or_else(|| "(first device)".into());
    RdmaContext::open(RdmaConfig {
        device,
        listen,
        ..RdmaConfig::default()
    })
    .with_context(|| format!("opening RDMA device {name}; `patronus devices` lists them"))
}

/// Serves on an RDMA device until stdin closes; prints `listening <addr>` (the handshake
/// address clients connect to) first.
pub fn serve(opts: &ServeOpts, device: Option<String>) -> Result<()> {
    let ctx = open(device, opts.listen)?;
    println!(
        "device {} (GID index {})",
        ctx.device_name(),
        ctx.gid_index()
    );
    let node = MemoryNode::<RdmaProvider>::start(ctx, opts.node_config())?;
    println!("listening {}", node.address());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let s = node.fresh_stats();
    println!(
        "served: granted {} ended {} rpcs {}",
        s.counters.granted, s.counters.ended, s.counters.rpcs
    );
    Ok(())
}

/// The probe's lifecycle (allocate, write, revoke, acquire, read, revoke) over RDMA.
pub fn probe(connect: SocketAddr, tenant: Option<TenantArg>, device: Option<String>) -> Result<()> {
    let ctx = open(device, SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let mut cfg = ClientConfig::default();
    if let Some(t) = tenant {
        cfg.tenant = t.tenant;
        cfg.tenant_secret = t.secret;
    }
    let mut c = Client::<RdmaProvider>::connect(&ctx, &connect, cfg)
        .context("connecting to the memory node")?;
    let p = c.allocate(256, std::time::Duration::from_secs(1), Mode::Exclusive)?;
    c.write(&p, 0, b"across processes")?;
    let addr = p.addr();
    c.revoke(p)?;
    let q = c.acquire(
        addr,
        16,
        std::time::Duration::from_secs(1),
        Access::Read,
        Mode::Shared,
    )?;
    let mut buf = [0u8; 16];
    c.read(&q, 0, &mut buf)?;
    c.revoke(q)?;
    println!("probe ok (rdma): {}", String::from_utf8_lossy(&buf));
    Ok(())
}
