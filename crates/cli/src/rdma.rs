//! `serve` and `probe` on the rdma-core provider (`--provider rdma --device NAME`): the same
//! memory node and client library as on the software RNIC, generic over the provider.

use crate::serve::{ServeOpts, TenantArg, probe_on, serve_until_eof};
use anyhow::{Context as _, Result};
use patronus_core::MemoryNode;
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};
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
    let node = MemoryNode::<RdmaProvider>::start(ctx, opts.node_config()?)?;
    println!("listening {}", node.address());
    serve_until_eof(node)
}

/// The probe's lifecycle (allocate, write, revoke, acquire, read, revoke) over RDMA.
pub fn probe(connect: SocketAddr, tenant: Option<TenantArg>, device: Option<String>) -> Result<()> {
    let ctx = open(device, SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let text = probe_on::<RdmaProvider>(&ctx, &connect, tenant)?;
    println!("probe ok (rdma): {text}");
    Ok(())
}
