//! `patronus-netns-client`: the processes of the multi-host tests (`tests/multi_host.rs`,
//! `docs/multi-host-tests.md`). Each test runs them in network namespaces with
//! `ip netns exec`; they talk to each other only over the soft RNIC's TCP transport, through
//! `patronus-core`'s public API, as separate hosts would.
//!
//! Every subcommand prints what it did as `key=value` lines the tests read (one fact a
//! line, flushed at each newline), and every loop in it is bounded by a deadline.

#![forbid(unsafe_code)]

mod counter;
mod objects;
mod serve;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use patronus_core::{Client, ClientConfig};
use rnic::soft::{SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "patronus-netns-client",
    about = "Processes of the multi-host tests"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A memory node on a TCP soft RNIC bound to --listen; serves until SIGTERM or SIGINT.
    Serve(serve::ServeArgs),
    /// Allocates an object, writes --text into it and publishes it under --name.
    Put(objects::PutArgs),
    /// Looks --name up, reads it with a read-only permission, and tries to write through it.
    Get(objects::GetArgs),
    /// Acquires --name exclusively with a short lease and keeps extending it until killed.
    Hold(objects::HoldArgs),
    /// Tries to acquire --name exclusively, until --deadline-ms.
    Exclusive(objects::ExclusiveArgs),
    /// Allocates a counter, publishes it, and adds 1 to it until told `stop` on stdin.
    FaaLoop(counter::FaaLoopArgs),
    /// One client process, one `Client` per memory node: allocates on each, reads back.
    TwoNodes(objects::TwoNodesArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve(a) => serve::serve(&a),
        Cmd::Put(a) => objects::put(&a),
        Cmd::Get(a) => objects::get(&a),
        Cmd::Hold(a) => objects::hold(&a),
        Cmd::Exclusive(a) => objects::exclusive(&a),
        Cmd::FaaLoop(a) => counter::faa_loop(&a),
        Cmd::TwoNodes(a) => objects::two_nodes(&a),
    }
}

/// The real clock, for deadlines and the elapsed times printed.
#[allow(clippy::disallowed_methods)] // a driver process: it reads the real clock
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// A client of the memory node at `node`, on a TCP soft RNIC of its own. The device is
/// returned with the client: it must outlive it.
pub(crate) fn connect(
    node: SocketAddr,
    acquire_wait: Duration,
) -> Result<(SoftContext, Client<SoftProvider>)> {
    let ctx = TcpNode::open(SoftConfig::default(), SocketAddr::from(([0, 0, 0, 0], 0)))
        .context("opening the client's TCP device")?;
    let cfg = ClientConfig {
        acquire_wait,
        ..ClientConfig::default()
    };
    let client = Client::<SoftProvider>::connect(&ctx, &SoftAddress::Tcp(node), cfg)
        .with_context(|| format!("connecting to the memory node at {node}"))?;
    Ok((ctx, client))
}

/// Milliseconds since `t`, for the lines printed.
pub(crate) fn ms_since(t: Instant) -> u128 {
    now().saturating_duration_since(t).as_millis()
}
