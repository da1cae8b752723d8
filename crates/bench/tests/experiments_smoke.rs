//! Structure checks of each experiment's quick run: rows, a figure and checks are present.
//! Performance verdicts are never asserted here (they depend on the machine); the reports
//! show them.

use patronus_bench::experiments::{self, fig1, fig8a, table5};
use patronus_bench::harness::{BenchOpts, Experiment, ProviderChoice};
use patronus_core::cluster::Link;
use std::path::PathBuf;

fn opts(name: &str, transport: Link) -> BenchOpts {
    let out: PathBuf = std::env::temp_dir().join(format!(
        "patronus-bench-smoke-{name}-{}",
        std::process::id()
    ));
    BenchOpts {
        quick: true,
        transport,
        out,
        isolation: patronus_core::manager::Isolation::SharedPd,
        provider: ProviderChoice::Soft,
        max_region: None,
        tls: None,
    }
}

fn assert_structure(exp: &Experiment, name: &str, mechanisms: &[&str]) {
    assert_eq!(exp.experiment, name);
    assert!(exp.quick);
    for m in mechanisms {
        assert!(
            exp.rows.iter().any(|r| r.mechanism == *m),
            "{name}: no row for {m:?}"
        );
    }
    assert!(!exp.figure.panels.is_empty(), "{name}: no figure panels");
    for panel in &exp.figure.panels {
        assert!(
            !panel.series.is_empty(),
            "{name}: empty panel {:?}",
            panel.title
        );
        for s in &panel.series {
            assert!(!s.points.is_empty(), "{name}: empty series {:?}", s.name);
            assert!(
                s.points.iter().all(|p| p.y.is_finite()),
                "{name}: {:?}",
                s.name
            );
        }
    }
    assert!(!exp.checks.is_empty(), "{name}: no checks");
    assert!(!exp.paper.is_empty(), "{name}: no paper references");
    assert!(
        exp.rows
            .iter()
            .all(|r| r.p50_us.is_finite() && r.p99_us.is_finite())
    );
    assert!(exp.wall_s > 0.0);
}

#[test]
fn fig1_structure() {
    let exp = fig1::run(&opts("fig1", Link::InProc)).expect("fig1 runs");
    assert_structure(
        &exp,
        "fig1",
        &[
            "MR reg+dereg",
            "MW bind",
            "QP flag change",
            "QP recovery",
            "TCP ping-pong 64 B",
            "soft READ 64 B (tcp)",
        ],
    );
    let sizes = exp.rows.iter().filter(|r| r.mechanism == "MW bind").count();
    assert!(sizes >= 2, "MW bind measured at {sizes} sizes");
    assert!(
        exp.rows
            .iter()
            .all(|r| r.mechanism != "MW bind" || r.get_f64("size_bytes").is_some())
    );
    assert_eq!(exp.figure.panels.len(), 2);
    assert!(!exp.ratios.is_empty());
    // Either UCX ran or a note says why not.
    assert!(
        exp.rows.iter().any(|r| r.mechanism.starts_with("UCX"))
            || exp.notes.iter().any(|n| n.contains("ucx_perftest"))
    );
}

#[test]
fn table5_structure() {
    let exp = table5::run(&opts("table5", Link::InProc)).expect("table5 runs");
    assert_structure(&exp, "table5", &["w/o spare QPs", "w/ spare QPs"]);
    let (faults, counts): (Vec<_>, Vec<_>) = exp
        .rows
        .iter()
        .partition(|r| r.mechanism.ends_with("spare QPs"));
    assert_eq!(faults.len(), 2);
    for r in faults {
        assert!(r.get_f64("switch_p50_us").is_some());
        assert_eq!(r.get_f64("faults"), Some(20.0));
        assert!(r.get_f64("neighbour_ops").is_some_and(|n| n > 0.0));
    }
    // The QPs a compute node holds at 1, 16 and 64 clients: the same.
    let qps: Vec<_> = counts
        .iter()
        .map(|r| r.get_f64("qps_per_compute_node"))
        .collect();
    assert_eq!(qps.len(), 3);
    assert!(qps.iter().all(|&q| q.is_some() && q == qps[0]), "{qps:?}");
}

#[test]
fn fig8a_structure() {
    let exp = fig8a::run(&opts("fig8a", Link::InProc)).expect("fig8a runs");
    assert_structure(&exp, "fig8a", &["Patronus", "vanilla"]);
    for r in &exp.rows {
        for key in [
            "keys_final",
            "load_factor_final",
            "audit_keys",
            "acknowledged",
        ] {
            assert!(r.get_f64(key).is_some(), "{}: no {key}", r.mechanism);
        }
    }
    // Load factor and keys, each with the crash marked.
    assert_eq!(exp.figure.panels.len(), 2);
    assert_eq!(exp.checks.len(), 3);
}

#[test]
fn isolation_structure() {
    let exp =
        experiments::run("isolation", &opts("isolation", Link::InProc)).expect("isolation runs");
    assert_structure(&exp, "isolation", &["shared-pd", "pd-per-client", "type2"]);
    // Each mode on both workloads, with its spread and its ratios to shared-pd.
    assert_eq!(exp.rows.len(), 6);
    for r in &exp.rows {
        for key in [
            "kops_min",
            "kops_max",
            "mgr_us_per_perm",
            "kops_x_shared_pd",
            "mgr_x_shared_pd",
        ] {
            assert!(r.get_f64(key).is_some(), "{}: no {key}", r.mechanism);
        }
        assert!(r.get_f64("kops_min") <= r.get_f64("kops_max"));
    }
    assert!(exp.isolation.contains("pd-per-client"));
    assert_eq!(exp.ratios.len(), 8);
}

#[test]
fn tls_structure() {
    let exp = experiments::run("tls", &opts("tls", Link::Tcp)).expect("tls runs");
    for m in [
        "READ 64 B, plaintext",
        "READ 64 B, TLS",
        "client session, plaintext",
        "client session, TLS",
    ] {
        let r = exp.rows.iter().find(|r| r.mechanism == m);
        assert!(r.is_some_and(|r| r.p50_us > 0.0), "{m}: {r:?}");
    }
    assert_eq!(exp.checks.len(), 2);
    assert!(
        exp.ratios
            .iter()
            .all(|r| r.value.is_finite() && r.value > 0.0)
    );
}

#[test]
fn isolation_is_refused_where_not_taken() {
    let mut o = opts("refused", Link::InProc);
    o.isolation = patronus_core::manager::Isolation::Type2;
    let e = experiments::run("fig7", &o).expect_err("fig7 runs only shared-pd");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("fig7") && msg.contains("fig5, fig6, fig9, fig11"),
        "{msg}"
    );
}

/// Prints the numbers of full or quick runs on both transports (release builds):
/// `cargo test --release -p patronus-bench --test experiments_smoke -- --ignored --nocapture`.
#[test]
#[ignore = "prints numbers; run by hand in release"]
fn print_numbers() {
    let quick = std::env::var_os("BENCH_FULL").is_none();
    for transport in [Link::InProc, Link::Tcp] {
        for (name, run) in [
            (
                "fig1",
                fig1::run as fn(&BenchOpts) -> anyhow::Result<Experiment>,
            ),
            ("fig8a", fig8a::run),
            ("table5", table5::run),
        ] {
            let mut o = opts(name, transport);
            o.quick = quick;
            let exp = run(&o).expect("runs");
            println!("--- {name} over {transport:?}: {:.1} s", exp.wall_s);
            for r in &exp.ratios {
                println!("ratio  {}: {:.2}", r.name, r.value);
            }
            for p in &exp.paper {
                println!(
                    "paper  {}: ours {:?} vs paper {:?} {}",
                    p.metric, p.ours, p.paper, p.unit
                );
            }
            for c in &exp.checks {
                println!(
                    "check  [{}] {}: {}",
                    if c.holds { "holds" } else { "FAILS" },
                    c.claim,
                    c.detail
                );
            }
            for n in &exp.notes {
                println!("note   {n}");
            }
        }
    }
}
