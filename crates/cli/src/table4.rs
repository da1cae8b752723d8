//! Table 4 of the paper, measured: MW operations and RPCs per permission for each cumulative
//! technique. Clients acquire (and revoke, or let expire) read-write permissions over 64-byte
//! objects at random, concurrently, as in §7.2.1.

use anyhow::{Context as _, Result};
use patronus_core::client::ClientConfig;
use patronus_core::cluster::{EmbeddedCluster, Transport};
use patronus_core::manager::{Counters, NodeConfig, Techniques};
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use rand::{Rng, SeedableRng};
use rnic::soft::SoftConfig;
use std::time::{Duration, Instant};

/// Logical clients (outstanding requests) per client thread.
const DEPTH: usize = 8;

struct Row {
    name: &'static str,
    techniques: Techniques,
    expire: bool,
    paper: &'static str,
}

const ROWS: [Row; 5] = [
    Row {
        name: "Baseline",
        techniques: Techniques::NONE,
        expire: false,
        paper: "2 + 2 / 2",
    },
    Row {
        name: "+ Delay",
        techniques: Techniques {
            delayed_unbind: true,
            contiguity: false,
            handover: false,
        },
        expire: false,
        paper: "2 + 1 / 2",
    },
    Row {
        name: "+ Cont",
        techniques: Techniques {
            delayed_unbind: true,
            contiguity: true,
            handover: false,
        },
        expire: false,
        paper: "1 + 1 / 2",
    },
    Row {
        name: "+ HO",
        techniques: Techniques::ALL,
        expire: false,
        paper: "1 + 0† / 2",
    },
    Row {
        name: "+ Expr",
        techniques: Techniques::ALL,
        expire: true,
        paper: "1 + 0† / 1",
    },
];

/// Runs every configuration and prints the table.
pub fn run(transport: Transport, perms: usize, clients: usize) -> Result<()> {
    println!(
        "Table 4: MW operations (bind + unbind) and RPCs per permission, {perms} permissions, {clients} clients, {transport:?}"
    );
    println!(
        "{:<10} {:>8} {:>8} {:>10} {:>6} {:>12}   paper (MW bind + unbind / RPC)",
        "config", "bind", "unbind", "handover", "RPC", "mgr CPU us"
    );
    for row in &ROWS {
        let (c, cpu) = measure(transport, row, perms, clients)?;
        let n = c.granted.max(1) as f64;
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>10.2} {:>6.2} {:>12.2}   {}",
            row.name,
            c.binds as f64 / n,
            c.unbinds as f64 / n,
            c.handovers as f64 / n,
            c.rpcs as f64 / n,
            cpu.as_secs_f64() * 1e6 / n,
            row.paper
        );
    }
    println!("† at probability: handover needs a grant and a release in the same batch.");
    Ok(())
}

#[allow(clippy::disallowed_methods)] // an experiment driver: threads and wall-time bounds
fn measure(
    transport: Transport,
    row: &Row,
    perms: usize,
    clients: usize,
) -> Result<(Counters, Duration)> {
    let node_cfg = NodeConfig {
        techniques: row.techniques,
        max_lifetime_us: 1_000_000,
        header_count: 1 << 16,
        mw_count: 1 << 15,
        ..NodeConfig::default()
    };
    let mut cluster = EmbeddedCluster::start(
        transport,
        SoftConfig::default(),
        node_cfg,
        ClientConfig::default(),
        clients.max(1),
    )
    .context("starting the cluster")?;
    // Objects to acquire: allocated, then their allocation permissions revoked.
    let objects = 1024;
    let mut addrs = Vec::with_capacity(objects);
    {
        let c = &mut cluster.clients[0];
        for _ in 0..objects {
            let p = c.allocate(32, 1_000_000, Mode::Shared)?;
            addrs.push(p.addr());
            c.revoke(p)?;
        }
    }
    let before_stats = cluster.node.fresh_stats();
    let before = wait_settled(&cluster, before_stats.counters)?;
    let cpu_before = cluster.node.fresh_stats().busy_cpu;
    let per_client = perms / clients.max(1);
    let lease = if row.expire { 300 } else { 1_000_000 };
    let expire = row.expire;
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for (i, c) in cluster.clients.iter_mut().enumerate() {
            let addrs = &addrs;
            handles.push(s.spawn(move || -> Result<()> {
                // `DEPTH` logical clients per thread, each with one request in flight, as the
                // paper's coroutines: the memory node sees batches that mix grants and releases.
                let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                let mut granted = 0usize;
                let mut in_flight = 0usize;
                let mut issued = 0usize;
                while granted < per_client || in_flight > 0 {
                    while in_flight < DEPTH && issued < per_client {
                        let addr = addrs[rng.random_range(0..addrs.len())];
                        c.submit(Request::Acquire {
                            addr,
                            size: 32,
                            lease_us: lease,
                            access: Access::ReadWrite,
                            mode: Mode::Shared,
                            wait_us: 0,
                        })?;
                        issued += 1;
                        in_flight += 1;
                    }
                    let Some((_, reply)) = c.poll_reply()? else {
                        std::hint::spin_loop();
                        continue;
                    };
                    match reply {
                        Reply::Granted(g) => {
                            granted += 1;
                            if expire {
                                in_flight -= 1;
                            } else {
                                c.submit(Request::Revoke {
                                    id: g.id,
                                    free: false,
                                })?;
                            }
                        }
                        Reply::Revoked => in_flight -= 1,
                        Reply::Failed(s) => anyhow::bail!("request failed: {s:?}"),
                        other => anyhow::bail!("unexpected reply {other:?}"),
                    }
                }
                Ok(())
            }));
        }
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
        }
        Ok(())
    })?;
    // Let every lease end (expiring ones) and the counters settle.
    let t0 = Instant::now();
    loop {
        let s = cluster.node.fresh_stats();
        if s.counters.ended >= s.counters.granted || t0.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::yield_now();
    }
    let after = wait_settled(&cluster, cluster.node.fresh_stats().counters)?;
    let cpu = cluster
        .node
        .fresh_stats()
        .busy_cpu
        .saturating_sub(cpu_before);
    Ok((after.since(&before), cpu))
}

/// Waits until the published counters stop changing (the manager publishes when idle).
#[allow(clippy::disallowed_methods)]
fn wait_settled(cluster: &EmbeddedCluster, mut last: Counters) -> Result<Counters> {
    let t0 = Instant::now();
    let mut stable = 0;
    while stable < 200 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
        let now = cluster.node.fresh_stats().counters;
        if now == last {
            stable += 1;
        } else {
            stable = 0;
            last = now;
        }
    }
    Ok(last)
}
