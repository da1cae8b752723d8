//! Setting up Patronus for an experiment: a memory node on the rig's memory-node device,
//! clients on the per-thread compute-node devices, and objects allocated up front.

use super::driver::{Driven, Logical, Rig, drive_on, engine_cpu, spread};
use super::tickets::{send, wait_reply};
use anyhow::{Context as _, Result, bail};
use patronus_core::client::{Client, ClientConfig, ComputeNode};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, NodeLimits, Techniques};
use patronus_core::proto::messages::{Mode, Reply, Request};
use rnic::Context as _;
use rnic::soft::{SoftChannel, SoftContext, SoftProvider};
use std::time::Duration;

/// A running Patronus memory node and the devices its clients connect from.
#[derive(Debug)]
pub struct PatronusRig {
    /// The memory node under test (its manager's CPU is what the rows report).
    pub node: MemoryNode<SoftProvider>,
    /// Its device (for engine CPU).
    pub node_dev: SoftContext,
    /// One compute-node device per client thread.
    pub client_devs: Vec<SoftContext>,
    /// One completion channel per client thread: its clients' control CQs report there.
    pub channels: Vec<SoftChannel>,
}

/// Client settings for throughput runs: no spare QPs (no fault is injected), no recovery
/// thread, and no acquire wait unless the experiment asks for one.
pub fn lean_client() -> ClientConfig {
    ClientConfig {
        spare_qps: 0,
        acquire_wait: Duration::ZERO,
        background_recovery: false,
        staging_bytes: 64 << 10,
        rpc_timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    }
}

impl PatronusRig {
    /// Starts a node with `cfg` and opens `threads` client devices.
    pub fn start(rig: &Rig, cfg: NodeConfig, threads: usize) -> Result<Self> {
        let node_dev = rig.device()?;
        let node = MemoryNode::start(node_dev.clone(), cfg).context("starting the memory node")?;
        let client_devs = (0..threads.max(1))
            .map(|_| rig.device())
            .collect::<Result<Vec<_>>>()?;
        let channels = client_devs
            .iter()
            .map(|d| d.create_channel())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PatronusRig {
            node,
            node_dev,
            client_devs,
            channels,
        })
    }

    /// Connects `n` clients, spread round-robin over the client devices (client `i` on
    /// device `i % threads`, which is also the thread that will drive it).
    pub fn clients(&self, n: usize, cfg: &ClientConfig) -> Result<Vec<Client<SoftProvider>>> {
        (0..n)
            .map(|i| {
                let t = i % self.client_devs.len();
                let dev = &self.client_devs[t];
                Client::connect_on(
                    dev,
                    self.node.address(),
                    cfg.clone(),
                    Some(&self.channels[t]),
                )
                .with_context(|| format!("connecting client {i}"))
            })
            .collect()
    }

    /// Makes `n` clients over one compute node per client thread (client `i` of the node of
    /// thread `i % threads`, which will drive it): the logical clients of a thread share its
    /// session with the memory node (control QPs, data QPs), as the paper's coroutines of a
    /// compute node share its QPs.
    pub fn node_clients(&self, n: usize, cfg: &ClientConfig) -> Result<Vec<Client<SoftProvider>>> {
        let nodes = self
            .client_devs
            .iter()
            .zip(&self.channels)
            .map(|(dev, ch)| {
                ComputeNode::connect_on(dev, self.node.address(), cfg.clone(), Some(ch))
                    .context("connecting a compute node")
            })
            .collect::<Result<Vec<_>>>()?;
        (0..n)
            .map(|i| {
                nodes[i % nodes.len()]
                    .client()
                    .with_context(|| format!("making client {i}"))
            })
            .collect()
    }

    /// Allocates `count` objects of `size` bytes and revokes the allocation permissions, so
    /// later `acquire`s find them; returns their addresses. Pipelined, 16 requests in flight.
    pub fn objects(&self, count: usize, size: u64) -> Result<Vec<u64>> {
        let mut c = Client::<SoftProvider>::connect(
            &self.client_devs[0],
            self.node.address(),
            lean_client(),
        )?;
        let mut addrs = Vec::with_capacity(count);
        let mut in_flight = 0usize;
        let mut issued = 0usize;
        let deadline = super::driver::now() + Duration::from_secs(30);
        let waiting = || -> Result<()> {
            if super::driver::now() > deadline {
                bail!("allocating objects: the memory node stopped answering");
            }
            Ok(())
        };
        while addrs.len() < count {
            while in_flight < 16 && issued < count {
                send(
                    &mut c,
                    Request::Allocate {
                        size,
                        lease_us: 10_000_000,
                        mode: Mode::Shared,
                    },
                )?;
                issued += 1;
                in_flight += 1;
            }
            match wait_reply(&mut c, Duration::from_millis(1))? {
                Some((_, Reply::Granted(g))) => {
                    addrs.push(g.buffer_addr);
                    send(
                        &mut c,
                        Request::Revoke {
                            id: g.id,
                            free: false,
                        },
                    )?;
                }
                Some((_, Reply::Revoked)) => in_flight -= 1,
                Some((_, other)) => bail!("allocating objects: unexpected {other:?}"),
                None => waiting()?,
            }
        }
        while in_flight > 0 {
            match wait_reply(&mut c, Duration::from_millis(1))? {
                Some((_, Reply::Revoked)) => in_flight -= 1,
                Some((_, other)) => bail!("allocating objects: unexpected {other:?}"),
                None => waiting()?,
            }
        }
        Ok(addrs)
    }

    /// A node configuration for throughput runs: `techniques`, the given maximum lifetime,
    /// header and window pools large enough for every permission alive during a run, and the
    /// paper's isolation (one PD for every client, type-1 windows). The clients are one
    /// application, as in the paper: their access faults are not throttled (readers of a block
    /// a writer just freed fault, by design, and a write-heavy run on hot keys faults
    /// thousands of times a second; the throttle defends a node from a hostile tenant).
    pub fn throughput_config(techniques: Techniques, max_lifetime_us: u64) -> NodeConfig {
        let defaults = NodeConfig::default();
        NodeConfig {
            techniques,
            max_lifetime_us,
            isolation: Isolation::SharedPd,
            header_count: 1 << 17,
            mw_count: 1 << 16,
            limits: NodeLimits {
                fault_burst: u32::MAX,
                faults_per_s: u32::MAX,
                // `PATRONUS_FAIR_SHARES=off` turns the manager's fair queue off, to measure
                // what it costs (docs/evaluation.md).
                fair_shares: std::env::var("PATRONUS_FAIR_SHARES").map_or(true, |v| v != "off"),
                ..defaults.limits
            },
            ..defaults
        }
    }

    /// Drives `logicals` (spread over the client threads) and returns the run with the
    /// node's manager and engine CPU spent during it.
    pub fn drive(
        &self,
        logicals: Vec<Box<dyn Logical>>,
        ops: u64,
        budget: Duration,
        seed: u64,
        what: &str,
    ) -> Result<(Driven, Duration, Duration)> {
        let (s0, e0) = (self.node.fresh_stats(), engine_cpu(&self.node_dev));
        let calls = || rnic::soft::TcpNode::stats(&self.node_dev).map(|s| s.syscalls);
        let calls0 = calls();
        let mut d = drive_on(
            spread(logicals, self.client_devs.len()),
            self.channels.iter().cloned().map(Some).collect(),
            ops,
            budget,
            seed,
            what,
        )?;
        let (s1, e1) = (self.node.fresh_stats(), engine_cpu(&self.node_dev));
        d.node_nic_calls = Some(s1.nic_calls.saturating_sub(s0.nic_calls));
        d.node_syscalls = calls()
            .zip(calls0)
            .map(|(after, before)| after.since(&before));
        let manager = s1.busy_cpu.saturating_sub(s0.busy_cpu);
        Ok((d, manager, e1.saturating_sub(e0)))
    }

    /// Manager busy CPU and NIC engine CPU of the node so far.
    pub fn cpu(&self) -> (Duration, Duration) {
        (self.node.fresh_stats().busy_cpu, engine_cpu(&self.node_dev))
    }
}
