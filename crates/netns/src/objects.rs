//! Objects across hosts: publish and read back, hold exclusively, contend, and one process
//! with a client per memory node.

use crate::{connect, ms_since, now};
use anyhow::{Context as _, Result, bail};
use patronus_core::nodes::{NodeId, NodeSet, NodeSetConfig};
use patronus_core::{Access, ClientError, Mode};
use std::net::SocketAddr;
use std::time::Duration;

/// Exit code of `exclusive` when every attempt met a conflicting holder.
pub const EXIT_REFUSED: i32 = 3;

/// Arguments of `put`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    /// The memory node.
    #[arg(long)]
    connect: SocketAddr,
    /// Name to publish the object under.
    #[arg(long)]
    name: String,
    /// What to write.
    #[arg(long)]
    text: String,
}

/// Allocates, writes, publishes, revokes (the object stays: it is the tenant's).
pub fn put(a: &PutArgs) -> Result<()> {
    let (_dev, mut c) = connect(a.connect, Duration::from_secs(1))?;
    let len = a.text.len() as u64;
    let p = c.allocate(len, Duration::from_secs(1), Mode::Exclusive)?;
    c.write(&p, 0, a.text.as_bytes())?;
    c.control().publish(&a.name, p.addr(), len)?;
    println!("put name={} addr={:#x} len={len}", a.name, p.addr());
    c.revoke(p)?;
    Ok(())
}

/// Arguments of `get`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The memory node.
    #[arg(long)]
    connect: SocketAddr,
    /// Published name of the object.
    #[arg(long)]
    name: String,
    /// Print the first 8 bytes as a little-endian integer (`value=N`) instead of text.
    #[arg(long)]
    u64: bool,
}

/// Looks up, acquires read-only, reads; then tries to write through the read-only permission
/// (the NIC must refuse) and reads again.
pub fn get(a: &GetArgs) -> Result<()> {
    let (_dev, mut c) = connect(a.connect, Duration::from_secs(1))?;
    let (addr, len) = c.control().lookup(&a.name).context("looking the name up")?;
    let p = c.acquire(
        addr,
        len,
        Duration::from_secs(1),
        Access::Read,
        Mode::Shared,
    )?;
    let mut buf = vec![0u8; usize::try_from(len)?];
    c.read(&p, 0, &mut buf)?;
    if a.u64 {
        let word: [u8; 8] = buf
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .context("the object is shorter than 8 bytes")?;
        println!(
            "got name={} addr={addr:#x} value={}",
            a.name,
            u64::from_le_bytes(word)
        );
        c.revoke(p)?;
        return Ok(());
    }
    println!(
        "got name={} addr={addr:#x} text={}",
        a.name,
        String::from_utf8_lossy(&buf)
    );
    match c.write(&p, 0, b"overwritten") {
        Err(e) => println!("write_through_read_permission=refused ({e})"),
        Ok(()) => println!("write_through_read_permission=ALLOWED"),
    }
    // The refused write broke the data QP; the read goes through a spare.
    c.read(&p, 0, &mut buf)?;
    println!("text_after={}", String::from_utf8_lossy(&buf));
    c.revoke(p)?;
    Ok(())
}

/// Arguments of `hold`.
#[derive(clap::Args, Debug)]
pub struct HoldArgs {
    /// The memory node.
    #[arg(long)]
    connect: SocketAddr,
    /// Published name of the object.
    #[arg(long)]
    name: String,
    /// Lease asked for, and added by each extension, ms.
    #[arg(long, default_value_t = 300)]
    lease_ms: u64,
    /// Give up holding (exit without revoking) after this long, ms.
    #[arg(long, default_value_t = 20_000)]
    deadline_ms: u64,
}

/// Acquires exclusively and extends the lease every third of it until the deadline; the
/// tests kill it before. Prints `holding` once granted and each change of the extensions'
/// outcome.
pub fn hold(a: &HoldArgs) -> Result<()> {
    let start = now();
    let (_dev, mut c) = connect(a.connect, Duration::from_secs(1))?;
    let (addr, len) = c.control().lookup(&a.name)?;
    let lease = Duration::from_millis(a.lease_ms);
    let p = c.acquire(addr, len, lease, Access::ReadWrite, Mode::Exclusive)?;
    println!(
        "holding name={} addr={addr:#x} lease_ms={}",
        a.name, a.lease_ms
    );
    let deadline = start + Duration::from_millis(a.deadline_ms);
    let mut last = String::new();
    let mut extended = 0u64;
    while now() < deadline {
        pace(lease / 3);
        let outcome = match c.extend(&p, lease) {
            Ok(()) => {
                extended += 1;
                "ok".to_string()
            }
            Err(e) => format!("failed ({e})"),
        };
        if outcome != last {
            println!(
                "extend={outcome} extended={extended} at_ms={}",
                ms_since(start)
            );
            last = outcome;
        }
    }
    println!("hold deadline reached, extended={extended}");
    Ok(())
}

/// Waits `d` between a holder's extensions: the pace of a renewal, not a wait for a
/// condition.
#[allow(clippy::disallowed_methods)]
fn pace(d: Duration) {
    std::thread::sleep(d);
}

/// Arguments of `exclusive`.
#[derive(clap::Args, Debug)]
pub struct ExclusiveArgs {
    /// The memory node.
    #[arg(long)]
    connect: SocketAddr,
    /// Published name of the object.
    #[arg(long)]
    name: String,
    /// How long each acquire may wait for conflicting holders at the memory node, ms (0:
    /// refused at once on a conflict).
    #[arg(long, default_value_t = 0)]
    wait_ms: u64,
    /// Try again after a refusal until this long has passed, ms (0: one attempt).
    #[arg(long, default_value_t = 0)]
    deadline_ms: u64,
}

/// Acquires exclusively: `acquired after_ms=T attempts=N` (exit 0), or every attempt met a
/// holder: `refused after_ms=T attempts=N` (exit [`EXIT_REFUSED`]).
pub fn exclusive(a: &ExclusiveArgs) -> Result<()> {
    let (_dev, mut c) = connect(a.connect, Duration::from_millis(a.wait_ms))?;
    let (addr, len) = c.control().lookup(&a.name)?;
    let start = now();
    let deadline = start + Duration::from_millis(a.deadline_ms);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let lease = Duration::from_millis(200);
        match c.acquire(addr, len, lease, Access::ReadWrite, Mode::Exclusive) {
            Ok(p) => {
                println!("acquired after_ms={} attempts={attempts}", ms_since(start));
                c.revoke(p)?;
                return Ok(());
            }
            Err(ClientError::ConflictTimeout) if now() < deadline => {}
            Err(ClientError::ConflictTimeout) => {
                println!("refused after_ms={} attempts={attempts}", ms_since(start));
                drop(c);
                std::process::exit(EXIT_REFUSED);
            }
            Err(e) => bail!("acquire failed otherwise than by a conflict: {e}"),
        }
    }
}

/// Arguments of `two-nodes`.
#[derive(clap::Args, Debug)]
pub struct TwoNodesArgs {
    /// The memory nodes (give it once per node).
    #[arg(long = "node", required = true)]
    nodes: Vec<SocketAddr>,
}

/// One client process over several memory nodes through the multi-node handle
/// (`NodeSet`): two objects per node placed round robin, each written, then read back
/// through a fresh permission acquired by its global address, then freed.
pub fn two_nodes(a: &TwoNodesArgs) -> Result<()> {
    let mut devices = Vec::new();
    let mut clients = Vec::new();
    for &node in &a.nodes {
        let (dev, c) = connect(node, Duration::from_secs(1))?;
        devices.push(dev);
        clients.push(c);
    }
    let mut set = NodeSet::from_clients(clients, NodeSetConfig::default())
        .context("a node set over the memory nodes")?;
    let node_addr = |n: NodeId| a.nodes[n.index()];
    let mut objects = Vec::new();
    for _ in 0..2 * a.nodes.len() {
        // The text names the node the object was placed on: room for any address.
        let p = set.allocate(64, Duration::from_secs(1), Mode::Exclusive)?;
        let text = format!("object on memory node {}", node_addr(p.node()));
        set.write(&p, 0, text.as_bytes())?;
        println!(
            "allocated node={} global={:#x} len={}",
            node_addr(p.node()),
            p.addr(),
            text.len()
        );
        objects.push((p.addr(), text));
        set.revoke(p)?;
    }
    for (addr, text) in &objects {
        let p = set.acquire(
            *addr,
            text.len() as u64,
            Duration::from_secs(1),
            Access::ReadWrite,
            Mode::Shared,
        )?;
        let node = node_addr(p.node());
        let mut buf = vec![0u8; text.len()];
        set.read(&p, 0, &mut buf)?;
        let back = String::from_utf8_lossy(&buf);
        println!("read node={node} addr={addr:#x} text={back}");
        if back != *text {
            bail!("node {node}: read {back:?}, wrote {text:?}");
        }
        set.free(p)?;
    }
    drop(set);
    drop(devices);
    println!("two-nodes ok nodes={}", a.nodes.len());
    Ok(())
}
