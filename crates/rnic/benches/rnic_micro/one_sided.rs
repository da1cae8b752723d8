//! Section 2 (and the client side of section 3): 64 B READ / WRITE and 8 B CAS latency and
//! throughput between two soft devices, whatever transport connects them.

use anyhow::{Result, anyhow, bail};
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftMr, SoftMw};
use rnic::{Context, MemoryRegion, Rkey, SendOp, SendWr, Sge};
use serde_json::{Value, json};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::Opts;
use crate::endpoints::{Client, MemoryNode, post, wait_completions};
use crate::measure::{Lat, fmt_ns, now, sample};

/// Payload of the one-sided READ/WRITE measurements and of the TCP ping-pong.
pub(crate) const PAYLOAD: u32 = 64;
/// Work requests per doorbell in the throughput runs.
pub(crate) const BATCH: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    Cas,
}

impl Op {
    pub(crate) const ALL: [Op; 3] = [Op::Read, Op::Write, Op::Cas];
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Read => "READ 64B",
            Op::Write => "WRITE 64B",
            Op::Cas => "CAS 8B",
        }
    }
    pub(crate) fn key(self) -> &'static str {
        match self {
            Op::Read => "read_64",
            Op::Write => "write_64",
            Op::Cas => "cas_8",
        }
    }
}

/// Where one client thread aims: its own page of the memory node's buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) remote: u64,
    pub(crate) rkey: Rkey,
}

/// Builds the `k`-th work request of a run. CAS requests chain (compare = k, swap = k + 1) on
/// a word only this client uses, so every one succeeds and changes memory.
pub(crate) fn one_sided_wr(
    op: Op,
    c: &Client,
    slot: Slot,
    k: u64,
) -> SendWr<'static, SoftMw, SoftMr> {
    let local = Sge {
        addr: c.buf.addr(),
        length: if op == Op::Cas { 8 } else { PAYLOAD },
        lkey: c.mr.lkey(),
    };
    let op = match op {
        Op::Read => SendOp::Read {
            local,
            remote_addr: slot.remote,
            rkey: slot.rkey,
        },
        Op::Write => SendOp::Write {
            local,
            remote_addr: slot.remote,
            rkey: slot.rkey,
        },
        Op::Cas => SendOp::CompareSwap {
            local,
            remote_addr: slot.remote,
            rkey: slot.rkey,
            compare: k,
            swap: k + 1,
        },
    };
    SendWr {
        wr_id: k,
        signaled: true,
        op,
    }
}

/// Single-threaded latency: one signaled request posted, then its completion polled.
pub(crate) fn latency(
    c: &Client,
    slot: Slot,
    op: Op,
    sizes: &Sizes,
    cas_base: &mut u64,
) -> Result<Lat> {
    sample(sizes.lat_warmup, sizes.lat_iters, sizes.lat_budget, || {
        let k = *cas_base;
        *cas_base += 1;
        post(&c.qp, &[one_sided_wr(op, c, slot, k)])?;
        wait_completions(&c.cq, 1)
    })
}

/// Runs `ops` requests in doorbell batches of [`BATCH`] signaled requests (each batch waits
/// for its completions); returns when it started and ended, so threads can be aggregated.
pub(crate) fn stream(
    c: &Client,
    slot: Slot,
    op: Op,
    ops: u64,
    cas_base: &mut u64,
) -> Result<(Instant, Instant)> {
    let batches = ops / BATCH as u64;
    let start = now();
    for _ in 0..batches {
        let base = *cas_base;
        *cas_base += BATCH as u64;
        let wrs: [SendWr<'static, SoftMw, SoftMr>; BATCH] =
            std::array::from_fn(|j| one_sided_wr(op, c, slot, base + j as u64));
        post(&c.qp, &wrs)?;
        wait_completions(&c.cq, BATCH)?;
    }
    Ok((start, now()))
}

#[derive(Debug)]
pub(crate) struct OneSided {
    pub(crate) latency: Vec<(Op, Lat)>,
    /// (op, threads, Mops/s)
    pub(crate) throughput: Vec<(Op, usize, f64)>,
}

pub(crate) struct Sizes {
    pub(crate) lat_warmup: u64,
    pub(crate) lat_iters: u64,
    /// Upper bound on the sampling time of one latency measurement.
    pub(crate) lat_budget: Duration,
    pub(crate) tput_ops: u64,
}

/// Measures READ/WRITE/CAS latency (and, if `threads_list` is non-empty, throughput) from
/// clients on `cn` to a memory node on `mn`.
pub(crate) fn one_sided(
    mn_ctx: SoftContext,
    cn: &SoftContext,
    sizes: &Sizes,
    threads_list: &[usize],
) -> Result<OneSided> {
    let max_threads = threads_list.iter().copied().max().unwrap_or(1);
    let mn = MemoryNode::new(mn_ctx, 4096 * (max_threads + 1))?;
    let cpd = cn.alloc_pd()?;
    let clients: Vec<Client> = (0..max_threads)
        .map(|_| Ok(Client::connect(cn, &cpd, mn.address(), b"rnic_micro")?))
        .collect::<Result<_>>()?;
    let slots: Vec<Slot> = (0..max_threads)
        .map(|t| Slot {
            remote: mn.buf.addr() + 4096 * t as u64,
            rkey: mn.mr.rkey(),
        })
        .collect();
    // Each slot's CAS word starts at 0; cas_bases track its current value per client.
    let mut cas_bases = vec![0u64; max_threads];
    let mut out = OneSided {
        latency: Vec::new(),
        throughput: Vec::new(),
    };
    for op in Op::ALL {
        let lat = latency(&clients[0], slots[0], op, sizes, &mut cas_bases[0])?;
        out.latency.push((op, lat));
    }
    for &threads in threads_list {
        for op in Op::ALL {
            let mops = throughput(
                &clients[..threads],
                &slots[..threads],
                op,
                sizes.tput_ops,
                &mut cas_bases[..threads],
            )?;
            out.throughput.push((op, threads, mops));
        }
    }
    drop(clients);
    drop(mn);
    Ok(out)
}

/// Aggregate Mops/s of `clients.len()` threads, each streaming `ops` requests on its own QP.
pub(crate) fn throughput(
    clients: &[Client],
    slots: &[Slot],
    op: Op,
    ops: u64,
    cas_bases: &mut [u64],
) -> Result<f64> {
    // Warm up each QP briefly, outside the timed window.
    for ((c, s), b) in clients.iter().zip(slots).zip(cas_bases.iter_mut()) {
        stream(c, *s, op, (ops / 20).max(BATCH as u64), b)?;
    }
    let barrier = Barrier::new(clients.len());
    let results: Vec<Result<(Instant, Instant)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter()
            .zip(slots)
            .zip(cas_bases.iter_mut())
            .enumerate()
            .map(|(t, ((c, s), b))| {
                let barrier = &barrier;
                std::thread::Builder::new()
                    .name(format!("bench-client-{t}"))
                    .spawn_scoped(scope, move || {
                        barrier.wait();
                        stream(c, *s, op, ops, b)
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("client thread panicked"))),
                Err(e) => Err(anyhow!("spawning a client thread: {e}")),
            })
            .collect()
    });
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for r in results {
        let (s, e) = r?;
        first = Some(first.map_or(s, |f| f.min(s)));
        last = Some(last.map_or(e, |l| l.max(e)));
    }
    let (Some(first), Some(last)) = (first, last) else {
        bail!("no client threads");
    };
    let done = (ops / BATCH as u64 * BATCH as u64) * clients.len() as u64;
    Ok(done as f64 / (last - first).as_secs_f64() / 1e6)
}

pub(crate) fn print_latency(label: &str, res: &OneSided) {
    println!(
        "{:<14} | {:>9} {:>9} {:>9} {:>9} | {:>8}",
        label, "p50", "p99", "mean", "max", "samples"
    );
    for (op, l) in &res.latency {
        println!(
            "{:<14} | {:>9} {:>9} {:>9} {:>9} | {:>8}",
            op.name(),
            fmt_ns(l.p50),
            fmt_ns(l.p99),
            fmt_ns(l.mean as u64),
            fmt_ns(l.max),
            l.samples
        );
    }
}

pub(crate) fn latency_json(res: &OneSided) -> Value {
    let mut m = serde_json::Map::new();
    for (op, l) in &res.latency {
        m.insert(op.key().to_owned(), l.json());
    }
    Value::Object(m)
}

pub(crate) fn inproc(opts: &Opts) -> Result<(OneSided, Value)> {
    println!("== 1. One-sided operations, in-process fabric (inline links) ==");
    let sizes = Sizes {
        lat_warmup: opts.pick(20_000, 5_000, 100),
        lat_iters: opts.pick(300_000, 50_000, 1_000),
        lat_budget: opts.pick(
            Duration::from_secs(3),
            Duration::from_millis(500),
            Duration::from_millis(100),
        ),
        tput_ops: opts.pick(1_000_000, 200_000, 2_000),
    };
    let fabric = SoftFabric::new();
    let mn = fabric.open_device(SoftConfig::default());
    let cn = fabric.open_device(SoftConfig::default());
    let res = one_sided(mn, &cn, &sizes, &[1, 2])?;
    print_latency("in-process", &res);
    println!();
    println!(
        "{:<14} | {:>7} | {:>10} | {:>13}",
        "throughput", "threads", "Mops/s", "per thread"
    );
    for (op, threads, mops) in &res.throughput {
        println!(
            "{:<14} | {:>7} | {:>10.2} | {:>13.2}",
            op.name(),
            threads,
            mops,
            mops / *threads as f64
        );
    }
    println!(
        "(throughput: doorbell batches of {BATCH} signaled WRs, each thread on its own QP and CQ)"
    );
    println!();
    let tput: Vec<Value> = res
        .throughput
        .iter()
        .map(|(op, t, m)| json!({ "op": op.key(), "threads": t, "mops": m }))
        .collect();
    let value = json!({
        "transport": "in-process inline",
        "latency": latency_json(&res),
        "latency_iters": sizes.lat_iters,
        "throughput_ops_per_thread": sizes.tput_ops,
        "throughput_batch": BATCH,
        "throughput": tput,
    });
    Ok((res, value))
}
