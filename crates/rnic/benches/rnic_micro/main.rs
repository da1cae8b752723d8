//! RNIC microbenchmarks for the software NIC (`rnic::soft`).
//!
//! Run with `cargo bench -p rnic --bench rnic_micro [-- --quick] [-- --help]`.
//! A plain `main` (`harness = false`), not run by `cargo test`; `cargo test --benches` (or
//! `--all-targets`) runs it without the `--bench` flag, and then it only smoke-tests itself.
//!
//! Sections (all measured in one process run, so ratios compare like with like):
//! 1. `inproc` — 64 B READ / WRITE and 8 B CAS on the in-process fabric (inline links):
//!    p50/p99 latency of a single post + poll, and throughput with 1 and 2 threads (each thread
//!    on its own QP).
//! 2. `tcp`    — the same latencies over the TCP transport on loopback, and the memory node's
//!    engine CPU per operation.
//!
//! The paper's Figure 1 (MR registration vs MW bind, QP flag change and recovery, next to a
//! raw TCP ping-pong and UCX anchors) is the evaluation's: `cargo run --release -p patronus-bench -- fig1` (crates/bench/src/experiments/fig1).
//!
//! Results are printed as tables and written as JSON (default `target/rnic-micro.json`).
//! See `docs/benchmarks.md` for what every number means.

mod endpoints;
mod measure;
mod one_sided;
mod tcp;

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::path::PathBuf;

use measure::{fmt_ns, now, timer_overhead_ns, unix_time, verdict};
use one_sided::{Op, inproc};
use tcp::tcp;

/// Target (`docs/benchmarks.md`): an in-process 64 B READ within this, on one core (the MW
/// bind's share of the target is checked by `patronus-bench fig1`).
const TARGET_INPROC_NS: u64 = 300;

/// How long a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `cargo bench`: full sample counts (< ~1 min).
    Full,
    /// `cargo bench -- --quick`: fewer samples (< ~10 s).
    Quick,
    /// Run without `--bench`, i.e. by `cargo test --benches` / `--all-targets`: a few
    /// operations of every kind to prove the harness works (about a second), no JSON.
    Smoke,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Quick => "quick",
            Mode::Smoke => "smoke (test mode)",
        }
    }
}

#[derive(Debug)]
struct Opts {
    mode: Mode,
    json: PathBuf,
    sections: Vec<String>,
}

const SECTIONS: [&str; 2] = ["inproc", "tcp"];

const USAGE: &str = "\
usage: cargo bench -p rnic --bench rnic_micro -- [--quick] [--json PATH] [SECTION...]

  --quick      short run (< ~10 s): fewer samples
  (without --bench, which cargo bench always passes, the binary runs a ~1 s smoke test
   instead: that is what `cargo test --benches` / `--all-targets` executes)
  --json PATH  where to write the JSON report (default: <target dir>/rnic-micro.json)
  SECTION      any of: inproc tcp (default: all)
Figure 1 (MR registration vs MW bind) is the evaluation's: `cargo run --release -p patronus-bench -- fig1`.";

impl Opts {
    fn parse() -> Result<Opts> {
        let mut opts = Opts {
            mode: Mode::Full,
            json: default_json_path(),
            sections: Vec::new(),
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        // `cargo bench` passes `--bench` to every bench target; without it we are being run as
        // a test (`cargo test --benches`), possibly with libtest's flags, which we ignore.
        if !args.iter().any(|a| a == "--bench") {
            opts.mode = Mode::Smoke;
            opts.sections = SECTIONS.iter().map(|s| (*s).to_owned()).collect();
            return Ok(opts);
        }
        let mut quick = false;
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => quick = true,
                "--json" => {
                    opts.json = args.next().context("--json needs a path")?.into();
                }
                // cargo passes `--bench` to every bench target.
                "--bench" => {}
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                s if SECTIONS.contains(&s) => opts.sections.push(s.to_owned()),
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        if quick {
            opts.mode = Mode::Quick;
        }
        if opts.sections.is_empty() {
            opts.sections = SECTIONS.iter().map(|s| (*s).to_owned()).collect();
        }
        Ok(opts)
    }

    /// A count or size by mode.
    fn pick<T>(&self, full: T, quick: T, smoke: T) -> T {
        match self.mode {
            Mode::Full => full,
            Mode::Quick => quick,
            Mode::Smoke => smoke,
        }
    }

    fn wants(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

/// `$CARGO_TARGET_DIR/rnic-micro.json`, else the workspace's `target/rnic-micro.json`.
fn default_json_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")));
    std::fs::canonicalize(&target)
        .unwrap_or(target)
        .join("rnic-micro.json")
}

/// The 1/5/15-minute load averages: other work on the machine skews every number here.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn main() -> Result<()> {
    let opts = Opts::parse()?;
    let started = now();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "rnic_micro ({} run) on {cpus} CPU(s); JSON -> {}",
        opts.mode.name(),
        opts.json.display()
    );
    println!();
    let mut report = serde_json::Map::new();
    report.insert("bench".into(), json!("rnic_micro"));
    report.insert("mode".into(), json!(opts.mode.name()));
    report.insert("unix_time".into(), json!(unix_time()));
    report.insert("cpus".into(), json!(cpus));
    let load_before = loadavg();
    println!("load average at start: {load_before}");
    report.insert("loadavg_start".into(), json!(load_before));
    let timer = timer_overhead_ns();
    println!("timer overhead (included in every latency sample): {timer} ns");
    report.insert("timer_overhead_ns".into(), json!(timer));

    let mut targets = Vec::new();
    if opts.wants("inproc") {
        let (res, v) = inproc(&opts)?;
        if let Some((_, l)) = res.latency.iter().find(|(op, _)| *op == Op::Read) {
            targets.push(("READ 64B p50 (in-process)", l.p50));
        }
        report.insert("inproc".into(), v);
    }
    if opts.wants("tcp") {
        report.insert("tcp".into(), tcp(&opts)?);
    }

    if !targets.is_empty() {
        println!(
            "== targets (one core, in-process): <= {TARGET_INPROC_NS} ns (verdict on the raw p50; \
             'net' subtracts the {timer} ns timer overhead) =="
        );
        let mut tj = Vec::new();
        for (name, v) in &targets {
            let met = *v <= TARGET_INPROC_NS;
            let net = v.saturating_sub(timer);
            println!(
                "  {name:<34} {:>9} (net {:>7})  target {TARGET_INPROC_NS} ns -> {}",
                fmt_ns(*v),
                fmt_ns(net),
                verdict(met)
            );
            tj.push(json!({
                "name": name, "measured_ns": v, "net_of_timer_ns": net,
                "target_ns": TARGET_INPROC_NS, "met": met,
            }));
        }
        report.insert("targets".into(), Value::Array(tj));
        println!();
    }
    let elapsed = now() - started;
    let load_after = loadavg();
    println!("load average at end: {load_after}");
    report.insert("loadavg_end".into(), json!(load_after));
    report.insert("elapsed_s".into(), json!(elapsed.as_secs_f64()));
    if opts.mode == Mode::Smoke {
        // A test run must not overwrite the report of a real run.
        println!(
            "smoke run done ({:.1} s); run `cargo bench -p rnic --bench rnic_micro` to measure",
            elapsed.as_secs_f64()
        );
        return Ok(());
    }
    if let Some(dir) = opts.json.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&Value::Object(report))?;
    std::fs::write(&opts.json, text + "\n")
        .with_context(|| format!("writing {}", opts.json.display()))?;
    println!(
        "wrote {} ({:.1} s)",
        opts.json.display(),
        elapsed.as_secs_f64()
    );
    Ok(())
}
