//! Substrate anchors for Figure 1: what a round trip costs on this machine before any NIC
//! logic — a busy-polling TCP ping-pong on loopback — next to a one-sided READ over the soft
//! NIC's transports, and, when `ucx_perftest` is installed, UCX's one-sided get/put over TCP
//! and shared memory for the same size.

use super::endpoints::{execute, memory_node, requester};
use super::protection::device_pair;
use crate::harness::{Latency, spin_read, spin_write};
use anyhow::{Context as _, Result, anyhow, bail};
use patronus_core::cluster::Link;
use rnic::soft::SoftProvider;
use rnic::{AccessFlags, Context, MemoryRegion, ProtectionDomain};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Payload of every anchor, bytes.
pub(super) const PAYLOAD: usize = 64;

/// Round trips of `PAYLOAD` bytes between two loopback sockets (TCP_NODELAY, non-blocking,
/// both ends busy-polling; the echo end on its own thread).
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time and spawns its echo thread
pub(super) fn tcp_pingpong(iters: u64) -> Result<Latency> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
    }
    let echo =
        std::thread::Builder::new()
            .name("fig1-echo".into())
            .spawn(move || -> Result<()> {
                let mut server = server;
                let mut buf = [0u8; PAYLOAD];
                while spin_read(&mut server, &mut buf)? {
                    spin_write(&mut server, &buf)?;
                }
                Ok(()) // the client closed
            })?;
    let msg = [0x5au8; PAYLOAD];
    let mut back = [0u8; PAYLOAD];
    let mut lat = Latency::new();
    let warmup = iters / 10;
    let mut run = || -> Result<()> {
        for i in 0..warmup + iters {
            let t0 = Instant::now();
            spin_write(&mut client, &msg)?;
            if !spin_read(&mut client, &mut back)? {
                bail!("the echo side closed");
            }
            if i >= warmup {
                lat.record(t0.elapsed());
            }
        }
        Ok(())
    };
    let outcome = run();
    drop(client); // ends the echo thread
    echo.join().map_err(|_| anyhow!("echo thread panicked"))??;
    outcome.map(|()| lat)
}

/// One-sided `PAYLOAD`-byte READs from a client device to a memory-node device on `transport`.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub(super) fn soft_read(transport: Link, iters: u64) -> Result<Latency> {
    let (mn_ctx, cn_ctx, _fabric) = device_pair(transport)?;
    let mn = memory_node::<SoftProvider>(mn_ctx)?;
    let region = mn.ctx.alloc_buffer(4096)?;
    let mr = mn.pd.reg_mr(&region, 0, 4096, AccessFlags::REMOTE_READ)?;
    let client = requester::<SoftProvider>(&cn_ctx, mn.address())?;
    let mut lat = Latency::new();
    let warmup = iters / 10;
    for i in 0..warmup + iters {
        let wr = client.read_wr(i, PAYLOAD as u32, region.addr(), mr.rkey());
        let t0 = Instant::now();
        execute(&client, wr)?;
        if i >= warmup {
            lat.record(t0.elapsed());
        }
    }
    Ok(lat)
}

/// One UCX measurement: `ucx_perftest -t <test>` over `UCX_TLS=<tls>`.
#[derive(Debug)]
pub(super) struct UcxResult {
    /// "ucp_get" or "ucp_put_lat".
    pub(super) test: &'static str,
    /// "tcp" or "shm".
    pub(super) tls: &'static str,
    /// The "typical" (50th percentile) overhead column, µs.
    pub(super) typical_us: f64,
    /// The average overhead column, µs.
    pub(super) average_us: f64,
}

/// What the UCX anchors produced: results and a note per skipped or failed run.
#[derive(Debug, Default)]
pub(super) struct UcxAnchors {
    pub(super) results: Vec<UcxResult>,
    pub(super) notes: Vec<String>,
}

/// Each `ucx_perftest` process gets this long before it is killed.
const UCX_TIMEOUT: Duration = Duration::from_secs(20);

/// UCX's one-sided get and put latency for `PAYLOAD` bytes over TCP and shared memory, server
/// and client on loopback; skipped, with a note, when `ucx_perftest` is not on `PATH`.
pub(super) fn ucx(iters: u64) -> UcxAnchors {
    let mut out = UcxAnchors::default();
    let Some(bin) = find_on_path("ucx_perftest") else {
        out.notes.push(
            "ucx_perftest not installed (Debian package ucx-utils): UCX anchors skipped".into(),
        );
        return out;
    };
    for tls in ["tcp", "shm"] {
        for test in ["ucp_get", "ucp_put_lat"] {
            match ucx_one(&bin, tls, test, iters) {
                Ok((typical_us, average_us)) => out.results.push(UcxResult {
                    test,
                    tls,
                    typical_us,
                    average_us,
                }),
                Err(e) => out.notes.push(format!(
                    "ucx_perftest -t {test} with UCX_TLS={tls} failed, anchor skipped: {e:#}"
                )),
            }
        }
    }
    out
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Runs one server + client pair; returns (typical, average) overhead in µs.
fn ucx_one(bin: &PathBuf, tls: &str, test: &str, iters: u64) -> Result<(f64, f64)> {
    let port = {
        // A free port, released for the server to take.
        let l = TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let mut server = Command::new(bin)
        .args(["-p", &port.to_string()])
        .env("UCX_TLS", tls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the ucx_perftest server")?;
    let outcome = (|| {
        wait_listening(port, &mut server)?;
        let client = Command::new(bin)
            .args(["127.0.0.1", "-p", &port.to_string(), "-t", test])
            .args(["-s", &PAYLOAD.to_string(), "-n", &iters.to_string()])
            .env("UCX_TLS", tls)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the ucx_perftest client")?;
        let out = finish(client)?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "client exited with {}: {}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr))
            );
        }
        parse_final(&text).ok_or_else(|| anyhow!("no \"Final:\" line in: {}", tail(&text)))
    })();
    let _ = server.kill(); // it exits by itself after one test; this only reaps a stuck one
    let _ = server.wait();
    outcome
}

/// Waits, without connecting (which would consume the server's one rendezvous), until the
/// server's port is in LISTEN state in `/proc/net/tcp`.
#[allow(clippy::disallowed_methods)] // an experiment driver bounds its wait in wall time
fn wait_listening(port: u16, server: &mut Child) -> Result<()> {
    let deadline = Instant::now() + UCX_TIMEOUT;
    let needle = format!(":{port:04X}");
    loop {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f).is_ok_and(|t| {
                t.lines().any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && cols[1].ends_with(&needle) && cols[3] == "0A"
                })
            })
        });
        if listening {
            return Ok(());
        }
        if let Some(status) = server.try_wait()? {
            bail!("the server exited with {status} before listening");
        }
        if Instant::now() > deadline {
            bail!("the server did not listen on port {port} within {UCX_TIMEOUT:?}");
        }
        std::thread::yield_now();
    }
}

/// Waits for `child` with a deadline, killing it when it passes.
#[allow(clippy::disallowed_methods)] // an experiment driver bounds its wait in wall time
fn finish(mut child: Child) -> Result<Output> {
    let deadline = Instant::now() + UCX_TIMEOUT;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("timed out after {UCX_TIMEOUT:?}");
        }
        std::thread::yield_now();
    }
    Ok(child.wait_with_output()?)
}

/// `Final: <iterations> <typical> <average> ...` → (typical, average) in µs.
fn parse_final(text: &str) -> Option<(f64, f64)> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let nums: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums.as_slice() {
        [_iters, typical, average, ..] if typical.is_finite() && average.is_finite() => {
            Some((*typical, *average))
        }
        _ => None,
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    let joined = lines.into_iter().rev().collect::<Vec<_>>().join(" | ");
    if joined.is_empty() {
        "(no output)".into()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::parse_final;

    #[test]
    fn parses_the_final_line_of_both_output_styles() {
        let new = "[thread 0]  1000  0.900  1.027  1.027  59.40  59.40  973474  973474\n\
                   Final:      1000  0.910  1.030  1.030  59.40  59.40  973474  973474\n";
        assert_eq!(parse_final(new), Some((0.910, 1.030)));
        assert_eq!(parse_final("Final: n/a"), None);
        assert_eq!(parse_final("nothing here"), None);
    }
}
