//! The requester half of an RC QP, sans-IO: assigns PSNs, keeps outstanding requests for
//! retransmission, matches responses, runs the ack and RNR timers, and releases completions
//! in posting order.
//!
//! Invariants:
//! - `outstanding` is in posting order; remote requests carry consecutive PSNs.
//! - Completions leave strictly in posting order (a bind that finished early waits behind an
//!   earlier READ), as on a real send queue.
//! - Retries are finite: `retry_count` retransmissions on ack timeout, `rnr_retry` on RNR NAKs;
//!   both are reset by progress (a matching response).

use crate::soft::wire::{NakCode, Request, RequestOp, ResponseKind};
use crate::verbs::{Psn, QpNumber, QpTiming, Sge, Timestamp, WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::sync::Arc;

/// Request payloads are shared between the outstanding queue and the link.
pub type Payload = Arc<[u8]>;

/// One posted send-queue request.
#[derive(Debug)]
pub struct Pending {
    /// Caller's id.
    pub wr_id: u64,
    /// Report success?
    pub signaled: bool,
    /// Kind, for the completion.
    pub opcode: WcOpcode,
    /// PSN and request for remote operations; `None` for local ones (bind, invalidate).
    pub remote: Option<(Psn, RequestOp<Payload>)>,
    /// Local destination of READ data or an atomic's previous value.
    pub local: Option<Sge>,
    /// Bytes transferred, for the completion.
    pub byte_len: u32,
    /// Final status once known.
    pub result: Option<WcStatus>,
}

/// What the glue must do after a response or a timer.
#[derive(Debug, PartialEq, Eq)]
pub enum RequesterAction {
    /// Nothing more.
    None,
    /// Transmit these requests again, in order.
    Retransmit(Vec<Request<Payload>>),
    /// The QP must enter ERR (outstanding requests were flushed).
    Fatal,
}

/// Requester state of one QP.
#[derive(Debug)]
pub struct Requester {
    peer_qp: QpNumber,
    next_psn: Psn,
    outstanding: VecDeque<Pending>,
    timing: QpTiming,
    retries_left: u8,
    rnr_left: u8,
    /// The deadline is an RNR back-off, not an ack timeout.
    rnr_waiting: bool,
    deadline: Option<Timestamp>,
}

impl Requester {
    /// A requester that sends to `peer_qp` starting at `start_psn`.
    pub fn new(peer_qp: QpNumber, start_psn: Psn, timing: QpTiming) -> Self {
        Requester {
            peer_qp,
            next_psn: start_psn,
            outstanding: VecDeque::new(),
            timing,
            retries_left: timing.retry_count,
            rnr_left: timing.rnr_retry,
            rnr_waiting: false,
            deadline: None,
        }
    }

    /// Requests posted and not yet released as completions.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// When [`on_timeout`](Self::on_timeout) must next run.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.deadline
    }

    fn awaiting_response(&self) -> bool {
        self.outstanding
            .iter()
            .any(|p| p.remote.is_some() && p.result.is_none())
    }

    /// Queues a remote request; returns the packet to transmit.
    pub fn push_remote(
        &mut self,
        pending: PendingSpec,
        op: RequestOp<Payload>,
        now: Timestamp,
    ) -> Request<Payload> {
        let psn = self.next_psn;
        self.next_psn = psn.next();
        if !self.awaiting_response() {
            self.deadline = Some(now.plus_us(self.timing.ack_timeout_us));
        }
        let req = Request {
            dst_qp: self.peer_qp,
            psn,
            op: op.clone(),
        };
        self.outstanding.push_back(Pending {
            wr_id: pending.wr_id,
            signaled: pending.signaled,
            opcode: pending.opcode,
            remote: Some((psn, op)),
            local: pending.local,
            byte_len: pending.byte_len,
            result: None,
        });
        req
    }

    /// Queues a local request that already executed with `status`.
    pub fn push_local(&mut self, pending: PendingSpec, status: WcStatus) {
        self.outstanding.push_back(Pending {
            wr_id: pending.wr_id,
            signaled: pending.signaled,
            opcode: pending.opcode,
            remote: None,
            local: pending.local,
            byte_len: pending.byte_len,
            result: Some(status),
        });
    }

    /// Handles a response. `deliver` places READ data or an atomic's value into the local
    /// buffer and returns the resulting status (success or a local protection error).
    pub fn on_response<D: AsRef<[u8]>>(
        &mut self,
        psn: Psn,
        kind: &ResponseKind<D>,
        now: Timestamp,
        deliver: &mut dyn FnMut(&Pending, &ResponseKind<D>) -> WcStatus,
    ) -> RequesterAction {
        let Some(head) = self
            .outstanding
            .iter_mut()
            .find(|p| p.remote.is_some() && p.result.is_none())
        else {
            return RequesterAction::None; // a late duplicate: everything is answered
        };
        let head_psn = head.remote.as_ref().map(|(p, _)| *p).unwrap_or_default();
        let dist = psn.distance(head_psn);
        if dist < 0 {
            return RequesterAction::None; // duplicate of an answered request
        }
        if dist > 0 {
            // A response to something not yet due: forged or corrupted.
            head.result = Some(WcStatus::BadResponseError);
            self.flush();
            return RequesterAction::Fatal;
        }
        let status = match (kind, head.opcode) {
            (ResponseKind::Nak(NakCode::ReceiverNotReady), _) => {
                if self.rnr_left == 0 {
                    head.result = Some(WcStatus::RnrRetryExceeded);
                    self.flush();
                    return RequesterAction::Fatal;
                }
                self.rnr_left -= 1;
                self.rnr_waiting = true;
                self.deadline = Some(now.plus_us(self.timing.rnr_timer_us));
                return RequesterAction::None;
            }
            (ResponseKind::Nak(code), _) => nak_status(*code),
            (ResponseKind::ReadData(d), WcOpcode::Read)
                if d.as_ref().len() == head.byte_len as usize =>
            {
                deliver(head, kind)
            }
            (ResponseKind::AtomicAck(_), WcOpcode::CompareSwap | WcOpcode::FetchAdd) => {
                deliver(head, kind)
            }
            (ResponseKind::Ack, WcOpcode::Write | WcOpcode::Send) => WcStatus::Success,
            _ => WcStatus::BadResponseError,
        };
        head.result = Some(status);
        self.retries_left = self.timing.retry_count;
        self.rnr_left = self.timing.rnr_retry;
        if status != WcStatus::Success {
            self.flush();
            return RequesterAction::Fatal;
        }
        self.deadline = self
            .awaiting_response()
            .then(|| now.plus_us(self.timing.ack_timeout_us));
        RequesterAction::None
    }

    /// Runs the ack / RNR timer.
    pub fn on_timeout(&mut self, now: Timestamp) -> RequesterAction {
        match self.deadline {
            Some(d) if d <= now => {}
            _ => return RequesterAction::None,
        }
        if !self.awaiting_response() {
            self.deadline = None;
            return RequesterAction::None;
        }
        // An RNR wait and an ack timeout both resend from the oldest unanswered request; only
        // ack timeouts consume the transport retry budget (RNR retries were counted already).
        if !std::mem::take(&mut self.rnr_waiting) {
            if self.retries_left == 0 {
                if let Some(head) = self
                    .outstanding
                    .iter_mut()
                    .find(|p| p.remote.is_some() && p.result.is_none())
                {
                    head.result = Some(WcStatus::RetryExceeded);
                }
                self.flush();
                return RequesterAction::Fatal;
            }
            self.retries_left -= 1;
        }
        self.deadline = Some(now.plus_us(self.timing.ack_timeout_us));
        let resend = self
            .outstanding
            .iter()
            .filter(|p| p.result.is_none())
            .filter_map(|p| p.remote.as_ref())
            .map(|(psn, op)| Request {
                dst_qp: self.peer_qp,
                psn: *psn,
                op: op.clone(),
            })
            .collect();
        RequesterAction::Retransmit(resend)
    }

    /// The link to the peer failed: the oldest unanswered request fails with `RetryExceeded`
    /// (as when a peer vanishes) and everything else is flushed.
    pub fn link_lost(&mut self) {
        if let Some(head) = self
            .outstanding
            .iter_mut()
            .find(|p| p.remote.is_some() && p.result.is_none())
        {
            head.result = Some(WcStatus::RetryExceeded);
        }
        self.flush();
    }

    /// Completes every unfinished request as flushed.
    pub fn flush(&mut self) {
        for p in self.outstanding.iter_mut().filter(|p| p.result.is_none()) {
            p.result = Some(WcStatus::WrFlushError);
        }
        self.deadline = None;
    }

    /// Releases finished requests at the head, in order, as completions (unsignaled successes
    /// are dropped silently, as on hardware).
    pub fn release(&mut self, qpn: QpNumber, out: &mut dyn FnMut(WorkCompletion)) {
        while let Some(head) = self.outstanding.front() {
            let Some(status) = head.result else { break };
            if status != WcStatus::Success || head.signaled {
                out(WorkCompletion {
                    wr_id: head.wr_id,
                    status,
                    opcode: head.opcode,
                    byte_len: head.byte_len,
                    qp_num: qpn,
                    invalidated_rkey: None,
                });
            }
            self.outstanding.pop_front();
        }
    }
}

/// The completion-facing part of a request being posted.
#[derive(Clone, Copy, Debug)]
pub struct PendingSpec {
    /// Caller's id.
    pub wr_id: u64,
    /// Report success?
    pub signaled: bool,
    /// Kind.
    pub opcode: WcOpcode,
    /// Local destination (READ, atomics).
    pub local: Option<Sge>,
    /// Bytes transferred.
    pub byte_len: u32,
}

/// Work-completion status for a NAK (rxe `rxe_comp.c` `check_ack`).
pub fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::RemoteAccessError => WcStatus::RemoteAccessError,
        NakCode::RemoteOperationalError => WcStatus::RemoteOperationError,
        NakCode::InvalidRequest | NakCode::InvalidRkey | NakCode::PsnSequenceError => {
            WcStatus::RemoteInvalidRequestError
        }
        NakCode::ReceiverNotReady => WcStatus::RnrRetryExceeded,
    }
}
