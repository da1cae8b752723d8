//! Section 2: one-sided latency over the TCP transport on loopback, and the memory node's
//! engine CPU per operation. What a raw TCP round trip costs next to a READ over the soft NIC
//! (the substrate anchor, with its target of 1.5×) is measured by Figure 1 (`bench fig1`).

use anyhow::Result;
use rnic::soft::{SoftConfig, SoftContext, TcpNode};
use serde_json::{Value, json};
use std::time::Duration;

use crate::Opts;
use crate::measure::{fmt_ns, ns};
use crate::one_sided::{Sizes, latency_json, one_sided, print_latency};

/// Opens a memory-node device and a client device on the TCP transport (loopback), each its
/// own `TcpNode` with its own engine thread(s); listeners pick a free port.
pub(crate) fn tcp_devices() -> Result<(SoftContext, SoftContext)> {
    let loopback: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
    let mn = TcpNode::open(SoftConfig::default(), loopback)?;
    let cn = TcpNode::open(SoftConfig::default(), loopback)?;
    Ok((mn, cn))
}

pub(crate) fn tcp(opts: &Opts) -> Result<Value> {
    println!("== 2. TCP transport (loopback) ==");
    let (warmup, iters, budget) = opts.pick(
        (5_000, 100_000, Duration::from_secs(3)),
        (1_000, 20_000, Duration::from_millis(700)),
        (50, 200, Duration::from_millis(100)),
    );
    let (mn, cn) = tcp_devices()?;
    let sizes = Sizes {
        lat_warmup: warmup,
        lat_iters: iters,
        lat_budget: budget,
        tput_ops: 0,
    };
    let cpu0 = TcpNode::engine_cpu_time(&mn);
    let res = one_sided(mn.clone(), &cn, &sizes, &[])?;
    let cpu1 = TcpNode::engine_cpu_time(&mn);
    // Memory-node engine CPU per one-sided op, over all three latency runs (warm-ups included).
    let ops: u64 = res.latency.iter().map(|(_, l)| l.samples + warmup).sum();
    let mn_cpu_per_op = match (cpu0, cpu1) {
        (Some(a), Some(b)) if ops > 0 => Some(ns(b.saturating_sub(a)) / ops),
        _ => None,
    };
    drop((mn, cn));
    print_latency("TCP loopback", &res);
    if let Some(c) = mn_cpu_per_op {
        println!(
            "memory-node engine CPU per op (spinning included): {}",
            fmt_ns(c)
        );
    }
    println!("(the READ / raw TCP ping-pong ratio and its 1.5x target: `bench fig1`)");
    println!();
    Ok(json!({
        "available": true,
        "mn_engine_cpu_per_op_ns": mn_cpu_per_op,
        "latency": latency_json(&res),
    }))
}
