//! The mechanisms the data-structure experiments (Figures 9 and 10) compare, each serving the
//! structures of `patronus-ods` as remote memory: a Patronus memory node, and the baselines'
//! nodes (one for Unprot and RPC, whose pool is registered once; one for MR, whose is not).
//!
//! A run builds its logical clients with a [`Workload`]: the structure is created once per
//! run through one handle of the mechanism ([`Workload::create`]), then every logical client
//! gets a handle of its own ([`Workload::client`]), so the same workload code runs on each
//! mechanism. Patronus handles are pipelined on their thread's completion channel, as in the
//! other experiments; every handle has its own connection.

use super::driver::{CLIENT_THREADS, Driven, Logical, Rig, drive, engine_cpu, spread};
use super::patronus_rig::{PatronusRig, lean_client};
use crate::baseline::{BaselineClientConfig, BaselineConfig, BaselineMemory, BaselineNode, Scheme};
use anyhow::{Context as _, Result};
use patronus_core::manager::{NodeConfig, Techniques};
use patronus_ods::{NamedRoots, PatronusMemory, RemoteMemory};
use rnic::soft::{SoftContext, SoftProvider};
use std::time::Duration;

/// The mechanisms, in plotting order.
pub const MECHANISMS: [&str; 4] = ["Unprot", "Patronus", "MR", "RPC"];

/// What a run measures: how to make the structure, and one logical client on a handle.
pub trait Workload {
    /// Creates the structure through `mem`; returns its root address.
    fn create<M: RemoteMemory + NamedRoots + Send + 'static>(&self, mem: &mut M) -> Result<u64>;
    /// Logical client `i`, on its own handle `mem`, of the structure at `root`.
    fn client<M: RemoteMemory + NamedRoots + Send + 'static>(
        &self,
        mem: M,
        root: u64,
        i: usize,
    ) -> Result<Box<dyn Logical>>;
}

/// The memory nodes of every mechanism, and the devices clients connect from.
#[derive(Debug)]
pub struct OdsRig {
    patronus: PatronusRig,
    base: (BaselineNode<SoftProvider>, SoftContext),
    mr: (BaselineNode<SoftProvider>, SoftContext),
    client_devs: Vec<SoftContext>,
}

/// What one run measured: the driven clients, and the memory node's CPU spent during it
/// (its manager or server thread, and its NIC engines).
#[derive(Debug)]
pub struct Measured {
    /// The run.
    pub driven: Driven,
    /// Manager (or server) thread CPU.
    pub manager: Duration,
    /// NIC engine CPU (zero in-process).
    pub engine: Duration,
    /// The structure's root (to run on it again).
    pub root: u64,
}

impl OdsRig {
    /// Starts every mechanism's node with a pool of `pool_bytes` and Patronus leases up to
    /// `max_lifetime_us`.
    pub fn start(rig: &Rig, pool_bytes: u64, max_lifetime_us: u64) -> Result<Self> {
        let cfg = NodeConfig {
            pool_bytes,
            ..PatronusRig::throughput_config(Techniques::ALL, max_lifetime_us)
        };
        let patronus = PatronusRig::start(rig, cfg, CLIENT_THREADS)?;
        let node = |whole_pool_region| -> Result<(BaselineNode<SoftProvider>, SoftContext)> {
            let dev = rig.device()?;
            let node = BaselineNode::start(
                dev.clone(),
                BaselineConfig {
                    pool_bytes,
                    whole_pool_region,
                    ..BaselineConfig::default()
                },
            )
            .context("starting a baseline memory node")?;
            Ok((node, dev))
        };
        let base = node(true)?;
        let mr = node(false)?;
        let client_devs = (0..CLIENT_THREADS)
            .map(|_| rig.device())
            .collect::<Result<Vec<_>>>()?;
        Ok(OdsRig {
            patronus,
            base,
            mr,
            client_devs,
        })
    }

    /// Creates the structure (or, given its `root`, uses the one a former run made) and drives
    /// `n` logical clients of `w` on mechanism `mech` until `ops` operations completed or
    /// `budget` passed.
    #[allow(clippy::too_many_arguments)]
    pub fn run<W: Workload>(
        &self,
        mech: &str,
        w: &W,
        root: Option<u64>,
        n: usize,
        ops: u64,
        budget: Duration,
        what: &str,
    ) -> Result<Measured> {
        if mech == "Patronus" {
            let mut setup = PatronusMemory::new(
                self.patronus
                    .clients(1, &lean_client())?
                    .pop()
                    .context("a client")?,
            );
            let root = match root {
                Some(r) => r,
                None => w.create(&mut setup)?,
            };
            let logicals = self
                .patronus
                .clients(n, &lean_client())?
                .into_iter()
                .enumerate()
                .map(|(i, c)| w.client(PatronusMemory::new(c), root, i))
                .collect::<Result<Vec<_>>>()?;
            let (driven, manager, engine) = self.patronus.drive(logicals, ops, budget, 9, what)?;
            drop(setup);
            return Ok(Measured {
                driven,
                manager,
                engine,
                root,
            });
        }
        let scheme = match mech {
            "Unprot" => Scheme::Unprot,
            "MR" => Scheme::Mr,
            "RPC" => Scheme::Rpc,
            other => anyhow::bail!("no mechanism called {other:?}"),
        };
        let (node, node_dev) = if scheme == Scheme::Mr {
            (&self.mr.0, &self.mr.1)
        } else {
            (&self.base.0, &self.base.1)
        };
        let connect = |i: usize| {
            BaselineMemory::<SoftProvider>::connect(
                &self.client_devs[i % self.client_devs.len()],
                node.address(),
                scheme,
                BaselineClientConfig {
                    timeout: Duration::from_secs(20),
                    ..BaselineClientConfig::default()
                },
            )
            .with_context(|| format!("connecting {mech} client {i}"))
        };
        let mut setup = connect(0)?;
        let root = match root {
            Some(r) => r,
            None => w.create(&mut setup)?,
        };
        let logicals = (0..n)
            .map(|i| w.client(connect(i)?, root, i))
            .collect::<Result<Vec<_>>>()?;
        let (m0, e0) = (node.stats().busy_cpu, engine_cpu(node_dev));
        let driven = drive(spread(logicals, CLIENT_THREADS), ops, budget, 9, what)?;
        let (m1, e1) = (node.stats().busy_cpu, engine_cpu(node_dev));
        drop(setup);
        Ok(Measured {
            driven,
            manager: m1.saturating_sub(m0),
            engine: e1.saturating_sub(e0),
            root,
        })
    }

    /// Stops every node.
    pub fn shutdown(self) {
        self.base.0.shutdown();
        self.mr.0.shutdown();
        self.patronus.node.shutdown();
    }
}
