//! Device attributes (`ibv_query_device`) and asynchronous events (`ibv_get_async_event`).

use super::types::QpNumber;

/// Device capabilities. The soft provider sizes its fixed-capacity tables from these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Maximum memory regions.
    pub max_mr: u32,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Maximum queue pairs.
    pub max_qp: u32,
    /// Maximum completion queues.
    pub max_cq: u32,
    /// Maximum entries of one completion queue.
    pub max_cqe: u32,
    /// Maximum shared receive queues.
    pub max_srq: u32,
    /// Maximum outstanding work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Maximum protection domains.
    pub max_pd: u32,
    /// Largest message (READ, WRITE or SEND payload) in bytes.
    pub max_msg_size: u32,
    /// Whether CPU atomics on registered memory are atomic with respect to RDMA atomics
    /// (`IBV_ATOMIC_GLOB`). ConnectX reports `IBV_ATOMIC_HCA`: only NIC atomics are.
    pub global_atomics: bool,
    /// Supports type-1 memory windows.
    pub mw_type1: bool,
    /// Supports type-2 memory windows.
    pub mw_type2: bool,
    /// Enforces the whole [`QpService`](super::QpService) (`QueuePair::set_service`): weighted
    /// service of QPs and their responder rate limits in operations and bytes. A device
    /// without it refuses what it cannot enforce with `VerbsError::Unsupported` (an rdma-core
    /// device maps a byte rate to packet pacing, see `rnic-rdma`).
    pub qp_rate_limit: bool,
    /// Runs work-request chains (`verbs::chain`): cross-channel QPs with managed queues,
    /// WAIT and ENABLE requests, and a send queue whose held requests take their fields from
    /// a registered [`WqeRing`](super::WqeRing) when they start (CORE-Direct on ConnectX). A
    /// device without it refuses `create_cross_channel_qp` with `Unsupported`.
    pub cross_channel: bool,
    /// Binds a type-2 window for a QP other than the one the bind is posted on
    /// (`BindInfo::target_qp`). A device without it refuses such a bind: at post time with
    /// `Unsupported` (rdma-core), or with a `MwBindError` completion (the soft NIC configured
    /// without it).
    pub mw_bind_target_qp: bool,
}

impl Default for DeviceAttr {
    fn default() -> Self {
        DeviceAttr {
            max_mr: 1 << 16,
            max_mw: 1 << 18,
            max_qp: 1 << 14,
            max_cq: 1 << 14,
            max_cqe: 1 << 16,
            max_srq: 1 << 10,
            max_qp_wr: 1 << 13,
            max_pd: 1 << 12,
            max_msg_size: 1 << 30,
            global_atomics: false,
            mw_type1: true,
            mw_type2: true,
            qp_rate_limit: false,
            cross_channel: true,
            mw_bind_target_qp: true,
        }
    }
}

/// An asynchronous event, as `ibv_get_async_event` reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// The QP entered the error state because of a transport or protocol failure
    /// (`IBV_EVENT_QP_FATAL`): lost connection, PSN violation, retries exhausted.
    QpFatal(QpNumber),
    /// A peer's request violated access rights on this (responder) QP
    /// (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError(QpNumber),
    /// A peer sent an invalid request on this (responder) QP (`IBV_EVENT_QP_REQ_ERR`).
    QpRequestError(QpNumber),
    /// The QP reached the last WQE after entering the error state (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached(QpNumber),
    /// A completion queue overflowed (`IBV_EVENT_CQ_ERR`); completions were lost.
    CqOverrun,
    /// The peer closed the connection in order (its side shut down, its process ended); the QP
    /// is in the error state as after [`AsyncEvent::QpFatal`], but nothing failed. rdma-core
    /// reports this as the connection manager's `RDMA_CM_EVENT_DISCONNECTED`, not as a QP
    /// event; a provider that cannot tell reports `QpFatal`.
    QpDisconnected(QpNumber),
}
