//! Running experiments as a suite: each writes its JSON and SVG and appends its section to
//! `report.md`; at the end a compact comparison table is printed and added to the report.

use crate::experiments;
use crate::harness::{
    BenchOpts, Experiment, ProviderChoice, markdown_table, start_report, write_all, wrote_line,
};
use anyhow::{Context as _, Result};
use std::fs::OpenOptions;
use std::io::Write as _;

/// Runs `names` (or every experiment for `["all"]`) with `opts`, writing everything into
/// `opts.out`. Returns the experiments in order.
#[allow(clippy::disallowed_methods)] // the suite's wall time
pub fn run(names: &[String], opts: &BenchOpts) -> Result<Vec<Experiment>> {
    let names: Vec<String> = if names.iter().any(|n| n == "all") {
        experiments::ALL.iter().map(|s| s.to_string()).collect()
    } else {
        names.to_vec()
    };
    experiments::check_isolation(&names, opts)?;
    experiments::check_provider(&names, opts)?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    start_report(
        &opts.out,
        "Patronus evaluation on the software RNIC",
        &preamble(opts, &names),
    )?;
    let started = std::time::Instant::now();
    let mut done = Vec::new();
    let mut written = Vec::new();
    for name in &names {
        println!();
        let t0 = std::time::Instant::now();
        let mut exp = experiments::run(name, opts).with_context(|| format!("experiment {name}"))?;
        exp.wall_s = t0.elapsed().as_secs_f64();
        written.push(write_all(&opts.out, &exp)?);
        done.push(exp);
    }
    let summary = summary(&done);
    println!(
        "\n== Summary ({}, {:.0} s) ==\n{}",
        match opts.provider {
            ProviderChoice::Soft => opts.transport_name(),
            ProviderChoice::Rdma { .. } => "rdma",
        },
        started.elapsed().as_secs_f64(),
        console_summary(&done)
    );
    let report = opts.out.join("report.md");
    let mut f = OpenOptions::new().append(true).open(&report)?;
    writeln!(f, "\n## Summary\n\n{summary}")?;
    println!("{}", wrote_line(&written, &report));
    Ok(done)
}

fn preamble(opts: &BenchOpts, names: &[String]) -> Vec<String> {
    let mut out = vec![
        format!(
            "Experiments: {}. Link: {}. Mode: {}. Machine: {} logical CPUs.",
            names.join(", "),
            opts.transport_name(),
            if opts.quick { "quick (seconds per experiment; smoke-level sample counts)" } else { "full" },
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        ),
        "Every mechanism runs on the same software RNIC with the same workload code. Latencies come from HDR histograms; throughput is a fixed operation count over wall time; every ratio compares numbers taken in this run. Paper numbers are quoted only where the paper's text or tables state them (section cited); where the paper has only a figure, the paper column says n/a.".into(),
        if opts.isolation == patronus_core::manager::Isolation::SharedPd {
            "Patronus runs in the paper's isolation mode in every experiment but `isolation`: one protection domain for every client and type-1 windows (`Isolation::SharedPd`), with the manager drawing each bind's key byte at random. A served or embedded node defaults to a PD per client instead (docs/threat-model.md); the `isolation` experiment measures what each mode costs.".to_string()
        } else {
            format!("Patronus runs with `--isolation {}` in {} (each section says its mode); the paper's figures use one protection domain for every client with type-1 windows (`shared-pd`).", opts.isolation_name(), experiments::TAKE_ISOLATION.join(", "))
        },
        "Where our numbers disagree with the paper, the section's checks and notes say why: the soft NIC's cost structure differs from a ConnectX-5 (no RNIC firmware, MR registration is page faulting and pinning in software, in-process one-sided operations run on the requester's thread, and the memory node shares 2 cores with the clients).".into(),
    ];
    if let ProviderChoice::Rdma { .. } = opts.provider {
        out.push("With `--provider rdma`, Figure 1's protection operations (MR registration, window binds, the QP access-flag change and recovery) run on an rdma-core device, and the software RNIC's beside them in the same run; compare ratios, not absolute times, on an emulated machine (docs/rdma.md, \"Figure 1 on rxe0\").".into());
    }
    if opts.transport == patronus_core::cluster::Link::Tcp {
        out.push("Over TCP every device has a NIC engine thread; with several devices, the client thread and the manager on a small machine, busy threads can hold cores for whole scheduler time slices, which shows as millisecond-scale control RPCs when it happens (see the latencies). Read this report as a check that everything runs over the TCP transport; compare mechanisms with the in-process report, or with the memory node in its own process on a larger machine (docs/evaluation.md).".into());
    }
    out
}

/// One line per experiment: its verdicts and headline ratios.
pub fn summary(exps: &[Experiment]) -> String {
    let rows: Vec<Vec<String>> = exps
        .iter()
        .map(|e| {
            let checks = e
                .checks
                .iter()
                .map(|c| format!("{} {}", if c.holds { "✅" } else { "❌" }, c.claim))
                .collect::<Vec<_>>()
                .join("<br>");
            let ratios = e
                .ratios
                .iter()
                .take(3)
                .map(|r| format!("{}: {:.2}", r.name, r.value))
                .collect::<Vec<_>>()
                .join("<br>");
            vec![e.experiment.clone(), e.transport.clone(), ratios, checks]
        })
        .collect();
    markdown_table(&["experiment", "transport", "ratios", "checks"], &rows)
}

/// The summary for a terminal: per experiment, its ratios and its checks with their numbers.
pub fn console_summary(exps: &[Experiment]) -> String {
    let mut out = String::new();
    for e in exps {
        out.push_str(&format!("{} ({}):\n", e.experiment, e.transport));
        for r in &e.ratios {
            out.push_str(&format!("    {:<58} {:>8.2}\n", r.name, r.value));
        }
        for c in &e.checks {
            let verdict = if c.holds { "holds" } else { "DOES NOT HOLD" };
            out.push_str(&format!(
                "  [{verdict}] {}\n        {}\n",
                c.claim, c.detail
            ));
        }
    }
    out
}
