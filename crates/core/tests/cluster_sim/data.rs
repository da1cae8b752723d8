//! The data path: one-sided READ, WRITE, CAS and FAA over a per-client data link (one RC data
//! QP) to the node's memory model, and the client's side of a batch.
//!
//! The node side checks each op as the responder NIC would (`FakeNic::can_access` and
//! `can_atomic`: the window the grant named must be bound under the rkey's key byte, cover
//! the range and carry the right). A refused op completes `RemoteAccessError`; the QP breaks
//! there and everything behind it is flushed unexecuted (`WrFlushError`). The link can also
//! die, each op's turn drawn from the seed: *before* the op executes (it completes
//! `RetryExceeded`, nothing behind it runs), or *after* it executed but before its completion
//! came back (it completes `RetryExceeded` too; the responder may have run some of the ops
//! behind it as well, which the client sees flushed).
//!
//! The client side is the driver's batch loop (`client/data.rs`): the completions go through
//! the client core's exactly-once decision (`ClientCore::data_next_step`, with
//! `Fault::of` over the batch), ops it says to retry run again on a fresh link (the
//! promoted spare QP) within the batch's `RetryRounds` budget, and every op ends with one
//! outcome the oracle checks against how many times the node executed it.

use patronus_core::client::core::{ClientCore, Fault, Next, RetryRounds};
use patronus_core::manager::{ClientId, TenantId};
use rnic::{MemoryKey, WcStatus};

/// A one-sided op's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Cas,
    Faa,
}

/// One one-sided op, decided under a live lease.
#[derive(Clone, Copy, Debug)]
pub struct DataOp {
    pub kind: OpKind,
    pub rkey: MemoryKey,
    pub addr: u64,
    pub len: u64,
    /// The buffer window's bind count at the grant (to tell a wrapped key byte).
    pub epoch: u64,
    /// Unique over the run: the oracle counts each op's executions by it.
    pub tag: u64,
}

impl DataOp {
    pub fn is_read(&self) -> bool {
        self.kind == OpKind::Read
    }
}

/// How an op ended, as the application sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Completed successfully.
    Done,
    /// The NIC refused it.
    Denied,
    /// `OutcomeUnknown`: it may have executed.
    Unknown,
    /// It failed again on the fresh link (`FailedAfterFailover`): the core had said it did
    /// not execute (or is a READ).
    Failed,
}

/// What a client reaches of the node's data path.
pub trait DataLink {
    /// Posts `ops` on client's data QP; one completion status per op, in order.
    fn post(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        ops: &[DataOp],
    ) -> Result<Vec<WcStatus>, String>;
    /// `op` ended with `outcome` (checked against its executions).
    fn ended(&mut self, op: &DataOp, outcome: Outcome) -> Result<(), String>;
}

/// Runs a batch as the client's driver does: post, feed the completions to the core's
/// decision, retry on a fresh link what it says to retry (within the batch's `RetryRounds`),
/// report every op's outcome.
pub fn run_batch<L: DataLink + ?Sized>(
    core: &ClientCore,
    link: &mut L,
    client: ClientId,
    tenant: TenantId,
    ops: &[DataOp],
) -> Result<(), String> {
    let mut outcome: Vec<Option<Outcome>> = vec![None; ops.len()];
    let mut todo: Vec<usize> = (0..ops.len()).collect();
    let mut rounds = RetryRounds::default();
    while !todo.is_empty() {
        let batch: Vec<DataOp> = todo.iter().map(|&i| ops[i]).collect();
        let statuses = link.post(client, tenant, &batch)?;
        let fault = Fault::of(statuses.iter().copied());
        let may_retry = rounds.may_retry(fault);
        if statuses.iter().any(|&s| s != WcStatus::Success) {
            rounds.broke(fault);
        }
        let mut retry = Vec::new();
        for (&i, &status) in todo.iter().zip(&statuses) {
            if status == WcStatus::Success {
                outcome[i] = Some(Outcome::Done);
                continue;
            }
            outcome[i] = Some(match core.data_next_step(status, fault, ops[i].is_read()) {
                Next::Retry if may_retry => {
                    retry.push(i);
                    continue;
                }
                Next::Retry => Outcome::Failed,
                Next::Denied => Outcome::Denied,
                Next::Unknown => Outcome::Unknown,
            });
        }
        todo = retry;
    }
    for (op, o) in ops.iter().zip(outcome) {
        link.ended(op, o.ok_or("an op of the batch without an outcome")?)?;
    }
    Ok(())
}
