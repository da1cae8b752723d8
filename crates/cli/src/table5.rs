//! Table 5 of the paper, measured: how long a QP fault interrupts a client, with and without
//! spare QPs. The fault is a deliberate access through a corrupted rkey (§7.2.5).

use anyhow::{Context as _, Result};
use patronus_core::client::{ClientConfig, ClientError};
use patronus_core::cluster::{EmbeddedCluster, Transport};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::Mode;
use rnic::soft::SoftConfig;
use std::time::{Duration, Instant};

/// Runs `faults` faults with spares and without, and prints the interruption.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub fn run(transport: Transport, faults: usize) -> Result<()> {
    println!("Table 5: interruption of a QP fault, {faults} faults each, {transport:?}");
    println!(
        "{:<16} {:>14} {:>16} {:>14}",
        "", "switch (us)", "next op ok (us)", "paper (us)"
    );
    for (name, spares, paper) in [("w/o spare QPs", 0, "1012"), ("w/ spare QPs", 2, "78")] {
        let cfg = ClientConfig {
            spare_qps: spares,
            ..ClientConfig::default()
        };
        let node = NodeConfig {
            max_lifetime_us: 60_000_000,
            ..NodeConfig::default()
        };
        let mut cluster = EmbeddedCluster::start(transport, SoftConfig::default(), node, cfg, 1)
            .context("starting the cluster")?;
        let c = &mut cluster.clients[0];
        let p = c.allocate(64, 60_000_000, Mode::Exclusive)?;
        let (mut switch, mut total) = (Duration::ZERO, Duration::ZERO);
        let mut buf = [0u8; 8];
        for _ in 0..faults {
            // Let the background worker return the previous QP to the spare pool first, as
            // the paper assumes faults are rarer than recoveries.
            let t_wait = Instant::now();
            while spares > 0
                && c.spares_ready() < spares
                && t_wait.elapsed() < Duration::from_secs(5)
            {
                std::thread::yield_now();
            }
            let mut bad = p.forged_copy();
            bad.corrupt_rkey();
            let t0 = Instant::now();
            match c.write(&bad, 0, b"x") {
                Err(ClientError::Denied(_)) => {}
                other => anyhow::bail!("expected a denied access, got {other:?}"),
            }
            c.read(&p, 0, &mut buf)?;
            total += t0.elapsed();
            switch += c.qp_switches().1;
        }
        let n = faults.max(1) as f64;
        println!(
            "{:<16} {:>14.1} {:>16.1} {:>14}",
            name,
            switch.as_secs_f64() * 1e6 / n,
            total.as_secs_f64() * 1e6 / n,
            paper
        );
    }
    println!("switch: promotion of a spare, or reset + reconnect (a new handshake) without one;");
    println!("next op ok: from issuing the faulting op to the next successful read.");
    Ok(())
}
