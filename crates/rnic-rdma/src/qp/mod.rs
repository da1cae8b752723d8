//! RC queue pairs: creation, the RESET → INIT → RTR → RTS state machine, posting, and both
//! sides of the connection handshake that drives the state machine (`handshake`).
//!
//! Invariants:
//! - Transitions use exactly the attribute masks rdma-core requires for RC (`ibv_modify_qp(3)`):
//!   INIT sets port, P_Key index and access flags; RTR the address vector, path MTU, remote QPN,
//!   receive PSN, responder resources and RNR timer; RTS the send PSN, ACK timeout, retry
//!   counts and initiator depth.
//! - Every posted send request is recorded (wr_id, opcode) in posting order before the doorbell,
//!   under one lock, so the record's order is the send queue's order. RC completes send
//!   requests in order, so a completion for `wr_id` retires every older entry (the unsignaled
//!   ones that completed silently). The record is bounded.
//! - A window's recorded rkey changes only for binds the device accepted into its queue.

pub(crate) mod handshake;

use crate::context::alloc_error;
use crate::ffi::{self, QpCaps, QpModify};
use crate::memory::{RdmaMr, RdmaMw, RdmaPd};
use crate::provider::RdmaProvider;
use crate::queues::raw_recv;
use crate::record::SendRecord;
use crate::translate::{
    access_to_ibv, ack_timeout_to_ib, qp_state_from_ibv, qp_state_to_ibv, retry_count_to_ib,
    rnr_retry_to_ib, rnr_timer_to_ib, verbs_error,
};
use crate::wire::PeerInfo;
use crate::work::translate;
use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use rnic::{
    AccessFlags, QpInit, QpNumber, QpService, QpState, QpTiming, QueuePair, RecvWr, Resource,
    SendWr, VerbsError, VerbsResult,
};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// An RC queue pair. Cloning shares it.
#[derive(Clone)]
pub struct RdmaQp {
    pub(crate) inner: Arc<QpInner>,
}

pub(crate) struct QpInner {
    pub(crate) pd: RdmaPd,
    raw: ffi::Qp,
    qpn: u32,
    record: Arc<SendRecord>,
    access: Mutex<AccessFlags>,
    timing: QpTiming,
    post: Mutex<()>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        self.pd.ctx.inner.records.lock().remove(&self.qpn);
    }
}

impl fmt::Debug for RdmaQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RdmaQp({})", self.inner.qpn)
    }
}

impl RdmaQp {
    pub(crate) fn new(pd: &RdmaPd, init: QpInit<'_, RdmaProvider>) -> VerbsResult<RdmaQp> {
        let raw = ffi::create_qp(
            &pd.raw,
            init.send_cq.raw(),
            init.recv_cq.raw(),
            init.srq.map(|s| &s.raw),
            QpCaps {
                max_send_wr: init.max_send_wr.max(1),
                max_recv_wr: init.max_recv_wr.max(1),
            },
        )
        .map_err(|e| alloc_error("ibv_create_qp", Resource::QueuePair, e))?;
        let qpn = raw.qp_num();
        let record = Arc::new(SendRecord::new(init.max_send_wr));
        pd.ctx.inner.records.lock().insert(qpn, record.clone());
        Ok(RdmaQp {
            inner: Arc::new(QpInner {
                pd: pd.clone(),
                raw,
                qpn,
                record,
                access: Mutex::new(init.access),
                timing: init.timing,
                post: Mutex::new(()),
            }),
        })
    }

    fn modify(&self, m: QpModify, what: &'static str) -> VerbsResult<()> {
        self.inner
            .raw
            .modify(&m)
            .map_err(|e| verbs_error(what, Resource::QueuePair, e))
    }

    /// RESET → INIT.
    pub(crate) fn to_init(&self) -> VerbsResult<()> {
        use sys::ibv_qp_attr_mask as M;
        self.modify(
            QpModify {
                mask: (M::IBV_QP_STATE
                    | M::IBV_QP_PKEY_INDEX
                    | M::IBV_QP_PORT
                    | M::IBV_QP_ACCESS_FLAGS)
                    .0,
                state: qp_state_to_ibv(QpState::Init),
                access: access_to_ibv(*self.inner.access.lock()),
                port: self.inner.pd.ctx.inner.config.port,
                ..QpModify::default()
            },
            "ibv_modify_qp(INIT)",
        )
    }

    /// INIT → RTR towards `peer`.
    pub(crate) fn to_rtr(&self, peer: &PeerInfo) -> VerbsResult<()> {
        use sys::ibv_qp_attr_mask as M;
        let ctx = &self.inner.pd.ctx.inner;
        self.modify(
            QpModify {
                mask: (M::IBV_QP_STATE
                    | M::IBV_QP_AV
                    | M::IBV_QP_PATH_MTU
                    | M::IBV_QP_DEST_QPN
                    | M::IBV_QP_RQ_PSN
                    | M::IBV_QP_MAX_DEST_RD_ATOMIC
                    | M::IBV_QP_MIN_RNR_TIMER)
                    .0,
                state: qp_state_to_ibv(QpState::ReadyToReceive),
                port: ctx.config.port,
                path_mtu: ctx.active_mtu.min(peer.mtu),
                dest_qp_num: peer.qpn,
                rq_psn: peer.psn,
                max_dest_rd_atomic: ctx.max_rd_atom,
                min_rnr_timer: rnr_timer_to_ib(self.inner.timing.rnr_timer_us),
                dlid: peer.lid,
                dgid: ctx.link_layer.needs_grh().then_some(peer.gid),
                sgid_index: ctx.gid_index,
                ..QpModify::default()
            },
            "ibv_modify_qp(RTR)",
        )
    }

    /// RTR → RTS with send PSN `psn`; `peer_rd_atom` bounds the initiator depth.
    pub(crate) fn to_rts(&self, psn: u32, peer_rd_atom: u8) -> VerbsResult<()> {
        use sys::ibv_qp_attr_mask as M;
        let ctx = &self.inner.pd.ctx.inner;
        let t = self.inner.timing;
        self.modify(
            QpModify {
                mask: (M::IBV_QP_STATE
                    | M::IBV_QP_TIMEOUT
                    | M::IBV_QP_RETRY_CNT
                    | M::IBV_QP_RNR_RETRY
                    | M::IBV_QP_SQ_PSN
                    | M::IBV_QP_MAX_QP_RD_ATOMIC)
                    .0,
                state: qp_state_to_ibv(QpState::ReadyToSend),
                sq_psn: psn,
                timeout: ack_timeout_to_ib(t.ack_timeout_us),
                retry_cnt: retry_count_to_ib(t.retry_count),
                rnr_retry: rnr_retry_to_ib(t.rnr_retry),
                max_rd_atomic: ctx.max_init_rd_atom.min(peer_rd_atom.max(1)),
                ..QpModify::default()
            },
            "ibv_modify_qp(RTS)",
        )
    }

    pub(crate) fn local_info(&self, psn: u32) -> PeerInfo {
        let ctx = &self.inner.pd.ctx.inner;
        PeerInfo {
            qpn: self.inner.qpn,
            psn,
            lid: ctx.lid,
            mtu: ctx.active_mtu,
            rd_atom: ctx.max_rd_atom,
            gid: ctx.gid,
        }
    }

    fn modify_state(&self, state: QpState, what: &'static str) -> VerbsResult<()> {
        self.modify(
            QpModify {
                mask: sys::ibv_qp_attr_mask::IBV_QP_STATE.0,
                state: qp_state_to_ibv(state),
                ..QpModify::default()
            },
            what,
        )
    }
}

impl QueuePair<RdmaProvider> for RdmaQp {
    fn qp_num(&self) -> QpNumber {
        QpNumber(self.inner.qpn)
    }

    fn state(&self) -> QpState {
        self.inner
            .raw
            .query_state()
            .map_or(QpState::Error, qp_state_from_ibv)
    }

    fn connect(&self, to: &SocketAddr, private_data: &[u8]) -> VerbsResult<()> {
        let state = self.state();
        if state != QpState::Reset {
            return Err(VerbsError::InvalidQpState {
                qpn: self.qp_num(),
                state: state.name(),
                action: "connect",
            });
        }
        let result = handshake::client(self, *to, private_data);
        if result.is_err() {
            // Leave the QP where `connect` may be tried again.
            let _ = self.reset();
        }
        result
    }

    fn reset(&self) -> VerbsResult<()> {
        self.modify_state(QpState::Reset, "ibv_modify_qp(RESET)")?;
        self.inner.record.clear();
        Ok(())
    }

    fn set_error(&self) {
        // ERR is reachable from every state; a failure here means the QP is gone already.
        let _ = self.modify_state(QpState::Error, "ibv_modify_qp(ERR)");
    }

    /// Changes `qp_access_flags` (an RTS → RTS modify). The modify is synchronous in the
    /// device: requests that arrive after it returns see the new flags.
    fn modify_access(&self, access: AccessFlags) -> VerbsResult<()> {
        let mut current = self.inner.access.lock();
        if !matches!(self.state(), QpState::Reset | QpState::Error) {
            self.modify(
                QpModify {
                    mask: sys::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0,
                    access: access_to_ibv(access),
                    ..QpModify::default()
                },
                "ibv_modify_qp(access flags)",
            )?;
        }
        *current = access;
        Ok(())
    }

    /// Maps the service to `ibv_modify_qp_rate_limit`, which paces the QP's outgoing packets
    /// (a responder's READ responses and acknowledgements, a requester's requests) in bytes:
    /// a byte rate becomes `rate_limit` in kbps (rounded up) and its burst `max_burst_sz`.
    /// Weights other than 1 and operation rates have no rdma-core equivalent: `Unsupported`,
    /// as is a device (or libibverbs) without packet pacing.
    fn set_service(&self, service: QpService) -> VerbsResult<()> {
        service.validate()?;
        if service.weight != 1 {
            return Err(VerbsError::Unsupported(
                "rdma-core has no per-QP service weight",
            ));
        }
        let bytes = match service.rate {
            None => None,
            Some(r) if r.ops.is_some() => {
                return Err(VerbsError::Unsupported(
                    "RDMA NICs pace QPs in bytes; there is no operation rate",
                ));
            }
            Some(r) => r.bytes,
        };
        let (kbps, burst) = bytes.map_or((0, 0), |b| {
            let kbps = b.per_sec.saturating_mul(8).div_ceil(1000).max(1);
            (
                u32::try_from(kbps).unwrap_or(u32::MAX),
                u32::try_from(b.burst).unwrap_or(u32::MAX),
            )
        });
        self.inner
            .raw
            .set_rate_limit(kbps, burst)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => VerbsError::Unsupported(
                    "this device or libibverbs has no QP rate limit (packet pacing)",
                ),
                _ => verbs_error("ibv_modify_qp_rate_limit", Resource::QueuePair, e),
            })
    }

    /// `None`: the device's counters (per-QP or counter-set statistics, e.g. `rdma statistic`
    /// or `ibv_read_counters` on a flow's counter set) are not read by this provider yet.
    fn served(&self) -> Option<rnic::QpServed> {
        None
    }

    /// `None`: no QP of this provider is cross-channel.
    fn wqe_ring(&self) -> Option<rnic::WqeRing> {
        None
    }

    fn post_send(&self, wrs: &[SendWr<'_, RdmaMw, RdmaMr>]) -> Result<(), (usize, VerbsError)> {
        let mut translated = Vec::with_capacity(wrs.len());
        let mut rejected = None;
        for (i, wr) in wrs.iter().enumerate() {
            match translate(wr) {
                Ok(t) => translated.push(t),
                Err(e) => {
                    rejected = Some((i, e));
                    break;
                }
            }
        }
        let raw: Vec<ffi::RawSendWr<'_>> = translated.iter().map(|t| t.raw).collect();
        let _doorbell = self.inner.post.lock();
        for (mw, _) in translated.iter().filter_map(|t| t.bind) {
            mw.sync_raw_rkey();
        }
        self.inner.record.record(translated.iter().map(|t| {
            let bind = t.bind.map(|(mw, new)| (mw.keys.clone(), new));
            (t.raw.wr_id, t.opcode, bind)
        }));
        let posted = match self.inner.raw.post_send(&raw) {
            Ok(()) => raw.len(),
            Err((i, e)) => {
                rejected = Some((i, verbs_error("ibv_post_send", Resource::QueueSlot, e)));
                i
            }
        };
        // Entries of requests the device did not take are removed again.
        self.inner.record.unrecord(raw.len() - posted);
        for (mw, rkey) in translated[..posted].iter().filter_map(|t| t.bind) {
            mw.set_rkey(rkey);
        }
        rejected.map_or(Ok(()), Err)
    }

    /// `ibv_post_recv`. A receive posted to a QP in ERR must complete flushed. rxe's provider
    /// only writes the request into the queue it shares with the kernel, and the kernel flushes
    /// that queue only when the QP's responder runs, which nothing does once the QP is in ERR
    /// (`docs/rdma.md`, "rxe deviations"): such a receive never completed. On rxe a receive
    /// posted to a QP in ERR is therefore followed by another modify to ERR, which runs the
    /// responder and flushes it.
    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()> {
        let raw: Vec<_> = wrs.iter().map(raw_recv).collect();
        self.inner
            .raw
            .post_recv(&raw)
            .map_err(|(_, e)| verbs_error("ibv_post_recv", Resource::QueueSlot, e))?;
        if self.inner.pd.ctx.is_rxe() && self.state() == QpState::Error {
            self.set_error();
        }
        Ok(())
    }
}
