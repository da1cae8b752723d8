//! A run's settings: which run, and what it is made of.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Faults on the schedule its seed draws; the history must be linearizable.
    Faults,
    /// No fault, CPU burners on the same cores; nothing may fail or take longer than the limit.
    Busy,
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which run.
    pub mode: Mode,
    /// The `patronus` binary.
    pub patronus: PathBuf,
    /// Where its files go.
    pub out: PathBuf,
    /// How long the loops run (faults mode: plus the time the last faults take to end).
    pub duration: Duration,
    /// Seeds the workload and the fault schedule.
    pub seed: u64,
    /// `kv` loops in all.
    pub loops: usize,
    /// Of which insert fresh keys.
    pub inserters: usize,
    /// Hot keys.
    pub keys: usize,
    /// `kv create` arguments after `create`.
    pub shape: Vec<String>,
    /// The node's pool, MiB.
    pub pool_mib: u32,
    /// The node's admin endpoint, if any: its status is sampled every 5 s into
    /// `status.jsonl` (for a stall: who holds what).
    pub admin: Option<SocketAddr>,
    /// CPU-burning processes (busy mode).
    pub burners: usize,
    /// Busy mode: an invocation longer than this is a failure.
    pub max_latency: Duration,
    /// An invocation running this long is killed and reported as hung.
    pub hang: Duration,
    /// The checker's budget.
    pub budget: lincheck::Budget,
}
