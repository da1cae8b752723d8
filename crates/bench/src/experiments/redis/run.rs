//! The runs of the Redis comparison: each system alone, its server pinned to core 1, the
//! clients on the benchmark's client thread, over TCP.

use super::redis_server::RedisServer;
use super::store::{KvConnection, KvRequest};
use crate::experiments::driver::{Driven, Logical, Rig, StepCtx, drive, now, spread};
use crate::experiments::fig9::Kv;
use crate::experiments::ods_rig::Workload;
use crate::experiments::patronus_rig::lean_client;
use crate::harness::process::ServerProcess;
use crate::kv::{KvOp, KvWorkload, check_value};
use anyhow::{Context as _, Result, bail};
use patronus_core::client::Client;
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig};
use patronus_ods::PatronusMemory;
use rnic::soft::{SoftAddress, SoftContext, SoftProvider};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The core each server is pinned to (the client thread has the other).
pub const SERVER_CORE: usize = 1;

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
    let driven = drive(spread(logicals, 1), ops, budget, 13, "redis")?;
    let server_cpu = server.process().cpu_time()?.saturating_sub(cpu0);
    Ok(Run {
        driven,
        server_cpu,
        nic_cpu: Duration::ZERO,
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
    /// Starts one with a pool of `pool_mib` MiB, one PD for all (the paper's mode).
    pub fn start(pool_mib: u64) -> Result<Self> {
        let exe = std::env::current_exe()?;
        let is_patronus = exe
            .file_stem()
            .is_some_and(|s| s.to_string_lossy() == "patronus");
        let beside = exe.with_file_name(format!("patronus{}", std::env::consts::EXE_SUFFIX));
        let server = if is_patronus {
            Some(exe)
        } else {
            beside.is_file().then_some(beside)
        };
        if let Some(exe) = server {
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
                "shared-pd",
                "--max-lifetime-ms",
                "1000",
                // Engines sleep when idle, as Redis's event loop does: CPU per op is work.
                "--engine-spin-polls",
                "0",
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
                isolation: Isolation::SharedPd,
                max_lifetime_us: 1_000_000,
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

    /// CPU time the node has used: (its process's but its soft NIC engines', the engines'),
    /// or (its manager's, its NIC engine threads').
    pub fn cpu_time(&self) -> Result<(Duration, Duration)> {
        match self {
            PatronusNode::Process(p, _) => {
                let (engines, rest) = p.cpu_split("rnic-tcp-eng")?;
                Ok((rest, engines))
            }
            PatronusNode::InProcess(n, dev) => Ok((
                n.fresh_stats().manager_cpu,
                crate::experiments::driver::engine_cpu(dev),
            )),
        }
    }
}

/// Loads a RACE table on `node` and drives `clients` logical clients of workload `w`.
pub fn race(
    node: &PatronusNode,
    w: &KvWorkload,
    clients: usize,
    ops: u64,
    budget: Duration,
) -> Result<(
    Run,
    u64,
    Option<String>,
    crate::experiments::race_costs::RunCosts,
)> {
    let rig = Rig::new(patronus_core::cluster::Link::Tcp);
    let dev = rig.device()?;
    let addr = node.address();
    let connect = || -> Result<PatronusMemory<SoftProvider>> {
        Ok(PatronusMemory::new(Client::connect(
            &dev,
            &addr,
            lean_client(),
        )?))
    };
    let kv = Kv::new(w.clone());
    let mut setup = connect()?;
    let root = kv.create(&mut setup)?;
    let logicals = (0..clients)
        .map(|i| kv.client(connect()?, root, i))
        .collect::<Result<Vec<_>>>()?;
    let cpu0 = node.cpu_time()?;
    let driven = drive(spread(logicals, 1), ops, budget, 13, "patronus race")?;
    let cpu1 = node.cpu_time()?;
    let (failed, first) = kv.take_failures();
    let run = Run {
        driven,
        server_cpu: cpu1.0.saturating_sub(cpu0.0),
        nic_cpu: cpu1.1.saturating_sub(cpu0.1),
    };
    Ok((run, failed, first, kv.take_costs()))
}
