//! The embedded demo: one memory node and three clients on the software RNIC.

use anyhow::{Context as _, Result, bail};
use patronus_core::client::{ClientConfig, ClientError, Op};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::SoftConfig;
use std::time::{Duration, Instant};

fn step(n: usize, what: &str) {
    println!("\n[{n}] {what}");
}

#[allow(clippy::disallowed_methods)] // a demo driver waits on wall time for a lease to end
pub fn run(transport: Link) -> Result<()> {
    let node_cfg = NodeConfig {
        max_lifetime_us: 2_000_000,
        ..NodeConfig::default()
    };
    let client_cfg = ClientConfig {
        check_local_expiry: false, // so the demo can show the NIC refusing a late access
        acquire_wait: Duration::from_secs(1), // a conflicting acquire waits up to 1 s
        ..ClientConfig::default()
    };
    let started = Instant::now();
    let mut cluster =
        EmbeddedCluster::start(transport, SoftConfig::default(), node_cfg, client_cfg, 3)
            .context("starting the embedded cluster")?;
    println!(
        "Patronus demo: memory node at {:?}, 3 clients, transport {:?} (started in {:.1} ms)",
        cluster.node.address(),
        transport,
        started.elapsed().as_secs_f64() * 1e3
    );
    let node = &cluster.node;
    let [alice, bob, carol] = &mut cluster.clients[..] else {
        bail!("expected three clients");
    };

    step(
        1,
        "alice allocates 4 KiB (exclusive, lease 500 ms) and writes to it",
    );
    let p = alice.allocate(4096 - 32, Duration::from_millis(500), Mode::Exclusive)?;
    println!(
        "    granted {:?}: buffer {:#x}+{} rkey {:?}, lifetime {} us, contiguous header+buffer window: {}",
        p.id(),
        p.addr(),
        p.len(),
        p.rkey(),
        p.lifetime_us(),
        p.contiguous()
    );
    alice.write(&p, 0, b"the quick brown fox")?;
    let mut buf = [0u8; 19];
    alice.read(&p, 0, &mut buf)?;
    println!("    read back: {:?}", String::from_utf8_lossy(&buf));
    println!(
        "    FAA +1 -> old {}, CAS 1->7 -> old {}",
        alice.faa(&p, 64, 1)?,
        alice.cas(&p, 64, 1, 7)?
    );

    step(
        2,
        "alice extends her lease one-sidedly (RDMA CAS on the header's lifetime field)",
    );
    for _ in 0..3 {
        alice
            .extend(&p, Duration::from_millis(100))
            .context("extending while nobody waits")?;
        println!("    lifetime now {} us", p.lifetime_us());
    }

    step(
        3,
        "bob asks for a shared read permission while alice holds it exclusively: he waits",
    );
    let asked = Instant::now();
    let pending = bob.start(Op::Acquire {
        addr: p.addr(),
        size: 19,
        lease: Duration::from_millis(500),
        access: Access::Read,
        mode: Mode::Shared,
        wait: true,
    })?;
    // The node queues bob and zeroes alice's lifetime field by CAS through its NIC (§5.3: a
    // holder others wait for may not extend; if her extensions raced the CAS, it adopts them
    // and zeroes again). Wait for that: each `status` call returns after the manager's next
    // turn.
    let alice_addr = p.addr();
    while node.status().0.permissions.iter().any(|s| {
        s.permission.addr == alice_addr
            && s.permission.mode == Mode::Exclusive
            && s.permission.extendable
    }) {
        if asked.elapsed() > Duration::from_secs(5) {
            bail!("the memory node did not refuse alice's extensions within 5 s of bob's acquire");
        }
    }
    if let Some(done) = bob.poll(pending)? {
        bail!("bob was granted {done:?} while alice held it exclusively");
    }
    println!("    bob's acquire is queued at the memory node behind alice's exclusive permission");
    println!("    the node zeroed alice's lifetime field so that she cannot extend past her lease");

    step(
        4,
        "alice tries to extend again: refused, someone is waiting (§5.3, \"regulate the extension\")",
    );
    match alice.extend(&p, Duration::from_millis(100)) {
        Err(ClientError::ExtensionRefused) => println!(
            "    refused by the memory node: her CAS found the lifetime field zeroed; her lease ends in at most {} us",
            p.lifetime_us()
        ),
        other => bail!("alice's extension while bob waits: expected a refusal, got {other:?}"),
    }

    step(
        5,
        "alice revokes: bob's waiting acquire is granted at once; he reads; his write is refused by the NIC",
    );
    let addr = p.addr();
    let alice_rkey = p.rkey();
    alice.revoke(p)?;
    let q = bob
        .wait(pending)?
        .into_perm()
        .context("bob's acquire ended without a permission")?;
    println!(
        "    granted {:.1} ms after he asked; bob's rkey {:?} (alice's old rkey {:?} is dead)",
        asked.elapsed().as_secs_f64() * 1e3,
        q.rkey(),
        alice_rkey
    );
    bob.read(&q, 0, &mut buf)?;
    println!("    bob reads: {:?}", String::from_utf8_lossy(&buf));
    match bob.write(&q, 0, b"tampered") {
        Err(e) => println!("    bob's write: {e}"),
        Ok(()) => bail!("a write through a read-only window succeeded"),
    }
    let qps = bob.status().qps();
    println!(
        "    the fault broke bob's QP; a spare took over ({} promotion, {} us on bob's path)",
        qps.promotions,
        qps.last_switch.as_micros()
    );
    bob.read(&q, 0, &mut buf)?;
    println!(
        "    bob reads again on the spare: {:?} (memory unchanged)",
        String::from_utf8_lossy(&buf)
    );

    step(
        6,
        "carol acquires with a 20 ms lease and never revokes: the lease expires",
    );
    let before = node.stats().counters.expired;
    let r = carol.acquire(
        addr,
        19,
        Duration::from_millis(20),
        Access::Read,
        Mode::Shared,
    )?;
    carol.read(&r, 0, &mut buf)?;
    let t0 = Instant::now();
    while node.stats().counters.expired == before {
        if t0.elapsed() > Duration::from_secs(5) {
            bail!("lease did not expire within 5 s");
        }
        std::thread::yield_now();
    }
    println!(
        "    the manager expired it after {:.1} ms without any RPC",
        t0.elapsed().as_secs_f64() * 1e3
    );
    match carol.read(&r, 0, &mut buf) {
        Err(e) => println!("    carol's late read: {e}"),
        Ok(()) => bail!("a read after expiry succeeded"),
    }
    bob.revoke(q)?;

    let s = node.fresh_stats();
    let c = s.counters;
    println!("\nMemory node report");
    println!(
        "    permissions granted {}, ended {} (expired {}, forced {})",
        c.granted, c.ended, c.expired, c.forced
    );
    println!(
        "    window binds {} (of which handovers {}), unbinds {}, lifetime CAS {}, RPCs {}",
        c.binds, c.handovers, c.unbinds, c.lifetime_cas, c.rpcs
    );
    println!(
        "    extensions seen by the manager: {}",
        c.extended_by_client
    );
    println!(
        "    manager CPU {:.3} ms handling {} batches ({:.2} ms including idle polling)",
        s.busy_cpu.as_secs_f64() * 1e3,
        s.batches,
        s.manager_cpu.as_secs_f64() * 1e3
    );
    match rnic::soft::TcpNode::engine_cpu_time(&cluster.node_ctx) {
        Some(cpu) => println!(
            "    NIC engine CPU {:.2} ms (one-sided ops are served by the engine, not the manager)",
            cpu.as_secs_f64() * 1e3
        ),
        None => println!(
            "    one-sided ops cost the memory node's CPU nothing: in-process, the requester's thread runs the NIC"
        ),
    }
    if let Some(o) = s.occupancy {
        println!(
            "    pools: {} live permissions, headers {}/{} free, windows {} free + {} delayed-unbound of {}",
            o.permissions, o.headers_free, o.headers_capacity, o.mw_free, o.mw_stale, o.mw_capacity
        );
    }
    Ok(())
}
