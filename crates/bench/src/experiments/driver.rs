//! What every multi-client experiment shares: the devices of a run (one memory-node device,
//! one device per client thread, on the chosen transport), the memory node's CPU clocks, and
//! the driver that multiplexes many logical clients on a few threads.
//!
//! The driver's contract: a logical client is a state machine whose [`Logical::step`] never
//! waits for the memory node's CPU. Permission operations (acquire, revoke, register, flip QP
//! flags) are submitted and polled, so they are pipelined across the logical clients of a
//! thread, as the paper's coroutines are (§7 setup); so are fig7's CN extensions, the
//! one-sided CASes that experiment compares with RPCs (`Op::Extend` tickets). Any other data
//! access is synchronous for its own round trip in every mechanism (the RPC mechanism's
//! accesses included), so no mechanism gets pipelining the others lack. Throughput is a fixed op count over the wall time to reach it.

use crate::harness::{Latency, Row, bar};
use anyhow::{Context as _, Result, anyhow};
use patronus_core::client::{Client, ClientStats};
use patronus_core::cluster::Link;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rnic::CompletionChannel;
use rnic::soft::SoftProvider;
use rnic::soft::{SoftChannel, SoftConfig, SoftContext, SoftFabric, TcpNode, TcpOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Unproductive rounds a thread yields through before it sleeps on its completion channel:
/// under load a reply is usually a few rounds away, and a sleeping client costs whoever
/// completes its work a wake-up (in process, the manager's thread).
const SLEEP_AFTER_IDLE_ROUNDS: u32 = 64;

/// Client threads: the machine has 2 cores, one of which the memory node's thread shares.
pub const CLIENT_THREADS: usize = 1;

/// The devices of one run.
#[derive(Debug)]
pub struct Rig {
    transport: Link,
    fabric: Option<SoftFabric>,
    tls: Option<rnic::soft::TlsOptions>,
}

impl Rig {
    /// A rig on `transport` (in-process: one fabric for every device).
    pub fn new(transport: Link) -> Self {
        Rig {
            transport,
            fabric: matches!(transport, Link::InProc).then(SoftFabric::new),
            tls: None,
        }
    }

    /// A rig on the run's transport, with its TLS (`--tls`) on every TCP device.
    pub fn for_bench(opts: &crate::harness::BenchOpts) -> Self {
        Rig {
            tls: opts.tls.clone(),
            ..Rig::new(opts.transport)
        }
    }

    /// A rig over TCP whatever the run's transport, with the run's TLS (`--tls`): for
    /// experiments that need what only the TCP transport has.
    pub fn tcp_for_bench(opts: &crate::harness::BenchOpts) -> Self {
        Rig {
            tls: opts.tls.clone(),
            ..Rig::new(Link::Tcp)
        }
    }

    /// Whether the rig's TCP devices speak TLS.
    pub fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A new device: a memory node's or a compute node's.
    pub fn device(&self) -> Result<SoftContext> {
        match &self.fabric {
            Some(f) => Ok(f.open_device(SoftConfig::default())),
            None => {
                let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
                // Engines park as soon as they run out of work: a run has several devices,
                // and on 2 cores engines that spin before parking hold cores for whole
                // scheduler time slices (4 ms here) while the thread they wait for cannot run.
                let options = TcpOptions {
                    spin_polls: 0,
                    tls: self.tls.clone(),
                    ..TcpOptions::default()
                };
                TcpNode::open_with(SoftConfig::default(), loopback, options)
                    .context("opening a TCP device")
            }
        }
    }

    /// The transport every device of this rig uses.
    pub fn transport(&self) -> Link {
        self.transport
    }
}

/// CPU time of a memory node's NIC engine threads (zero in-process: there, the requester's
/// thread runs the responder, so one-sided ops cost the node's CPU nothing by construction).
pub fn engine_cpu(node: &SoftContext) -> Duration {
    TcpNode::engine_cpu_time(node).unwrap_or_default()
}

/// What a logical client reports from one step.
#[derive(Debug)]
pub struct StepCtx<'a> {
    /// The thread's seeded generator.
    pub rng: &'a mut StdRng,
    /// Latency samples of the measured operation.
    pub latency: &'a mut Latency,
    /// Measured operations completed in this step (the caller adds them up).
    pub done: u64,
}

/// A logical client: a state machine advanced by its thread.
pub trait Logical: Send {
    /// Advances the client: polls what it waits for, or issues its next operation.
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()>;
    /// The Patronus client this logical client drives, if it is one: it waits for that
    /// client's control replies only (see [`Logical::arm`]) and reports its counts.
    fn patronus_client(&self) -> Option<&Client<SoftProvider>> {
        None
    }
    /// The Patronus client, mutably (to arm it).
    fn patronus_client_mut(&mut self) -> Option<&mut Client<SoftProvider>> {
        None
    }
    /// Arms the client's completion queues on its thread's completion channel, if it waits
    /// only for completions (not for the clock) and its CQs are on that channel; returns
    /// whether it did. When every client of a thread is armed and a further round completed
    /// nothing, the thread sleeps on the channel instead of yielding the core. By default a
    /// Patronus client arms its control CQs (its data accesses are synchronous in a step).
    fn arm(&mut self) -> bool {
        self.patronus_client_mut()
            .map(|c| c.control().arm())
            .is_some()
    }
    /// What the client library counted (Patronus clients), for the report, with the id of
    /// the compute node that counted it (its clients share the counts).
    fn client_stats(&self) -> Option<(u64, ClientStats)> {
        self.patronus_client()
            .map(|c| (c.status().node_id(), c.status().stats()))
    }
}

/// The client library's counts of each compute node a thread drove clients of, by node id.
type NodeStats = std::collections::BTreeMap<u64, ClientStats>;

/// What a driven run measured.
#[derive(Debug)]
pub struct Driven {
    /// Measured operations completed when the clock stopped.
    pub ops: u64,
    /// Wall time from the start to the target op count.
    pub wall: Duration,
    /// Latency of every measured operation.
    pub latency: Latency,
    /// The Patronus client library's counts, summed over the compute nodes the logical
    /// clients belong to (`None` when no client reported any: a baseline mechanism).
    pub clients: Option<ClientStats>,
    /// The memory node's transport system calls during the run (TCP devices only; set by
    /// whoever knows the node's device).
    pub node_syscalls: Option<rnic::soft::TcpSyscalls>,
    /// Of the manager's busy CPU, the time it spent inside NIC calls during the run (a
    /// Patronus node only; `NodeStats::nic_calls`).
    pub node_nic_calls: Option<Duration>,
}

impl Driven {
    /// A result row: throughput, HDR percentiles, and the memory node's CPU per operation
    /// (`manager`: its manager/server thread's busy time; `engine`: its NIC engine threads),
    /// in total and per kind.
    pub fn row(&self, mechanism: &str, clients: u32, manager: Duration, engine: Duration) -> Row {
        let mut r = Row::new(mechanism, clients)
            .with("ops", self.ops)
            .with("mn_manager_cpu_us_per_op", us_per_op(manager, self.ops))
            .with("mn_engine_cpu_us_per_op", us_per_op(engine, self.ops));
        r.throughput_ops = self.throughput();
        r.p50_us = self.latency.p50_us();
        r.p99_us = self.latency.p99_us();
        r.mn_cpu_us_per_op = us_per_op(manager + engine, self.ops);
        if let Some(c) = &self.clients {
            r = with_client_stats(r, c);
        }
        if let Some(nic) = self.node_nic_calls {
            // The split of the manager's busy CPU: inside NIC calls (the soft NIC's work
            // runs there, inline) and the rest, the manager's own.
            r = r
                .with("mn_manager_nic_us_per_op", us_per_op(nic, self.ops))
                .with(
                    "mn_manager_own_us_per_op",
                    us_per_op(manager.saturating_sub(nic), self.ops),
                );
        }
        if let Some(s) = &self.node_syscalls {
            let per = |n: u64| n as f64 / self.ops.max(1) as f64;
            r = r
                .with("mn_syscalls_per_op", per(s.total()))
                .with("mn_reads_per_op", per(s.reads))
                .with("mn_writes_per_op", per(s.writes))
                .with("mn_polls_per_op", per(s.polls + s.wakes));
        }
        r
    }

    /// Operations per second.
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs `groups` (one group of logical clients per thread) until `target` measured operations
/// completed, or `budget` wall time passed. Every thread is seeded from `seed`.
pub fn drive(
    groups: Vec<Vec<Box<dyn Logical>>>,
    target: u64,
    budget: Duration,
    seed: u64,
    what: &str,
) -> Result<Driven> {
    let channels = vec![None; groups.len()];
    drive_on(groups, channels, target, budget, seed, what)
}

/// [`drive`], with each group's completion channel (the one its clients' CQs report to): a
/// thread whose clients all [`arm`](Logical::arm) sleeps on it when a round completes nothing;
/// without one, it yields the core.
#[allow(clippy::disallowed_methods)] // an experiment driver: threads and wall time
pub fn drive_on(
    groups: Vec<Vec<Box<dyn Logical>>>,
    channels: Vec<Option<SoftChannel>>,
    target: u64,
    budget: Duration,
    seed: u64,
    what: &str,
) -> Result<Driven> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = bar(target, what);
    let start_line = Arc::new(std::sync::Barrier::new(groups.len()));
    // The first thread to see the target (or the budget) reached stops the clock; the
    // calling thread only joins, so it takes no core from the clients or the memory node.
    let finished: Arc<parking_lot::Mutex<Option<Duration>>> = Arc::default();
    let t0 = Arc::new(parking_lot::Mutex::new(None::<Instant>));
    let results = std::thread::scope(|s| -> Result<Vec<(Latency, NodeStats)>> {
        let mut handles = Vec::new();
        let mut channels = channels.into_iter();
        for (t, mut group) in groups.into_iter().enumerate() {
            let channel = channels.next().flatten();
            let (done, stop, start_line) = (done.clone(), stop.clone(), start_line.clone());
            let (finished, t0, progress) = (finished.clone(), t0.clone(), progress.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("bench-client-{t}"))
                    .spawn_scoped(s, move || -> Result<(Latency, NodeStats)> {
                        let mut rng = StdRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37));
                        let mut latency = Latency::new();
                        if start_line.wait().is_leader() {
                            *t0.lock() = Some(Instant::now());
                        }
                        start_line.wait();
                        let started = t0.lock().unwrap_or_else(Instant::now);
                        let mut rounds = 0u64;
                        // Every client was armed before the last round, which completed nothing.
                        let mut armed = false;
                        // Rounds in a row that completed nothing.
                        let mut idle_rounds = 0u32;
                        while !stop.load(Ordering::Relaxed) {
                            let mut local = 0u64;
                            for client in group.iter_mut() {
                                let mut ctx = StepCtx {
                                    rng: &mut rng,
                                    latency: &mut latency,
                                    done: 0,
                                };
                                if let Err(e) = client.step(&mut ctx) {
                                    stop.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                                local += ctx.done;
                            }
                            rounds += 1;
                            if local > 0 {
                                armed = false;
                                idle_rounds = 0;
                                let n = done.fetch_add(local, Ordering::Relaxed) + local;
                                if t == 0 && rounds % 64 == 0 {
                                    progress.set_position(n.min(target));
                                }
                                if n >= target {
                                    let mut f = finished.lock();
                                    if f.is_none() {
                                        *f = Some(started.elapsed());
                                    }
                                    stop.store(true, Ordering::Relaxed);
                                }
                            } else if let (Some(ch), true) = (&channel, armed) {
                                // Armed, and a whole round since completed nothing: sleep until
                                // a completion (polling drives the NIC's timers: at most 1 ms).
                                ch.wait(Duration::from_millis(1));
                                armed = false;
                            } else if channel.is_some()
                                && idle_rounds >= SLEEP_AFTER_IDLE_ROUNDS
                                && group.iter_mut().all(|c| c.arm())
                            {
                                // One more round before sleeping: completions that came before
                                // the arming raise no event, the round's polls find them.
                                armed = true;
                            } else {
                                // Nothing completed in a whole round (and not long enough to
                                // sleep, or no channel to sleep on): give the core to the memory
                                // node's threads, which a spinning client would starve.
                                idle_rounds += 1;
                                std::thread::yield_now();
                            }
                            if rounds % 256 == 0 && started.elapsed() >= budget {
                                let mut f = finished.lock();
                                if f.is_none() {
                                    *f = Some(started.elapsed());
                                }
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        // Once per compute node: its clients share one count.
                        let mut nodes = std::collections::BTreeMap::new();
                        for (node, c) in group.iter().filter_map(|c| c.client_stats()) {
                            nodes.insert(node, c);
                        }
                        Ok((latency, nodes))
                    })
                    .context("spawning a client thread")?,
            );
        }
        let mut lats = Vec::new();
        for h in handles {
            lats.push(
                h.join()
                    .map_err(|_| anyhow!("a client thread panicked"))??,
            );
        }
        Ok(lats)
    });
    progress.finish_and_clear();
    let lats = results?;
    let wall = finished.lock().unwrap_or(budget);
    let mut latency = Latency::new();
    let mut nodes = std::collections::BTreeMap::new();
    for (l, n) in lats {
        latency.merge(&l);
        nodes.extend(n);
    }
    let mut clients: Option<ClientStats> = None;
    for c in nodes.values() {
        clients.get_or_insert_with(ClientStats::default).merge(c);
    }
    Ok(Driven {
        ops: done.load(Ordering::Relaxed),
        wall,
        latency,
        clients,
        node_syscalls: None,
        node_nic_calls: None,
    })
}

/// `row` with the client library's lease and control-path counts (the evidence the report's
/// explanations quote).
pub fn with_client_stats(row: Row, c: &ClientStats) -> Row {
    row.with("grants", c.grants)
        .with("grants_wasted", c.wasted)
        .with("grants_wasted_pct", 100.0 * c.wasted_fraction())
        .with("grants_dead_on_arrival", c.dead_on_arrival)
        .with("local_expiries", c.local_expiries)
        .with("cas_extensions", c.cas_extensions)
        .with("rpc_extensions", c.rpc_extensions)
        .with("extension_refusals", c.extension_refusals)
        .with("rpc_retries", c.rpc_retries)
        .with("overloaded", c.overloaded)
        .with("ctrl_rtt_p50_us", c.rtt_us.value_at_quantile(0.5))
        .with("ctrl_rtt_p99_us", c.rtt_us.value_at_quantile(0.99))
        .with("lease_slack_us", c.slack_us)
}

/// Splits `items` round-robin into `threads` groups.
pub fn spread<T>(items: Vec<T>, threads: usize) -> Vec<Vec<T>> {
    let mut groups: Vec<Vec<T>> = (0..threads.max(1)).map(|_| Vec::new()).collect();
    let n = groups.len();
    for (i, item) in items.into_iter().enumerate() {
        groups[i % n].push(item);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Microseconds of `d` per operation.
pub fn us_per_op(d: Duration, ops: u64) -> f64 {
    d.as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// Wall-clock now, for latency samples (experiment drivers only).
#[allow(clippy::disallowed_methods)] // latency samples are wall time by definition
pub fn now() -> Instant {
    Instant::now()
}
