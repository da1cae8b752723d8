//! Allocation: what scrubbing freed memory costs, and what a live permission costs in memory
//! (`docs/architecture.md`, "Freed memory is scrubbed").
//!
//! (a) Churn: one client allocates, writes the whole buffer and frees it, over and over, at
//! 64 B, 4 KiB and 64 KiB, under each [`Scrub`] policy (Off, OnGrant, Idle) in the same run.
//! Before the timed churn a slab's worth of objects of the size class is allocated, written and
//! freed, so every timed allocation reuses memory that holds an earlier tenant's bytes (the
//! allocator reuses free objects first-in first-out). Reported per configuration: cycles per
//! second, allocate latency, the manager's busy CPU per cycle, and each policy against Off.
//! After the timed churn, a few more allocations read their buffer before writing it: with
//! scrubbing on they must read zero; with it off they show the earlier bytes (the hole
//! scrubbing closes, and proof that the churn really reused dirty memory).
//!
//! (b) Memory per live permission: one client grows live 64 B allocations (pipelined) to N on
//! a node sized for them; the node's own accounting gives pool bytes in use and the estimate of
//! its tables, and the process's resident set size gives a cross-check.

use super::tickets::{next_reply, send, wait_reply};
use crate::experiments::driver::{CLIENT_THREADS, Logical, Rig, StepCtx, now, us_per_op};
use crate::experiments::patronus_rig::{PatronusRig, lean_client};
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Panel, PanelKind, Point, Ratio, Row, Series, bar,
    thread_cpu,
};
use anyhow::{Context as _, Result, bail};
use patronus_core::client::Client;
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::{
    Isolation, MemoryNode, NodeConfig, NodeStats, Scrub, SlabConfig, Techniques,
};
use patronus_core::proto::header::HEADER_SIZE;
use patronus_core::proto::messages::{Access, Grant, Mode, Reply, Request};
use rnic::soft::{SoftConfig, SoftProvider};
use rnic::{Context as _, DeviceAttr, MemoryBuffer as _, Timestamp};
use std::time::Duration;

/// Buffer sizes of the churn.
pub const SIZES: [u64; 3] = [64, 4096, 65536];
/// The policies, Off (the reference) first.
const POLICIES: [(Scrub, &str); 3] = [
    (Scrub::Off, "Off"),
    (Scrub::OnGrant, "OnGrant"),
    (Scrub::Idle, "Idle"),
];
/// Lease of every allocation, µs (they end by `free`, never by expiry, during a run).
const LEASE_US: u64 = 30_000_000;
/// Lease of part (b)'s allocations, µs: an hour, longer than any growth takes (a grant's
/// maximum lifetime saturates at `u32::MAX` µs, about 71 minutes).
const LIVE_LEASE_US: u64 = 3_600_000_000;
/// Byte every client writes into its buffers (nonzero, so stale bytes are visible).
const PATTERN: u8 = 0xA5;
/// Allocations in flight when growing many at once (the client's limit).
const IN_FLIGHT: usize = patronus_core::client::MAX_OUTSTANDING_RPCS as usize;
/// The size of part (b)'s allocations.
const LIVE_SIZE: u64 = 64;
/// Manager metadata per live permission the node should stay within, bytes.
const METADATA_TARGET_B: u64 = 128;
/// Clients churning. One: its allocate latency is the manager's answer, not time spent queued
/// behind other clients' 64 KiB writes on the shared client thread.
const CHURN_CLIENTS: u32 = 1;
/// Longest a pipelined allocation may go unanswered before the run fails.
const STALL: Duration = Duration::from_secs(20);

struct Plan {
    /// Timed allocate/write/free cycles per configuration.
    ops: u64,
    /// Wall-time cap per configuration.
    budget: Duration,
    /// Allocations that read their buffer before writing it, per configuration.
    verify: usize,
    /// Live permissions of part (b).
    live: usize,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            ops: 4_000,
            budget: Duration::from_millis(400),
            verify: 32,
            live: 20_000,
        }
    } else {
        Plan {
            ops: 40_000,
            budget: Duration::from_secs(5),
            verify: 256,
            live: 1_000_000,
        }
    }
}

/// "64 B", "4 KiB", "64 KiB".
fn size_name(size: u64) -> String {
    if size >= 1 << 10 && size % (1 << 10) == 0 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

/// Objects of one slab of the class that holds `size` (the default slab configuration; every
/// object is its buffer behind a 32-byte header slot).
fn objects_per_slab(size: u64) -> usize {
    let slab = SlabConfig::default();
    let class = size.max(slab.min_class).next_power_of_two();
    let stride = class + HEADER_SIZE as u64;
    (slab.slab_bytes.max(stride) / stride) as usize
}

/// A client cycling allocate → write the whole buffer → free. Measures allocate latency;
/// one operation is one whole cycle.
struct Churner {
    client: Client<SoftProvider>,
    size: u64,
    data: Vec<u8>,
    state: ChurnState,
}

enum ChurnState {
    Ready,
    /// Allocate sent at (client clock, wall clock).
    Allocating(Timestamp, std::time::Instant),
    Freeing,
}

impl Logical for Churner {
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        match self.state {
            ChurnState::Ready => {
                let sent = self.client.status().clock().now();
                let t0 = now();
                send(
                    &mut self.client,
                    Request::Allocate {
                        size: self.size,
                        lease_us: LEASE_US,
                        mode: Mode::Shared,
                    },
                )?;
                self.state = ChurnState::Allocating(sent, t0);
            }
            ChurnState::Allocating(sent, t0) => {
                let Some((_, reply)) = next_reply(&mut self.client)? else {
                    return Ok(());
                };
                let Reply::Granted(g) = reply else {
                    bail!("allocate {} B: unexpected {reply:?}", self.size);
                };
                ctx.latency.record(now() - t0);
                let perm = self
                    .client
                    .control()
                    .adopt(g, Access::ReadWrite, Mode::Shared, sent);
                self.client.write(&perm, 0, &self.data)?;
                send(
                    &mut self.client,
                    Request::Revoke {
                        id: perm.id(),
                        free: true,
                    },
                )?;
                self.state = ChurnState::Freeing;
            }
            ChurnState::Freeing => match next_reply(&mut self.client)? {
                None => {}
                Some((_, Reply::Revoked)) => {
                    ctx.done += 1;
                    self.state = ChurnState::Ready;
                }
                Some((_, other)) => bail!("free {} B: unexpected {other:?}", self.size),
            },
        }
        Ok(())
    }

    fn patronus_client(&self) -> Option<&Client<SoftProvider>> {
        Some(&self.client)
    }

    fn patronus_client_mut(&mut self) -> Option<&mut Client<SoftProvider>> {
        Some(&mut self.client)
    }
}

/// Allocates `n` objects of `size` bytes, `IN_FLIGHT` requests at a time, handing each grant
/// to `on_grant`. Polls the reply queue, yielding the core between polls.
fn allocate_many(
    c: &mut Client<SoftProvider>,
    n: usize,
    size: u64,
    lease_us: u64,
    what: &str,
    mut on_grant: impl FnMut(Grant),
) -> Result<()> {
    let (mut issued, mut granted, mut in_flight) = (0usize, 0usize, 0usize);
    let mut last = now();
    while granted < n {
        while in_flight < IN_FLIGHT && issued < n {
            send(
                c,
                Request::Allocate {
                    size,
                    lease_us,
                    mode: Mode::Shared,
                },
            )
            .with_context(|| format!("{what}: sending allocation {} of {n}", issued + 1))?;
            issued += 1;
            in_flight += 1;
        }
        let reply = wait_reply(c, Duration::from_millis(1))
            .with_context(|| format!("{what}: waiting for allocation {} of {n}", granted + 1))?;
        match reply {
            Some((_, Reply::Granted(g))) => {
                in_flight -= 1;
                granted += 1;
                last = now();
                on_grant(g);
            }
            Some((_, other)) => {
                bail!(
                    "{what}: allocation {} of {n} answered {other:?}",
                    granted + 1
                )
            }
            None => {
                if now() - last > STALL {
                    bail!("{what}: the memory node stopped answering after {granted} of {n}");
                }
            }
        }
    }
    Ok(())
}

/// Frees the objects of `grants`, `IN_FLIGHT` requests at a time.
fn free_many(c: &mut Client<SoftProvider>, grants: &[Grant], what: &str) -> Result<()> {
    let (mut issued, mut done, mut in_flight) = (0usize, 0usize, 0usize);
    let mut last = now();
    while done < grants.len() {
        while in_flight < IN_FLIGHT && issued < grants.len() {
            send(
                c,
                Request::Revoke {
                    id: grants[issued].id,
                    free: true,
                },
            )
            .with_context(|| format!("{what}: sending a free"))?;
            issued += 1;
            in_flight += 1;
        }
        let reply = wait_reply(c, Duration::from_millis(1))
            .with_context(|| format!("{what}: waiting for a free"))?;
        match reply {
            Some((_, Reply::Revoked)) => {
                in_flight -= 1;
                done += 1;
                last = now();
            }
            Some((_, other)) => bail!("{what}: free answered {other:?}"),
            None => {
                if now() - last > STALL {
                    bail!("{what}: the memory node stopped answering frees");
                }
            }
        }
    }
    Ok(())
}

/// A fresh snapshot of the node's stats.
fn stats(node: &MemoryNode<SoftProvider>) -> NodeStats {
    node.fresh_stats()
}

/// What one churn configuration measured.
struct Churn {
    row: Row,
    size: u64,
    policy: &'static str,
    /// Pool bytes per allocation, from `pool_bytes_in_use` with a slab's worth live.
    pool_per_alloc: f64,
    /// Verification allocations, and how many of them read a nonzero byte.
    verified: usize,
    stale_reads: usize,
}

/// One (policy, size) configuration on a node of its own.
fn churn(rig: &Rig, policy: Scrub, name: &'static str, size: u64, plan: &Plan) -> Result<Churn> {
    let what = format!("alloc {name} {}", size_name(size));
    let cfg = NodeConfig {
        scrub: policy,
        ..PatronusRig::throughput_config(Techniques::ALL, 2 * LEASE_US)
    };
    let p = PatronusRig::start(rig, cfg, CLIENT_THREADS)?;
    let k = CHURN_CLIENTS as usize;
    let mut clients = p.clients(k + 1, &lean_client())?;
    let Some(mut aux) = clients.pop() else {
        bail!("{what}: clients did not connect");
    };
    let data = vec![PATTERN; size as usize];

    // A slab's worth of live objects (every object of the first slab of the class), written
    // and freed: each timed allocation then reuses memory that holds an earlier tenant's bytes.
    let slab = objects_per_slab(size);
    let before = stats(&p.node);
    let sent = aux.status().clock().now();
    let mut grants = Vec::with_capacity(slab);
    allocate_many(&mut aux, slab, size, LEASE_US, &what, |g| grants.push(g))?;
    let live = stats(&p.node);
    let pool_per_alloc = live
        .pool_bytes_in_use
        .saturating_sub(before.pool_bytes_in_use) as f64
        / slab as f64;
    for g in &grants {
        let perm = aux
            .control()
            .adopt(*g, Access::ReadWrite, Mode::Shared, sent);
        aux.write(&perm, 0, &data)
            .with_context(|| format!("{what}: writing a fresh object"))?;
    }
    free_many(&mut aux, &grants, &what)?;

    let logicals: Vec<Box<dyn Logical>> = clients
        .into_iter()
        .map(|client| {
            Box::new(Churner {
                client,
                size,
                data: data.clone(),
                state: ChurnState::Ready,
            }) as Box<dyn Logical>
        })
        .collect();
    let (d, mgr, eng) = p.drive(logicals, plan.ops, plan.budget, 0xa110c ^ size, &what)?;

    // Allocations that read their buffer before writing it (not timed).
    let mut stale_reads = 0;
    let mut buf = vec![0u8; size as usize];
    for i in 0..plan.verify {
        let mut cycle = || -> Result<bool, patronus_core::client::ClientError> {
            let perm = aux.allocate(size, Duration::from_micros(LEASE_US), Mode::Shared)?;
            aux.read(&perm, 0, &mut buf)?;
            let stale = buf.iter().any(|&b| b != 0);
            aux.write(&perm, 0, &data)?;
            aux.free(perm)?;
            Ok(stale)
        };
        if cycle().with_context(|| format!("{what}: verification allocation {}", i + 1))? {
            stale_reads += 1;
        }
    }
    // Freed objects not zeroed yet, after the verification's idle gaps (in which an idle
    // scrubber gets its turns).
    let dirty_left = stats(&p.node).occupancy.map_or(0, |o| o.dirty_objects);
    p.node.shutdown();
    let row = d
        .row(&format!("{name} {}", size_name(size)), k as u32, mgr, eng)
        .with("size_b", size)
        .with("dirty_left", dirty_left as u64)
        .with("pool_b", pool_per_alloc)
        .with("stale_reads", format!("{stale_reads}/{}", plan.verify));
    Ok(Churn {
        row,
        size,
        policy: name,
        pool_per_alloc,
        verified: plan.verify,
        stale_reads,
    })
}

/// CPU time, µs, of zeroing one buffer of `size` bytes with the soft NIC's `fill_zero` (what
/// the manager's scrub calls), over a 16 MiB span so the buffers are not all in cache.
fn zero_cost_us(size: u64) -> Result<f64> {
    const SPAN: usize = 16 << 20;
    let dev = rnic::soft::SoftFabric::new().open_device(SoftConfig::default());
    let buf = dev.alloc_buffer(SPAN)?;
    buf.fill_zero(0, SPAN)?; // fault the pages in first
    let size = size as usize;
    let slots = SPAN / size;
    let reps = (64 << 20) / size;
    let t0 = thread_cpu();
    for i in 0..reps {
        buf.fill_zero((i % slots) * size, size)?;
    }
    Ok((thread_cpu() - t0).as_secs_f64() * 1e6 / reps as f64)
}

/// Resident set size of this process, bytes (`VmRSS` of `/proc/self/status`, which is in kB
/// and needs no page size); `None` where there is no procfs.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// What part (b) measured.
struct LiveMemory {
    n: usize,
    grow: Duration,
    busy: Duration,
    pool_in_use: u64,
    metadata: u64,
    metadata_before: u64,
    rss_growth: Option<u64>,
    node_start_rss: Option<u64>,
    mw_count: u32,
}

/// Grows `n` live 64 B allocations on a node sized for them.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
fn live_memory(transport: Link, n: usize) -> Result<LiveMemory> {
    let per_slab = objects_per_slab(LIVE_SIZE);
    let slabs = n.div_ceil(per_slab) as u64 + 1;
    let mw_count = u32::try_from(n + 1024).context("too many live permissions")?;
    let node_cfg = NodeConfig {
        pool_bytes: slabs * SlabConfig::default().slab_bytes,
        // Read-write allocations carry their header in the slot in front of the buffer
        // (contiguity): the header pool is for read-only acquires, which this run has none of.
        header_count: 1024,
        mw_count,
        max_lifetime_us: LIVE_LEASE_US,
        isolation: Isolation::SharedPd,
        techniques: Techniques::ALL,
        ..NodeConfig::default()
    };
    let device = SoftConfig {
        attr: DeviceAttr {
            max_mw: DeviceAttr::default().max_mw.max(mw_count + 4096),
            ..DeviceAttr::default()
        },
        ..SoftConfig::default()
    };
    let rss0 = rss_bytes();
    let mut cluster = EmbeddedCluster::start(transport, device, node_cfg, lean_client(), 1)
        .context("starting a node sized for the live permissions")?;
    let Some(mut c) = cluster.clients.pop() else {
        bail!("the cluster started no client");
    };
    let s0 = stats(&cluster.node);
    let rss1 = rss_bytes();
    let progress = bar(n as u64, "live permissions");
    let mut count = 0u64;
    let t0 = std::time::Instant::now();
    allocate_many(
        &mut c,
        n,
        LIVE_SIZE,
        LIVE_LEASE_US,
        "live permissions",
        |_| {
            count += 1;
            if count % 4096 == 0 {
                progress.set_position(count);
            }
        },
    )?;
    let grow = t0.elapsed();
    progress.finish_and_clear();
    let s1 = stats(&cluster.node);
    let rss2 = rss_bytes();
    let live = s1.occupancy.map_or(0, |o| o.permissions);
    if live != n {
        bail!("live permissions: the node counts {live}, expected {n}");
    }
    drop(c);
    let EmbeddedCluster { node, .. } = cluster;
    node.shutdown();
    Ok(LiveMemory {
        n,
        grow,
        busy: s1.busy_cpu.saturating_sub(s0.busy_cpu),
        pool_in_use: s1.pool_bytes_in_use,
        metadata: s1.metadata_bytes,
        metadata_before: s0.metadata_bytes,
        rss_growth: rss1.zip(rss2).map(|(a, b)| b.saturating_sub(a)),
        node_start_rss: rss0.zip(rss1).map(|(a, b)| b.saturating_sub(a)),
        mw_count,
    })
}

/// Runs the allocation experiment on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let mut exp = Experiment::new("alloc", opts.transport_name(), opts.quick);
    println!(
        "Allocation: memory per live permission; allocate → write → free churn per scrub policy"
    );
    // Memory first, on a fresh heap: freed memory of earlier nodes, still resident, would
    // otherwise absorb part of the growth the resident set is meant to show.
    println!("Growing {} live {LIVE_SIZE} B allocations", plan.live);
    let mem = live_memory(opts.transport, plan.live)?;
    let n = mem.n as f64;
    let mem_row = {
        let mut r = Row::new(format!("{} live perms", mem.n), 1)
            .with("live_perms", mem.n as u64)
            .with("pool_b", mem.pool_in_use as f64 / n)
            .with("meta_b", mem.metadata as f64 / n);
        if let Some(g) = mem.rss_growth {
            r = r.with("rss_b", g as f64 / n);
        }
        r.throughput_ops = n / mem.grow.as_secs_f64().max(1e-9);
        r.mn_cpu_us_per_op = us_per_op(mem.busy, mem.n as u64);
        r
    };
    println!(
        "{} live: pool {:.1} B + metadata {:.1} B = {:.1} B per permission; RSS growth {} B per permission; grown in {:.2} s",
        mem.n,
        mem.pool_in_use as f64 / n,
        mem.metadata as f64 / n,
        (mem.pool_in_use + mem.metadata) as f64 / n,
        mem.rss_growth
            .map_or("n/a".into(), |g| format!("{:.1}", g as f64 / n)),
        mem.grow.as_secs_f64()
    );
    println!("Churn: one client allocates, writes the whole buffer and frees it");
    println!(
        "{:<16} {:>10} {:>9} {:>9} {:>11} {:>8} {:>8} {:>7}",
        "config", "Kcycles/s", "p50 us", "p99 us", "mgr us/op", "pool B", "dirty", "stale"
    );
    let rig = Rig::for_bench(opts);
    let mut churns = Vec::new();
    for size in SIZES {
        for (policy, name) in POLICIES {
            let c = churn(&rig, policy, name, size, &plan)?;
            println!(
                "{:<16} {:>10.1} {:>9.2} {:>9.2} {:>11.3} {:>8.0} {:>8} {:>4}/{}",
                c.row.mechanism,
                c.row.throughput_ops / 1e3,
                c.row.p50_us,
                c.row.p99_us,
                c.row.mn_cpu_us_per_op,
                c.pool_per_alloc,
                c.row
                    .get_f64("dirty_left")
                    .map_or(String::new(), |v| format!("{v:.0}")),
                c.stale_reads,
                c.verified
            );
            churns.push(c);
        }
    }
    // Each policy against Off at the same size, from this run.
    for i in 0..churns.len() {
        let Some(off) = churns
            .iter()
            .find(|o| o.size == churns[i].size && o.policy == "Off")
            .map(|o| o.row.clone())
        else {
            continue;
        };
        let r = &churns[i].row;
        let vs = |a: f64, b: f64| a / b.max(1e-9);
        let (t, l, m) = (
            vs(r.throughput_ops, off.throughput_ops),
            vs(r.p50_us, off.p50_us),
            vs(r.mn_cpu_us_per_op, off.mn_cpu_us_per_op),
        );
        churns[i].row = churns[i]
            .row
            .clone()
            .with("tput_vs_off", t)
            .with("p50_vs_off", l)
            .with("cpu_vs_off", m);
    }
    let zero: Vec<(u64, f64)> = SIZES
        .iter()
        .map(|&s| zero_cost_us(s).map(|z| (s, z)))
        .collect::<Result<_>>()?;
    println!(
        "Zeroing one buffer alone (fill_zero): {}",
        zero.iter()
            .map(|(s, z)| format!("{z:.3} us at {}", size_name(*s)))
            .collect::<Vec<_>>()
            .join(", ")
    );

    exp.rows = churns.iter().map(|c| c.row.clone()).collect();
    exp.rows.push(mem_row);
    summarize(&mut exp, &churns, &zero, &mem);
    Ok(exp)
}

fn summarize(exp: &mut Experiment, churns: &[Churn], zero: &[(u64, f64)], mem: &LiveMemory) {
    let find =
        |policy: &str, size: u64| churns.iter().find(|c| c.policy == policy && c.size == size);
    let big = SIZES[SIZES.len() - 1];
    let ratio = |policy: &str, size: u64, key: &str| {
        find(policy, size)
            .and_then(|c| c.row.get_f64(key))
            .unwrap_or(0.0)
    };
    let n = mem.n as f64;
    let per_perm = (mem.pool_in_use + mem.metadata) as f64 / n;
    exp.ratios = vec![
        Ratio {
            name: format!("OnGrant / Off allocate p50, {}", size_name(big)),
            value: ratio("OnGrant", big, "p50_vs_off"),
        },
        Ratio {
            name: format!("OnGrant / Off manager CPU per cycle, {}", size_name(big)),
            value: ratio("OnGrant", big, "cpu_vs_off"),
        },
        Ratio {
            name: format!(
                "bytes per live {LIVE_SIZE} B permission (pool + metadata) / {LIVE_SIZE} B"
            ),
            value: per_perm / LIVE_SIZE as f64,
        },
    ];
    for size in SIZES {
        for policy in ["OnGrant", "Idle"] {
            if policy == "OnGrant" && size == big {
                continue; // listed first
            }
            exp.ratios.push(Ratio {
                name: format!("{policy} / Off allocate p50, {}", size_name(size)),
                value: ratio(policy, size, "p50_vs_off"),
            });
        }
    }
    for size in SIZES {
        for policy in ["OnGrant", "Idle"] {
            if policy == "OnGrant" && size == big {
                continue;
            }
            exp.ratios.push(Ratio {
                name: format!("{policy} / Off manager CPU per cycle, {}", size_name(size)),
                value: ratio(policy, size, "cpu_vs_off"),
            });
        }
    }
    for size in SIZES {
        for policy in ["OnGrant", "Idle"] {
            exp.ratios.push(Ratio {
                name: format!("{policy} / Off throughput, {}", size_name(size)),
                value: ratio(policy, size, "tput_vs_off"),
            });
        }
    }

    // Checks.
    let pool = |size: u64| find("Off", size).map_or(0.0, |c| c.pool_per_alloc);
    let mut checks = vec![Check {
        claim: "a 4 KiB allocation costs ≤ 4 KiB + 64 B of pool".into(),
        holds: pool(4096) > 0.0 && pool(4096) <= 4096.0 + 64.0,
        detail: format!(
            "pool_bytes_in_use grew by {:.1} B per live allocation at 4 KiB ({:.1} B at 64 B, {:.1} B at 64 KiB): the buffer plus its 32-byte header slot",
            pool(4096),
            pool(64),
            pool(65536)
        ),
    }];
    let reads = |policies: &[&str]| -> (usize, usize) {
        churns
            .iter()
            .filter(|c| policies.contains(&c.policy))
            .fold((0, 0), |(s, v), c| (s + c.stale_reads, v + c.verified))
    };
    let (on_stale, on_checked) = reads(&["OnGrant", "Idle"]);
    checks.push(Check {
        claim: "scrubbing on (OnGrant, Idle): every reused allocation reads zero".into(),
        holds: on_checked > 0 && on_stale == 0,
        detail: format!(
            "{on_stale} of {on_checked} allocations of reused memory read a nonzero byte (each read its whole buffer before writing it)"
        ),
    });
    let (off_stale, off_checked) = reads(&["Off"]);
    checks.push(Check {
        claim: "scrubbing off: reused allocations show the earlier tenant's bytes (the churn really reuses dirty memory)".into(),
        holds: off_checked > 0 && off_stale == off_checked,
        detail: format!(
            "{off_stale} of {off_checked} allocations under Off read the previous writer's bytes — the hole scrubbing closes"
        ),
    });
    // Idle's promise: freed memory is zeroed while the manager has nothing else to do.
    let dirty = |policy: &str| -> f64 {
        SIZES
            .iter()
            .filter_map(|&s| find(policy, s))
            .filter_map(|c| c.row.get_f64("dirty_left"))
            .sum()
    };
    let (idle_dirty, on_dirty) = (dirty("Idle"), dirty("OnGrant"));
    let p50 = |policy: &str| find(policy, big).map_or(0.0, |c| c.row.p50_us);
    // A working idle scrubber zeroes whatever it may between requests: at least half of what
    // OnGrant leaves dirty (a difference of a few objects is timing, not background work).
    let idle_holds = idle_dirty <= 0.5 * on_dirty;
    checks.push(Check {
        claim: "Idle zeroes freed memory in the background: at most half as many freed objects are left dirty as under OnGrant".into(),
        holds: idle_holds,
        detail: format!(
            "freed objects still dirty after the churn and the verification allocations (which leave the manager idle between requests), summed over the sizes: Idle {idle_dirty:.0}, OnGrant {on_dirty:.0}; allocate p50 at {}: Off {:.2} µs, OnGrant {:.2} µs, Idle {:.2} µs{}",
            size_name(big),
            p50("Off"),
            p50("OnGrant"),
            p50("Idle"),
            if idle_holds {
                String::new()
            } else {
                ". With delayed unbinding (every technique on, as here) a freed object stays covered by its last window until that window is handed over, and since objects and stale windows are both reused first-in first-out, that happens when the object itself is allocated again: the idle scrubber, which must not zero memory a window still covers, finds nothing eligible, and every reused object is zeroed on the grant path, as under OnGrant".to_string()
            }
        ),
    });
    // The cost of scrubbing is the zeroing: OnGrant against Off at the largest size, against
    // the zeroing measured alone.
    let cpu = |policy: &str| find(policy, big).map_or(0.0, |c| c.row.mn_cpu_us_per_op);
    let added = cpu("OnGrant") - cpu("Off");
    let zero_big = zero.iter().find(|(s, _)| *s == big).map_or(0.0, |z| z.1);
    checks.push(Check {
        claim: format!(
            "scrubbing on the grant path costs the manager about one zeroing of the buffer per allocation (at {}, within 2×)",
            size_name(big)
        ),
        holds: zero_big > 0.0 && added >= 0.5 * zero_big && added <= 2.0 * zero_big,
        detail: format!(
            "manager busy CPU per cycle: Off {:.2} µs, OnGrant {:.2} µs (+{added:.2} µs); zeroing one {} buffer alone: {zero_big:.2} µs",
            cpu("Off"),
            cpu("OnGrant"),
            size_name(big)
        ),
    });
    let meta_growth = mem.metadata.saturating_sub(mem.metadata_before) as f64 / n;
    let pool_b = mem.pool_in_use as f64 / n;
    checks.push(Check {
        claim: format!(
            "a live {LIVE_SIZE} B permission costs ≤ {LIVE_SIZE} B + 64 B of pool, at {} live permissions",
            mem.n
        ),
        holds: pool_b <= (LIVE_SIZE + 64) as f64,
        detail: format!(
            "pool {pool_b:.1} B + manager metadata {:.1} B = {per_perm:.1} B per live permission ({:.1} MiB in all)",
            mem.metadata as f64 / n,
            (mem.pool_in_use + mem.metadata) as f64 / (1u64 << 20) as f64
        ),
    });
    let meta_b = mem.metadata as f64 / n;
    checks.push(Check {
        claim: format!(
            "the manager keeps at most {METADATA_TARGET_B} B of metadata per live permission (the paper: a 32 B header per object), at {} live permissions",
            mem.n
        ),
        holds: meta_b <= METADATA_TARGET_B as f64,
        detail: format!(
            "{meta_b:.1} B per live permission (`NodeStats::metadata_bytes`: the manager's tables by capacity). Where it goes: docs/evaluation.md, \"The manager alone\""
        ),
    });
    if let Some(rss) = mem.rss_growth {
        let rss_b = rss as f64 / n;
        let ratio = rss_b / meta_growth.max(1e-9);
        checks.push(Check {
            claim: "the manager's metadata estimate and the process's memory growth agree within 1.25×".into(),
            holds: (0.8..=1.25).contains(&ratio),
            detail: format!(
                "metadata grew {meta_growth:.1} B per permission, the resident set {rss_b:.1} B ({ratio:.2}×). A cross-check, not an identity: the resident set also holds the soft NIC's per-window state and allocator slack, and counts only the pages of the tables' capacity that were touched; the pool was resident before (the soft NIC faults in every registered page)"
            ),
        });
    }
    exp.checks = checks;

    let zero_text = zero
        .iter()
        .map(|(s, z)| format!("{:.3} µs at {}", z, size_name(*s)))
        .collect::<Vec<_>>()
        .join(", ");
    exp.notes = vec![
        format!(
            "Churn: one client on one thread allocates, writes the whole buffer (one-sided WRITE) and frees it; a cycle is one operation (`Kops/s` are cycles per second); p50/p99 are the allocate RPC's latency. Each (policy, size) has a node of its own (every technique, one shared PD, type-1 windows, as in the other experiments). Before the timed churn the first slab of the size class ({}) is allocated, written and freed, so every timed allocation reuses an object that holds an earlier tenant's bytes (objects are reused first-in first-out).",
            SIZES
                .iter()
                .map(|&s| format!("{} objects at {}", objects_per_slab(s), size_name(s)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "`MN CPU µs/op` is the manager thread's busy CPU per cycle (allocate and free; `NodeStats::busy_cpu`, which counts batches). The idle scrubber runs outside batches and is not in it; `dirty_left` (freed objects not yet zeroed, read after the verification allocations) shows whether it ran.".into(),
        format!(
            "Zeroing one buffer with the soft NIC's `fill_zero` (what a scrub calls), measured on this thread over a 16 MiB span: {zero_text}."
        ),
        "`stale_reads`: allocations after the timed churn that read a nonzero byte when they read their new buffer before writing it. `pool_b`: pool bytes per allocation, from `NodeStats::pool_bytes_in_use` with a slab's worth (churn) or all N (live permissions) allocated.".into(),
        format!(
            "Live permissions: {} live {LIVE_SIZE} B allocations grown by one client ({} in flight) on a node with {} windows and a pool sized for them; `Kops/s` is the growth rate. Pool {:.1} B and manager metadata {:.1} B per permission (`NodeStats::pool_bytes_in_use`, `NodeStats::metadata_bytes`: the manager's tables by capacity, including those sized by the window count); metadata grew {:.1} B per permission while growing. RSS (`VmRSS`) grew {} per permission: it includes the manager's tables, the soft NIC's per-window state and allocator slack, and the client side (nothing per permission here: the client does not keep the grants); the pool itself was already resident, since the soft NIC faults in every registered page. Starting the node and the client took {} of RSS (pool, {} pre-allocated windows, both devices' window tables).",
            mem.n,
            IN_FLIGHT,
            mem.mw_count,
            mem.pool_in_use as f64 / mem.n as f64,
            mem.metadata as f64 / mem.n as f64,
            meta_growth,
            mem.rss_growth
                .map_or("n/a".into(), |g| format!("{:.1} B", g as f64 / mem.n as f64)),
            mem.node_start_rss
                .map_or("n/a".into(), |g| format!("{:.1} MiB", g as f64 / (1u64 << 20) as f64)),
            mem.mw_count
        ),
    ];

    let bars = |f: &dyn Fn(&Row) -> f64| -> Vec<Series> {
        POLICIES
            .iter()
            .map(|(_, policy)| Series {
                name: (*policy).to_string(),
                points: SIZES
                    .iter()
                    .filter_map(|&s| find(policy, s))
                    .map(|c| Point::bar(size_name(c.size), f(&c.row)))
                    .collect(),
            })
            .collect()
    };
    let panel = |title: &str, y: &str, series: Vec<Series>| Panel {
        title: title.into(),
        x_label: "buffer size".into(),
        y_label: y.into(),
        x_log: false,
        y_log: false,
        kind: PanelKind::Bars,
        series,
    };
    let mut memory = vec![
        Point::bar("pool", pool_b),
        Point::bar("metadata", mem.metadata as f64 / n),
    ];
    if let Some(rss) = mem.rss_growth {
        memory.push(Point::bar("RSS growth", rss as f64 / n));
    }
    exp.figure = Figure {
        title: "Allocation: the cost of scrubbing, and memory per live permission".into(),
        panels: vec![
            panel("(a) allocate p50", "µs", bars(&|r| r.p50_us)),
            panel(
                "(b) manager CPU per cycle",
                "µs",
                bars(&|r| r.mn_cpu_us_per_op),
            ),
            panel(
                "(c) allocate/write/free cycles",
                "Kcycles/s",
                bars(&|r| r.throughput_ops / 1e3),
            ),
            Panel {
                title: format!("(d) bytes per live permission, N = {}", mem.n),
                x_label: "".into(),
                y_label: "bytes".into(),
                x_log: false,
                y_log: false,
                kind: PanelKind::Bars,
                series: vec![Series {
                    name: format!("{LIVE_SIZE} B allocations"),
                    points: memory,
                }],
            },
        ],
    };
}
