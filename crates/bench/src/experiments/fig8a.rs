//! Figure 8(a): RACE hashing when a resizing client crashes (§7.2.3).
//!
//! Loaders insert new keys into a RACE table (`patronus_ods::race`) on a Patronus memory node
//! while it resizes: any loader whose insert finds its subtable full splits it. At the crash
//! epoch, the first loader then splitting (in the `Copying` phase: T frozen, T' allocated) stops
//! for good, its connection open, holding the split's lock — an exclusive permission
//! (`LockMode::Lease`, Patronus) or a lock word (`LockMode::Word`, vanilla RACE). Writers of the
//! keys that subtable claims wait on its frozen slots; with the lease, one of them takes the
//! lock once its lease ends and finishes the split, and loading goes on; with the lock word,
//! they wait for good, and one by one every loader gets stuck behind it.
//!
//! Epochs are fixed wall-clock intervals. Keys arrive on a schedule (a fixed number per loader
//! per epoch; a loader behind it inserts as fast as it can), so where the crash falls in the
//! table's growth does not depend on the machine's speed. Per epoch the run records the inserts
//! acknowledged and the splits finished; the load factor is keys / slots of the subtables the
//! table has then (RACE's definition).

mod checks;
mod loader;
mod measures;
mod report;
mod timeline;

use super::driver::{CLIENT_THREADS, Logical, Rig};
use super::patronus_rig::{PatronusRig, lean_client};
use crate::harness::{BenchOpts, Experiment, Row};
use anyhow::{Context as _, Result};
use loader::{CrashPlan, Loader};
use patronus_core::manager::{NodeConfig, Techniques};
use patronus_ods::PatronusMemory;
use patronus_ods::race::{self, Audit, ClientOptions, LockMode, Phase, RaceConfig};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use timeline::Timeline;

/// The paper's crash epoch.
const CRASH_EPOCH: usize = 240;
/// Logical clients loading the table (each also a resizer).
const LOADERS: usize = 8;
/// The split phase the resizer crashes in, and its steps in that phase before it stops.
const CRASH_PHASE: Phase = Phase::Copying;
const CRASH_STEPS: u32 = 2;
/// The node's maximum permission lifetime, µs: far above any lease here, so it cuts no split
/// short (a live split over TCP takes a while) and it is the lease that ends an orphaned lock.
const MAX_LIFETIME_US: u64 = 10_000_000;

/// An insert in progress this long at the end of a run is stuck.
const STUCK: Duration = Duration::from_millis(500);

/// What a run is made of.
#[derive(Clone, Debug)]
struct Plan {
    epochs: usize,
    epoch: Duration,
    table: RaceConfig,
    /// Keys each loader begins per epoch (its schedule).
    per_epoch: u64,
    /// A resizer's split rights last `split_lease`, its lock `split_lease + fence_gap`: an
    /// orphaned lock ends at most that long after its last extension.
    split_lease: Duration,
    fence_gap: Duration,
}

impl Plan {
    /// The lease of a resizer's lock.
    fn lock_lease(&self) -> Duration {
        self.split_lease + self.fence_gap
    }
}

fn plan(opts: &BenchOpts) -> Plan {
    // 60 slots a subtable; 4 subtables at first.
    let table = RaceConfig {
        initial_depth: 2,
        max_depth: 8,
        groups: 5,
        slots: 4,
        block_size: 128,
        lock: LockMode::Lease,
        seed: 0x8a,
    };
    // 6 000 keys/s in both (what one loading thread sustains in-process on this 2-core
    // machine, splits included): 15 360 slots fill in ~2.4 s of loading, 61 440 in ~9.5 s.
    if opts.quick {
        Plan {
            epochs: 600,
            epoch: Duration::from_millis(4),
            table,
            per_epoch: 3,
            split_lease: Duration::from_millis(50),
            fence_gap: Duration::from_millis(50),
        }
    } else {
        Plan {
            epochs: 600,
            epoch: Duration::from_millis(20),
            table: RaceConfig {
                max_depth: 10,
                ..table
            },
            per_epoch: 15,
            split_lease: Duration::from_millis(200),
            fence_gap: Duration::from_millis(200),
        }
    }
}

/// The loaders' policy: leases and a margin long enough for TCP's millisecond round trips
/// (a loader steps once per round of all eight), the plan's split lease, and a try of a
/// frozen subtable's lock every 8 polls (acquisitions do not wait here: a try while the lock
/// is held costs one refused acquire).
fn options(plan: &Plan) -> ClientOptions {
    ClientOptions {
        lease: Duration::from_millis(50),
        read_lease: Duration::from_millis(50),
        margin: Duration::from_millis(10),
        split_lease: plan.split_lease,
        fence_gap: plan.fence_gap,
        takeover_after: 8,
        ..ClientOptions::default()
    }
}

/// One run's record.
struct Run {
    lock: LockMode,
    row: Row,
    timeline: Arc<Timeline>,
    /// The table after the run (a fresh client's scan).
    audit: Audit,
    /// Loaders (the crashed one aside) whose insert had waited `STUCK` or more at the end.
    stuck: usize,
}

/// Runs Figure 8(a) on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let started = super::driver::now();
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("fig8a", opts.transport_name(), opts.quick);
    println!(
        "Figure 8(a): {LOADERS} loaders, a resizer crashes at epoch {CRASH_EPOCH} ({} ms epochs, lock lease {} ms)",
        plan.epoch.as_millis(),
        plan.lock_lease().as_millis()
    );
    let mut runs = Vec::new();
    for lock in [LockMode::Lease, LockMode::Word] {
        runs.push(measure(&rig, &plan, lock)?);
    }
    report::print_epochs(&plan, &runs);
    report::summarize(&mut exp, &plan, &runs);
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

fn measure(rig: &Rig, plan: &Plan, lock: LockMode) -> Result<Run> {
    let cfg = NodeConfig {
        pool_bytes: 256 << 20,
        ..PatronusRig::throughput_config(Techniques::ALL, MAX_LIFETIME_US)
    };
    let p = PatronusRig::start(rig, cfg, CLIENT_THREADS)?;
    let connect = || -> Result<PatronusMemory<_>> {
        let c = p.clients(1, &lean_client())?.pop().context("a client")?;
        Ok(PatronusMemory::new(c))
    };
    let root = race::create(&mut connect()?, RaceConfig { lock, ..plan.table })?;
    let timeline = Arc::new(Timeline::new(plan.epochs, plan.epoch, LOADERS));
    let crash = Arc::new(CrashPlan {
        after: plan.epoch * CRASH_EPOCH as u32,
        phase: CRASH_PHASE,
        extra_steps: CRASH_STEPS,
        taken: AtomicBool::new(false),
    });
    let loaders = p
        .clients(LOADERS, &lean_client())?
        .into_iter()
        .enumerate()
        .map(|(i, c)| -> Result<Box<dyn Logical>> {
            let mut mem = PatronusMemory::new(c);
            let table = race::open(&mut mem, root, options(plan))?;
            let (t, c) = (timeline.clone(), crash.clone());
            Ok(Box::new(Loader::new(table, mem, i, t, c, plan.per_epoch)))
        })
        .collect::<Result<Vec<_>>>()?;
    let name = measures::name(lock);
    let budget = plan.epoch * plan.epochs as u32;
    let what = format!("fig8a {name}");
    let (d, mgr, eng) = p.drive(loaders, u64::MAX, budget, 0x8a, &what)?;
    let stuck = timeline.stuck(timeline.elapsed(), STUCK);
    // Every loader is gone (the crashed one's connection closed with it): count the table.
    let mut mem = connect()?;
    let audit = race::open(&mut mem, root, options(plan))?.audit(&mut mem)?;
    drop(mem);
    p.node.shutdown();
    let row = d.row(name, LOADERS as u32, mgr, eng);
    Ok(Run {
        lock,
        row,
        stuck,
        timeline,
        audit,
    })
}
