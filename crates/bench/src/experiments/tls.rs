//! What TLS costs on the TCP transport, measured beside plaintext in one run, on devices of
//! this process over loopback (whatever `--transport` says; with `--tls`, the run's
//! certificates, else a CA made for this experiment):
//!
//! - **a 64 B READ**, blocking, one in flight: p50 with and without TLS, in alternating
//!   chunks (a machine that speeds up or slows down moves both alike), and the transport's
//!   system calls per READ on each side;
//! - **a client session**: `Client::connect` to a memory node (every connection it opens:
//!   a control QP, data QPs, spares) and its close, with and without TLS, alternating.
//!
//! The far ends (responders, memory nodes) run on [`SERVER_CORE`] and the measuring thread
//! with its devices on the other core (threads inherit the affinity of the thread that
//! starts them), as in the floor measurements: unpinned, the same loop swung from 23 to 71 µs
//! per READ with where the scheduler put the engines.
//!
//! Targets: the TLS READ's p50 within 1.15× the plaintext one; a TLS session in ≤ 5 ms
//! (median).

use super::floor::PAYLOAD;
use crate::experiments::driver::Rig;
use crate::harness::process::{SERVER_CORE, pin_this_thread};
use crate::harness::{BenchOpts, Check, Experiment, Latency, Ratio, Row, tls::ephemeral};
use anyhow::{Result, anyhow, bail};
use patronus_core::client::{Client, ClientConfig};
use patronus_core::manager::{MemoryNode, NodeConfig};
use rnic::endpoints::{OpenResponder, Requester};
use rnic::soft::{
    SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode, TcpOptions, TlsOptions,
};
use rnic::{
    AccessFlags, CompletionQueue, Context as _, MemoryRegion as _, ProtectionDomain as _,
    QueuePair as _, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

/// The READ target: TLS p50 over plaintext p50.
pub const TARGET_READ: f64 = 1.15;
/// The session target, ms (median).
pub const TARGET_SESSION_MS: f64 = 5.0;
/// Chunks of each case, alternating.
const CHUNKS: u64 = 4;
/// Figures 5 and 6 over TLS keep at least this much of their plaintext throughput.
pub const TARGET_FIGURES: f64 = 0.9;
/// Rounds of a figure's TLS comparison (which side goes first alternates).
const FIGURE_ROUNDS: u64 = 5;

struct Plan {
    reads: u64,
    sessions: u64,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            reads: 8_000,
            sessions: 40,
        }
    } else {
        Plan {
            reads: 50_000,
            sessions: 400,
        }
    }
}

fn device(tls: Option<&TlsOptions>) -> Result<SoftContext> {
    let options = TcpOptions {
        spin_polls: 0,
        tls: tls.cloned(),
        ..TcpOptions::default()
    };
    Ok(TcpNode::open_with(
        SoftConfig::default(),
        ([127, 0, 0, 1], 0).into(),
        options,
    )?)
}

/// A case's measurements: latencies and system calls per operation (this end, the far end).
struct Measured {
    latency: Latency,
    syscalls: (f64, f64),
}

/// `n` blocking 64 B READs from `client` to `server`'s region through a new QP.
#[allow(clippy::disallowed_methods)] // a benchmark times operations on the real clock
fn reads(
    client: &SoftContext,
    server: &OpenResponder<SoftProvider>,
    region: (u64, rnic::MemoryKey),
    n: u64,
) -> Result<Measured> {
    let pd = client.alloc_pd()?;
    let r = Requester::<SoftProvider>::connect(client, &pd, server.address(), b"tls")?;
    let mut wcs = [WorkCompletion::default(); 1];
    let mut lat = Latency::new();
    let mut one = |lat: Option<&mut Latency>| -> Result<()> {
        let wr = r.read_wr(1, PAYLOAD as u32, region.0, region.1);
        let t0 = Instant::now();
        r.qp.post_send(&[wr])
            .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
        loop {
            if r.cq.poll(&mut wcs) == 1 {
                if wcs[0].status != WcStatus::Success {
                    bail!("READ failed: {:?}", wcs[0].status);
                }
                break;
            }
            if !r.cq.wait(Duration::from_secs(10)) {
                bail!("no completion within 10 s");
            }
        }
        if let Some(l) = lat {
            l.record(t0.elapsed());
        }
        Ok(())
    };
    for _ in 0..n / 10 {
        one(None)?;
    }
    let stats = |c: &SoftContext| TcpNode::stats(c).map(|s| s.syscalls).unwrap_or_default();
    let (here0, far0) = (stats(client), stats(&server.ctx));
    for _ in 0..n {
        one(Some(&mut lat))?;
    }
    let (here1, far1) = (stats(client), stats(&server.ctx));
    let per = |a: rnic::soft::TcpSyscalls, b: rnic::soft::TcpSyscalls| {
        b.since(&a).total() as f64 / n as f64
    };
    Ok(Measured {
        latency: lat,
        syscalls: (per(here0, here1), per(far0, far1)),
    })
}

/// `n` client sessions (connect, close) to `node` from `dev`.
#[allow(clippy::disallowed_methods)] // a benchmark times operations on the real clock
fn sessions(dev: &SoftContext, node: &SoftAddress, n: u64) -> Result<Latency> {
    let mut lat = Latency::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let client = Client::<SoftProvider>::connect(dev, node, ClientConfig::default())?;
        lat.record(t0.elapsed());
        drop(client);
    }
    Ok(lat)
}

/// Runs the comparison.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let tls = match &opts.tls {
        Some(t) => t.clone(),
        None => ephemeral()?,
    };
    let mut exp = Experiment::new("tls", "tcp", opts.quick);

    // The far ends, on the server core: a responder and a memory node per side.
    let (servers, nodes) = {
        let _on = pin_this_thread(SERVER_CORE);
        let servers = [
            OpenResponder::<SoftProvider>::new(device(None)?, 1024, 4)?,
            OpenResponder::<SoftProvider>::new(device(Some(&tls))?, 1024, 4)?,
        ];
        let nodes = [
            MemoryNode::<SoftProvider>::start(device(None)?, NodeConfig::default())?,
            MemoryNode::<SoftProvider>::start(device(Some(&tls))?, NodeConfig::default())?,
        ];
        (servers, nodes)
    };
    let _here = pin_this_thread(1 - SERVER_CORE);
    let clients = [device(None)?, device(Some(&tls))?];
    // READs.
    let mut read_lat = [Latency::new(), Latency::new()];
    let mut read_calls = [(0.0, 0.0); 2];
    let mut regions = Vec::new();
    for s in &servers {
        let buf = s.ctx.alloc_buffer(4096)?;
        let mr = s.pd.reg_mr(&buf, 0, 4096, AccessFlags::REMOTE_READ)?;
        regions.push((buf.addr(), mr.rkey(), buf, mr));
    }
    let chunk = plan.reads.div_ceil(CHUNKS);
    for _ in 0..CHUNKS {
        for (i, (s, c)) in servers.iter().zip(&clients).enumerate() {
            let m = reads(c, s, (regions[i].0, regions[i].1), chunk)?;
            read_lat[i].merge(&m.latency);
            read_calls[i].0 += m.syscalls.0 / CHUNKS as f64;
            read_calls[i].1 += m.syscalls.1 / CHUNKS as f64;
        }
    }

    // Sessions.
    let mut session_lat = [Latency::new(), Latency::new()];
    let per_chunk = plan.sessions.div_ceil(CHUNKS);
    for _ in 0..CHUNKS {
        for (i, node) in nodes.iter().enumerate() {
            let l = sessions(&clients[i], node.address(), per_chunk)?;
            session_lat[i].merge(&l);
        }
    }

    for (i, name) in ["plaintext", "TLS"].into_iter().enumerate() {
        let r = &read_lat[i];
        let mut row = Row::new(format!("READ 64 B, {name}"), 1);
        row.p50_us = r.p50_us();
        row.p99_us = r.p99_us();
        exp.rows.push(
            row.with("syscalls_per_read_here", read_calls[i].0)
                .with("syscalls_per_read_far", read_calls[i].1),
        );
        let s = &session_lat[i];
        let mut row = Row::new(format!("client session, {name}"), 1);
        row.p50_us = s.p50_us();
        row.p99_us = s.p99_us();
        exp.rows.push(row);
    }
    let read_ratio = read_lat[1].p50_us() / read_lat[0].p50_us().max(f64::MIN_POSITIVE);
    let session_ms = session_lat[1].p50_us() / 1e3;
    exp.ratios.push(Ratio {
        name: "READ 64 B p50, TLS / plaintext".into(),
        value: read_ratio,
    });
    exp.ratios.push(Ratio {
        name: "client session p50, TLS / plaintext".into(),
        value: session_lat[1].p50_us() / session_lat[0].p50_us().max(f64::MIN_POSITIVE),
    });
    exp.checks.push(Check {
        claim: format!(
            "a 64 B READ over TLS within {TARGET_READ}× of plaintext (p50, blocking, one in flight)"
        ),
        holds: read_ratio <= TARGET_READ,
        detail: format!(
            "{:.1} vs {:.1} µs ({read_ratio:.2}×), {} READs each in {CHUNKS} alternating \
             chunks; system calls per READ here / far: TLS {:.2} / {:.2}, plaintext {:.2} / {:.2}",
            read_lat[1].p50_us(),
            read_lat[0].p50_us(),
            plan.reads,
            read_calls[1].0,
            read_calls[1].1,
            read_calls[0].0,
            read_calls[0].1,
        ),
    });
    exp.checks.push(Check {
        claim: format!(
            "a client session over TLS is set up in at most {TARGET_SESSION_MS} ms (median)"
        ),
        holds: session_ms <= TARGET_SESSION_MS,
        detail: format!(
            "{session_ms:.2} ms with TLS vs {:.2} ms without (p99 {:.2} / {:.2} ms), {} \
             sessions each: every connection of a client (control QP, data QPs, spares), \
             each a TCP connection with a full TLS 1.3 handshake (no resumption)",
            session_lat[0].p50_us() / 1e3,
            session_lat[1].p99_us() / 1e3,
            session_lat[0].p99_us() / 1e3,
            plan.sessions,
        ),
    });
    exp.notes.push(
        "Both sides of every case are devices of this process on loopback, each with its own \
         engine thread (engines sleep when idle); the far ends on one core, the measuring \
         thread and its devices on the other. TLS is rustls (TLS 1.3, the \
         ring provider, ECDSA P-256 certificates), mutually authenticated."
            .into(),
    );
    Ok(exp)
}

/// With `--tls`: one point of a figure (`what`, measured by `measure` on a rig, with a
/// seed) on a plaintext rig and on the run's TLS rig, in [`FIGURE_ROUNDS`] rounds whose
/// first side alternates; the medians' ratio and the [`TARGET_FIGURES`] check go into `exp`.
/// Without `--tls`, nothing.
pub(crate) fn compare_figure(
    opts: &BenchOpts,
    exp: &mut Experiment,
    what: &str,
    measure: impl Fn(&Rig, u64) -> Result<Row>,
) -> Result<()> {
    if opts.tls.is_none() {
        return Ok(());
    }
    let rigs = [Rig::new(opts.transport), Rig::for_bench(opts)];
    // Per side: throughput (Kops/s), and the node's manager and NIC-engine CPU per operation.
    let mut kops: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut manager: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut engine: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut calls: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..FIGURE_ROUNDS {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let row = measure(&rigs[side], 50 + round)?;
            kops[side].push(row.throughput_ops / 1e3);
            manager[side].push(row.get_f64("mn_manager_cpu_us_per_op").unwrap_or(0.0));
            engine[side].push(row.get_f64("mn_engine_cpu_us_per_op").unwrap_or(0.0));
            calls[side].push(row.get_f64("mn_syscalls_per_op").unwrap_or(0.0));
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (plain, secure) = (median(&kops[0]), median(&kops[1]));
    let ratio = secure / plain.max(f64::MIN_POSITIVE);
    let cpu = |side: usize| (median(&manager[side]), median(&engine[side]));
    let ((pm, pe), (tm, te)) = (cpu(0), cpu(1));
    let (pc, tc) = (median(&calls[0]), median(&calls[1]));
    println!(
        "{what}: TLS {secure:.1} vs plaintext {plain:.1} Kops/s (medians of {FIGURE_ROUNDS} \
         alternating rounds): {ratio:.2}x; node CPU per operation, manager + NIC engines: \
         TLS {tm:.2} + {te:.2} us, plaintext {pm:.2} + {pe:.2} us; node system calls per \
         operation: TLS {tc:.2}, plaintext {pc:.2}"
    );
    exp.ratios.push(Ratio {
        name: format!("{what} throughput, TLS / plaintext"),
        value: ratio,
    });
    exp.checks.push(Check {
        claim: format!("{what} over TLS keeps >= {TARGET_FIGURES}x its plaintext throughput"),
        holds: ratio >= TARGET_FIGURES,
        detail: format!(
            "medians of {FIGURE_ROUNDS} alternating rounds: {secure:.1} vs {plain:.1} Kops/s \
             ({ratio:.2}x); rounds TLS {:?}, plaintext {:?}; node CPU per operation (manager + \
             NIC engines, medians) TLS {tm:.2} + {te:.2} us, plaintext {pm:.2} + {pe:.2} us; \
             node system calls per operation TLS {tc:.2}, plaintext {pc:.2}",
            rounded(&kops[1]),
            rounded(&kops[0])
        ),
    });
    Ok(())
}

fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 10.0).round() / 10.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use patronus_core::cluster::Link;
    use std::cell::RefCell;

    fn opts(tls: bool) -> BenchOpts {
        BenchOpts {
            quick: true,
            transport: Link::Tcp,
            out: std::env::temp_dir(),
            isolation: patronus_core::manager::Isolation::SharedPd,
            provider: Default::default(),
            max_region: None,
            tls: tls.then(|| ephemeral().expect("a CA")),
        }
    }

    #[test]
    fn a_figure_is_compared_in_alternating_rounds_only_with_tls() {
        let mut exp = Experiment::new("fig6", "tcp", true);
        let sides = RefCell::new(Vec::new());
        let measure = |rig: &Rig, _seed: u64| {
            sides.borrow_mut().push(rig.has_tls());
            let mut row = Row::new("+ Expr", 1);
            // TLS at 0.8x plaintext, whatever the order.
            row.throughput_ops = if rig.has_tls() { 800.0 } else { 1000.0 };
            Ok(row)
        };
        compare_figure(&opts(false), &mut exp, "Figure 6 + Expr", measure).unwrap();
        assert!(
            sides.borrow().is_empty() && exp.checks.is_empty(),
            "nothing without --tls"
        );

        compare_figure(&opts(true), &mut exp, "Figure 6 + Expr", measure).unwrap();
        let sides = sides.into_inner();
        assert_eq!(sides.len() as u64, 2 * FIGURE_ROUNDS);
        // Which side goes first alternates.
        assert_eq!(&sides[..4], &[false, true, true, false]);
        assert!((exp.ratios[0].value - 0.8).abs() < 1e-9, "{:?}", exp.ratios);
        assert!(!exp.checks[0].holds, "0.8x is below the target");
    }
}
