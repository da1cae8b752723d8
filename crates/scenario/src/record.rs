//! What a run records as it goes, for the report and the files it leaves: the node's lives,
//! the faults as they happened, and where those files are.

use crate::faults::Fault;
use serde::Serialize;
use std::path::PathBuf;

/// One life of the node, as recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Epoch {
    /// Its pid.
    pub pid: u32,
    /// When it was spawned.
    pub spawned: u64,
    /// When it printed its address.
    pub ready: u64,
    /// When its table's `kv create` completed.
    pub table: Option<u64>,
    /// When it was signalled to end.
    pub signalled: Option<u64>,
    /// When it was reaped.
    pub reaped: Option<u64>,
    /// How it ended.
    pub how: Option<String>,
}

/// A fault as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    /// When (ns on the run's clock).
    pub at: u64,
    /// What was planned.
    #[serde(flatten)]
    pub fault: Fault,
    /// What happened: the process reached, or why nothing was.
    pub what: String,
    /// Whether it reached a process.
    pub hit: bool,
}

/// The files a run leaves.
#[derive(Clone, Debug)]
pub struct Files {
    /// The history, JSON lines (`lincheck check FILE`).
    pub history: PathBuf,
    /// Every invocation with how it was classified.
    pub invocations: PathBuf,
    /// The nodes' lives, the faults, the scenario's own commands.
    pub events: PathBuf,
    /// The directory.
    pub dir: PathBuf,
}
