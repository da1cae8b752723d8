//! Figure 10: the lock-free segmented queue of §6.1 (`patronus_ods::queue`) under producers
//! only, for Unprot, Patronus, MR and RPC (§7.3.2): throughput and latency against the number of
//! producers, and the sweep of the segment size N (64 … 1024 entries: the smaller the
//! segments, the more often a producer allocates one and every other acquires it).

use super::driver::{Logical, Rig, StepCtx, now};
use super::ods_rig::{MECHANISMS, OdsRig, Workload, mechanism_panel, workload_checks};
use crate::harness::{BenchOpts, Experiment, Figure, Panel, PaperRef, Ratio, Row};
use anyhow::{Context as _, Result};
use patronus_core::manager::Isolation;
use patronus_ods::queue::{PushOp, Queue, QueueConfig, QueueOptions, QueueStats};
use patronus_ods::{NamedRoots, RemoteMemory};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

/// Bytes of each item (a pointer-sized payload, as a queue of references would carry).
const ITEM: u32 = 8;
/// Patronus / MR throughput in the paper's segment sweep, N = 64 and N = 1024 (§7.3.2).
const PAPER_SWEEP: [(u32, f64); 2] = [(64, 5.18), (1024, 1.78)];

struct Plan {
    producers: Vec<u32>,
    segments: Vec<u32>,
    sweep_producers: u32,
    ops: u64,
    budget: Duration,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            producers: vec![1, 16],
            segments: vec![64, 1024],
            sweep_producers: 8,
            ops: 20_000,
            budget: Duration::from_millis(400),
        }
    } else {
        Plan {
            producers: vec![1, 2, 4, 8, 16, 32, 64],
            segments: vec![64, 128, 256, 512, 1024],
            sweep_producers: 32,
            ops: 200_000,
            budget: Duration::from_secs(5),
        }
    }
}

/// Producers pushing into one queue with segments of `entries`; pushes that fail are counted
/// (and the run goes on), never hidden.
struct Producers {
    entries: u32,
    failed: Arc<AtomicU64>,
    /// Producers whose handle failed to close.
    close_failed: Arc<AtomicU64>,
    /// What the producers counted (summed as each is dropped at the end of the run).
    costs: Arc<parking_lot::Mutex<QueueStats>>,
}

impl Workload for Producers {
    fn create<M: RemoteMemory + NamedRoots + Send + 'static>(&self, mem: &mut M) -> Result<u64> {
        Ok(Queue::create(
            mem,
            &QueueConfig {
                entries: self.entries,
                item_size: ITEM,
            },
        )?)
    }

    fn client<M: RemoteMemory + NamedRoots + Send + 'static>(
        &self,
        mem: M,
        root: u64,
        i: usize,
    ) -> Result<Box<dyn Logical>> {
        // Many producers share one client thread, and on a loaded 2-core machine a step can
        // come milliseconds after the last: longer leases, and a consumer (none here) would
        // skip a claimed slot only after 100 ms.
        let opts = QueueOptions {
            lease: Duration::from_millis(50),
            renew_margin: Duration::from_millis(10),
            skip_after: Duration::from_millis(100),
            ..QueueOptions::default()
        };
        let queue = Queue::open(mem, root, opts)?;
        Ok(Box::new(Producer {
            opened: queue.stats(),
            queue,
            costs: self.costs.clone(),
            failed: self.failed.clone(),
            close_failed: self.close_failed.clone(),
            op: None,
            next: (i as u64) << 40,
        }))
    }

    fn destroy<M: RemoteMemory + NamedRoots + Send + 'static>(
        &self,
        mem: &mut M,
        root: u64,
    ) -> Result<()> {
        Queue::destroy(mem, root).context("destroying the queue")?;
        Ok(())
    }
}

/// One producer: pushes items one after another, each a state machine stepped by the driver.
struct Producer<M: RemoteMemory> {
    queue: Queue<M>,
    /// The queue handle's counts once open (the run's costs are counted from here).
    opened: QueueStats,
    costs: Arc<parking_lot::Mutex<QueueStats>>,
    failed: Arc<AtomicU64>,
    /// Handles whose close failed (their spare segments stay allocated).
    close_failed: Arc<AtomicU64>,
    op: Option<(PushOp, Instant)>,
    next: u64,
}

impl<M: RemoteMemory> Drop for Producer<M> {
    /// Counts the run's costs, then closes the handle: its spare segments (allocated, never
    /// linked) are freed, which destroying the queue cannot do. The clock has stopped.
    fn drop(&mut self) {
        self.costs
            .lock()
            .add(&self.queue.stats().since(&self.opened));
        if self.queue.close().is_err() {
            self.close_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<M: RemoteMemory + Send> Logical for Producer<M> {
    /// Armed only while its push waits for a segment's acquire (Patronus starts them without
    /// blocking); otherwise its next step has work to do.
    fn arm(&mut self) -> bool {
        self.op.is_some() && self.queue.arm()
    }

    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        let (mut op, started) = match self.op.take() {
            Some(op) => op,
            None => {
                self.next += 1;
                let item = self.next.to_le_bytes();
                (PushOp::new(&mut self.queue, &item)?, now())
            }
        };
        match op.step(&mut self.queue) {
            Ok(Poll::Ready(())) => {
                ctx.latency.record(started.elapsed());
                ctx.done += 1;
            }
            Ok(Poll::Pending) => self.op = Some((op, started)),
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// Per-push columns like Table 4's counts (§6.1: each new segment costs one `allocate` and,
/// for every other producer, one `acquire`).
fn cost_columns(mut row: Row, s: &QueueStats) -> Row {
    let per = |n: u64| (n as f64 / s.pushes.max(1) as f64 * 1e4).round() / 1e4;
    for (what, n) in [
        ("allocates", s.allocates),
        ("acquires", s.acquires),
        ("extends", s.extends),
        ("releases", s.releases),
        ("frees", s.frees),
        ("one_sided", s.ops),
        ("batches", s.batches),
    ] {
        row = row.with(&format!("{what}_per_push"), per(n));
    }
    row.with("segments_linked", s.segments_linked)
}

/// Runs Figure 10 on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("fig10", opts.transport_name(), opts.quick);
    // Room for one run's queue: each run's is destroyed before the next starts, and its
    // producers free their spare segments as they close. The queue has no consumer, so it
    // keeps every item pushed: segments of 1024 16 B entries and a 64 B header take 32 KiB
    // each in both allocators (a power of two), 64 entries 2 KiB, so about 32 B an item; four
    // times that covers a run that overshoots its operation target.
    let pool = (plan.ops * 4 * 32).max(64 << 20);
    let nodes = OdsRig::start(&rig, pool, 1_000_000, Isolation::SharedPd)?;
    println!("Figure 10: queue producers ({ITEM} B items)");
    println!(
        "{:<9} {:>9} {:>8} {:>10} {:>9} {:>9} {:>13}",
        "mechanism", "producers", "N", "Kops/s", "p50 us", "p99 us", "MN CPU us/op"
    );
    let measure = |mech: &str, n: u32, entries: u32, sweep: bool| -> Result<Row> {
        let producers = Producers {
            entries,
            failed: Arc::default(),
            close_failed: Arc::default(),
            costs: Arc::default(),
        };
        let m = nodes.run(
            mech,
            &producers,
            None,
            n as usize,
            plan.ops,
            plan.budget,
            &format!("fig10 {mech} x{n} N={entries}"),
        )?;
        nodes
            .destroy(mech, &producers, m.root)
            .with_context(|| format!("freeing {mech}'s queue"))?;
        let row = cost_columns(
            m.driven.row(mech, n, m.manager, m.engine),
            &producers.costs.lock(),
        )
        .with("segment_entries", entries)
        .with("sweep", sweep)
        .with("failed_ops", producers.failed.load(Ordering::Relaxed));
        let close_failed = producers.close_failed.load(Ordering::Relaxed);
        if close_failed > 0 {
            println!(
                "          {close_failed} producers failed to close (spare segments left allocated)"
            );
        }
        println!(
            "{:<9} {:>9} {:>8} {:>10.1} {:>9.2} {:>9.2} {:>13.3}",
            mech,
            n,
            entries,
            row.throughput_ops / 1e3,
            row.p50_us,
            row.p99_us,
            row.mn_cpu_us_per_op
        );
        Ok(row)
    };
    for &n in &plan.producers {
        for mech in MECHANISMS {
            let row = measure(mech, n, 1024, false)?;
            exp.rows.push(row);
        }
    }
    for &entries in &plan.segments {
        for mech in ["Unprot", "Patronus", "MR"] {
            let row = measure(mech, plan.sweep_producers, entries, true)?;
            exp.rows.push(row);
        }
    }
    nodes.shutdown();
    summarize(&mut exp, &plan);
    Ok(exp)
}

fn find<'a>(exp: &'a Experiment, mech: &str, n: u32, entries: u32, sweep: bool) -> Option<&'a Row> {
    exp.rows.iter().find(|r| {
        r.mechanism == mech
            && r.clients == n
            && r.get_f64("segment_entries") == Some(f64::from(entries))
            && r.extra.get("sweep").and_then(|v| v.as_bool()) == Some(sweep)
    })
}

fn summarize(exp: &mut Experiment, plan: &Plan) {
    let mut checks = Vec::new();
    let mut ratios = Vec::new();
    for &n in &plan.producers {
        checks.extend(workload_checks(
            |m| find(exp, m, n, 1024, false).map(|r| r.throughput_ops),
            &format!("{n} producers"),
            "§7.3.2",
        ));
    }
    let sweep = |m: &str, entries: u32| {
        find(exp, m, plan.sweep_producers, entries, true).map(|r| r.throughput_ops)
    };
    let mut paper = Vec::new();
    for &entries in &plan.segments {
        let (Some(p), Some(mr)) = (sweep("Patronus", entries), sweep("MR", entries)) else {
            continue;
        };
        let value = p / mr.max(1e-9);
        ratios.push(Ratio {
            name: format!("Patronus / MR throughput, N = {entries}"),
            value,
        });
        paper.push(PaperRef {
            metric: format!("Patronus / MR throughput, segments of {entries}"),
            ours: Some(value),
            paper: PAPER_SWEEP
                .iter()
                .find(|(n, _)| *n == entries)
                .map(|(_, r)| *r),
            unit: "×".into(),
            source: "§7.3.2, Figure 10".into(),
        });
        if let Some(u) = sweep("Unprot", entries) {
            ratios.push(Ratio {
                name: format!("Patronus / Unprot throughput, N = {entries}"),
                value: p / u.max(1e-9),
            });
        }
    }
    checks.push(exp.all_completed("failed_ops", "push"));
    exp.checks = checks;
    exp.ratios = ratios;
    exp.paper = paper;
    exp.notes = vec![
        format!("Each producer pushes {ITEM} B items into one shared queue: FAA claims a slot, one batch writes the item and CASes its state to filled; a full segment makes a producer allocate the next (one allocate) and every other producer acquire it (one acquire each). Producers are logical clients with their own connections, multiplexed on the client thread; each push is a state machine stepped by the driver (one batch or one control request per step)."),
        "Patronus handles keep a long-lived permission on the queue's root (extended one-sidedly) and one per segment; Unprot and RPC need none; MR registers a region per segment and per acquire (the baselines' allocator registers the creator's).".into(),
        "The segment sweep runs a fixed number of producers with segments of N entries: the smaller N, the more permission operations per push.".into(),
        "In-process a one-sided operation runs on the requester's thread while a permission RPC crosses to the manager's thread and back; over TCP both cross the transport, which is closer to an RDMA NIC's ratio between them. The paper's 27.7 % bound was measured on RDMA hardware.".into(),
    ];
    exp.figure = Figure {
        title: "Figure 10 analogue: queue producers".into(),
        panels: vec![
            panel(exp, "(a) throughput", "throughput (Kops/s)", false, |r| {
                r.throughput_ops / 1e3
            }),
            panel(exp, "(b) median latency", "p50 latency (µs)", false, |r| {
                r.p50_us
            }),
            panel(exp, "(c) segment sweep", "throughput (Kops/s)", true, |r| {
                r.throughput_ops / 1e3
            }),
        ],
    };
}

fn panel(exp: &Experiment, title: &str, y: &str, sweep: bool, f: impl Fn(&Row) -> f64) -> Panel {
    let x_label = if sweep {
        "entries per segment"
    } else {
        "producers"
    };
    mechanism_panel(exp, title, x_label, y, |r| {
        let in_sweep = r.extra.get("sweep").and_then(|v| v.as_bool()) == Some(sweep);
        let x = if sweep {
            r.get_f64("segment_entries").unwrap_or(0.0)
        } else {
            f64::from(r.clients)
        };
        in_sweep.then(|| (x, f(r)))
    })
}
