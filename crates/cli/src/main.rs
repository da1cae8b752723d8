//! `patronus`: the embedded demo (the README's main job), a memory-node server, and the
//! Table-4 accounting run.

mod demo;
mod serve;
mod table4;
mod table5;

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

#[derive(Subcommand, Debug)]
enum Command {
    /// Start an embedded memory node and clients, walk through a permission's lifecycle
    /// (allocate, acquire, extend, revoke, expiry, a QP fault) and print what happened.
    Demo {
        /// Transport between clients and the memory node.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
    },
    /// Print MW operations and RPCs per permission for the Table-4 configurations.
    Table4 {
        /// Transport.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
        /// Permissions per configuration.
        #[arg(long, default_value_t = 4000)]
        perms: usize,
        /// Concurrent clients (threads, each with several requests in flight).
        #[arg(long, default_value_t = 8)]
        clients: usize,
    },
    /// Measure how long a QP fault interrupts a client, with and without spare QPs (Table 5).
    Table5 {
        /// Transport.
        #[arg(long, value_enum, default_value = "inproc")]
        transport: TransportArg,
        /// Faults per configuration.
        #[arg(long, default_value_t = 50)]
        faults: usize,
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
    },
    /// Connect to a memory node over TCP, run a short lifecycle, print the result.
    Probe {
        /// The memory node's address.
        #[arg(long)]
        connect: std::net::SocketAddr,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { transport } => demo::run(transport.into()),
        Command::Table4 {
            transport,
            perms,
            clients,
        } => table4::run(transport.into(), perms, clients),
        Command::Table5 { transport, faults } => table5::run(transport.into(), faults),
        Command::Serve {
            listen,
            pool_mib,
            max_lifetime_ms,
        } => serve::serve(listen, pool_mib, max_lifetime_ms),
        Command::Probe { connect } => serve::probe(connect),
    }
}
