//! `patronus`: the evaluation suite (the README's main job: `bench all --quick`), the
//! lifecycle demo, a memory-node server with a probe client for multi-process set-ups, and a
//! key-value tool on a named RACE table of such a server.

mod demo;
mod devices;
mod faas;
mod kv;
mod rdma;
mod serve;

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

#[derive(Clone, Copy, Debug, ValueEnum)]
enum IsolationArg {
    /// One PD for every client, type-1 windows (the paper's mode; a key byte is guessable).
    SharedPd,
    /// A PD per client: another client's rkey fails on this client's QPs.
    PdPerClient,
    /// A PD per client and type-2 windows bound to the client's current QP.
    Type2,
}

impl From<IsolationArg> for patronus_core::manager::Isolation {
    fn from(i: IsolationArg) -> Self {
        use patronus_core::manager::Isolation;
        match i {
            IsolationArg::SharedPd => Isolation::SharedPd,
            IsolationArg::PdPerClient => Isolation::PdPerClient,
            IsolationArg::Type2 => Isolation::Type2,
        }
    }
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
    /// Run a memory node over TCP until stdin closes (for multi-process set-ups).
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Buffer pool size in MiB.
        #[arg(long, default_value_t = 64)]
        pool_mib: u64,
        /// Maximum lifetime of a permission, ms.
        #[arg(long, default_value_t = 1000)]
        max_lifetime_ms: u64,
        /// How clients are isolated from each other.
        #[arg(long, value_enum, default_value = "pd-per-client")]
        isolation: IsolationArg,
        /// A tenant the node serves, as ID:SECRET (repeatable; SECRET is a 64-bit number,
        /// decimal or 0x-hex). Without any, every client is tenant 0 (one application).
        #[arg(long = "tenant", value_parser = serve::parse_tenant)]
        tenants: Vec<serve::TenantArg>,
        /// Manager threads (shards), each owning a slice of the pools.
        #[arg(long, default_value_t = 1)]
        shards: usize,
        /// The RNIC: the software one over TCP, or an rdma-core device.
        #[arg(long, value_enum, default_value = "soft")]
        provider: ProviderArg,
        /// RDMA device name with `--provider rdma` (default: the first device).
        #[arg(long)]
        device: Option<String>,
        /// Soft RNIC (`--provider soft`): empty polls a NIC engine thread makes after work
        /// before it sleeps. Spinning saves a wake-up per burst of frames but keeps the core
        /// busy; 0 sleeps at once (a node sharing its core, or one measured for CPU per op).
        #[arg(long, default_value_t = rnic::soft::TcpOptions::default().spin_polls)]
        engine_spin_polls: u32,
        #[command(flatten)]
        limits: serve::LimitArgs,
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
        Command::Serve {
            listen,
            pool_mib,
            max_lifetime_ms,
            isolation,
            tenants,
            shards,
            provider,
            device,
            engine_spin_polls,
            limits,
        } => {
            let opts = serve::ServeOpts {
                listen,
                pool_mib,
                max_lifetime_ms,
                isolation: isolation.into(),
                tenants,
                shards,
                engine_spin_polls,
                limits,
            };
            match provider {
                ProviderArg::Soft => serve::serve(&opts),
                ProviderArg::Rdma => rdma::serve(&opts, device),
            }
        }
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
