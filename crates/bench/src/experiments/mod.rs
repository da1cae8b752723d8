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
pub mod ods_rig;
pub mod patronus_rig;
pub mod race_costs;
pub mod redis;
pub mod table5;

use crate::harness::{BenchOpts, Experiment};
use anyhow::{Result, bail};

/// Every experiment, in the order `all` runs them.
pub const ALL: [&str; 13] = [
    "fig1", "fig5", "fig6", "fig7", "fig8a", "fig8b", "fig9", "fig10", "fig11", "redis", "table5",
    "alloc", "dos",
];

/// Runs the experiment called `name`.
pub fn run(name: &str, opts: &BenchOpts) -> Result<Experiment> {
    match name {
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
        other => bail!("no experiment called {other:?} (have: {})", ALL.join(", ")),
    }
}
