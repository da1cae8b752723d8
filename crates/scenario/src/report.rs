//! The run's report: what ran, what the faults reached, how invocations ended, latency, and
//! the checker's verdict. Printed, and written to `report.txt` beside the history.

use crate::classify::{Classified, error_line, is_failure};
use crate::clock::secs;
use crate::config::{Config, Mode};
use crate::faults::Planned;
use crate::history::{Built, FinalScan};
use crate::invoke::{Ended, Invocation};
use crate::record::{Epoch, FaultEvent, Files};
use anyhow::Result;
use hdrhistogram::Histogram;
use lincheck::{Status, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// What makes a run fail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Violations: the checker's (0 or 1: it reports the first witness), operations that
    /// succeeded with no node up, tables gone while their node was up, `kv` doing what it
    /// never does (anomalies), a failed final scan.
    pub violations: usize,
    /// Whether the checker ran out of budget.
    pub undecided: bool,
    /// Busy mode: invocations that failed (any end but exit 0, or 3 for get/del).
    pub failures: usize,
    /// Busy mode: invocations longer than the limit.
    pub slow: usize,
    /// Invocations the watchdog killed.
    pub hung: usize,
    /// Why the run stopped early, if it did.
    pub aborted: Vec<String>,
}

impl Findings {
    /// Whether the run passed.
    pub fn passed(&self, mode: Mode) -> bool {
        let busy_ok = mode == Mode::Faults || (self.failures == 0 && self.slow == 0);
        self.violations == 0
            && !self.undecided
            && self.hung == 0
            && self.aborted.is_empty()
            && busy_ok
    }
}

/// The 1-minute load average.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Prints what is about to run.
pub fn print_header(config: &Config, addr: SocketAddr, planned: &[Planned]) {
    let mode = match config.mode {
        Mode::Faults => "faults",
        Mode::Busy => "busy",
    };
    println!(
        "patronus-scenario {mode}: seed {}, {} s, {} kv loops ({} on {} hot keys, {} inserting \
         fresh keys){}, node on {addr}, files in {}",
        config.seed,
        config.duration.as_secs_f64(),
        config.loops,
        config.loops - config.inserters,
        config.keys,
        config.inserters,
        if config.burners > 0 {
            format!(", {} CPU burners", config.burners)
        } else {
            String::new()
        },
        config.out.display()
    );
    println!("table: kv create {}", config.shape.join(" "));
    if !planned.is_empty() {
        println!("fault schedule (seed {}):", config.seed);
        for p in planned {
            println!("  {:>8.3} s  {}", p.at_ms as f64 / 1e3, p.fault);
        }
        println!("faults as they happen (times since the run started):");
    }
}

/// What the report is made of.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The settings.
    pub config: &'a Config,
    /// How long the loops ran, ns.
    pub ran_for: u64,
    /// Every loop invocation, in invoke order.
    pub invocations: &'a [Invocation],
    /// How each was classified.
    pub classes: &'a [Classified],
    /// The node's lives.
    pub epochs: &'a [Epoch],
    /// The faults as they happened.
    pub faults: &'a [FaultEvent],
    /// The history built from them.
    pub built: Built,
    /// The final scan, if it worked.
    pub scan: Option<&'a FinalScan>,
    /// Why it did not.
    pub scan_problem: Option<String>,
    /// Invocations the watchdog killed.
    pub hung: Vec<String>,
    /// Why the run stopped early.
    pub aborted: Vec<String>,
    /// The load average before the loops started.
    pub load_before: Option<f64>,
    /// Its samples during the run.
    pub load: Vec<f64>,
    /// The files written.
    pub files: Files,
}

/// Checks the history, prints the report and writes it to `report.txt`; the findings.
pub fn report(inputs: Inputs<'_>) -> Result<Findings> {
    let Inputs {
        config,
        ran_for,
        invocations,
        classes,
        epochs,
        faults,
        built,
        scan,
        scan_problem,
        hung,
        aborted,
        load_before,
        load,
        files,
    } = inputs;
    let mut r = String::new();
    let mut findings = Findings {
        hung: hung.len(),
        aborted,
        ..Findings::default()
    };
    let _ = writeln!(r, "\n== report");
    let _ = writeln!(
        r,
        "ran {} with {} kv loops: {} invocations",
        secs(ran_for),
        config.loops,
        invocations.len()
    );
    for (i, e) in epochs.iter().enumerate() {
        let _ = writeln!(
            r,
            "node {i} (pid {}): up {} .. {}, table created at {}{}",
            e.pid,
            secs(e.ready),
            e.reaped.map_or("the end".into(), secs),
            e.table.map_or("never".into(), secs),
            e.how
                .as_ref()
                .map(|h| format!(", ended by {h}"))
                .unwrap_or_default()
        );
    }
    if !faults.is_empty() {
        let hit = faults.iter().filter(|f| f.hit).count();
        let _ = writeln!(
            r,
            "faults: {} injected, {hit} reached a process:",
            faults.len()
        );
        for f in faults {
            let _ = writeln!(r, "  {:>10}  {}: {}", secs(f.at), f.fault, f.what);
        }
    }

    // How invocations ended.
    let mut by_end: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    for inv in invocations {
        let key = format!("{} {}", inv.op.name(), inv.ran.ended);
        let entry = by_end.entry(key).or_default();
        entry.0 += 1;
        if let Some(line) = error_line(&inv.ran.stderr) {
            let line: String = line.chars().take(200).collect();
            if entry.1.len() < 3 && !entry.1.contains(&line) {
                entry.1.push(line);
            }
        }
    }
    let _ = writeln!(r, "how they ended:");
    for (end, (n, samples)) in &by_end {
        let _ = writeln!(r, "  {end}: {n}");
        for s in samples {
            let _ = writeln!(r, "      {s}");
        }
    }
    let count = |f: &dyn Fn(&Status<lincheck::kv::Outcome>) -> bool| {
        classes.iter().filter(|c| f(&c.status)).count()
    };
    let known = count(&|s| matches!(s, Status::Done(_)));
    let unknown = count(&|s| matches!(s, Status::Unknown));
    let failed = count(&|s| matches!(s, Status::Failed));
    let killed = invocations
        .iter()
        .filter(|i| matches!(i.ran.ended, Ended::Signal(_)))
        .count();
    let _ = writeln!(
        r,
        "classified: {known} known results, {unknown} unknown outcomes ({killed} killed, {} \
         other errors), {failed} definite failures (no table yet, or never connected)",
        unknown - killed.min(unknown)
    );
    if epochs.len() > 1 || built.while_down > 0 {
        let _ = writeln!(
            r,
            "restarts: {} invocations spanned one (unknown in each epoch they touch); {} ran \
             wholly while no node was up, all of which must fail",
            built.spanning, built.while_down
        );
    }

    // Latency.
    let mut hist = Histogram::<u64>::new(3)?;
    for inv in invocations {
        hist.record(inv.ran.latency() / 1_000)?;
    }
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1e3);
    if !hist.is_empty() {
        let _ = writeln!(
            r,
            "latency per invocation (spawn to exit): p50 {}, p90 {}, p99 {}, max {}",
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.9)),
            ms(hist.value_at_quantile(0.99)),
            ms(hist.max())
        );
    }
    if !load.is_empty() || load_before.is_some() {
        let mean = load.iter().sum::<f64>() / load.len().max(1) as f64;
        let max = load.iter().cloned().fold(0.0, f64::max);
        let min = load.iter().cloned().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            r,
            "load average (1 min): {} before; during the run min {:.2}, mean {:.2}, max {:.2} \
             ({} samples, one per 5 s)",
            load_before.map_or("?".into(), |l| format!("{l:.2}")),
            if load.is_empty() { 0.0 } else { min },
            mean,
            max,
            load.len()
        );
    }

    // Busy mode's failures.
    if config.mode == Mode::Busy {
        let limit = config.max_latency.as_nanos() as u64;
        findings.failures = invocations
            .iter()
            .filter(|i| is_failure(&i.op, i.ran.ended))
            .count();
        findings.slow = invocations
            .iter()
            .filter(|i| i.ran.latency() > limit)
            .count();
        let _ = writeln!(
            r,
            "failures: {} (any end but exit 0, or exit 3 of get/del); longer than {}: {}",
            findings.failures,
            secs(limit),
            findings.slow
        );
        for inv in invocations
            .iter()
            .filter(|i| is_failure(&i.op, i.ran.ended) || i.ran.latency() > limit)
            .take(10)
        {
            let _ = writeln!(
                r,
                "  loop {} #{} {} {} at {}: {} after {}: {}",
                inv.client,
                inv.seq,
                inv.op.name(),
                inv.op.key(),
                secs(inv.ran.invoke),
                inv.ran.ended,
                secs(inv.ran.latency()),
                error_line(&inv.ran.stderr).unwrap_or("")
            );
        }
    }

    // Violations found without the checker.
    let mut violations: Vec<String> = built.violations.clone();
    for (inv, c) in invocations.iter().zip(classes) {
        if let Some(a) = &c.anomaly {
            violations.push(format!(
                "loop {} invocation {} at {}: {a}",
                inv.client,
                inv.seq,
                secs(inv.ran.invoke)
            ));
        }
    }
    violations.extend(scan_problem);
    for h in &hung {
        let _ = writeln!(r, "hung: {h}");
    }

    // The checker.
    let history = &built.history;
    let _ = writeln!(
        r,
        "history: {} ({} records{})",
        files.history.display(),
        history.len(),
        scan.map(|s| format!(", with the final scan's {} keys", s.pairs.len()))
            .unwrap_or_default()
    );
    let verdict = lincheck::check_kv(history, config.budget);
    match &verdict {
        Verdict::Linearizable(stats) => {
            let _ = writeln!(
                r,
                "lincheck: linearizable: {} operations checked, {} keys, {} states, {:.2?}",
                stats.operations, stats.partitions, stats.states, stats.elapsed
            );
        }
        Verdict::Violation(w) => {
            let witness = files.dir.join("witness.jsonl");
            w.history.write_jsonl(&witness)?;
            let _ = writeln!(
                r,
                "lincheck: NOT LINEARIZABLE (witness in {}):\n{w}",
                witness.display()
            );
            violations.push(format!("lincheck: {}", w.explanation));
        }
        Verdict::Undecided(_) => {
            findings.undecided = true;
            let why = verdict.clone().into_result().err().map(|e| e.to_string());
            let _ = writeln!(r, "lincheck: UNDECIDED: {}", why.unwrap_or_default());
        }
    }
    findings.violations = violations.len();
    let _ = writeln!(r, "violations: {}", violations.len());
    for v in violations.iter().take(20) {
        let _ = writeln!(r, "  {v}");
    }
    for a in &findings.aborted {
        let _ = writeln!(r, "aborted: {a}");
    }
    let _ = writeln!(
        r,
        "files: {} (invocations.jsonl, events.json, serve-N.log, report.txt)\nre-check: cargo \
         run --release -p patronus-lincheck -- check {}",
        files.dir.display(),
        files.history.display()
    );
    let _ = writeln!(
        r,
        "{}",
        if findings.passed(config.mode) {
            "PASSED"
        } else {
            "FAILED"
        }
    );
    print!("{r}");
    std::fs::write(files.dir.join("report.txt"), &r)?;
    Ok(findings)
}
