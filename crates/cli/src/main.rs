//! `patronus`: a memory-node daemon (`serve`, `status`), clients for it (`probe`, `kv`,
//! `faas`), the lifecycle demo and the RDMA device list. The evaluation is `patronus-bench`
//! (crates/bench), so that this shipped binary carries no test helpers.

mod daemon;
mod demo;
mod devices;
mod errors;
mod faas;
mod kv;
mod rdma;
mod serve;
mod status;
mod tls;

use clap::{Parser, Subcommand, ValueEnum};
use patronus_core::cluster::Link;

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

impl From<TransportArg> for Link {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Inproc => Link::InProc,
            TransportArg::Tcp => Link::Tcp,
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
        /// Link between clients and the memory node.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
    },
    /// The evaluation moved to its own binary, `patronus-bench` (it links test helpers the
    /// shipped `patronus` must not carry).
    #[command(hide = true, disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run a memory node as a daemon until SIGINT or SIGTERM (then drain gracefully):
    /// configured by `--config FILE` (TOML; `--print-default-config`), each setting also a
    /// flag or an environment variable; Prometheus metrics and status on `--admin ADDR`.
    Serve(Box<daemon::flags::ServeFlags>),
    /// Print a running node's status (from its admin address): live permissions, leases
    /// about to expire, sessions and their QPs, pools, manager CPU.
    Status {
        /// The node's admin address (its `admin` setting), IP:PORT.
        #[arg(default_value = "127.0.0.1:9471")]
        admin: std::net::SocketAddr,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// A file holding the node's admin bearer token (its `admin_token_file`).
        #[arg(long, env = "PATRONUS_ADMIN_TOKEN_FILE", value_name = "FILE")]
        admin_token_file: Option<String>,
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
        /// TLS to the node (soft provider).
        #[command(flatten)]
        tls: tls::TlsArgs,
    },
    /// Make a test CA, a node certificate and tenant certificates (PEM) for mutual TLS
    /// between `serve` and its clients (`--tls-*` flags; docs/operations.md, "TLS").
    Certs(tls::CertsArgs),
    /// Use a named RACE hash table of a running `patronus serve`: create, put, get, del,
    /// scan, info, drop (each command one short-lived client; exit codes in `kv --help`).
    #[command(after_help = kv::EXIT_CODES_HELP)]
    Kv(kv::KvArgs),
    /// Run one chain of ServerlessBench TC4 on the FaaS runtime: `image` (a thumbnail of a
    /// photograph) or `analyse` (a salary analysis), against an embedded memory node or a
    /// running `patronus serve` (--connect).
    Faas(faas::FaasArgs),
    /// List RDMA devices with ports, GIDs and memory-window capabilities. Exit code 0: devices
    /// listed; 2: no RDMA device; 3: libibverbs not installed; 1: a device could not be queried;
    /// with --check, 4: a device does not enforce what an isolation mode rests on.
    Devices {
        /// Run the NIC protection self-check on each device (or on --device): window bounds,
        /// old rkey after rebind, read-only windows, type-2 QP association, invalidation.
        #[arg(long)]
        check: bool,
        /// Only this device (with --check).
        #[arg(long, env = "PATRONUS_RDMA_DEVICE")]
        device: Option<String>,
    },
}

/// Runs the command; an error is one line on stderr (its causes joined by ": ", each once)
/// and exit code 1.
fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {}", errors::one_line_anyhow(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { transport } => demo::run(transport.into()),
        Command::Bench { args } => anyhow::bail!(
            "the evaluation is its own binary now: cargo run --release -p patronus-bench -- {}",
            if args.is_empty() {
                "all --quick".to_string()
            } else {
                args.join(" ")
            }
        ),
        Command::Serve(flags) => daemon::run(&flags),
        Command::Status {
            admin,
            json,
            admin_token_file,
        } => status::run(admin, json, admin_token_file.as_deref()),
        Command::Probe {
            connect,
            tenant,
            provider,
            device,
            tls,
        } => match provider {
            ProviderArg::Soft => serve::probe(connect, tenant, &tls),
            ProviderArg::Rdma => rdma::probe(connect, tenant, device),
        },
        Command::Certs(args) => tls::certs(&args),
        Command::Kv(args) => std::process::exit(kv::run(&args)),
        Command::Faas(args) => faas::run(&args),
        Command::Devices { check, device } => std::process::exit(if check {
            devices::check(device)
        } else {
            devices::run()
        }),
    }
}
