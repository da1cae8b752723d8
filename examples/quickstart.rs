//! Quickstart: tenant A puts bytes in remote memory and lets tenant B read them.
//!
//! Run it with no setup — it starts a memory node in this process, on TCP loopback:
//!
//! ```text
//! cargo run -p patronus-examples --example quickstart
//! ```
//!
//! or against a memory node running elsewhere, serving the two tenants below:
//!
//! ```text
//! patronus serve --tenant 1:0x5EC1 --tenant 2:0x5EC2
//! cargo run -p patronus-examples --example quickstart -- --connect 127.0.0.1:7471
//! ```
//!
//! (`PATRONUS_CONNECT=127.0.0.1:7471` does the same as `--connect`.) It exits non-zero if
//! anything is not as the comments say.

use anyhow::{Context as _, Result, bail, ensure};
use patronus_core::{
    Access, Client, ClientConfig, ClientError, MemoryNode, Mode, NodeConfig, TenantSecret,
};
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::time::Duration;

/// The two tenants and the secrets their clients authenticate with. A real deployment draws
/// secrets at random and keeps them out of source code.
const A: TenantSecret = TenantSecret {
    tenant: 1,
    secret: 0x5EC1,
};
const B: TenantSecret = TenantSecret {
    tenant: 2,
    secret: 0x5EC2,
};
const HELLO: &[u8; 19] = b"hello from tenant 1";

fn main() -> Result<()> {
    // A device is an RDMA NIC: here the software one, over TCP on a free loopback port.
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let connect = std::env::args().skip_while(|a| a != "--connect").nth(1);
    let connect = connect.or_else(|| std::env::var("PATRONUS_CONNECT").ok());
    // Keep an in-process node alive until the end of `main`.
    let (_node, address) = match connect {
        Some(addr) => {
            let addr: SocketAddr = addr.parse().with_context(|| format!("`{addr}`"))?;
            println!("connecting to the memory node at {addr}");
            (None, SoftAddress::Tcp(addr))
        }
        None => {
            let device = TcpNode::open(SoftConfig::default(), loopback)?;
            let config = NodeConfig {
                tenants: vec![A, B],
                max_lifetime_us: 1_000_000, // leases extend up to 1 s (as `patronus serve`)
                ..NodeConfig::default()
            };
            let node = MemoryNode::<SoftProvider>::start(device, config)?;
            let address = node.address().clone();
            println!("started a memory node in this process at {address:?}");
            (Some(node), address)
        }
    };
    // This compute node's device. Both tenants' clients use it here; each client gets its own
    // protection domain on it and its own connections to the memory node.
    let device = TcpNode::open(SoftConfig::default(), loopback)?;
    let connect_as = |t: TenantSecret| -> Result<Client<SoftProvider>> {
        let config = ClientConfig {
            tenant: t.tenant,
            tenant_secret: t.secret,
            ..ClientConfig::default()
        };
        let client = Client::connect(&device, &address, config);
        client.with_context(|| format!("connecting as tenant {}", t.tenant))
    };
    let (mut a, mut b) = (connect_as(A)?, connect_as(B)?);
    let lease = Duration::from_secs(1);

    // A allocates 64 bytes: it gets a read-write permission (a memory window's rkey with a
    // lease) and writes through it with one-sided RDMA: the node's CPU is not involved.
    let mine = a.allocate(64, lease, Mode::Shared)?;
    a.write(&mine, 0, HELLO)?;
    // A shares the object with tenant B, read-only. Until then B could not even tell that
    // an object exists at this address.
    a.control()
        .share(mine.addr(), B.tenant, Some(Access::Read))?;

    // B acquires its own permission over the object, by address, and reads A's bytes.
    let theirs = b.acquire(mine.addr(), 64, lease, Access::Read, Mode::Shared)?;
    let mut text = [0u8; HELLO.len()];
    b.read(&theirs, 0, &mut text)?;
    ensure!(&text == HELLO, "B read {text:?}");
    println!("tenant 2 read: {}", String::from_utf8_lossy(&text));

    // B's window is read-only: the NIC refuses a write through it (nothing is written).
    match b.write(&theirs, 0, b"overwritten") {
        Err(ClientError::Denied(status)) => {
            println!("tenant 2's write refused by the NIC: {status:?}")
        }
        other => bail!("a write through a read-only permission was not refused: {other:?}"),
    }
    a.read(&mine, 0, &mut text)?;
    ensure!(&text == HELLO, "the refused write changed the bytes");

    // Clean up: B gives its permission back, A withdraws the share and frees the object
    // (which ends every permission on it).
    b.revoke(theirs)?;
    a.control().share(mine.addr(), B.tenant, None)?;
    a.free(mine)?;
    println!("done: shared, read, refused a write, revoked and freed");
    Ok(())
}
