//! `patronus`: the evaluation suite (the README's main job: `bench all --quick`), the
//! lifecycle demo, a memory-node server with a probe client for multi-process set-ups, and a
//! key-value tool on a named RACE table of such a server.

mod daemon;
mod demo;
mod devices;
mod faas;
mod kv;
mod rdma;
mod serve;
mod status;

use clap::{Parser, Subcommand, ValueEnum};
use patronus_core::cluster::Transport;

#[derive(Parser, Debug)]
#[command(
    name = "patronus",
    version,
    about = "Protective remote memory on a software RNIC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Inproc,
    Tcp,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Inproc => Transport::InProc,
            TransportArg::Tcp => Transport::Tcp,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum ProviderArg {
    /// The software RNIC over TCP.
    #[default]
    Soft,
    /// An rdma-core device (ConnectX, Soft-RoCE, ...): see `patronus devices`.
    Rdma,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start an embedded memory node and clients, walk through a permission's lifecycle
    /// (allocate, acquire, extend, revoke, expiry, a QP fault) and print what happened.
    Demo {
        /// Transport between clients and the memory node.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
    },
    /// Run experiments of the paper's §7 on the software RNIC: every mechanism side by side,
    /// JSON + SVG per experiment and a report.md with the paper's numbers beside ours.
    Bench {
        /// fig1, fig5, fig6 (with Table 4), fig7, fig8a (RACE hashing under a resizer
        /// crash), fig8b, fig9 (RACE hashing), fig10 (the lock-free queue's producers), fig11 (FaaS chains), redis
        /// (RACE on Patronus against redis-server, over TCP), table5, alloc (scrubbing cost and
        /// memory per live permission), dos (an honest client's throughput around each
        /// denial-of-service abuse), or all.
        #[arg(required = true, value_parser = ["fig1", "fig5", "fig6", "fig7", "fig8a", "fig8b", "fig9", "fig10", "fig11", "redis", "table5", "alloc", "dos", "all"])]
        experiments: Vec<String>,
        /// Seconds per experiment instead of minutes (smoke-level sample counts).
        #[arg(long)]
        quick: bool,
        /// Transport between clients and the memory node.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
        /// Output folder for the JSON, SVG figures and report.md.
        #[arg(long, default_value = "target/patronus-eval")]
        out: std::path::PathBuf,
    },
    /// Run a memory node as a daemon until SIGINT or SIGTERM (then drain gracefully):
    /// configured by `--config FILE` (TOML; `--print-default-config`), each setting also a
    /// flag or an environment variable; Prometheus metrics and status on `--admin ADDR`.
    Serve(Box<daemon::flags::ServeFlags>),
    /// Print a running node's status (from its admin address): live permissions, leases
    /// about to expire, sessions and their QPs, pools, manager CPU.
    Status {
        /// The node's admin address (its `admin` setting), IP:PORT.
        admin: std::net::SocketAddr,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Connect to a memory node over TCP, run a short lifecycle, print the result.
    Probe {
        /// The memory node's address.
        #[arg(long)]
        connect: std::net::SocketAddr,
        /// Authenticate as this tenant, ID:SECRET (default: tenant 0).
        #[arg(long, value_parser = serve::parse_tenant)]
        tenant: Option<serve::TenantArg>,
        /// The RNIC: the software one over TCP, or an rdma-core device.
        #[arg(long, value_enum, default_value = "soft")]
        provider: ProviderArg,
        /// RDMA device name with `--provider rdma` (default: the first device).
        #[arg(long)]
        device: Option<String>,
    },
    /// Use a named RACE hash table of a running `patronus serve`: create, put, get, del,
    /// scan, info, drop (each command one short-lived client; exit codes in `kv --help`).
    #[command(after_help = kv::EXIT_CODES_HELP)]
    Kv(kv::KvArgs),
    /// Run one chain of ServerlessBench TC4 on the FaaS runtime: `image` (a thumbnail of a
    /// photograph) or `analyse` (a salary analysis), against an embedded memory node or a
    /// running `patronus serve` (--connect).
    Faas(faas::FaasArgs),
    /// List RDMA devices with ports, GIDs and memory-window capabilities. Exit code 0: devices
    /// listed; 2: no RDMA device; 3: libibverbs not installed; 1: a device could not be queried.
    Devices,
}

/// Runs the command; an error is one line on stderr (its causes joined by ": ") and exit
/// code 1.
fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { transport } => demo::run(transport.into()),
        Command::Bench {
            experiments,
            quick,
            transport,
            out,
        } => {
            let opts = patronus_bench::harness::BenchOpts {
                quick,
                transport: transport.into(),
                out,
            };
            patronus_bench::suite::run(&experiments, &opts).map(|_| ())
        }
        Command::Serve(flags) => daemon::run(&flags),
        Command::Status { admin, json } => status::run(admin, json),
        Command::Probe {
            connect,
            tenant,
            provider,
            device,
        } => match provider {
            ProviderArg::Soft => serve::probe(connect, tenant),
            ProviderArg::Rdma => rdma::probe(connect, tenant, device),
        },
        Command::Kv(args) => std::process::exit(kv::run(&args)),
        Command::Faas(args) => faas::run(&args),
        Command::Devices => std::process::exit(devices::run()),
    }
}
