//! The mechanisms the data-structure experiments (Figures 9 and 10) compare, each serving the
//! structures of `patronus-ods` as remote memory: a Patronus memory node, and the baselines'
//! nodes (one for Unprot and RPC, whose pool is registered once; one for MR, whose is not).
//!
//! A run builds its logical clients with a [`Workload`]: the structure is created once per
//! run through one handle of the mechanism ([`Workload::create`]), then every logical client
//! gets a handle of its own ([`Workload::client`]), so the same workload code runs on each
//! mechanism. Once a structure is no longer needed [`OdsRig::destroy`] frees it
//! ([`Workload::destroy`]), so the nodes' pools hold only the structures still in use.
//! Patronus handles are pipelined on their thread's completion channel, as in the
//! other experiments; every handle has its own connection.

use super::driver::{CLIENT_THREADS, Driven, Logical, Rig, drive, engine_cpu, spread};
use super::patronus_rig::{PatronusRig, lean_client};
use crate::baseline::{BaselineClientConfig, BaselineConfig, BaselineMemory, BaselineNode, Scheme};
use crate::harness::{Check, Experiment, Panel, PanelKind, Point, Row, Series};
use anyhow::{Context as _, Result};
use patronus_core::manager::{Isolation, NodeConfig, Techniques};
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
    /// Frees the structure at `root` through `mem` (no client uses it any more).
    fn destroy<M: RemoteMemory + NamedRoots + Send + 'static>(
        &self,
        mem: &mut M,
        root: u64,
    ) -> Result<()>;
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
    /// Operations, wall time and latencies of the driven clients.
    pub driven: Driven,
    /// Manager (or server) thread CPU.
    pub manager: Duration,
    /// NIC engine CPU (zero in-process).
    pub engine: Duration,
    /// The structure's root (to run on it again).
    pub root: u64,
}

impl OdsRig {
    /// Starts every mechanism's node with a pool of `pool_bytes`, the Patronus node isolating
    /// its clients as `isolation` says, with leases up to `max_lifetime_us`.
    pub fn start(
        rig: &Rig,
        pool_bytes: u64,
        max_lifetime_us: u64,
        isolation: Isolation,
    ) -> Result<Self> {
        let cfg = NodeConfig {
            pool_bytes,
            isolation,
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
                .node_clients(n, &lean_client())?
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

    /// Frees the structure at `root` that runs of `w` on mechanism `mech` used (through a
    /// handle of its own), once no client uses it.
    pub fn destroy<W: Workload>(&self, mech: &str, w: &W, root: u64) -> Result<()> {
        if mech == "Patronus" {
            let mut mem = PatronusMemory::new(
                self.patronus
                    .clients(1, &lean_client())?
                    .pop()
                    .context("a client")?,
            );
            return w.destroy(&mut mem, root);
        }
        let mut mem = self.baseline_connector(mech)?(0)?;
        w.destroy(&mut mem, root)
    }

    /// A way to connect Patronus remote memory from any thread (container `i` from the
    /// compute node of the `i`-th client device, round robin: the containers of a device share
    /// its session and QPs), for runtimes that connect their own clients.
    pub fn patronus_connector(
        &self,
    ) -> Result<
        impl Fn(usize) -> Result<PatronusMemory<SoftProvider>> + Send + Sync + Clone + 'static,
    > {
        let addr = self.patronus.node.address().clone();
        let nodes = self
            .client_devs
            .iter()
            .map(|d| {
                patronus_core::client::ComputeNode::connect(d, &addr, lean_client())
                    .context("connecting a compute node")
            })
            .collect::<Result<Vec<_>>>()?;
        let nodes = std::sync::Arc::new(nodes);
        Ok(move |i: usize| {
            let c = nodes[i % nodes.len()]
                .client()
                .with_context(|| format!("making Patronus client {i}"))?;
            Ok(PatronusMemory::new(c))
        })
    }

    /// The same for a baseline mechanism ("Unprot", "MR" or "RPC").
    pub fn baseline_connector(
        &self,
        mech: &str,
    ) -> Result<
        impl Fn(usize) -> Result<BaselineMemory<SoftProvider>> + Send + Sync + Clone + 'static,
    > {
        let scheme = match mech {
            "Unprot" => Scheme::Unprot,
            "MR" => Scheme::Mr,
            "RPC" => Scheme::Rpc,
            other => anyhow::bail!("no mechanism called {other:?}"),
        };
        let node = if scheme == Scheme::Mr {
            &self.mr.0
        } else {
            &self.base.0
        };
        let (devs, addr) = (self.client_devs.clone(), node.address().clone());
        let mech = mech.to_string();
        Ok(move |i: usize| {
            BaselineMemory::<SoftProvider>::connect(
                &devs[i % devs.len()],
                &addr,
                scheme,
                BaselineClientConfig {
                    timeout: Duration::from_secs(20),
                    ..BaselineClientConfig::default()
                },
            )
            .with_context(|| format!("connecting {mech} client {i}"))
        })
    }

    /// Stops every node.
    pub fn shutdown(self) {
        self.base.0.shutdown();
        self.mr.0.shutdown();
        self.patronus.node.shutdown();
    }
}

/// The paper's protection-overhead bound on the workloads (abstract, §7.3–7.4).
pub const MAX_OVERHEAD: f64 = 0.277;

/// The paper's claims about one workload point (`at`, e.g. "RO, 8 clients"), from each
/// mechanism's throughput (`tput`): protection costs at most [`MAX_OVERHEAD`] of Unprot's
/// throughput, and Patronus is ahead of MR and RPC (`source`: the paper's section).
pub fn workload_checks(tput: impl Fn(&str) -> Option<f64>, at: &str, source: &str) -> Vec<Check> {
    let Some(p) = tput("Patronus") else {
        return Vec::new();
    };
    let mut checks = Vec::new();
    if let Some(u) = tput("Unprot") {
        let overhead = 1.0 - p / u.max(1e-9);
        checks.push(Check {
            claim: format!(
                "protection costs at most {:.1} % of Unprot's throughput ({at}; abstract, {source})",
                MAX_OVERHEAD * 100.0
            ),
            holds: overhead <= MAX_OVERHEAD,
            detail: format!(
                "Patronus {:.1} Kops/s vs Unprot {:.1} Kops/s: {:.1} % {}",
                p / 1e3,
                u / 1e3,
                overhead.abs() * 100.0,
                if overhead >= 0.0 { "lower" } else { "higher" }
            ),
        });
    }
    for other in ["MR", "RPC"] {
        if let Some(o) = tput(other) {
            checks.push(Check {
                claim: format!("Patronus is ahead of {other} ({at}; {source})"),
                holds: p > o,
                detail: format!(
                    "Patronus {:.1} Kops/s vs {other} {:.1} Kops/s ({:.2}×)",
                    p / 1e3,
                    o / 1e3,
                    p / o.max(1e-9)
                ),
            });
        }
    }
    checks
}

/// A log-log panel with one line per mechanism: each row `point` maps to (x, y) is a point
/// of its mechanism's line (rows it maps to `None` are left out; empty lines are dropped).
pub fn mechanism_panel(
    exp: &Experiment,
    title: &str,
    x_label: &str,
    y_label: &str,
    point: impl Fn(&Row) -> Option<(f64, f64)>,
) -> Panel {
    Panel {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        x_log: true,
        y_log: true,
        kind: PanelKind::Lines,
        series: MECHANISMS
            .iter()
            .map(|m| Series {
                name: m.to_string(),
                points: exp
                    .rows
                    .iter()
                    .filter(|r| r.mechanism == *m)
                    .filter_map(|r| point(r).map(|(x, y)| Point::xy(x, y)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect(),
    }
}
