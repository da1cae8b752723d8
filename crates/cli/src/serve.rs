//! A memory node in its own process (over TCP), and a probe client for it.

use anyhow::{Context as _, Result, bail};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::{MemoryNode, NodeConfig};
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
use std::io::Read;
use std::net::SocketAddr;

/// Serves until stdin reaches end of file; prints `listening <addr>` first.
pub fn serve(listen: SocketAddr, pool_mib: u64, max_lifetime_ms: u64) -> Result<()> {
    let ctx = TcpNode::open(SoftConfig::default(), listen).context("opening the TCP device")?;
    let node = MemoryNode::<SoftProvider>::start(
        ctx,
        NodeConfig {
            pool_bytes: pool_mib << 20,
            max_lifetime_us: max_lifetime_ms * 1000,
            ..NodeConfig::default()
        },
    )?;
    let SoftAddress::Tcp(addr) = node.address() else {
        bail!("TCP node without a TCP address");
    };
    println!("listening {addr}");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let s = node.fresh_stats();
    println!(
        "served: granted {} ended {} rpcs {}",
        s.counters.granted, s.counters.ended, s.counters.rpcs
    );
    Ok(())
}

/// Connects, allocates, writes, reads, revokes.
pub fn probe(connect: SocketAddr) -> Result<()> {
    let ctx = TcpNode::open(SoftConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let mut c =
        Client::<SoftProvider>::connect(&ctx, &SoftAddress::Tcp(connect), ClientConfig::default())?;
    let p = c.allocate(256, 1_000_000, Mode::Exclusive)?;
    c.write(&p, 0, b"across processes")?;
    let addr = p.addr();
    c.revoke(p)?;
    let q = c.acquire(addr, 16, 1_000_000, Access::Read, Mode::Shared)?;
    let mut buf = [0u8; 16];
    c.read(&q, 0, &mut buf)?;
    c.revoke(q)?;
    println!("probe ok: {}", String::from_utf8_lossy(&buf));
    Ok(())
}
