//! A short `patronus-scenario faults` run against the `patronus` binary cargo built for these
//! tests: 4 `kv` loops for 30 s on a table that splits continuously, while the seeded schedule
//! kills and stops `kv` processes, stops `serve` and restarts it (a run of 30 s always gets one
//! of each serve fault). The whole history must be linearizable, no invocation may succeed
//! while no node is up, and none may hang. The README's rows run the long forms.

use scenario::run::{self, Config, Mode};
use std::path::PathBuf;
use std::time::Duration;

#[test]
fn a_short_faults_scenario_loses_no_acknowledged_write() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scenario-smoke-{}", std::process::id()));
    let config = Config {
        mode: Mode::Faults,
        patronus: PathBuf::from(env!("CARGO_BIN_EXE_patronus")),
        out: out.clone(),
        duration: Duration::from_secs(30),
        seed: 1,
        loops: 4,
        inserters: 1,
        keys: 4,
        shape: run::shape_args(true),
        pool_mib: 64,
        admin: None,
        burners: 0,
        max_latency: Duration::from_secs(10),
        // Safety is what this test checks; a stall is reported by the long runs.
        hang: Duration::from_secs(300),
        budget: lincheck::Budget::default().with_time(Duration::from_secs(120)),
    };
    let findings = run::run(&config).expect("the scenario runs");
    assert!(
        findings.passed(Mode::Faults),
        "{findings:?}: the report, history and witness are in {}",
        out.display()
    );
    let _ = std::fs::remove_dir_all(&out);
}
