//! Section 3: one-sided latency over the TCP transport on loopback, next to a busy-polling
//! TCP ping-pong of the same payload measured in the same run.

use anyhow::{Result, anyhow, bail};
use rnic::soft::{SoftConfig, SoftContext, TcpNode};
use serde_json::{Value, json};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::Opts;
use crate::endpoints::relax;
use crate::measure::{Lat, fmt_ns, ns, print_lat_row, sample, verdict};
use crate::one_sided::{Op, PAYLOAD, Sizes, latency_json, one_sided, print_latency};

/// Target from the project brief: TCP READ p50 within this factor of a TCP ping-pong p50.
pub(crate) const TARGET_TCP_RATIO: f64 = 1.5;

/// Opens a memory-node device and a client device on the TCP transport (loopback), each its
/// own `TcpNode` with its own engine thread(s); listeners pick a free port.
pub(crate) fn tcp_devices() -> Result<(SoftContext, SoftContext)> {
    let loopback: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
    let mn = TcpNode::open(SoftConfig::default(), loopback)?;
    let cn = TcpNode::open(SoftConfig::default(), loopback)?;
    Ok((mn, cn))
}

/// Round trips of `PAYLOAD` bytes over two loopback `TcpStream`s (TCP_NODELAY, non-blocking,
/// both ends busy-polling; the echo end on its own thread).
pub(crate) fn tcp_pingpong(warmup: u64, iters: u64, budget: Duration) -> Result<Lat> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
    }
    let echo = std::thread::Builder::new()
        .name("bench-echo".into())
        .spawn(move || -> Result<()> {
            let mut server = server;
            let mut buf = [0u8; PAYLOAD as usize];
            loop {
                if !spin_read(&mut server, &mut buf)? {
                    return Ok(()); // peer closed
                }
                spin_write(&mut server, &buf)?;
            }
        })?;
    let msg = [0x5au8; PAYLOAD as usize];
    let mut back = [0u8; PAYLOAD as usize];
    let lat = sample(warmup, iters, budget, || {
        spin_write(&mut client, &msg)?;
        if !spin_read(&mut client, &mut back)? {
            bail!("echo side closed");
        }
        Ok(())
    });
    drop(client);
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;
    lat
}

/// Fills `buf` from a non-blocking stream by spinning; `false` if the peer closed first.
pub(crate) fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool> {
    let mut got = 0;
    let mut spins = 0u32;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                spins = spins.wrapping_add(1);
                relax(spins);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

pub(crate) fn spin_write(s: &mut TcpStream, buf: &[u8]) -> Result<()> {
    let mut put = 0;
    let mut spins = 0u32;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(0) => bail!("connection closed while writing"),
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                spins = spins.wrapping_add(1);
                relax(spins);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(crate) fn tcp(opts: &Opts) -> Result<Value> {
    println!("== 3. TCP transport (loopback) vs busy-polling TCP ping-pong ==");
    let (warmup, iters, budget) = opts.pick(
        (5_000, 100_000, Duration::from_secs(3)),
        (1_000, 20_000, Duration::from_millis(700)),
        (50, 200, Duration::from_millis(100)),
    );
    let pingpong = tcp_pingpong(warmup, iters, budget)?;
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
    print_lat_row("ping-pong 64B", &pingpong);
    let read_p50 = res
        .latency
        .iter()
        .find(|(op, _)| *op == Op::Read)
        .map_or(0, |(_, l)| l.p50);
    let ratio = read_p50 as f64 / pingpong.p50.max(1) as f64;
    if let Some(c) = mn_cpu_per_op {
        println!(
            "memory-node engine CPU per op (spinning included): {}",
            fmt_ns(c)
        );
    }
    println!();
    println!(
        "ratio TCP READ p50 / ping-pong p50 = {:.2}x  (target <= {TARGET_TCP_RATIO}x) -> {}",
        ratio,
        verdict(ratio <= TARGET_TCP_RATIO)
    );
    println!();
    Ok(json!({
        "available": true,
        "mn_engine_cpu_per_op_ns": mn_cpu_per_op,
        "latency": latency_json(&res),
        "pingpong_64": pingpong.json(),
        "read_over_pingpong_p50": ratio,
        "target_ratio_max": TARGET_TCP_RATIO,
        "target_met": ratio <= TARGET_TCP_RATIO,
    }))
}
