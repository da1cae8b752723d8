//! Split latency (issue 25): how long a RACE split holds up inserts.
//!
//! Several clients — one thread each, with its own connection and a blocking table client, as
//! `patronus kv` processes are — insert fresh keys continuously into one RACE table on a
//! Patronus memory node in this process (in-process links, or TCP over loopback). Any insert
//! that finds its subtable full splits it; inserts of keys the subtable claims meanwhile wait
//! on its frozen slots. Every insert's latency goes into an HDR histogram, and so, separately,
//! does the latency of the inserts that ran a split themselves or waited for one, and each
//! split's duration (`TableClient::take_split_times`: from the split's first step to its
//! last, by phase). Tables of two shapes split: issue 25's tiny one (one group of two-slot
//! buckets: six slots a subtable, a split every few inserts) and the default one (64 groups
//! of seven-slot buckets: a split classifies about a thousand entries). The baseline, in the
//! same run, is the same load on a table of the default bucket shape made big enough at
//! creation that it never splits. A fresh client audits each table after its run.
//!
//! The table clients use the `kv` command's options (100 ms leases, every right revoked when
//! given up, one KV block allocated per insert) and its client library settings.

mod report;

use super::patronus_rig::PatronusRig;
use crate::harness::{BenchOpts, Experiment, Latency};
use anyhow::{Context as _, Result, anyhow};
use patronus_core::client::{Client, ClientConfig, ClientStats};
use patronus_core::cluster::Link;
use patronus_core::manager::NodeConfig;
use patronus_ods::PatronusMemory;
use patronus_ods::race::{self, Audit, ClientOptions, RaceConfig, RaceError, SplitTime};
use rnic::soft::SoftProvider;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::driver::{Rig, now};

/// Inserting clients (threads).
pub const CLIENTS: usize = 4;
/// No single split may stall an insert longer than this in-process (issue 25's target).
pub const BOUND_INPROC: Duration = Duration::from_millis(100);
/// Over TCP on this machine, "not for seconds": an insert may wait at most this long.
pub const BOUND_TCP: Duration = Duration::from_secs(1);
/// Key length (`c<client>-<sequence>`) and value length, bytes.
const VALUE_LEN: usize = 32;
/// Lease of the `kv` command's rights (`--lease-ms` default).
const KV_LEASE: Duration = Duration::from_millis(100);

/// What a run is made of.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Inserts per table (all clients together).
    inserts: u64,
    /// Wall-time cap per table.
    budget: Duration,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            inserts: 3_000,
            // Over TCP a quick run is a smoke test (a control round trip costs ~0.5 ms here).
            budget: match opts.transport {
                Link::InProc => Duration::from_millis(1_000),
                Link::Tcp => Duration::from_millis(500),
            },
        }
    } else {
        Plan {
            inserts: 30_000,
            budget: Duration::from_secs(30),
        }
    }
}

/// A table shape of the run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The row's name.
    pub name: &'static str,
    /// The table.
    pub config: RaceConfig,
    /// Whether it is the baseline (made big enough never to split).
    pub baseline: bool,
}

/// Issue 25's shape: `kv create --initial-depth 0 --groups 1 --slots 2 --max-depth 14`.
pub fn tiny() -> RaceConfig {
    RaceConfig {
        initial_depth: 0,
        max_depth: 14,
        groups: 1,
        slots: 2,
        ..RaceConfig::default()
    }
}

/// The baseline: the default bucket shape, with subtables enough at creation for `inserts`
/// keys at about a sixth of their slots (and no deeper: it cannot split).
pub fn presized(inserts: u64) -> RaceConfig {
    let c = RaceConfig::default();
    let per_subtable = u64::from(c.groups) * 3 * u64::from(c.slots);
    let subtables = (inserts * 6).div_ceil(per_subtable).next_power_of_two();
    let depth = subtables.trailing_zeros().clamp(1, 12) as u8;
    RaceConfig {
        initial_depth: depth,
        max_depth: depth,
        ..c
    }
}

fn shapes(plan: &Plan) -> [Shape; 3] {
    [
        Shape {
            name: "tiny (1 group × 2 slots, depth 0 → 14)",
            config: tiny(),
            baseline: false,
        },
        Shape {
            name: "default (64 groups × 7 slots, depth 1 → 12)",
            config: RaceConfig::default(),
            baseline: false,
        },
        Shape {
            name: "pre-sized, never splits (baseline)",
            config: presized(plan.inserts),
            baseline: true,
        },
    ]
}

/// The `kv` command's table options (`crates/cli/src/kv/session.rs`, default `--lease-ms`).
pub fn kv_options() -> ClientOptions {
    ClientOptions {
        lease: KV_LEASE,
        read_lease: KV_LEASE,
        margin: KV_LEASE / 5,
        preallocate: 1,
        split_lease: KV_LEASE,
        fence_gap: KV_LEASE,
        lapse: false,
        max_wait_polls: 1 << 16,
        ..ClientOptions::default()
    }
}

/// The `kv` command's client library settings (no spare QPs, no recovery thread).
fn kv_client() -> ClientConfig {
    ClientConfig {
        spare_qps: 0,
        background_recovery: false,
        ..ClientConfig::default()
    }
}

/// A memory node as `patronus serve` starts one by default (a PD per client, 1 s maximum
/// lease), with memory, headers and windows enough for the deepest tiny table.
fn node_config() -> NodeConfig {
    NodeConfig {
        pool_bytes: 128 << 20,
        max_lifetime_us: 1_000_000,
        header_count: 1 << 17,
        mw_count: 1 << 17,
        ..NodeConfig::default()
    }
}

/// What one table's run measured.
#[derive(Debug)]
pub struct Measured {
    /// The shape.
    pub shape: Shape,
    /// Every insert's latency.
    pub all: Latency,
    /// Inserts that ran a split themselves (or finished another's) or waited for one.
    pub during: Latency,
    /// Of those, the ones that ran a split.
    pub ran: Latency,
    /// Of those, the ones that waited for another client's split (and ran none).
    pub waited: Latency,
    /// Each split's duration.
    pub split: Latency,
    /// Every split's time, by phase.
    pub times: Vec<SplitTime>,
    /// Inserts acknowledged.
    pub acknowledged: u64,
    /// Inserts refused because their subtable was full at the maximum depth (the tiny shape's
    /// limit: a subtable of six slots can fill at depth 14 by chance), counted apart.
    pub table_full: u64,
    /// Inserts that failed otherwise.
    pub failed: u64,
    /// The first failure.
    pub first_failure: Option<String>,
    /// Polls spent waiting on frozen slots, and locks of splits in progress taken over.
    pub waits: u64,
    /// See `waits`.
    pub takeovers: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// The table after the run (a fresh client's scan).
    pub audit: Audit,
    /// The memory node's manager CPU (busy time) during the run.
    pub manager: Duration,
    /// The inserting clients' library counts (control round trips among them).
    pub clients: ClientStats,
}

impl Measured {
    /// Inserts completed (acknowledged or not).
    pub fn inserts(&self) -> u64 {
        self.acknowledged + self.table_full + self.failed
    }

    /// Inserts per second.
    pub fn throughput(&self) -> f64 {
        self.inserts() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Manager CPU per insert, µs.
    pub fn manager_us_per_insert(&self) -> f64 {
        super::driver::us_per_op(self.manager, self.inserts())
    }
}

/// One client's record.
#[derive(Default)]
struct ClientRecord {
    all: Latency,
    during: Latency,
    ran: Latency,
    waited: Latency,
    split: Latency,
    times: Vec<SplitTime>,
    acknowledged: u64,
    table_full: u64,
    failed: u64,
    first_failure: Option<String>,
    waits: u64,
    takeovers: u64,
    client: ClientStats,
}

/// Runs the split-latency experiment on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = now();
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("splits", opts.transport_name(), opts.quick);
    println!(
        "Split latency: {CLIENTS} clients insert fresh keys, {} inserts or {:.1} s per table ({})",
        plan.inserts,
        plan.budget.as_secs_f64(),
        opts.transport_name()
    );
    println!(
        "{:<46} {:>8} {:>9} {:>9} {:>10} {:>7} {:>10} {:>10} {:>10}",
        "table",
        "inserts",
        "p50 us",
        "p99 us",
        "max us",
        "splits",
        "split p99",
        "split max",
        "during p99"
    );
    let mut runs = Vec::new();
    for shape in shapes(&plan) {
        let m = measure(&rig, &plan, shape)?;
        println!(
            "{:<46} {:>8} {:>9.1} {:>9.1} {:>10.1} {:>7} {:>8.2}ms {:>8.2}ms {:>8.2}ms",
            shape.name,
            m.acknowledged,
            m.all.p50_us(),
            m.all.p99_us(),
            m.all.max_us(),
            m.times.len(),
            m.split.p99_us() / 1e3,
            m.split.max_us() / 1e3,
            m.during.p99_us() / 1e3,
        );
        runs.push(m);
    }
    report::summarize(&mut exp, opts, &runs);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

fn connect(p: &PatronusRig, i: usize) -> Result<PatronusMemory<SoftProvider>> {
    let dev = &p.client_devs[i % p.client_devs.len()];
    let c = Client::connect(dev, p.node.address(), kv_client())
        .with_context(|| format!("connecting client {i}"))?;
    Ok(PatronusMemory::new(c))
}

/// One table: created, loaded by the clients, audited.
fn measure(rig: &Rig, plan: &Plan, shape: Shape) -> Result<Measured> {
    let p = PatronusRig::start(rig, node_config(), CLIENTS)?;
    let mut setup = connect(&p, 0)?;
    let root = race::create(&mut setup, shape.config)?;
    let mems = (0..CLIENTS)
        .map(|i| connect(&p, i))
        .collect::<Result<Vec<_>>>()?;
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let (m0, _) = p.cpu();
    let t0 = now();
    let deadline = t0 + plan.budget;
    let records = std::thread::scope(|s| -> Result<Vec<ClientRecord>> {
        let handles = mems
            .into_iter()
            .enumerate()
            .map(|(i, mem)| {
                let (stop, done) = (&stop, &done);
                std::thread::Builder::new()
                    .name(format!("splits-client-{i}"))
                    .spawn_scoped(s, move || {
                        let r = load(mem, root, i, plan.inserts, deadline, stop, done);
                        // A client that failed to start stops the others.
                        stop.store(true, Ordering::Relaxed);
                        r
                    })
                    .context("spawning a client thread")
            })
            .collect::<Result<Vec<_>>>()?;
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a client thread panicked"))?)
            .collect()
    })?;
    let wall = t0.elapsed();
    let manager = p.cpu().0.saturating_sub(m0);
    let mut t = race::open(&mut setup, root, kv_options())?;
    let audit = t.audit(&mut setup)?;
    let mut m = Measured {
        shape,
        all: Latency::new(),
        during: Latency::new(),
        ran: Latency::new(),
        waited: Latency::new(),
        split: Latency::new(),
        times: Vec::new(),
        acknowledged: 0,
        table_full: 0,
        failed: 0,
        first_failure: None,
        waits: 0,
        takeovers: 0,
        wall,
        audit,
        manager,
        clients: ClientStats::default(),
    };
    for r in records {
        m.all.merge(&r.all);
        m.during.merge(&r.during);
        m.ran.merge(&r.ran);
        m.waited.merge(&r.waited);
        m.split.merge(&r.split);
        m.times.extend(r.times);
        m.acknowledged += r.acknowledged;
        m.table_full += r.table_full;
        m.failed += r.failed;
        m.waits += r.waits;
        m.takeovers += r.takeovers;
        m.clients.merge(&r.client);
        if m.first_failure.is_none() {
            m.first_failure = r.first_failure;
        }
    }
    let _ = t.close(&mut setup);
    drop(setup);
    p.node.shutdown();
    Ok(m)
}

/// One client: inserts fresh keys until the run's inserts are done or its time is up.
fn load(
    mut mem: PatronusMemory<SoftProvider>,
    root: u64,
    i: usize,
    target: u64,
    deadline: Instant,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<ClientRecord> {
    let mut t = race::open(&mut mem, root, kv_options())?;
    let mut rec = ClientRecord::default();
    let value = vec![b'v'; VALUE_LEN];
    for seq in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = format!("c{i}-{seq:08}");
        let before = t.stats();
        let t0 = now();
        let r = t.insert(&mut mem, key.as_bytes(), &value);
        let took = t0.elapsed();
        let after = t.stats();
        let times = t.take_split_times();
        rec.all.record(took);
        let waited = after.waits > before.waits;
        if !times.is_empty() {
            rec.during.record(took);
            rec.ran.record(took);
        } else if waited {
            rec.during.record(took);
            rec.waited.record(took);
        }
        for s in &times {
            rec.split.record(s.total);
        }
        rec.times.extend(times);
        rec.waits += after.waits - before.waits;
        rec.takeovers += after.takeovers - before.takeovers;
        match r {
            Ok(()) => rec.acknowledged += 1,
            Err(RaceError::TableFull { .. }) => rec.table_full += 1,
            Err(e) => {
                rec.failed += 1;
                rec.first_failure
                    .get_or_insert_with(|| format!("client {i}, key {key}: {e}"));
            }
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= target || now() >= deadline {
            stop.store(true, Ordering::Relaxed);
        }
    }
    let _ = t.close(&mut mem);
    rec.client = mem.client().status().stats();
    Ok(rec)
}
