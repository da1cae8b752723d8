//! `serve`: a memory node in its own process, until SIGTERM or SIGINT.
//!
//! The two signals are blocked in the main thread before the node starts, so every thread
//! the node spawns inherits the mask and the main thread takes them with `sigwait`: no
//! handler, no `unsafe`. SIGKILL needs nothing: the kernel closes the node's sockets.
//!
//! With `--exit-on-stdin-eof` the node also stops when its stdin closes: the tests hold that
//! pipe, so a node whose test process died (killed before its guards could run) does not
//! serve on forever in an orphaned namespace.

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::unistd::getpid;
use patronus_core::manager::{MemoryNode, NodeConfig};
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arguments of `serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (an address of the namespace the node runs in).
    #[arg(long)]
    listen: SocketAddr,
    /// Maximum lifetime of a permission, ms (extensions included).
    #[arg(long, default_value_t = 1000)]
    max_lifetime_ms: u64,
    /// Buffer pool, MiB.
    #[arg(long, default_value_t = 16)]
    pool_mib: u64,
    /// Also stop when stdin reaches end of file.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

/// Serves until SIGTERM or SIGINT (or stdin's end, if asked); prints `listening <addr>` once ready, `stopped by <sig>`
/// and the node's counts at the end.
pub fn serve(a: &ServeArgs) -> Result<()> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .context("blocking SIGTERM and SIGINT")?;
    let ctx = TcpNode::open(SoftConfig::default(), a.listen).context("opening the TCP device")?;
    let cfg = NodeConfig {
        pool_bytes: a.pool_mib << 20,
        max_lifetime_us: a.max_lifetime_ms * 1000,
        ..NodeConfig::default()
    };
    let node = MemoryNode::<SoftProvider>::start(ctx, cfg).context("starting the memory node")?;
    let SoftAddress::Tcp(addr) = node.address() else {
        bail!("a TCP device without a TCP address");
    };
    println!("listening {addr}");
    let eof = Arc::new(AtomicBool::new(false));
    if a.exit_on_stdin_eof {
        let eof = eof.clone();
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                eof.store(true, Ordering::SeqCst);
                // Process-directed, so the main thread's sigwait takes it.
                let _ = kill(getpid(), Signal::SIGTERM);
            })
            .context("spawning the stdin watcher")?;
    }
    let signal = signals.wait().context("waiting for SIGTERM or SIGINT")?;
    let cause = if eof.load(Ordering::SeqCst) {
        "stdin closed".to_string()
    } else {
        signal.to_string()
    };
    let s = node.fresh_stats();
    println!(
        "stopped by {cause}: granted={} ended={} rpcs={} sessions_now={} data_reconnects={}",
        s.counters.granted, s.counters.ended, s.counters.rpcs, s.held.sessions, s.data_reconnects
    );
    node.shutdown();
    Ok(())
}
