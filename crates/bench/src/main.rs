//! `patronus-bench`: the evaluation suite as its own binary (the README's main job:
//! `patronus-bench all --quick`). It is kept apart from the shipped `patronus` binary because
//! the suite links the core library's `testing` tamper helpers (the denial-of-service
//! experiment's flooder forges control traffic); `patronus` never compiles them.

use clap::{Parser, ValueEnum};
use patronus_bench::harness::{BenchOpts, ProviderChoice};
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;

#[derive(Parser, Debug)]
#[command(
    name = "patronus-bench",
    version,
    about = "Run experiments of the paper's §7 on the software RNIC: every mechanism side by \
             side, JSON + SVG per experiment and a report.md with the paper's numbers beside ours"
)]
struct Cli {
    /// fig1, fig5, fig6 (with Table 4), fig7, fig8a (RACE hashing under a resizer crash),
    /// fig8b, fig9 (RACE hashing), fig10 (the lock-free queue's producers), fig11 (FaaS
    /// chains), redis (RACE on Patronus against redis-server, over TCP), table5, alloc
    /// (scrubbing cost and memory per live permission), dos (an honest client's throughput
    /// around each denial-of-service abuse), isolation (permission throughput and manager CPU
    /// in each isolation mode), splits (how long a RACE split stalls inserts), tls (what TLS costs
    /// a READ and a client session over TCP), qos (LITE's Figure 16 recipe: a high- and a
    /// low-priority tenant's one-sided throughput over time without QoS, with the node's
    /// software priority policy and with a static split; over TCP), or all.
    #[arg(required = true, value_parser = ["fig1", "fig5", "fig6", "fig7", "fig8a", "fig8b", "fig9", "fig10", "fig11", "redis", "table5", "alloc", "dos", "isolation", "splits", "tls", "qos", "onesided", "all"])]
    experiments: Vec<String>,
    /// Seconds per experiment instead of minutes (smoke-level sample counts).
    #[arg(long)]
    quick: bool,
    /// Link between clients and the memory node.
    #[arg(long, value_enum, default_value = "inproc")]
    transport: TransportArg,
    /// Output folder for the JSON, SVG figures and report.md.
    #[arg(long, default_value = "target/patronus-eval")]
    out: std::path::PathBuf,
    /// How the memory node isolates clients in fig5, fig6, fig9 and fig11 (the others refuse
    /// anything but the paper's shared-pd): one PD for all with type-1 windows (the paper's),
    /// a PD per client (what a served node defaults to), or type-2 windows bound to the
    /// client's QP.
    #[arg(long, value_enum, default_value = "shared-pd")]
    isolation: IsolationArg,
    /// The RNIC under Figure 1's protection operations (fig1 only): the software one, or an
    /// rdma-core device (ConnectX, Soft-RoCE, ...), next to the software one's ratios.
    #[arg(long, value_enum, default_value = "soft")]
    provider: ProviderArg,
    /// The device with `--provider rdma` (default: $PATRONUS_RDMA_DEVICE, else the first
    /// device); its GID index comes from $PATRONUS_RDMA_GID when set.
    #[arg(long)]
    device: Option<String>,
    /// Figure 1's largest region, MiB (default: 16 with --quick, else 256; 256 with
    /// --provider rdma). Sizes run 4 KiB, 64 KiB, 1, 16, 64, 256 MiB up to it.
    #[arg(long, value_name = "MIB")]
    max_region_mib: Option<usize>,
    /// Mutual TLS 1.3 on every TCP connection of the run (a CA and a certificate made for
    /// the run); with `--transport tcp`.
    #[arg(long)]
    tls: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderArg {
    Soft,
    Rdma,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum IsolationArg {
    SharedPd,
    PdPerClient,
    Type2,
}

impl From<IsolationArg> for Isolation {
    fn from(i: IsolationArg) -> Self {
        match i {
            IsolationArg::SharedPd => Isolation::SharedPd,
            IsolationArg::PdPerClient => Isolation::PdPerClient,
            IsolationArg::Type2 => Isolation::Type2,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Inproc,
    Tcp,
}

impl From<TransportArg> for Link {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Inproc => Link::InProc,
            TransportArg::Tcp => Link::Tcp,
        }
    }
}

/// Runs the suite; an error is one line on stderr (its causes joined by ": ") and exit code 1.
fn main() {
    // The far end of the floor measurements: this binary again, in a process of its own.
    if std::env::var_os(patronus_bench::experiments::floor::peer::PEER_ENV).is_some() {
        if let Err(e) = patronus_bench::experiments::floor::peer::Peer::serve_until_stdin_closes() {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let cli = Cli::parse();
    let provider = match cli.provider {
        ProviderArg::Soft if cli.device.is_some() => {
            eprintln!("error: --device names an RDMA device: it needs --provider rdma");
            std::process::exit(2);
        }
        ProviderArg::Soft => ProviderChoice::Soft,
        ProviderArg::Rdma => ProviderChoice::Rdma { device: cli.device },
    };
    let opts = BenchOpts {
        quick: cli.quick,
        transport: cli.transport.into(),
        out: cli.out,
        isolation: cli.isolation.into(),
        provider,
        max_region: cli.max_region_mib.map(|m| m.saturating_mul(1 << 20)),
        tls: None,
    };
    let mut opts = opts;
    if cli.tls {
        if matches!(opts.transport, Link::InProc) {
            eprintln!("error: --tls protects TCP connections: it needs --transport tcp");
            std::process::exit(2);
        }
        match patronus_bench::harness::tls::ephemeral() {
            Ok(t) => opts.tls = Some(t),
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        }
    }
    if let Err(e) = patronus_bench::suite::run(&cli.experiments, &opts) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
