//! One point of Figure 11 — a batch of invocations on fresh warm containers — and the row
//! its repeated runs make (the median run's throughput, with the spread).

use crate::harness::process::process_cpu_split;
use crate::harness::{Latency, Row};
use anyhow::{Result, bail};
use patronus_faas::{Chain, ChainReport, FaasError, Invocation, Runtime};
use patronus_ods::RemoteMemory;
use std::time::{Duration, Instant};

use super::LEASE;

/// What one run of a point measured.
#[derive(Debug)]
pub(super) struct Point {
    chains: u64,
    wall: Duration,
    latency: Latency,
    failed: u64,
    first_failure: Option<String>,
    /// Acquires, allocates, releases.
    perms: (u64, u64, u64),
    /// CPU of the containers' threads, and of every other thread of the process (memory
    /// nodes, NIC engines, the dispatcher), during the run.
    cpu: (Duration, Duration),
}

impl Point {
    /// Chains per second.
    pub(super) fn throughput(&self) -> f64 {
        self.chains as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Container and other CPU per chain, µs.
    pub(super) fn cpu_us_per_chain(&self) -> (f64, f64) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.chains.max(1) as f64;
        (per(self.cpu.0), per(self.cpu.1))
    }

    pub(super) fn failed(&self) -> u64 {
        self.failed
    }
}

/// CPU of this process's container threads, and of its other threads.
fn cpu_split() -> Result<(Duration, Duration)> {
    process_cpu_split(std::process::id(), "faas-container-")
}

/// Runs `invocations`, all queued at once, on `containers` warm containers of `chain`
/// (connected before the clock starts).
#[allow(clippy::disallowed_methods)] // a benchmark driver: wall time
pub(super) fn measure<M, C>(
    connect: C,
    containers: u32,
    chain: Chain<M>,
    invocations: Vec<Invocation>,
) -> Result<Point>
where
    M: RemoteMemory + 'static,
    C: Fn(usize) -> Result<M, FaasError> + Send + Sync + 'static,
{
    let name = chain.name;
    let mut rt = Runtime::start(containers as usize, vec![chain], LEASE, connect);
    let count = invocations.len() as u64;
    let cpu0 = cpu_split()?;
    let t0 = Instant::now();
    for inv in invocations {
        rt.submit(name, inv)?;
    }
    let mut p = Point {
        chains: 0,
        wall: Duration::ZERO,
        latency: Latency::new(),
        failed: 0,
        first_failure: None,
        perms: (0, 0, 0),
        cpu: (Duration::ZERO, Duration::ZERO),
    };
    for _ in 0..count {
        let Some(done) = rt.next_done(Duration::from_secs(120)) else {
            bail!("{name}: a chain did not finish in 120 s");
        };
        match done.report {
            Ok(r) => {
                p.chains += 1;
                p.latency.record(done.latency);
                add_perms(&mut p.perms, &r);
            }
            Err(e) => {
                p.failed += 1;
                p.first_failure.get_or_insert(e.to_string());
            }
        }
    }
    p.wall = t0.elapsed();
    // Read while the containers live (idle now): an exited thread's CPU is gone.
    let cpu1 = cpu_split()?;
    p.cpu = (cpu1.0.saturating_sub(cpu0.0), cpu1.1.saturating_sub(cpu0.1));
    drop(rt.shutdown());
    Ok(p)
}

fn add_perms(to: &mut (u64, u64, u64), r: &ChainReport) {
    to.0 += r.acquires;
    to.1 += r.allocates;
    to.2 += r.releases;
}

/// The row of a point's runs: the median run's chains per second (`throughput_ops`) with the
/// lowest and highest (`chains_per_s_min` / `_max`), latency quantiles over every chain of
/// every run, and counts and CPU per chain over all of them.
pub(super) fn row(mech: &str, n: u32, app: &str, image_px: u64, runs: &[Point]) -> Row {
    let mut tputs: Vec<f64> = runs.iter().map(Point::throughput).collect();
    tputs.sort_by(f64::total_cmp);
    let median = tputs.get(tputs.len() / 2).copied().unwrap_or(0.0);
    let mut latency = Latency::new();
    let (mut chains, mut failed, mut perms) = (0u64, 0u64, (0u64, 0u64, 0u64));
    let mut cpu = (Duration::ZERO, Duration::ZERO);
    for p in runs {
        latency.merge(&p.latency);
        chains += p.chains;
        failed += p.failed;
        perms = (
            perms.0 + p.perms.0,
            perms.1 + p.perms.1,
            perms.2 + p.perms.2,
        );
        cpu = (cpu.0 + p.cpu.0, cpu.1 + p.cpu.1);
    }
    let per = |x: u64| x as f64 / chains.max(1) as f64;
    let us_per = |d: Duration| d.as_secs_f64() * 1e6 / chains.max(1) as f64;
    let first_failure = runs
        .iter()
        .find_map(|p| p.first_failure.clone())
        .unwrap_or_default();
    let mut row = Row::new(mech, n)
        .with("app", app)
        .with("image_px", image_px)
        .with("runs", runs.len())
        .with("chains_per_s_min", tputs.first().copied().unwrap_or(0.0))
        .with("chains_per_s_max", tputs.last().copied().unwrap_or(0.0))
        .with("chains", chains)
        .with("failed_chains", failed)
        .with("first_failure", first_failure)
        .with("acquires_per_chain", per(perms.0))
        .with("allocates_per_chain", per(perms.1))
        .with("releases_per_chain", per(perms.2))
        .with("container_cpu_us_per_chain", us_per(cpu.0))
        .with("other_cpu_us_per_chain", us_per(cpu.1));
    row.throughput_ops = median;
    row.p50_us = latency.p50_us();
    row.p99_us = latency.p99_us();
    row
}
