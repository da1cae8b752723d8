//! The floor of a round trip over loopback TCP on this machine, measured beside the systems
//! that run over it: a raw 64-byte request/response between two processes, blocking and
//! polling, and a 64-byte one-sided READ of the soft NIC over TCP the same two ways (and 16
//! READs per doorbell) — with the far end's CPU and both ends' system calls per operation.
//!
//! The far end ([`peer`]) runs in a process of its own, pinned to the server core; the
//! measuring thread is pinned to the other core for the duration, so no measurement depends on
//! where the scheduler happened to put the two ends (on this 2-core VM a blocking round trip
//! between two cores costs several times one on a single core).

pub mod peer;

use crate::harness::process::{SERVER_CORE, ServerProcess, program_beside};
use crate::harness::{Check, Latency, Ratio, Row, spin_write};
use anyhow::{Context as _, Result, anyhow, bail};
use peer::{Announce, PEER_ENV, Peer, SoftEnd};
use rnic::endpoints::Requester;
use rnic::soft::{
    SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode, TcpOptions, TcpSyscalls,
};
use rnic::{CompletionQueue, Context as _, QueuePair as _, WcStatus, WorkCompletion};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes of every request and response (and of every READ).
pub const PAYLOAD: usize = 64;

/// READs per doorbell in the batched case.
pub const BATCH: usize = 16;

/// The target of a soft READ against the raw round trip, both blocking.
pub const TARGET_READ_OVER_RAW: f64 = 1.3;

/// Transport system calls per READ, per side, with one READ in flight (target).
const SYSCALLS_ONE: f64 = 3.0;
/// The same with a doorbell of [`BATCH`] READs.
const SYSCALLS_BATCH: f64 = 0.5;

/// One measured case.
#[derive(Debug)]
pub struct Case {
    /// What was measured.
    pub name: &'static str,
    /// Round trips (per READ for the batched case: a doorbell's latency over its READs).
    pub latency: Latency,
    /// The far end's CPU per operation, µs (`None` when it ran in this process).
    pub peer_cpu_us: Option<f64>,
    /// System calls per operation at the measuring end and at the far end (transport
    /// counters of the soft devices; counted by the loop itself for the raw cases).
    pub syscalls: (f64, Option<f64>),
}

/// Chunks the blocking raw round trips and blocking soft READs are measured in, alternately.
const BLOCKING_CHUNKS: u64 = 4;

impl Case {
    /// One case of equal-sized `chunks` (their latencies together, their per-operation
    /// figures averaged).
    fn merged(chunks: Vec<Case>) -> Case {
        let n = chunks.len().max(1) as f64;
        let mut it = chunks.into_iter();
        let Some(mut first) = it.next() else {
            return Case {
                name: "",
                latency: Latency::new(),
                peer_cpu_us: None,
                syscalls: (0.0, None),
            };
        };
        let mut cpu = first.peer_cpu_us;
        let (mut here, mut far) = first.syscalls;
        for c in it {
            first.latency.merge(&c.latency);
            cpu = cpu.zip(c.peer_cpu_us).map(|(a, b)| a + b);
            here += c.syscalls.0;
            far = far.zip(c.syscalls.1).map(|(a, b)| a + b);
        }
        first.peer_cpu_us = cpu.map(|c| c / n);
        first.syscalls = (here / n, far.map(|f| f / n));
        first
    }
}

/// The floor: every case, and where the far end ran.
#[derive(Debug)]
pub struct Floor {
    /// The cases, in the order measured.
    pub cases: Vec<Case>,
    /// Whether the far end was a process of its own.
    pub separate: bool,
}

impl Floor {
    /// The case named `name`.
    pub fn case(&self, name: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.name == name)
    }

    /// The soft READ's p50 over the raw round trip's, both blocking.
    pub fn read_over_raw(&self) -> Option<f64> {
        let read = self.case(READ_BLOCKING)?.latency.p50_us();
        let raw = self.case(RAW_BLOCKING)?.latency.p50_us();
        Some(read / raw.max(1e-9))
    }

    /// Prints the cases, one line each.
    pub fn print(&self) {
        println!(
            "Floor: loopback TCP, {PAYLOAD} B, far end {} on core {SERVER_CORE}",
            if self.separate {
                "in its own process"
            } else {
                "in this process"
            }
        );
        println!(
            "  {:<34} {:>8} {:>8} {:>14} {:>16}",
            "case", "p50 us", "mean us", "far CPU us/op", "syscalls/op here/far"
        );
        for c in &self.cases {
            let far = c.peer_cpu_us.map_or("-".into(), |v| format!("{v:.2}"));
            let far_sys = c.syscalls.1.map_or("-".into(), |v| format!("{v:.2}"));
            println!(
                "  {:<34} {:>8.1} {:>8.1} {:>14} {:>9.2} / {}",
                c.name,
                c.latency.p50_us(),
                c.latency.mean_us(),
                far,
                c.syscalls.0,
                far_sys
            );
        }
    }

    /// The floor's targets as checks (and the READ's ratio): a soft READ near a raw round
    /// trip, and few transport system calls per READ on each side.
    pub fn checks(&self, checks: &mut Vec<Check>, ratios: &mut Vec<Ratio>) {
        let case = |n: &str| self.case(n);
        if let (Some(read), Some(raw)) = (case(READ_BLOCKING), case(RAW_BLOCKING)) {
            let r = read.latency.p50_us() / raw.latency.p50_us().max(1e-9);
            ratios.push(Ratio {
                name: "soft READ 64 B / raw TCP round trip, both blocking (p50)".into(),
                value: r,
            });
            checks.push(Check {
            claim: format!(
                "a 64 B soft READ over TCP within {}× of the raw TCP round trip (both blocking, one in flight)",
                TARGET_READ_OVER_RAW
            ),
            holds: r <= TARGET_READ_OVER_RAW,
            detail: format!(
                "READ p50 {:.1} µs vs round trip p50 {:.1} µs ({r:.2}×), {} samples each; the far end's CPU {:.1} vs {:.1} µs per operation",
                read.latency.p50_us(),
                raw.latency.p50_us(),
                read.latency.count(),
                read.peer_cpu_us.unwrap_or(f64::NAN),
                raw.peer_cpu_us.unwrap_or(f64::NAN),
            ),
        });
        }
        for (name, limit) in [(READ_BLOCKING, SYSCALLS_ONE), (READ_BATCH, SYSCALLS_BATCH)] {
            let Some(c) = case(name) else { continue };
            let (here, far) = (c.syscalls.0, c.syscalls.1.unwrap_or(f64::NAN));
            checks.push(Check {
            claim: format!("{name}: at most {limit} transport system calls per READ on each side"),
            holds: here <= limit && far <= limit,
            detail: format!(
                "requester {here:.2}, responder {far:.2} per READ (reads, writes, epoll_waits and wake-ups, from the devices' own counters)"
            ),
        });
        }
    }

    /// One result row per case (`floor: <case>`).
    pub fn rows(&self) -> Vec<Row> {
        self.cases
            .iter()
            .map(|c| {
                let mut r = Row::new(format!("floor: {}", c.name), 1)
                    .with("samples", c.latency.count())
                    .with("mean_us", c.latency.mean_us())
                    .with("syscalls_per_op_here", c.syscalls.0)
                    .with("far_end_in_own_process", self.separate);
                if let Some(v) = c.peer_cpu_us {
                    r = r.with("far_cpu_us_per_op", v);
                }
                if let Some(v) = c.syscalls.1 {
                    r = r.with("syscalls_per_op_far", v);
                }
                r.p50_us = c.latency.p50_us();
                r.p99_us = c.latency.p99_us();
                r.throughput_ops = 1e6 / c.latency.mean_us().max(1e-9);
                r
            })
            .collect()
    }
}

/// Case names.
pub const RAW_BLOCKING: &str = "TCP round trip, blocking";
/// Case names.
pub const RAW_POLLING: &str = "TCP round trip, polling";
/// Case names.
pub const READ_BLOCKING: &str = "soft READ, blocking";
/// Case names.
pub const READ_BATCH: &str = "soft READ, 16 per doorbell, blocking";
/// Case names.
pub const READ_POLLING: &str = "soft READ, polling";

/// The far end: a process, or threads of this one.
enum Far {
    Process(ServerProcess),
    Threads(#[allow(dead_code)] Peer),
}

impl Far {
    fn cpu(&self) -> Option<Duration> {
        match self {
            Far::Process(p) => p.cpu_time().ok(),
            Far::Threads(_) => None,
        }
    }
}

/// Measures every case with `samples` operations each.
pub fn measure(samples: u64) -> Result<Floor> {
    let (far, announce) = start_far()?;
    let _pin = crate::harness::process::pin_this_thread(1 - SERVER_CORE);
    let per_op = |d: Option<Duration>, n: u64| d.map(|d| d.as_secs_f64() * 1e6 / n as f64);
    let raw = |name, mode, n: u64| -> Result<Case> {
        let (latency, calls, cpu) = raw_round_trips(&announce, mode, n, &far)?;
        Ok(Case {
            name,
            latency,
            peer_cpu_us: per_op(cpu, n),
            // The echo makes one read and one write per message, blocking; spinning reads
            // are not counted at the far end.
            syscalls: (calls as f64 / n as f64, (mode == b'B').then_some(2.0)),
        })
    };
    // Soft READs: this end's device sleeps when idle too.
    let dev = TcpNode::open_with(
        SoftConfig::default(),
        ([127, 0, 0, 1], 0).into(),
        TcpOptions {
            spin_polls: 0,
            ..TcpOptions::default()
        },
    )?;
    // The two blocking cases the target compares run in alternating chunks, so a machine
    // that slows down or speeds up during the measurement moves both alike.
    let (mut raw_blocking, mut read_blocking) = (Vec::new(), Vec::new());
    let chunk = samples.div_ceil(BLOCKING_CHUNKS);
    for _ in 0..BLOCKING_CHUNKS {
        raw_blocking.push(raw(RAW_BLOCKING, b'B', chunk)?);
        let (sleeping, f) = (announce.sleeping, &far);
        read_blocking.push(soft_case(
            READ_BLOCKING,
            &dev,
            &announce,
            sleeping,
            1,
            false,
            chunk,
            f,
        )?);
    }
    let mut cases = vec![Case::merged(raw_blocking), raw(RAW_POLLING, b'P', samples)?];
    cases.push(Case::merged(read_blocking));
    cases.push(soft_case(
        READ_BATCH,
        &dev,
        &announce,
        announce.sleeping,
        BATCH,
        false,
        samples,
        &far,
    )?);
    // Polling: the far engine spins (a device opened for this case only), this end busy-polls.
    let mut holder = TcpStream::connect(announce.raw)?;
    holder.write_all(b"D")?;
    let mut line = String::new();
    BufReader::new(holder.try_clone()?).read_line(&mut line)?;
    let spinning = SoftEnd::parse(&line).ok_or_else(|| anyhow!("bad device line {line:?}"))?;
    cases.push(soft_case(
        READ_POLLING,
        &dev,
        &announce,
        spinning,
        1,
        true,
        samples,
        &far,
    )?);
    drop(holder);
    Ok(Floor {
        cases,
        separate: matches!(far, Far::Process(_)),
    })
}

/// The peer as a process (`patronus-bench` beside, or being, the running program) or, when
/// that binary is not at hand (a test binary), on threads of this process.
fn start_far() -> Result<(Far, Announce)> {
    // A test binary lies one folder below the build's programs (`deps/`), where cargo builds
    // this crate's `patronus-bench` for its integration tests.
    let below = || {
        let exe = std::env::current_exe().ok()?;
        let name = format!("patronus-bench{}", std::env::consts::EXE_SUFFIX);
        Some(exe.parent()?.parent()?.join(name)).filter(|p| p.is_file())
    };
    if let Some(bin) = program_beside("patronus-bench").or_else(below) {
        let (p, announce) = ServerProcess::start_with_env(
            &bin.to_string_lossy(),
            &[],
            &[(PEER_ENV, "1")],
            Some(SERVER_CORE),
            Announce::parse,
        )?;
        return Ok((Far::Process(p), announce));
    }
    let peer = Peer::start()?;
    let announce = peer.announce();
    Ok((Far::Threads(peer), announce))
}

/// `samples` round trips on a raw connection in `mode`; returns them, this end's system
/// calls (one write and the reads it took per round trip) and the far end's CPU meanwhile
/// (read while the connection, and so its echo thread, is still there).
#[allow(clippy::disallowed_methods)] // a benchmark measures wall time
fn raw_round_trips(
    a: &Announce,
    mode: u8,
    samples: u64,
    far: &Far,
) -> Result<(Latency, u64, Option<Duration>)> {
    let mut s = TcpStream::connect(a.raw)?;
    s.set_nodelay(true)?;
    s.write_all(&[mode])?;
    let polling = mode == b'P';
    s.set_nonblocking(polling)?;
    let msg = [0x5au8; PAYLOAD];
    let mut back = [0u8; PAYLOAD];
    let mut lat = Latency::new();
    let mut calls = 0u64;
    let warmup = samples / 10;
    let mut cpu0 = None;
    for i in 0..warmup + samples {
        if i == warmup {
            cpu0 = far.cpu();
        }
        let t0 = Instant::now();
        if polling {
            spin_write(&mut s, &msg)?;
        } else {
            s.write_all(&msg)?;
        }
        let mut reads = 0u64;
        let mut got = 0;
        while got < PAYLOAD {
            reads += 1;
            match s.read(&mut back[got..]) {
                Ok(0) => bail!("the echo closed"),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        if i >= warmup {
            lat.record(t0.elapsed());
            calls += 1 + reads;
        }
    }
    let cpu = far.cpu().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
    Ok((lat, calls, cpu))
}

/// The far end's transport system calls so far.
fn far_syscalls(a: &Announce) -> Result<TcpSyscalls> {
    let mut s = TcpStream::connect(a.raw)?;
    s.write_all(b"S")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let v: Vec<u64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("the peer's system-call line")?;
    match v.as_slice() {
        [reads, writes, polls, wakes] => Ok(TcpSyscalls {
            reads: *reads,
            writes: *writes,
            polls: *polls,
            wakes: *wakes,
        }),
        _ => bail!("the peer answered {text:?}"),
    }
}

/// One soft-READ case: `samples` READs of `PAYLOAD` bytes, `batch` per doorbell, waiting for
/// the completions blocking (the CQ's notification) or polling.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::disallowed_methods)] // a benchmark measures wall time
fn soft_case(
    name: &'static str,
    dev: &SoftContext,
    a: &Announce,
    end: SoftEnd,
    batch: usize,
    polling: bool,
    samples: u64,
    far: &Far,
) -> Result<Case> {
    let pd = dev.alloc_pd()?;
    let r = Requester::<SoftProvider>::connect(dev, &pd, &SoftAddress::Tcp(end.listen), b"floor")?;
    let doorbells = samples.div_ceil(batch as u64);
    let warmup = doorbells / 10;
    let mut lat = Latency::new();
    let mut wcs = [WorkCompletion::default(); BATCH];
    let mut run = |n: u64, lat: Option<&mut Latency>| -> Result<()> {
        let mut lat = lat;
        for i in 0..n {
            let wrs: Vec<_> = (0..batch)
                .map(|k| {
                    r.read_wr(
                        i * batch as u64 + k as u64,
                        PAYLOAD as u32,
                        end.addr,
                        end.rkey,
                    )
                })
                .collect();
            let t0 = Instant::now();
            r.qp.post_send(&wrs)
                .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
            let mut got = 0;
            while got < batch {
                let k = r.cq.poll(&mut wcs[..batch - got]);
                if let Some(bad) = wcs[..k].iter().find(|c| c.status != WcStatus::Success) {
                    bail!("READ failed: {:?}", bad.status);
                }
                got += k;
                if k == 0 && !polling && !r.cq.wait(Duration::from_secs(10)) {
                    bail!("no completion within 10 s");
                }
            }
            if let Some(l) = lat.as_deref_mut() {
                let per = t0.elapsed() / batch as u32;
                for _ in 0..batch {
                    l.record(per);
                }
            }
        }
        Ok(())
    };
    run(warmup, None)?;
    let (here0, far0, cpu0) = (TcpNode::stats(dev), far_syscalls(a).ok(), far.cpu());
    run(doorbells, Some(&mut lat))?;
    let (here1, far1, cpu1) = (TcpNode::stats(dev), far_syscalls(a).ok(), far.cpu());
    let ops = (doorbells * batch as u64) as f64;
    let here = here1.zip(here0).map_or(0.0, |(b, a)| {
        b.syscalls.since(&a.syscalls).total() as f64 / ops
    });
    // The far end's count includes the one `S` query's connection (not its transport): none.
    let far_calls = far1
        .zip(far0)
        .map(|(b, a)| b.since(&a).total() as f64 / ops);
    let cpu = cpu1
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a).as_secs_f64() * 1e6 / ops);
    Ok(Case {
        name,
        latency: lat,
        peer_cpu_us: cpu,
        syscalls: (here, far_calls),
    })
}
