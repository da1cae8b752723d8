//! One runner per experiment of the paper's §7. Each returns an [`crate::harness::Experiment`]
//! and prints a short table as it goes; the caller writes the JSON, SVG and report.

pub mod alloc;
pub mod dos;
pub mod driver;
pub mod evidence;
pub mod fig1;
pub mod fig10;
pub mod fig11;
pub mod fig5;
pub mod fig6;
pub mod fig7;
pub mod fig8a;
pub mod fig8b;
pub mod fig9;
pub mod floor;
pub mod isolation;
pub mod ods_rig;
pub mod onesided;
pub mod patronus_rig;
pub mod qos;
pub mod race_costs;
pub mod redis;
pub mod splits;
pub mod table5;
mod tickets;
pub mod tls;

use crate::harness::{BenchOpts, Experiment, ProviderChoice};
use anyhow::{Result, bail};
use patronus_core::manager::Isolation;

/// Every experiment, in the order `all` runs them.
pub const ALL: [&str; 18] = [
    "fig1",
    "fig5",
    "fig6",
    "fig7",
    "fig8a",
    "fig8b",
    "fig9",
    "fig10",
    "fig11",
    "redis",
    "table5",
    "alloc",
    "dos",
    "isolation",
    "splits",
    "tls",
    "qos",
    "onesided",
];

/// The experiments that run their Patronus node in [`BenchOpts::isolation`]; every other one
/// runs the paper's shared PD and refuses another mode (`isolation` measures all three).
pub const TAKE_ISOLATION: [&str; 4] = ["fig5", "fig6", "fig9", "fig11"];

/// Fails, before anything runs, if `opts` asks for a non-default isolation mode and one of
/// `names` cannot run in it; the error names the experiments that can.
pub fn check_isolation(names: &[String], opts: &BenchOpts) -> Result<()> {
    if opts.isolation == Isolation::SharedPd {
        return Ok(());
    }
    let refused: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != "isolation" && !TAKE_ISOLATION.contains(n))
        .collect();
    if !refused.is_empty() {
        bail!(
            "--isolation {}: {} run only the paper's shared-pd (run them without --isolation); the experiments that take it are {} (and `isolation` measures every mode)",
            opts.isolation_name(),
            refused.join(", "),
            TAKE_ISOLATION.join(", "),
        );
    }
    Ok(())
}

/// The experiments that run on an rdma-core device with `--provider rdma` (Figure 1's
/// protection operations); every other one runs on the software RNIC only.
pub const TAKE_PROVIDER: [&str; 1] = ["fig1"];

/// Fails, before anything runs, if `opts` asks for an rdma-core device and one of `names`
/// cannot run on it.
pub fn check_provider(names: &[String], opts: &BenchOpts) -> Result<()> {
    if opts.provider == ProviderChoice::Soft {
        return Ok(());
    }
    let refused: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !TAKE_PROVIDER.contains(n))
        .collect();
    if !refused.is_empty() {
        bail!(
            "--provider {}: {} run only on the software RNIC (run them without --provider); the experiments that take it are {}",
            opts.provider.name(),
            refused.join(", "),
            TAKE_PROVIDER.join(", "),
        );
    }
    Ok(())
}

/// What the report says about an experiment's isolation mode.
fn isolation_of(name: &str, opts: &BenchOpts) -> String {
    match name {
        _ if TAKE_ISOLATION.contains(&name) => opts.isolation_name().to_string(),
        "fig1" => "none (raw verbs, no Patronus memory node)".to_string(),
        "dos" => "shared-pd, except the type-2 reconnect storm (type2)".to_string(),
        "isolation" => "each of shared-pd, pd-per-client and type2, in turn".to_string(),
        "splits" | "tls" => "pd-per-client (a served node's default)".to_string(),
        "onesided" => "type2 (one-sided allocation needs it)".to_string(),
        _ => "shared-pd (the paper's)".to_string(),
    }
}

/// Runs the experiment called `name` (refusing an isolation mode or provider it cannot run in) and
/// records its isolation mode in the result.
pub fn run(name: &str, opts: &BenchOpts) -> Result<Experiment> {
    check_isolation(&[name.to_string()], opts)?;
    check_provider(&[name.to_string()], opts)?;
    let mut exp = match name {
        "fig1" => fig1::run(opts),
        "fig5" => fig5::run(opts),
        "fig6" => fig6::run(opts),
        "fig7" => fig7::run(opts),
        "fig8a" => fig8a::run(opts),
        "fig8b" => fig8b::run(opts),
        "fig9" => fig9::run(opts),
        "fig10" => fig10::run(opts),
        "fig11" => fig11::run(opts),
        "redis" => redis::run(opts),
        "table5" => table5::run(opts),
        "alloc" => alloc::run(opts),
        "dos" => dos::run(opts),
        "isolation" => isolation::run(opts),
        "splits" => splits::run(opts),
        "tls" => tls::run(opts),
        "qos" => qos::run(opts),
        "onesided" => onesided::run(opts),
        other => bail!("no experiment called {other:?} (have: {})", ALL.join(", ")),
    }?;
    exp.isolation = isolation_of(name, opts);
    Ok(exp)
}
