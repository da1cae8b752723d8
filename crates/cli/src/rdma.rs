//! `serve` and `probe` on the rdma-core provider (`--provider rdma --device NAME`): the same
//! memory node and client library as on the software RNIC, generic over the provider.

use crate::serve::{TenantArg, probe_on};
use anyhow::{Context as _, Result};
use patronus_core::MemoryNode;
use patronus_core::manager::NodeConfig;
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};
use std::net::SocketAddr;

fn open(device: Option<String>, listen: SocketAddr) -> Result<RdmaContext> {
    let name = device.clone().unwrap_or_else(|| "(first device)".into());
    RdmaContext::open(RdmaConfig {
        device,
        listen,
        // As the test suites read it (scripts/rxe-vm sets it); else the provider's rule.
        gid_index: std::env::var("PATRONUS_RDMA_GID")
            .ok()
            .and_then(|g| g.parse().ok()),
        ..RdmaConfig::default()
    })
    .with_context(|| format!("opening RDMA device {name}; `patronus devices` lists them"))
}

/// Starts a memory node on RDMA device `device` ("": the first) listening on `listen` (the
/// daemon serves it); returns it with the handshake address clients connect to.
pub fn start(
    device: &str,
    listen: SocketAddr,
    node_config: NodeConfig,
) -> Result<(MemoryNode<RdmaProvider>, String)> {
    let device = (!device.is_empty()).then(|| device.to_owned());
    let ctx = open(device, listen)?;
    println!(
        "device {} (GID index {})",
        ctx.device_name(),
        ctx.gid_index()
    );
    let node = MemoryNode::<RdmaProvider>::start(ctx, node_config)
        .with_context(|| format!("starting the memory node (clients at {listen})"))?;
    let listen = node.address().to_string();
    Ok((node, listen))
}

/// The probe's lifecycle (allocate, write, revoke, acquire, read, revoke) over RDMA.
pub fn probe(connect: SocketAddr, tenant: Option<TenantArg>, device: Option<String>) -> Result<()> {
    let ctx = open(device, SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let text = probe_on::<RdmaProvider>(&ctx, &connect, tenant)?;
    println!("probe ok (rdma): {text}");
    Ok(())
}
