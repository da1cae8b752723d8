//! The memory node: `patronus serve` as a child process, ready once it prints where it
//! listens, stopped, continued, killed or drained on the fault schedule.

use crate::clock::Clock;
use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `patronus serve`.
#[derive(Debug)]
pub struct Node {
    child: Child,
    /// Its number: 0 for the first, one more at each restart.
    pub index: usize,
    /// When it was spawned (ns on the run's clock).
    pub spawned: u64,
    /// When it printed `listening ADDR`.
    pub ready: u64,
    /// Where its output goes.
    pub log: PathBuf,
}

impl Node {
    /// Spawns `patronus serve` on `addr` (its admin endpoint on `admin`, if any; `pool_mib`
    /// MiB) and waits for its `listening` line; its stdout and stderr go to
    /// `dir/serve-INDEX.log`.
    pub fn start(
        patronus: &Path,
        addr: SocketAddr,
        admin: Option<SocketAddr>,
        pool_mib: u32,
        dir: &Path,
        index: usize,
        clock: &Clock,
    ) -> Result<Node> {
        let log = dir.join(format!("serve-{index}.log"));
        let err = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let spawned = clock.now();
        let mut child = Command::new(patronus)
            .arg("serve")
            .args(["--listen", &addr.to_string()])
            .args(["--admin", &admin.map(|a| a.to_string()).unwrap_or_default()])
            .args(["--pool-mib", &pool_mib.to_string()])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .with_context(|| format!("spawning {} serve", patronus.display()))?;
        let stdout = child.stdout.take().context("serve's stdout")?;
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        lines
            .read_line(&mut first)
            .context("reading serve's first line")?;
        let ready = clock.now();
        if !first.starts_with("listening ") {
            let _ = child.kill();
            let _ = child.wait();
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "serve did not print `listening ADDR` (got {first:?}); its log:\n{}",
                tail.lines().rev().take(5).collect::<Vec<_>>().join("\n")
            );
        }
        // The rest of its stdout (the report it prints when it stops) joins the log.
        let mut out = std::fs::OpenOptions::new().append(true).open(&log)?;
        let _ = writeln!(out, "{}", first.trim_end());
        std::thread::Builder::new()
            .name(format!("serve-{index}-out"))
            .spawn(move || {
                let _ = std::io::copy(&mut lines, &mut out);
            })?;
        Ok(Node {
            child,
            index,
            spawned,
            ready,
            log,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (it has not been reaped: the pid is its own).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = i32::try_from(self.child.id()).context("pid")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("{signal} to serve"))
    }

    /// Sends `signal` (SIGKILL: a crash; SIGTERM: a drain) and waits until it ended; when
    /// it was reaped, and how it ended.
    pub fn end(mut self, signal: Signal, clock: &Clock) -> Result<(u64, String)> {
        self.signal(signal)?;
        // A stopped node cannot drain: let it run to its end.
        let _ = self.signal(Signal::SIGCONT);
        let status = self.child.wait().context("waiting for serve")?;
        Ok((clock.now(), status.to_string()))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A free port on 127.0.0.1 below the kernel's ephemeral range (so that no client's own
/// listener takes it while the node is down), tried from `seed`'s pick on.
pub fn free_port(seed: u64) -> Result<SocketAddr> {
    let (low, _) = ephemeral_range();
    let base = 20_000u16.min(low.saturating_sub(1000));
    let span = low.saturating_sub(base).max(1);
    for i in 0..u64::from(span) {
        let port = base + u16::try_from((seed.wrapping_add(i)) % u64::from(span)).unwrap_or(0);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free port on 127.0.0.1 between {base} and {low}")
}

/// The kernel's ephemeral port range (Linux's default if unreadable).
fn ephemeral_range() -> (u16, u16) {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut parts = text.split_whitespace().filter_map(|p| p.parse().ok());
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => (a, b),
        _ => (32768, 60999),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_below_the_ephemeral_range() {
        let addr = free_port(7).expect("a free port");
        assert!(addr.port() < ephemeral_range().0);
        assert!(TcpListener::bind(addr).is_ok());
    }
}
