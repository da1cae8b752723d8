//! The one harness every experiment uses: latencies in HDR histograms, results as
//! [`Experiment`] values, written as `<name>.json`, drawn as `<name>.svg` and appended to
//! `report.md`; progress bars for long runs; per-thread CPU clocks.

mod compare;
mod cpu;
mod font;
mod latency;
mod plot;
pub mod process;
mod progress;
mod report;
mod result;
mod spin_io;
pub mod tls;

pub use compare::{Change, NOISE, Spread, change, trend};
pub use cpu::{process_cpu, thread_cpu};
pub use latency::Latency;
pub use plot::render_svg;
pub use progress::bar;
pub use report::{
    Written, append_report, markdown_table, start_report, write_all, write_json, wrote_line,
};
pub use result::{
    Check, Experiment, Figure, Panel, PanelKind, PaperRef, Point, Ratio, Row, Series,
};
pub use spin_io::{spin_read, spin_write};

use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use std::path::PathBuf;

/// Options every experiment takes.
#[derive(Clone, Debug)]
pub struct BenchOpts {
    /// Seconds, not minutes: CI smoke runs and the README's main job.
    pub quick: bool,
    /// Link between clients and the memory node.
    pub transport: Link,
    /// Output folder for JSON, SVG and `report.md`.
    pub out: PathBuf,
    /// How the memory node isolates clients in the experiments that take it
    /// ([`crate::experiments::TAKE_ISOLATION`]); the paper's figures use
    /// [`Isolation::SharedPd`], the others refuse anything else.
    pub isolation: Isolation,
    /// The RNIC under the experiments' operations: the software one, or an rdma-core device
    /// for Figure 1's protection operations (the only experiment that takes one).
    pub provider: ProviderChoice,
    /// Figure 1's largest region size in bytes; `None`: 16 MiB with `quick`, else 256 MiB, on
    /// the software RNIC, and 256 MiB on an rdma-core device.
    pub max_region: Option<usize>,
    /// TLS on every TCP device of the run (`--tls`; [`tls::ephemeral`]).
    pub tls: Option<rnic::soft::TlsOptions>,
}

/// Which RNIC provider an experiment runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ProviderChoice {
    /// The software RNIC (`rnic::soft`), in-process or over TCP.
    #[default]
    Soft,
    /// An rdma-core device (`rnic-rdma`).
    Rdma {
        /// Its name (`ibv_devices`); `None`: `PATRONUS_RDMA_DEVICE`, else the first device.
        device: Option<String>,
    },
}

impl ProviderChoice {
    /// "soft" or "rdma", as the command line spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ProviderChoice::Soft => "soft",
            ProviderChoice::Rdma { .. } => "rdma",
        }
    }
}

impl BenchOpts {
    /// "inproc" or "tcp".
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            Link::InProc => "inproc",
            Link::Tcp => "tcp",
        }
    }

    /// The isolation mode as the command line spells it ("shared-pd", ...).
    pub fn isolation_name(&self) -> &'static str {
        isolation_name(self.isolation)
    }
}

/// `mode` as the command line and the reports spell it: "shared-pd", "pd-per-client" or
/// "type2".
pub fn isolation_name(mode: Isolation) -> &'static str {
    match mode {
        Isolation::SharedPd => "shared-pd",
        Isolation::PdPerClient => "pd-per-client",
        Isolation::Type2 => "type2",
    }
}
