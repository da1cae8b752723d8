//! The responder half of an RC QP, sans-IO: a request in, a response (and maybe a receive
//! completion and an error) out, memory effects through the protection table only.
//!
//! Order of checks (rxe `rxe_resp.c`, IB spec): PSN; QP access flags and atomic alignment
//! (invalid request); rkey, PD, QP, rights and range (remote access error, zero-byte
//! READ/WRITE skip them). Any violation NAKs and moves the responder QP to ERR; a rejected
//! request never touches memory. Receiver-not-ready NAKs but keeps the QP alive; until the
//! NAKed PSN is retried, later packets are dropped silently (they will be retransmitted).
//!
//! Links are reliable and ordered (like TCP), so a PSN gap is not loss to recover from: it
//! means a broken link or a forged packet, and it closes the QP.

use crate::soft::mpt::{AccessError, ProtectionTable, RemoteOp};
use crate::soft::wire::{NakCode, PayloadLen, Request, RequestOp, ResponseKind};
use crate::verbs::{
    AccessFlags, AsyncEvent, MemoryKey, PdId, Psn, QpNumber, RecvWr, WcOpcode, WcStatus,
    WorkCompletion,
};
use std::collections::VecDeque;

/// Responses remembered for duplicate requests (retransmissions after a lost response).
const REPLAY_DEPTH: usize = 32;

/// Per-QP responder state.
#[derive(Debug)]
pub struct ResponderState {
    expected_psn: Psn,
    /// Set after an RNR NAK: later PSNs are dropped until this one is retried.
    rnr_pending: Option<Psn>,
    /// Responses of recent requests; `None` for READs, which are executed again on a duplicate
    /// (as the IB responder does) instead of keeping a copy of their data.
    replay: VecDeque<(Psn, Option<ResponseKind<Vec<u8>>>)>,
}

/// Everything the responder needs to know about its QP and device.
#[derive(Debug)]
pub struct ResponderCtx<'a> {
    /// The device's protection table.
    pub mpt: &'a ProtectionTable,
    /// PD of the QP.
    pub pd: PdId,
    /// The QP.
    pub qpn: QpNumber,
    /// Remote rights the QP accepts.
    pub qp_access: AccessFlags,
    /// Largest message.
    pub max_msg: u32,
}

/// Where a SEND's receive comes from.
pub trait RecvSource {
    /// Takes the next posted receive, if any.
    fn take(&mut self) -> Option<RecvWr>;
    /// The capacity of the receive [`take`](Self::take) would return (`None`: none posted).
    /// A source that cannot look ahead says `usize::MAX`: every SEND may fit.
    fn next_capacity(&mut self) -> Option<usize> {
        Some(usize::MAX)
    }
}

/// What handling one request produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Response to transmit (with the request's PSN), if any.
    pub response: Option<(Psn, ResponseKind<Vec<u8>>)>,
    /// Completion for the receive a SEND consumed.
    pub recv_completion: Option<WorkCompletion>,
    /// The request violated the protocol or access rules: the QP must enter ERR.
    pub error: Option<AsyncEvent>,
}

impl ResponderState {
    /// State expecting `start_psn` first.
    pub fn new(start_psn: Psn) -> Self {
        ResponderState {
            expected_psn: start_psn,
            rnr_pending: None,
            replay: VecDeque::with_capacity(REPLAY_DEPTH),
        }
    }

    /// The PSN the next new request must carry.
    pub fn expected_psn(&self) -> Psn {
        self.expected_psn
    }

    /// Handles one request.
    pub fn handle<D: AsRef<[u8]>>(
        &mut self,
        ctx: &ResponderCtx<'_>,
        req: &Request<D>,
        recvs: &mut dyn RecvSource,
    ) -> Outcome {
        let dist = req.psn.distance(self.expected_psn);
        if dist < 0 {
            // A retransmission of something already executed: replay writes, atomics and
            // sends (never execute them twice); execute READs again.
            return match self.replay.iter().find(|(p, _)| *p == req.psn) {
                Some((_, Some(kind))) => Outcome {
                    response: Some((req.psn, kind.clone())),
                    ..Outcome::default()
                },
                Some((_, None)) if matches!(req.op, RequestOp::Read { .. }) => {
                    execute(ctx, &req.op, recvs).with_psn(req.psn)
                }
                _ => Outcome::default(),
            };
        }
        if dist > 0 {
            if self.rnr_pending.is_some() {
                return Outcome::default(); // dropped; the requester goes back to the NAKed PSN
            }
            return fatal(
                req.psn,
                NakCode::PsnSequenceError,
                AsyncEvent::QpFatal(ctx.qpn),
            );
        }
        self.rnr_pending = None;
        let psn = req.psn;
        let out = execute(ctx, &req.op, recvs);
        if let Some((_, ResponseKind::Nak(NakCode::ReceiverNotReady))) = &out.response {
            self.rnr_pending = Some(psn);
            return out.with_psn(psn);
        }
        let mut out = out;
        if out.error.is_none() {
            self.expected_psn = psn.next();
            if let Some((_, kind)) = &out.response {
                if self.replay.len() == REPLAY_DEPTH {
                    self.replay.pop_front();
                }
                let cached = match kind {
                    ResponseKind::ReadData(_) => None,
                    other => Some(other.clone()),
                };
                self.replay.push_back((psn, cached));
            }
            // A WRITE or SEND without AckReq is acknowledged by the next acknowledgement or
            // response (cumulative); a duplicate of it is still answered from the replay.
            if !req.ack_req && matches!(out.response, Some((_, ResponseKind::Ack))) {
                out.response = None;
            }
        }
        out.with_psn(psn)
    }
}

impl ResponderState {
    /// Decides on a request from its header, before its payload is buffered: `None` if it
    /// may be executed (the caller receives the payload and calls [`handle`](Self::handle)),
    /// else the outcome `handle` would have produced with the payload. The answer never
    /// depends on payload bytes: a duplicate or out-of-sequence request is answered from its
    /// PSN alone, and a new one fails here only on what its length, rkey and address decide
    /// (rights, range, the receive a SEND would land in). Nothing touches memory.
    pub fn admit(
        &mut self,
        ctx: &ResponderCtx<'_>,
        req: &Request<PayloadLen>,
        recvs: &mut dyn RecvSource,
    ) -> Option<Outcome> {
        let psn = req.psn;
        if psn.distance(self.expected_psn) != 0 {
            let empty: Request<&[u8]> = Request {
                dst_qp: req.dst_qp,
                psn,
                op: req.op.map_data(|_| &[][..]),
                ack_req: req.ack_req,
            };
            return Some(self.handle(ctx, &empty, recvs));
        }
        let refused = match &req.op {
            RequestOp::Write {
                addr,
                rkey,
                data: PayloadLen(len),
            } => {
                if !ctx.qp_access.contains(AccessFlags::REMOTE_WRITE) || *len > ctx.max_msg as usize
                {
                    Some(invalid(ctx))
                } else if *len == 0 {
                    None
                } else {
                    ctx.mpt
                        .check_remote(*rkey, *addr, *len as u64, RemoteOp::Write, ctx.pd, ctx.qpn)
                        .err()
                        .map(|e| access_error(ctx, e))
                }
            }
            RequestOp::Send {
                data: PayloadLen(len),
                ..
            } => {
                if *len > ctx.max_msg as usize {
                    Some(invalid(ctx))
                } else {
                    match recvs.next_capacity() {
                        None => {
                            self.rnr_pending = Some(psn);
                            Some(Outcome {
                                response: Some((psn, ResponseKind::Nak(NakCode::ReceiverNotReady))),
                                ..Outcome::default()
                            })
                        }
                        Some(capacity) if *len > capacity => recvs.take().map(|recv| {
                            let mut out = invalid(ctx);
                            out.recv_completion = Some(WorkCompletion {
                                wr_id: recv.wr_id,
                                status: WcStatus::LocalLengthError,
                                opcode: WcOpcode::Recv,
                                byte_len: u32::try_from(*len).unwrap_or(u32::MAX),
                                qp_num: ctx.qpn,
                                invalidated_rkey: None,
                            });
                            out
                        }),
                        Some(_) => None,
                    }
                }
            }
            _ => None,
        };
        refused.map(|o| o.with_psn(psn))
    }
}

impl Outcome {
    fn with_psn(mut self, psn: Psn) -> Self {
        if let Some((p, _)) = &mut self.response {
            *p = psn;
        }
        self
    }
}

fn fatal(psn: Psn, code: NakCode, event: AsyncEvent) -> Outcome {
    Outcome {
        response: Some((psn, ResponseKind::Nak(code))),
        recv_completion: None,
        error: Some(event),
    }
}

fn ok(kind: ResponseKind<Vec<u8>>) -> Outcome {
    Outcome {
        response: Some((Psn::default(), kind)),
        ..Outcome::default()
    }
}

fn invalid(ctx: &ResponderCtx<'_>) -> Outcome {
    fatal(
        Psn::default(),
        NakCode::InvalidRequest,
        AsyncEvent::QpRequestError(ctx.qpn),
    )
}

fn access_error(ctx: &ResponderCtx<'_>, _why: AccessError) -> Outcome {
    fatal(
        Psn::default(),
        NakCode::RemoteAccessError,
        AsyncEvent::QpAccessError(ctx.qpn),
    )
}

fn execute<D: AsRef<[u8]>>(
    ctx: &ResponderCtx<'_>,
    op: &RequestOp<D>,
    recvs: &mut dyn RecvSource,
) -> Outcome {
    match op {
        RequestOp::Read { addr, rkey, len } => {
            if !ctx.qp_access.contains(AccessFlags::REMOTE_READ) || *len > ctx.max_msg {
                return invalid(ctx);
            }
            if *len == 0 {
                return ok(ResponseKind::ReadData(Vec::new()));
            }
            match ctx
                .mpt
                .check_remote(*rkey, *addr, *len as u64, RemoteOp::Read, ctx.pd, ctx.qpn)
            {
                Ok(grant) => {
                    let mut data = vec![0u8; *len as usize];
                    grant.region().read(*addr, &mut data);
                    ok(ResponseKind::ReadData(data))
                }
                Err(e) => access_error(ctx, e),
            }
        }
        RequestOp::Write { addr, rkey, data } => {
            let data = data.as_ref();
            if !ctx.qp_access.contains(AccessFlags::REMOTE_WRITE)
                || data.len() > ctx.max_msg as usize
            {
                return invalid(ctx);
            }
            if data.is_empty() {
                return ok(ResponseKind::Ack);
            }
            match ctx.mpt.check_remote(
                *rkey,
                *addr,
                data.len() as u64,
                RemoteOp::Write,
                ctx.pd,
                ctx.qpn,
            ) {
                Ok(grant) => {
                    grant.region().write(*addr, data);
                    ok(ResponseKind::Ack)
                }
                Err(e) => access_error(ctx, e),
            }
        }
        RequestOp::CompareSwap {
            addr,
            rkey,
            compare,
            swap,
        } => atomic(ctx, *addr, *rkey, |mr| {
            mr.compare_swap(*addr, *compare, *swap)
        }),
        RequestOp::FetchAdd { addr, rkey, add } => {
            atomic(ctx, *addr, *rkey, |mr| mr.fetch_add(*addr, *add))
        }
        RequestOp::Send { data, invalidate } => send(ctx, data.as_ref(), *invalidate, recvs),
    }
}

fn atomic(
    ctx: &ResponderCtx<'_>,
    addr: u64,
    rkey: MemoryKey,
    f: impl FnOnce(&crate::soft::mpt::MrEntry) -> u64,
) -> Outcome {
    if !ctx.qp_access.contains(AccessFlags::REMOTE_ATOMIC) || addr % 8 != 0 {
        return invalid(ctx);
    }
    match ctx
        .mpt
        .check_remote(rkey, addr, 8, RemoteOp::Atomic, ctx.pd, ctx.qpn)
    {
        Ok(grant) => ok(ResponseKind::AtomicAck(f(grant.region()))),
        Err(e) => access_error(ctx, e),
    }
}

fn send(
    ctx: &ResponderCtx<'_>,
    data: &[u8],
    invalidate: Option<MemoryKey>,
    recvs: &mut dyn RecvSource,
) -> Outcome {
    if data.len() > ctx.max_msg as usize {
        return invalid(ctx);
    }
    let Some(recv) = recvs.take() else {
        return Outcome {
            response: Some((Psn::default(), ResponseKind::Nak(NakCode::ReceiverNotReady))),
            ..Outcome::default()
        };
    };
    let mut wc = WorkCompletion {
        wr_id: recv.wr_id,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: data.len() as u32,
        qp_num: ctx.qpn,
        invalidated_rkey: None,
    };
    let capacity = recv.sge.map_or(0, |s| s.length as usize);
    if data.len() > capacity {
        wc.status = WcStatus::LocalLengthError;
        let mut out = invalid(ctx);
        out.recv_completion = Some(wc);
        return out;
    }
    if let Some(rkey) = invalidate
        && ctx.mpt.invalidate_mw(rkey, ctx.pd, Some(ctx.qpn)).is_err()
    {
        wc.status = WcStatus::RemoteInvalidRequestError;
        let mut out = fatal(
            Psn::default(),
            NakCode::InvalidRkey,
            AsyncEvent::QpRequestError(ctx.qpn),
        );
        out.recv_completion = Some(wc);
        return out;
    }
    if !data.is_empty() {
        let Some(sge) = recv.sge else {
            return invalid(ctx); // capacity check above makes this unreachable
        };
        match ctx
            .mpt
            .check_local(sge.lkey, sge.addr, data.len() as u64, true, ctx.pd)
        {
            Ok(grant) => grant.region().write(sge.addr, data),
            Err(_) => {
                wc.status = WcStatus::LocalProtectionError;
                let mut out = fatal(
                    Psn::default(),
                    NakCode::RemoteOperationalError,
                    AsyncEvent::QpFatal(ctx.qpn),
                );
                out.recv_completion = Some(wc);
                return out;
            }
        }
    }
    wc.invalidated_rkey = invalidate;
    Outcome {
        response: Some((Psn::default(), ResponseKind::Ack)),
        recv_completion: Some(wc),
        error: None,
    }
}
