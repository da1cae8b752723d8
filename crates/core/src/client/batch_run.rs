//! Running a batch of data-path ops to its results, blocking or a step at a time.
//!
//! A run posts the ops still to do with one doorbell (a *round*), files their completions
//! from the data CQ, settles each op (its result, a retry on the lane's next QP, or an error
//! as the client core decides: `core/data_path.rs`) and posts the next round until none is
//! left. [`Batch::execute`](super::Batch::execute) drives a run to its end at once; a
//! [`PostedBatch`] is a run whose first round was posted and which its owner advances when
//! it likes ([`PostedBatch::poll`] never blocks), so one thread keeps the batches of many
//! clients in flight together.
//!
//! Invariants:
//! - A client has at most one posted batch not yet taken (done or not): its ops live in the
//!   client's staging memory from offset 0, and the data CQ's completions of an earlier epoch
//!   are dropped. A batch started or executed meanwhile is refused (`InvalidArgument`), not
//!   posted.
//! - Every op ends with exactly one result; an op whose completion never comes within
//!   [`DEAD_TRANSPORT`] of the round's posting reports `RetryExceeded` (then `OutcomeUnknown`
//!   for writes and atomics, as the client core decides).

use super::core::{Fault, NOT_POSTED, Next, RetryRounds};
use super::data::Batch;
use super::driver::Client;
use super::error::ClientError;
use super::op::{Abandoned, BatchRun, Kind, Op, OpResult, Round};
use super::qps::{LaneView, tagged};
use crate::rpc::IdleWait;
use rnic::{MemoryBuffer, MemoryRegion, Provider, QueuePair, SendOp, SendWr, Sge, WcStatus};
use std::sync::Arc;

/// How long a batch waits for completions that do not come before it calls the transport dead.
pub(super) const DEAD_TRANSPORT: std::time::Duration = std::time::Duration::from_secs(10);

/// Bits of a batch's work-request id that hold the op's index.
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// A batch's epoch: the 27 id bits above the index (the user's tag starts at bit 47, and
/// bit 63 marks posted extensions).
const EPOCH_MASK: u64 = (1 << 27) - 1;

/// A batch posted with [`Batch::start`](super::Batch::start), not yet taken.
#[derive(Debug)]
#[must_use = "a posted batch's results are taken with `poll` or `wait`"]
pub struct PostedBatch {
    user: u16,
    run: BatchRun,
    /// It is its client's batch in flight (not one refused because another was).
    in_flight: bool,
    /// Where it goes if dropped untaken: its client finishes it before its next batch.
    abandoned: Abandoned,
}

impl Drop for PostedBatch {
    fn drop(&mut self) {
        if self.in_flight {
            let run =
                std::mem::replace(&mut self.run, BatchRun::refused(0, &ClientError::NotFound));
            *self.abandoned.lock() = Some(run);
        }
    }
}

impl PostedBatch {
    /// The results (one per op, in order) once every op has its own; `None` while some are
    /// in flight. Never blocks (a failure that needs a QP switched is handled in the call
    /// that sees it). `client` is the one that started the batch.
    pub fn poll<P: Provider>(
        &mut self,
        client: &mut Client<P>,
    ) -> Option<Vec<Result<OpResult, ClientError>>> {
        if client.user != self.user {
            return Some(self.foreign());
        }
        if !self.run.is_done() && !client.advance(&mut self.run, false) {
            return None;
        }
        self.land(client);
        Some(self.run.finish())
    }

    /// The results (one per op, in order), waiting for them.
    pub fn wait<P: Provider>(
        mut self,
        client: &mut Client<P>,
    ) -> Vec<Result<OpResult, ClientError>> {
        if client.user != self.user {
            return self.foreign();
        }
        if !self.run.is_done() {
            client.advance(&mut self.run, true);
        }
        self.land(client);
        self.run.finish()
    }

    /// Whether every op has its result (the next `poll` returns them).
    pub fn is_done(&self) -> bool {
        self.run.is_done()
    }

    /// Its client has no batch in flight any more.
    fn land<P: Provider>(&mut self, client: &mut Client<P>) {
        if std::mem::take(&mut self.in_flight) {
            client.batch_in_flight = false;
        }
    }

    /// Polled through another client: every op fails (the batch stays its client's).
    fn foreign(&self) -> Vec<Result<OpResult, ClientError>> {
        let e = ClientError::InvalidArgument(
            "a posted batch is polled through the client that started it",
        );
        BatchRun::refused(self.run.results.len(), &e).finish()
    }
}

impl<P: Provider> Batch<'_, P> {
    /// Posts every op with one doorbell and waits for them; one result per op, in order.
    pub fn execute(self) -> Vec<Result<OpResult, ClientError>> {
        let Batch { client, ops } = self;
        let mut run = client.prepare(ops);
        client.advance(&mut run, true);
        run.finish()
    }

    /// Posts every op with one doorbell and returns at once; [`PostedBatch::poll`] or
    /// [`PostedBatch::wait`] takes the results (one per op, in order). One thread can keep
    /// the batches of many clients in flight together this way. A client has at most one
    /// posted batch not yet taken: a batch started, or executed, meanwhile fails with
    /// `InvalidArgument` without being posted.
    pub fn start(self) -> PostedBatch {
        let Batch { client, ops } = self;
        let mut run = client.prepare(ops);
        let in_flight = !run.is_refused();
        if in_flight {
            client.advance(&mut run, false);
            client.batch_in_flight = true;
        }
        PostedBatch {
            user: client.user,
            run,
            in_flight,
            abandoned: client.abandoned.clone(),
        }
    }
}

/// The error of an op left unrun (it did not execute, or is a READ) because no QP could take
/// the broken one's place: the session's end as it is (the op's permission ended with it),
/// else the failed switch.
fn unrun(switch: &Arc<ClientError>) -> ClientError {
    match **switch {
        ClientError::SessionEnded(why) => ClientError::SessionEnded(why),
        _ => ClientError::FailoverFailed(switch.clone()),
    }
}

impl<P: Provider> Client<P> {
    /// The run of `ops`: each placed in the staging memory (an op that does not fit fails
    /// alone), nothing posted yet. Refused as a whole while another run is in flight.
    pub(super) fn prepare(&mut self, ops: Vec<Result<Op, ClientError>>) -> BatchRun {
        let abandoned = self.abandoned.lock().take();
        if let Some(mut run) = abandoned {
            // Its owner dropped it untaken: finish it (its results go nowhere).
            self.advance(&mut run, true);
            self.batch_in_flight = false;
        }
        if self.batch_in_flight {
            let e = ClientError::InvalidArgument("another batch of this client is in flight");
            return BatchRun::refused(ops.len(), &e);
        }
        let mut results = Vec::with_capacity(ops.len());
        let mut todo = Vec::new();
        let mut ops_ok: Vec<Option<Op>> = Vec::with_capacity(ops.len());
        let mut cursor = 0usize;
        // The end of the staging buffer holds posted extensions' results.
        let staging_len = self.staging.len() - super::posted::POSTED_STAGING;
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Ok(mut op) => {
                    let start = cursor.next_multiple_of(8);
                    if start + op.len as usize > staging_len {
                        results.push(Some(Err(ClientError::InvalidArgument(
                            "batch larger than the staging buffer",
                        ))));
                        ops_ok.push(None);
                        continue;
                    }
                    op.staging = start;
                    cursor = start + op.len as usize;
                    results.push(None);
                    ops_ok.push(Some(op));
                    todo.push(i);
                }
                Err(e) => {
                    results.push(Some(Err(e)));
                    ops_ok.push(None);
                }
            }
        }
        BatchRun {
            results,
            ops: ops_ok,
            todo,
            rounds: RetryRounds::default(),
            round: None,
        }
    }

    /// Advances `run`: posts a round if none is on the wire, files completions, settles a
    /// round whose completions are all in, and goes on. With `block`, until every op has its
    /// result; without, until it would have to wait. Whether every op has its result.
    pub(super) fn advance(&mut self, run: &mut BatchRun, block: bool) -> bool {
        loop {
            if run.round.is_none() {
                if run.todo.is_empty() {
                    return true;
                }
                if !self.post_round(run) {
                    continue; // no QP to post on: the ops ended with the switch's error
                }
            }
            let Some(round) = run.round.as_mut() else {
                continue;
            };
            if !self.collect(round, block) {
                return false;
            }
            if let Some(round) = run.round.take() {
                self.settle(run, round);
            }
        }
    }

    /// Posts `run`'s ops still to do on this client's lane (switching a broken lane's QP
    /// first). `false` when no QP could take the broken one's place: the ops still to do end
    /// with that error.
    fn post_round(&mut self, run: &mut BatchRun) -> bool {
        if let Some(broken) = self.broken_lane() {
            // Broke since the last batch (a lost link, another user's fault): switch
            // before posting anything.
            if let Err(e) = self.switch_qp(broken) {
                self.fail_todo(run, e);
                return false;
            }
        }
        // Type 2: another user's switch may not have bound the windows to the new QP yet.
        let lane = match self.bound_lane() {
            Ok(lane) => lane,
            Err(e) => {
                self.fail_todo(run, e);
                return false;
            }
        };
        let indexes = std::mem::take(&mut run.todo);
        run.round = Some(self.post(&lane, &run.ops, indexes));
        true
    }

    fn fail_todo(&mut self, run: &mut BatchRun, e: ClientError) {
        let e = Arc::new(e);
        for i in std::mem::take(&mut run.todo) {
            run.results[i] = Some(Err(unrun(&e)));
        }
    }

    /// Posts the ops at `indexes` on `lane` with one doorbell; ops the QP did not take are
    /// filed as never posted.
    fn post(&mut self, lane: &LaneView<P>, ops: &[Option<Op>], indexes: Vec<usize>) -> Round {
        // 27 bits of epoch above 20 bits of index: a batch's ids never carry the posted
        // extensions' tag nor the user's.
        self.epoch = (self.epoch + 1) & EPOCH_MASK;
        let epoch = self.epoch;
        let lkey = self.staging_mr.lkey();
        let base = self.staging.addr();
        let mut wrs = Vec::with_capacity(indexes.len());
        for &i in &indexes {
            let Some(op) = ops[i].as_ref() else { continue };
            let local = Sge {
                addr: base + op.staging as u64,
                length: op.len,
                lkey,
            };
            if matches!(op.kind, Kind::Write) {
                let _ = self.staging.write(op.staging, &op.payload);
            }
            let wr_op = match op.kind {
                Kind::Read => SendOp::Read {
                    local,
                    remote_addr: op.addr,
                    rkey: op.rkey(),
                },
                Kind::Write => SendOp::Write {
                    local,
                    remote_addr: op.addr,
                    rkey: op.rkey(),
                },
                Kind::Cas { compare, swap } => SendOp::CompareSwap {
                    local,
                    remote_addr: op.addr,
                    rkey: op.rkey(),
                    compare,
                    swap,
                },
                Kind::Faa { add } => SendOp::FetchAdd {
                    local,
                    remote_addr: op.addr,
                    rkey: op.rkey(),
                    add,
                },
                Kind::Invalidate => SendOp::SendWithInvalidate {
                    local: None,
                    invalidate: op.rkey(),
                },
            };
            wrs.push(SendWr {
                wr_id: tagged(self.user, (epoch << INDEX_BITS) | i as u64),
                signaled: true,
                op: wr_op,
            });
        }
        let posted = match lane.post_send(&wrs) {
            Ok(()) => wrs.len(),
            Err((k, _)) => k,
        };
        let out = indexes
            .iter()
            .skip(posted)
            .map(|&i| (i, NOT_POSTED))
            .collect();
        Round {
            epoch,
            qpn: lane.qp.qp_num(),
            incarnation: lane.incarnation,
            indexes,
            posted,
            out,
            causes: Vec::new(),
            got: 0,
            deadline: self.clocks.timer.now().plus(DEAD_TRANSPORT),
            idle: IdleWait::default(),
        }
    }

    /// Files the round's completions from the data CQ; with `block`, until all are in (a
    /// transport that completes nothing for [`DEAD_TRANSPORT`] of the timer clock is dead:
    /// what it did not complete reports `RetryExceeded`). Whether all are in.
    fn collect(&mut self, round: &mut Round, block: bool) -> bool {
        let mut routed = std::mem::take(&mut self.routed);
        while round.got < round.posted {
            routed.clear();
            let n = self.node.data_cq.poll(self.user, &mut routed);
            for r in &routed {
                if self.posted.file(&r.wc) {
                    continue; // a posted extension's: its poll takes it
                }
                let id = r.wc.wr_id;
                if r.wc.qp_num != round.qpn || id >> INDEX_BITS != round.epoch {
                    continue; // from a QP or batch already given up on
                }
                round.got += 1;
                round.causes.push(r.cause);
                round.out.push(((id & INDEX_MASK) as usize, r.wc.status));
            }
            if n > 0 {
                round.idle.busy();
                continue;
            }
            if self.clocks.timer.now() >= round.deadline {
                for &i in round.indexes.iter().take(round.posted) {
                    if !round.out.iter().any(|(j, _)| *j == i) {
                        round.out.push((i, WcStatus::RetryExceeded));
                    }
                }
                round.got = round.posted;
                break;
            }
            if !block {
                break;
            }
            // Sleep on the CQ after a short spin: the NIC may need this core (a TCP engine
            // thread on a small machine). At most 1 ms at a time, as polling drives the
            // provider's timers.
            let (cq, user) = (&self.node.data_cq, self.user);
            round
                .idle
                .idle_with(|| cq.wait(user, std::time::Duration::from_millis(1)));
        }
        routed.clear();
        self.routed = routed;
        round.got >= round.posted
    }

    /// Settles a round whose completions are all in: each op's result, or a retry on the
    /// lane's next QP (switched here), as the client core decides.
    fn settle(&mut self, run: &mut BatchRun, round: Round) {
        let fault = Fault::of_shared(round.out.iter().map(|&(_, s)| s), round.causes.into_iter());
        let may_retry = run.rounds.may_retry(fault);
        let mut retry = Vec::new();
        let mut broken = false;
        for (i, status) in round.out {
            let is_read = run.ops[i]
                .as_ref()
                .is_some_and(|op| matches!(op.kind, Kind::Read));
            // The core is asked only about failures (its lock stays off the fast path).
            let next = if status == WcStatus::Success {
                Next::Retry
            } else {
                self.node.lock().core.data_next_step(status, fault, is_read)
            };
            match (status, next) {
                (WcStatus::Success, _) => {
                    run.results[i] = run.ops[i].as_ref().map(|op| Ok(self.output(op)));
                }
                (_, Next::Retry) if may_retry => {
                    broken |= status != NOT_POSTED;
                    retry.push(i);
                }
                (s, Next::Retry) => {
                    broken = true;
                    run.results[i] = Some(Err(ClientError::FailedAfterFailover(s)));
                }
                (s, Next::Denied) => {
                    broken = true;
                    run.results[i] = Some(Err(ClientError::Denied(s)));
                }
                (s, Next::Unknown) => {
                    broken = true;
                    run.results[i] = Some(Err(ClientError::OutcomeUnknown(s)));
                }
            }
        }
        if broken {
            run.rounds.broke(fault);
            if let Err(e) = self.switch_qp(round.incarnation) {
                let e = Arc::new(e);
                for &i in &retry {
                    run.results[i] = Some(Err(unrun(&e)));
                }
                return;
            }
        }
        run.todo = retry;
    }
}
