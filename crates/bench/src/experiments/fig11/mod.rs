//! Figure 11: ServerlessBench TC4's two chains on the FaaS runtime (`patronus-faas`, §6.2,
//! §7.4) for Unprot, Patronus, MR and RPC: chains per second and p50/p99 chain latency against
//! the number of containers (each a warm worker thread with its own connection, all pulling
//! from one queue that is kept full), and the image chain against the image's size.
//!
//! Every chain acquires its input on bootstrap and revokes it on exit, and leaves one output
//! (allocated, written, its right revoked). The image chain is CPU-bound (decode, Lanczos3
//! resize, PNG encode of a real photograph); the data-analysis chain is IO-bound (a record
//! added to, and every record read from, a table of 512 in remote memory).
//!
//! Every point runs several times, the mechanisms in a rotating order (what runs first in a
//! process pays for warming its allocator and caches): a row is the median run with the
//! spread, and a claim that one mechanism is ahead holds only when the spreads do not overlap.

mod point;
mod summary;

use super::driver::Rig;
use super::ods_rig::{MECHANISMS, OdsRig};
use crate::harness::{BenchOpts, Experiment};
use anyhow::{Context as _, Result};
use patronus_faas::FaasError;
use patronus_faas::apps::{analysis, image as image_chain};
use patronus_ods::RemoteMemory;
use point::Point;
use std::collections::BTreeMap;
use std::time::Duration;

/// The test photograph (640 × 427, public domain; `crates/faas/testdata/SOURCE.md`).
const PHOTO: &[u8] = include_bytes!("../../../../faas/testdata/rocket.jpg");
/// Its pixels.
const PHOTO_PIXELS: u64 = 640 * 427;
/// Rights of a chain last this long (a few times a chain's run time, with room for queueing
/// on 2 cores).
const LEASE: Duration = Duration::from_secs(2);
/// The image chain's thumbnail side.
const SIDE: u32 = 128;
/// Targets (§7.4): the image chain close to Unprot; data analysis within the paper's bound.
const IMAGE_TARGET: f64 = 0.10;
const ANALYSIS_TARGET: f64 = 0.277;
/// Records an employee table gains in a run, at most.
const GROWTH: u64 = 64;

struct Plan {
    containers: Vec<u32>,
    image_chains: u64,
    analysis_chains: u64,
    /// Upscaling factors of the photograph for the size sweep (at the largest count).
    scales: Vec<u32>,
    /// Runs of every point.
    repeats: usize,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            containers: vec![1, 4],
            image_chains: 12,
            analysis_chains: 200,
            scales: vec![1, 2],
            repeats: 3,
        }
    } else {
        Plan {
            containers: vec![1, 2, 4, 8, 16],
            image_chains: 120,
            analysis_chains: 4_000,
            scales: vec![1, 2, 4],
            repeats: 3,
        }
    }
}

/// The photograph scaled up `k` times (JPEG), so a chain reads a larger input.
fn photo(k: u32) -> Result<Vec<u8>> {
    if k <= 1 {
        return Ok(PHOTO.to_vec());
    }
    let img = image::load_from_memory(PHOTO).context("decoding the test photograph")?;
    let big = img.resize_exact(
        img.width() * k,
        img.height() * k,
        image::imageops::FilterType::Triangle,
    );
    let mut out = Vec::new();
    big.write_to(
        &mut std::io::Cursor::new(&mut out),
        image::ImageFormat::Jpeg,
    )
    .context("encoding the upscaled photograph")?;
    Ok(out)
}

/// A point: mechanism (index in [`MECHANISMS`]), application, containers, image pixels.
type Key = (usize, &'static str, u32, u64);

/// Every run of every point so far.
type Runs = BTreeMap<Key, Vec<Point>>;

/// One pass over every point of mechanism `mech`, with `connect` making its remote memory;
/// `photos` holds the image at each scale of the plan.
fn pass<M, C>(
    runs: &mut Runs,
    plan: &Plan,
    mech: usize,
    photos: &[(u32, Vec<u8>)],
    connect: C,
) -> Result<()>
where
    M: RemoteMemory + 'static,
    C: Fn(usize) -> Result<M> + Send + Sync + Clone + 'static,
{
    let faas_connect =
        move |c: C| move |i: usize| c(i).map_err(|e| FaasError::Stopped(format!("{e:#}")));
    let mut setup = connect(0)?;
    let max = plan.containers.iter().copied().max().unwrap_or(1);
    // Data analysis: tables of 512 records, each taking at most GROWTH of the run's chains
    // (round robin), so every chain reads 512 to 512 + GROWTH records as the original's.
    for &n in &plan.containers {
        let loaded = analysis::employees(analysis::DEFAULT_RECORDS, 1, 7);
        let tables = (0..plan.analysis_chains.div_ceil(GROWTH))
            .map(|_| {
                let room = analysis::DEFAULT_RECORDS + GROWTH as u32;
                analysis::create_table(&mut setup, room, &loaded)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let invs = analysis::employees(plan.analysis_chains as u32, 10_000, 11)
            .iter()
            .zip(tables.iter().cycle())
            .map(|(e, t)| e.invocation(*t))
            .collect();
        let p = point::measure(faas_connect(connect.clone()), n, analysis::chain(), invs)?;
        for t in tables {
            let _ = patronus_faas::free(&mut setup, t);
        }
        record(runs, (mech, "analysis", n, 0), p);
    }
    // Image: the photograph at its size for every count, larger ones at the largest count.
    for (k, file) in photos {
        let at = image_chain::upload(&mut setup, file)?;
        let counts: Vec<u32> = if *k == 1 {
            plan.containers.clone()
        } else {
            vec![max]
        };
        for n in counts {
            let invs = (0..plan.image_chains)
                .map(|_| image_chain::invocation(at, SIDE))
                .collect();
            let p = point::measure(faas_connect(connect.clone()), n, image_chain::chain(), invs)?;
            let px = PHOTO_PIXELS * u64::from(k * k);
            record(runs, (mech, "image", n, px), p);
        }
        let _ = patronus_faas::free(&mut setup, at);
    }
    Ok(())
}

/// Keeps a run of point `key`, and prints it.
fn record(runs: &mut Runs, key: Key, p: Point) {
    let (mech, app, n, px) = key;
    let (cont, other) = p.cpu_us_per_chain();
    let list = runs.entry(key).or_default();
    println!(
        "{:<9} {:<9} {:>10} {:>10} {:>4} {:>10.1} {:>9.1} {:>9.1} {:>7}",
        MECHANISMS[mech],
        app,
        n,
        px,
        list.len() + 1,
        p.throughput(),
        cont,
        other,
        p.failed()
    );
    list.push(p);
}

/// Runs Figure 11 on `opts.transport`.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let rig = Rig::for_bench(opts);
    let mut exp = Experiment::new("fig11", opts.transport_name(), opts.quick);
    let nodes = OdsRig::start(&rig, 256 << 20, 10_000_000, opts.isolation)?;
    let photos = plan
        .scales
        .iter()
        .map(|&k| Ok((k, photo(k)?)))
        .collect::<Result<Vec<_>>>()?;
    println!("Figure 11: FaaS chains (ServerlessBench TC4) on warm containers");
    println!(
        "{:<9} {:<9} {:>10} {:>10} {:>4} {:>10} {:>9} {:>9} {:>7}",
        "mechanism",
        "app",
        "containers",
        "image px",
        "run",
        "chains/s",
        "cont. us",
        "other us",
        "failed"
    );
    let mut runs = Runs::new();
    for rep in 0..plan.repeats {
        for j in 0..MECHANISMS.len() {
            let mech = (j + rep) % MECHANISMS.len();
            let name = MECHANISMS[mech];
            if name == "Patronus" {
                pass(&mut runs, &plan, mech, &photos, nodes.patronus_connector()?)?;
            } else {
                pass(
                    &mut runs,
                    &plan,
                    mech,
                    &photos,
                    nodes.baseline_connector(name)?,
                )?;
            }
        }
    }
    nodes.shutdown();
    for ((mech, app, n, px), list) in &runs {
        exp.rows
            .push(point::row(MECHANISMS[*mech], *n, app, *px, list));
    }
    summary::summarize(&mut exp, &plan);
    Ok(exp)
}
