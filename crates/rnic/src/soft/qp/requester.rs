//! The requester half of an RC QP, sans-IO: assigns PSNs, keeps outstanding requests for
//! retransmission, matches responses, runs the ack and RNR timers, and releases completions
//! in posting order.
//!
//! Invariants:
//! - `outstanding` is in posting order; remote requests carry consecutive PSNs.
//! - Completions leave strictly in posting order (a bind that finished early waits behind an
//!   earlier READ), as on a real send queue.
//! - Retries are finite: on ack timeouts as the link's [`RetryPolicy`] says (`retry_count`
//!   retransmissions, or a time budget without a response: see [`AckTimer`]), `rnr_retry` on
//!   RNR NAKs; both are reset by progress (a matching response).
//! - Each remote request remembers when it first went out and whether it was sent again, so
//!   the ack timer gets round-trip samples from requests sent once only (Karn's algorithm).

use super::ack_timer::{AckTimer, Expiry};
use crate::soft::link::{Admission, RetryPolicy};
use crate::soft::wire::{NakCode, Request, RequestOp, ResponseKind};
use crate::verbs::{Psn, QpNumber, QpTiming, Sge, Timestamp, WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

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
    /// When the request was first transmitted.
    pub sent_at: Timestamp,
    /// Whether it was transmitted more than once (its response then gives no RTT sample).
    pub retransmitted: bool,
    /// Whether its first transmission carried AckReq: it gets a response of its own before
    /// any later request's (links deliver in order, so a response to a later request first is
    /// forged). One without is acknowledged by the next response (cumulative), also when a
    /// probe of it asked later (the probe's answer comes after the later requests').
    pub ack_req: bool,
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
    timer: AckTimer,
    rnr_left: u8,
    /// The deadline is an RNR back-off, not an ack timeout.
    rnr_waiting: bool,
    deadline: Option<Timestamp>,
    /// At most this many unsignaled WRITEs and SENDs in a row go without AckReq (1: every
    /// request asks).
    ack_every: u32,
    /// Unsignaled WRITEs and SENDs sent without AckReq since the last request that asked
    /// (or a READ or atomic, whose response acknowledges them too).
    unasked: u32,
}

impl Requester {
    /// A requester that sends to `peer_qp` starting at `start_psn`, with the verbs contract's
    /// ack timer.
    pub fn new(peer_qp: QpNumber, start_psn: Psn, timing: QpTiming) -> Self {
        Self::with_policy(peer_qp, start_psn, timing, RetryPolicy::Verbs)
    }

    /// A requester whose ack timer follows its link's `policy`.
    pub fn with_policy(
        peer_qp: QpNumber,
        start_psn: Psn,
        timing: QpTiming,
        policy: RetryPolicy,
    ) -> Self {
        Requester {
            peer_qp,
            next_psn: start_psn,
            outstanding: VecDeque::new(),
            timing,
            timer: AckTimer::new(policy, timing),
            rnr_left: timing.rnr_retry,
            rnr_waiting: false,
            deadline: None,
            ack_every: 1,
            unasked: 0,
        }
    }

    /// Lets at most `n - 1` unsignaled WRITEs and SENDs in a row go without AckReq, so their
    /// acknowledgements are coalesced into the next one (1, the default: every request asks).
    /// Nothing waits for an unsignaled request's acknowledgement but its send-queue slot, so
    /// `n` must stay well below the send queue's depth.
    pub fn set_ack_every(&mut self, n: u32) {
        self.ack_every = n.max(1);
    }

    /// Requests posted and not yet released as completions.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// When [`on_timeout`](Self::on_timeout) must next run.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.deadline
    }

    /// The ack timer (its RTO and, on a stream, the estimator behind it).
    pub fn ack_timer(&self) -> &AckTimer {
        &self.timer
    }

    /// Whether a signaled request is still unanswered (a poller may be waiting for its
    /// completion).
    pub fn awaits_signaled(&self) -> bool {
        self.outstanding
            .iter()
            .any(|p| p.signaled && p.result.is_none())
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
            self.timer.start(now);
            self.deadline = Some(self.timer.deadline(now));
        }
        let acked_type = matches!(op, RequestOp::Write { .. } | RequestOp::Send { .. });
        let ack_req = !acked_type || pending.signaled || self.unasked + 1 >= self.ack_every;
        self.unasked = if ack_req { 0 } else { self.unasked + 1 };
        let req = Request {
            dst_qp: self.peer_qp,
            psn,
            op: op.clone(),
            ack_req,
        };
        self.outstanding.push_back(Pending {
            wr_id: pending.wr_id,
            signaled: pending.signaled,
            opcode: pending.opcode,
            remote: Some((psn, op)),
            local: pending.local,
            byte_len: pending.byte_len,
            result: None,
            sent_at: now,
            retransmitted: false,
            ack_req,
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
            sent_at: Timestamp::ZERO,
            retransmitted: false,
            ack_req: false,
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
        // Acknowledgements are cumulative: a response to a later request acknowledges the
        // WRITEs and SENDs before it that went without AckReq (IB's coalesced ACKs).
        while let Some(head) = self
            .outstanding
            .iter_mut()
            .find(|p| p.remote.is_some() && p.result.is_none())
        {
            let head_psn = head.remote.as_ref().map(|(p, _)| *p).unwrap_or_default();
            if head.ack_req || psn.distance(head_psn) <= 0 {
                break;
            }
            if matches!(kind, ResponseKind::Nak(NakCode::PsnSequenceError)) {
                break; // the responder never got this far: not an acknowledgement
            }
            head.result = Some(WcStatus::Success);
        }
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
                self.timer.peer_alive(now);
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
        let sample: Option<Duration> = (!head.retransmitted).then(|| now.since(head.sent_at));
        self.timer.progress(now, sample);
        self.rnr_left = self.timing.rnr_retry;
        if status != WcStatus::Success {
            self.flush();
            return RequesterAction::Fatal;
        }
        self.deadline = self.awaiting_response().then(|| self.timer.deadline(now));
        RequesterAction::None
    }

    /// Decides on READ data of `len` bytes answering `psn` from its header: delivered if it
    /// answers an outstanding READ of exactly that length, discarded if it answers a request
    /// already answered (a late duplicate, which [`on_response`](Self::on_response) ignores
    /// too), refused otherwise (it would fail the QP as a bad response).
    pub fn admit_read_data(&self, psn: Psn, len: usize) -> Admission {
        let unanswered = self
            .outstanding
            .iter()
            .find(|p| p.remote.is_some() && p.result.is_none());
        let Some((head_psn, _)) = unanswered.and_then(|p| p.remote.as_ref()) else {
            return Admission::Discard;
        };
        if psn.distance(*head_psn) < 0 {
            return Admission::Discard;
        }
        let asked = self
            .outstanding
            .iter()
            .find(|p| p.remote.as_ref().is_some_and(|(p, _)| *p == psn));
        match asked {
            Some(p) if p.opcode == WcOpcode::Read && p.byte_len as usize == len => {
                Admission::Deliver
            }
            _ => Admission::Refuse("READ data that no outstanding READ of this length asked for"),
        }
    }

    /// Runs the ack / RNR timer. The owner calls it at every poll (the ack timer learns from
    /// the calls that are not due that the requester is running, see [`AckTimer::tick`]).
    pub fn on_timeout(&mut self, now: Timestamp) -> RequesterAction {
        match self.deadline {
            Some(d) if d <= now => {}
            _ => {
                self.timer.tick(now);
                return RequesterAction::None;
            }
        }
        if !self.awaiting_response() {
            self.deadline = None;
            return RequesterAction::None;
        }
        // An RNR wait resends from the oldest unanswered request (the responder dropped
        // everything after the NAKed one) without using the ack timer's retries (RNR retries
        // were counted already); an ack timeout resends as the timer says, or gives up.
        let expiry = if std::mem::take(&mut self.rnr_waiting) {
            Expiry::ResendAll
        } else {
            self.timer.expire(now)
        };
        let limit = match expiry {
            Expiry::GiveUp => {
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
            Expiry::Look => {
                self.deadline = Some(self.timer.deadline(now));
                return RequesterAction::None;
            }
            Expiry::ResendAll => usize::MAX,
            Expiry::ResendOldest => 1,
        };
        self.deadline = Some(self.timer.deadline(now));
        let peer_qp = self.peer_qp;
        let resend = self
            .outstanding
            .iter_mut()
            .filter(|p| p.result.is_none() && p.remote.is_some())
            .take(limit)
            .filter_map(|p| {
                // `ack_req` stays as the first transmission had it: a probe of a request that
                // went without it is answered after the responses to later requests that
                // asked, so those still acknowledge it.
                p.retransmitted = true;
                p.remote.as_ref()
            })
            .map(|(psn, op)| Request {
                dst_qp: peer_qp,
                psn: *psn,
                op: op.clone(),
                // A retransmission always asks: it exists to learn how far the peer got.
                ack_req: true,
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

#[cfg(test)]
mod tests;
