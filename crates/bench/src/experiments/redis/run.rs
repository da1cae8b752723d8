//! The runs of the Redis comparison: each system alone, its server pinned to core 1, the
//! clients on the benchmark's client thread, over TCP.

use super::redis_server::RedisServer;
use super::store::{KvConnection, KvRequest};
use crate::experiments::driver::{Driven, Logical, Rig, StepCtx, drive, drive_on, now, spread};
use crate::experiments::fig9::Kv;
use crate::experiments::ods_rig::Workload;
use crate::experiments::patronus_rig::lean_client;
use crate::experiments::race_costs::RunCosts;
use crate::harness::process::{ServerProcess, program_beside};
use crate::kv::{KvOp, KvWorkload, check_value};
use anyhow::{Context as _, Result, bail};
use patronus_core::client::Client;
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig};
use patronus_ods::PatronusMemory;
use patronus_ods::race::ClientOptions;
use rnic::Context as _;
use rnic::soft::{SoftAddress, SoftContext, SoftProvider};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use crate::harness::process::SERVER_CORE;

/// A measured run: the clients, and the server's CPU during it.
#[derive(Debug)]
pub struct Run {
    /// The clients' run.
    pub driven: Driven,
    /// The server's CPU time during it (the memory node's: every thread but its soft NIC's
    /// engines).
    pub server_cpu: Duration,
    /// The memory node's soft NIC engine threads' CPU time during it: the work an RDMA NIC
    /// does in hardware (transport, executing one-sided operations). Zero for Redis.
    pub nic_cpu: Duration,
    /// Of `server_cpu`, the memory node's manager threads' (zero for Redis).
    pub manager_cpu: Duration,
    /// The benchmark process's CPU time during it: the client thread and its device's
    /// engines (and the benchmark's own bookkeeping).
    pub client_cpu: Duration,
}

impl Run {
    /// The result row: throughput, latency, the server's CPU per operation split by thread
    /// (`mn_manager_cpu_us_per_op`: every thread but the engines; of it `node_manager_…` the
    /// manager threads and `node_other_…` the rest), the NIC engines', the client's.
    pub fn row(&self, system: &str, clients: u32) -> crate::harness::Row {
        let per_op = |d: Duration| d.as_secs_f64() * 1e6 / self.driven.ops.max(1) as f64;
        self.driven
            .row(system, clients, self.server_cpu, self.nic_cpu)
            .with("node_manager_cpu_us_per_op", per_op(self.manager_cpu))
            .with(
                "node_other_cpu_us_per_op",
                per_op(self.server_cpu.saturating_sub(self.manager_cpu)),
            )
            .with("client_cpu_us_per_op", per_op(self.client_cpu))
    }
}

/// Redis clients: each step is one command, or one pipeline of `depth` commands.
struct RedisClient {
    conn: Box<dyn KvConnection>,
    workload: Arc<KvWorkload>,
    depth: usize,
    version: u64,
}

impl Logical for RedisClient {
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        let ops: Vec<KvOp> = (0..self.depth)
            .map(|_| self.workload.next_op(ctx.rng))
            .collect();
        let keys: Vec<_> = ops
            .iter()
            .map(|(KvOp::Get(k) | KvOp::Put(k))| KvWorkload::key(*k))
            .collect();
        let values: Vec<Option<Vec<u8>>> = ops
            .iter()
            .map(|op| match op {
                KvOp::Put(k) => {
                    self.version += 1;
                    Some(self.workload.value(*k, self.version))
                }
                KvOp::Get(_) => None,
            })
            .collect();
        let requests: Vec<KvRequest<'_>> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| match v {
                Some(v) => KvRequest::Put(k, v),
                None => KvRequest::Get(k),
            })
            .collect();
        let started = now();
        let out = self.conn.batch(&requests)?;
        let took = started.elapsed();
        for (op, got) in ops.iter().zip(out) {
            if let (KvOp::Get(k), got) = (op, got) {
                let value = got.with_context(|| format!("redis lost key {k}"))?;
                if check_value(*k, &value).is_none() {
                    bail!("redis returned another key's value for key {k}");
                }
            }
        }
        // Each operation of a pipeline waits for the whole pipeline.
        for _ in 0..self.depth {
            ctx.latency.record(took);
        }
        ctx.done += self.depth as u64;
        Ok(())
    }
}

/// Loads every key into `server` and drives `clients` connections with pipelines of `depth`.
pub fn redis(
    server: &RedisServer,
    w: &KvWorkload,
    clients: usize,
    depth: usize,
    ops: u64,
    budget: Duration,
) -> Result<Run> {
    let mut loader = server.connect()?;
    let values: Vec<(Vec<u8>, Vec<u8>)> = (0..w.keys)
        .map(|i| (KvWorkload::key(i).to_vec(), w.value(i, 0)))
        .collect();
    for chunk in values.chunks(64) {
        let puts: Vec<KvRequest<'_>> = chunk.iter().map(|(k, v)| KvRequest::Put(k, v)).collect();
        loader.batch(&puts)?;
    }
    let workload = Arc::new(w.clone());
    let logicals = (0..clients)
        .map(|i| -> Result<Box<dyn Logical>> {
            Ok(Box::new(RedisClient {
                conn: Box::new(server.connect()?),
                workload: workload.clone(),
                depth,
                version: (i as u64 + 1) << 40,
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    let cpu0 = server.process().cpu_time()?;
    let client0 = rnic::process_cpu_time();
    let driven = drive(spread(logicals, 1), ops, budget, 13, "redis")?;
    let client_cpu = rnic::process_cpu_time().saturating_sub(client0);
    let server_cpu = server.process().cpu_time()?.saturating_sub(cpu0);
    Ok(Run {
        driven,
        server_cpu,
        nic_cpu: Duration::ZERO,
        manager_cpu: Duration::ZERO,
        client_cpu,
    })
}

/// A Patronus memory node for the comparison: `patronus serve` in its own process when the
/// `patronus` binary is the running program or lies beside it (`patronus-bench` and
/// `patronus` build into the same folder), else in this process.
#[derive(Debug)]
pub enum PatronusNode {
    /// `patronus serve`, pinned to [`SERVER_CORE`].
    Process(ServerProcess, SocketAddr),
    /// A node in this process, on a TCP device of its own.
    InProcess(Box<MemoryNode<SoftProvider>>, SoftContext),
}

impl PatronusNode {
    /// Starts one with a pool of `pool_mib` MiB, isolating clients as `isolation` says.
    pub fn start(pool_mib: u64, isolation: Isolation) -> Result<Self> {
        if let Some(exe) = program_beside("patronus") {
            let args = [
                "serve",
                "--listen",
                "127.0.0.1:0",
                // No admin endpoint: its fixed default port would collide between runs.
                "--admin",
                "",
                "--pool-mib",
                &pool_mib.to_string(),
                "--isolation",
                match isolation {
                    Isolation::SharedPd => "shared-pd",
                    Isolation::PdPerClient => "pd-per-client",
                    Isolation::Type2 => "type2",
                },
                "--max-lifetime-ms",
                "1000",
                // Engines sleep when idle, as Redis's event loop does: CPU per op is work.
                "--engine-spin-polls",
                "0",
                // A store's clients keep rights (two windows each) over many blocks.
                "--windows-per-client",
                &WINDOWS_PER_CLIENT.to_string(),
            ]
            .map(String::from);
            let (p, addr) =
                ServerProcess::start(&exe.to_string_lossy(), &args, Some(SERVER_CORE), |line| {
                    line.strip_prefix("listening ")?
                        .trim()
                        .parse::<SocketAddr>()
                        .ok()
                })?;
            return Ok(PatronusNode::Process(p, addr));
        }
        let rig = Rig::new(patronus_core::cluster::Link::Tcp);
        let dev = rig.device()?;
        let node = MemoryNode::start(
            dev.clone(),
            NodeConfig {
                pool_bytes: pool_mib << 20,
                isolation,
                max_lifetime_us: 1_000_000,
                windows_per_client: WINDOWS_PER_CLIENT,
                ..NodeConfig::default()
            },
        )?;
        Ok(PatronusNode::InProcess(Box::new(node), dev))
    }

    /// Where clients connect.
    pub fn address(&self) -> SoftAddress {
        match self {
            PatronusNode::Process(_, a) => SoftAddress::Tcp(*a),
            PatronusNode::InProcess(n, _) => n.address().clone(),
        }
    }

    /// Whether the node runs in a process of its own.
    pub fn separate(&self) -> bool {
        matches!(self, PatronusNode::Process(..))
    }

    /// CPU time the node has used: (its process's but its soft NIC engines', the engines',
    /// its manager threads'), or in this process (its manager's, its NIC engine threads',
    /// its manager's).
    pub fn cpu_time(&self) -> Result<(Duration, Duration, Duration)> {
        match self {
            PatronusNode::Process(p, _) => {
                let (engines, rest) = p.cpu_split("rnic-tcp-eng")?;
                let (manager, _) = p.cpu_split("patronus-manage")?;
                Ok((rest, engines, manager))
            }
            PatronusNode::InProcess(n, dev) => {
                let manager = n.fresh_stats().manager_cpu;
                Ok((
                    manager,
                    crate::experiments::driver::engine_cpu(dev),
                    manager,
                ))
            }
        }
    }
}

/// Windows the memory node gives each client session (a PD per client): a right takes up to
/// two, and a store's clients keep many (serve's default, 1,024, holds 512 rights).
const WINDOWS_PER_CLIENT: u32 = 8192;

/// The table clients' options against Redis: a key-value store's clients rather than Figure
/// 9's short leases. Rights last 200 ms (a key read or written again within that needs no
/// acquire) and up to 1,024 are kept (every key of a quick run); blocks come 16 per
/// allocation and go 16 per free (one round trip each); an operation's batches are started
/// without waiting, so the clients of the driver's thread have theirs in flight together; a
/// key's block is read beside its buckets where the client last saw its entry, so a lookup
/// of an entry that did not change is one round trip and an update two.
pub fn store_options() -> ClientOptions {
    ClientOptions {
        lease: Duration::from_millis(200),
        read_lease: Duration::from_millis(200),
        reader_cache: 1024,
        preallocate: 16,
        free_batch: 16,
        pipeline: true,
        speculate: true,
        ..crate::experiments::fig9::options()
    }
}

/// A RACE table loaded on a node, and the client that created it (kept connected: the table's
/// memory is its allocations).
pub struct RaceTable {
    kv: Kv,
    root: u64,
    dev: SoftContext,
    addr: SoftAddress,
    _owner: PatronusMemory<SoftProvider>,
}

impl std::fmt::Debug for RaceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaceTable")
            .field("root", &self.root)
            .finish()
    }
}

impl RaceTable {
    /// Creates a table for workload `w` on `node` and loads every key.
    pub fn load(node: &PatronusNode, w: &KvWorkload) -> Result<Self> {
        let rig = Rig::new(patronus_core::cluster::Link::Tcp);
        let dev = rig.device()?;
        let addr = node.address();
        let kv = Kv::with_options(w.clone(), store_options());
        let mut owner = PatronusMemory::new(Client::connect(&dev, &addr, lean_client())?);
        let root = kv.create(&mut owner)?;
        Ok(RaceTable {
            kv,
            root,
            dev,
            addr,
            _owner: owner,
        })
    }
}

/// What a RACE run returns: the run, its failed operations (and the first failure), and what
/// the operations cost.
pub type RaceRun = (Run, u64, Option<String>, RunCosts);

/// Drives `clients` logical clients of `table`'s workload against `node` (where the table
/// lies).
pub fn race(
    node: &PatronusNode,
    table: &RaceTable,
    clients: usize,
    ops: u64,
    budget: Duration,
) -> Result<RaceRun> {
    // Every client's CQs report to one channel: the driver's thread sleeps on it while all of
    // them wait for replies or completions, as a Redis client sleeps in its read.
    let channel = table.dev.create_channel()?;
    let connect = || -> Result<PatronusMemory<SoftProvider>> {
        Ok(PatronusMemory::new(Client::connect_on(
            &table.dev,
            &table.addr,
            lean_client(),
            Some(&channel),
        )?))
    };
    let kv = &table.kv;
    let logicals = (0..clients)
        .map(|i| kv.client(connect()?, table.root, i))
        .collect::<Result<Vec<_>>>()?;
    let cpu0 = node.cpu_time()?;
    let client0 = rnic::process_cpu_time();
    let driven = drive_on(
        spread(logicals, 1),
        vec![Some(channel)],
        ops,
        budget,
        13,
        "patronus race",
    )?;
    let client_cpu = rnic::process_cpu_time().saturating_sub(client0);
    let cpu1 = node.cpu_time()?;
    let (failed, first) = kv.take_failures();
    let run = Run {
        driven,
        server_cpu: cpu1.0.saturating_sub(cpu0.0),
        nic_cpu: cpu1.1.saturating_sub(cpu0.1),
        manager_cpu: cpu1.2.saturating_sub(cpu0.2),
        client_cpu,
    };
    Ok((run, failed, first, kv.take_costs()))
}
