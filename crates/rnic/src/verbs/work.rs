//! Work requests and work completions (`ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`).
//!
//! Local buffers are always named by an lkey of a registered memory region, as on rdma-core; the
//! provider checks them and completes the request with [`WcStatus::LocalProtectionError`]
//! otherwise. Atomics return the remote word's previous value into their 8-byte local buffer.

use super::types::{AccessFlags, CqNumber, Lkey, QpNumber, Rkey, VirtAddr};
use std::fmt;

/// A scatter/gather entry: `length` bytes at `addr`, inside the registered region named by `lkey`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Sge {
    /// Local virtual address.
    pub addr: VirtAddr,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region that covers `[addr, addr + length)`.
    pub lkey: Lkey,
}

/// What a bind work request asks for (`ibv_mw_bind_info`).
#[derive(Debug)]
pub struct BindInfo<'a, Mr> {
    /// The region to bind over; `None` (with `length == 0`) unbinds a type-1 window.
    pub mr: Option<&'a Mr>,
    /// First address covered.
    pub addr: VirtAddr,
    /// Bytes covered; zero is legal for type 1 (it invalidates the window).
    pub length: u64,
    /// Remote rights granted through the window.
    pub access: AccessFlags,
    /// Key byte of the window's new rkey (the low 8 bits of rdma-core's
    /// `ibv_send_wr.bind_mw.rkey`, which the consumer chooses); `None` takes the device's own
    /// choice (`ibv_inc_rkey` of the current rkey). A consumer that draws key bytes at random
    /// makes the next rkey of a window unpredictable to its previous holder.
    pub key: Option<u8>,
    /// For a type-2 window: the QP the window is bound for, if not the QP the bind is posted
    /// on (the `qpn` of a real NIC's bind segment; `DeviceAttr::mw_bind_target_qp`). It must
    /// be a QP of the same device and protection domain, not in RESET or ERR when the bind
    /// executes; the window is then usable on that QP only, and its reset or destruction
    /// invalidates the window. `None`: the posting QP (rdma-core's only choice). A type-1
    /// bind naming a QP fails with `MwBindError`.
    pub target_qp: Option<QpNumber>,
}

/// The send or the receive queue of a QP (what a cross-channel ENABLE releases).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WorkQueue {
    /// The send queue (`IBV_EXP_WR_SEND_ENABLE`).
    Send,
    /// The receive queue (`IBV_EXP_WR_RECV_ENABLE`).
    Recv,
}

/// The operation of a send-queue work request.
#[derive(Debug)]
pub enum SendOp<'a, Mw, Mr> {
    /// RDMA READ of `local.length` bytes from `remote_addr` into `local`.
    Read {
        /// Destination (needs LOCAL_WRITE).
        local: Sge,
        /// Source address on the peer.
        remote_addr: VirtAddr,
        /// Key of the peer's region or window.
        rkey: Rkey,
    },
    /// RDMA WRITE of `local` to `remote_addr`.
    Write {
        /// Source.
        local: Sge,
        /// Destination address on the peer.
        remote_addr: VirtAddr,
        /// Key of the peer's region or window.
        rkey: Rkey,
    },
    /// 8-byte compare-and-swap; the previous value lands in `local` (8 bytes).
    CompareSwap {
        /// Where the previous remote value is written (8 bytes, needs LOCAL_WRITE).
        local: Sge,
        /// 8-byte-aligned remote address.
        remote_addr: VirtAddr,
        /// Key of the peer's region or window.
        rkey: Rkey,
        /// Expected value.
        compare: u64,
        /// Value stored when the comparison holds.
        swap: u64,
    },
    /// 8-byte fetch-and-add; the previous value lands in `local` (8 bytes).
    FetchAdd {
        /// Where the previous remote value is written (8 bytes, needs LOCAL_WRITE).
        local: Sge,
        /// 8-byte-aligned remote address.
        remote_addr: VirtAddr,
        /// Key of the peer's region or window.
        rkey: Rkey,
        /// Addend.
        add: u64,
    },
    /// Two-sided SEND; consumes a receive at the peer. `local` may be `None` for zero bytes.
    Send {
        /// Payload.
        local: Option<Sge>,
    },
    /// SEND that also invalidates a type-2 window at the peer (`IBV_WR_SEND_WITH_INV`).
    SendWithInvalidate {
        /// Payload.
        local: Option<Sge>,
        /// The peer's type-2 window to invalidate.
        invalidate: Rkey,
    },
    /// Binds a memory window (`IBV_WR_BIND_MW`). The new rkey is readable from the window as
    /// soon as the request is posted, and may be published only after a successful completion.
    BindMw {
        /// The window.
        mw: &'a Mw,
        /// Region, range and rights.
        bind: BindInfo<'a, Mr>,
    },
    /// Invalidates a local type-2 window (`IBV_WR_LOCAL_INV`).
    LocalInvalidate {
        /// The window's current rkey.
        rkey: Rkey,
    },
    /// Cross-channel WAIT (`IBV_EXP_WR_CQE_WAIT`, CORE-Direct): every later request of this
    /// send queue is held until the CQ numbered `cq` (of this device) has produced `count`
    /// completions since it was created. The count is absolute, as in the WAIT segment a real
    /// NIC executes; rdma-core's experimental verb takes a count relative to the previous WAIT
    /// on that CQ and sums it in the driver, which a caller does by itself here. Needs a
    /// cross-channel QP (`create_cross_channel_qp`); a CQ of another device is refused at
    /// post time with `InvalidArgument`. See `docs/verbs-contract.md`, "Work-request chains".
    Wait {
        /// The CQ whose completions are counted.
        cq: CqNumber,
        /// Completions it must have produced (queued, overruns excluded) since its creation.
        count: u64,
    },
    /// Cross-channel ENABLE (`IBV_EXP_WR_SEND_ENABLE` / `IBV_EXP_WR_RECV_ENABLE`): lets the
    /// managed `queue` of the QP numbered `qp` (same device) run its requests whose index is
    /// below `index`. A queue's requests are numbered from 0 in posting order since the QP was
    /// created or reset; the limit only grows. Needs a cross-channel QP, and a target whose
    /// `queue` is managed (else `InvalidArgument` at post time).
    Enable {
        /// The managed QP.
        qp: QpNumber,
        /// Which of its queues.
        queue: WorkQueue,
        /// Requests `0..index` of that queue may run.
        index: u64,
    },
}

/// A send-queue work request.
#[derive(Debug)]
pub struct SendWr<'a, Mw, Mr> {
    /// Caller's identifier, echoed in the completion.
    pub wr_id: u64,
    /// Whether a successful completion is reported (errors always are).
    pub signaled: bool,
    /// The operation.
    pub op: SendOp<'a, Mw, Mr>,
}

/// A receive work request; `sge` may be `None` to accept zero-byte messages only.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecvWr {
    /// Caller's identifier, echoed in the completion.
    pub wr_id: u64,
    /// Where the message lands (needs LOCAL_WRITE).
    pub sge: Option<Sge>,
}

/// Completion status (`ibv_wc_status`), with the same meanings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum WcStatus {
    /// The request completed.
    Success,
    /// A local length error (message larger than the receive buffer or the device limit).
    LocalLengthError,
    /// The QP could not execute the request (e.g. unsupported opcode for the QP).
    LocalQpOperationError,
    /// A local buffer was not covered by a registered region with the needed rights.
    LocalProtectionError,
    /// The QP was in the error state; the request was flushed without executing.
    WrFlushError,
    /// A memory-window bind failed its checks.
    MwBindError,
    /// The responder rejected the request as invalid (QP access flags, misaligned atomic).
    RemoteInvalidRequestError,
    /// The responder rejected the rkey, range or rights.
    RemoteAccessError,
    /// The responder could not complete the request (e.g. its receive buffer was bad).
    RemoteOperationError,
    /// Transport retries were exhausted (no response).
    RetryExceeded,
    /// Receiver-not-ready retries were exhausted.
    RnrRetryExceeded,
    /// The response could not be parsed or did not match the request.
    BadResponseError,
}

impl WcStatus {
    /// Whether the status is [`WcStatus::Success`].
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocalLengthError => "local length error",
            WcStatus::LocalQpOperationError => "local QP operation error",
            WcStatus::LocalProtectionError => "local protection error",
            WcStatus::WrFlushError => "work request flushed",
            WcStatus::MwBindError => "memory window bind error",
            WcStatus::RemoteInvalidRequestError => "remote invalid request",
            WcStatus::RemoteAccessError => "remote access error",
            WcStatus::RemoteOperationError => "remote operation error",
            WcStatus::RetryExceeded => "transport retry counter exceeded",
            WcStatus::RnrRetryExceeded => "RNR retry counter exceeded",
            WcStatus::BadResponseError => "bad response",
        };
        f.write_str(s)
    }
}

/// What kind of request a completion belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WcOpcode {
    /// RDMA READ.
    Read,
    /// RDMA WRITE.
    Write,
    /// Compare-and-swap.
    CompareSwap,
    /// Fetch-and-add.
    FetchAdd,
    /// SEND (either kind).
    Send,
    /// Memory-window bind.
    BindMw,
    /// Local invalidate.
    LocalInvalidate,
    /// A receive consumed by an incoming SEND.
    Recv,
    /// A cross-channel WAIT whose count was reached.
    Wait,
    /// A cross-channel ENABLE.
    Enable,
}

/// A work completion (`ibv_wc`). The default value is a placeholder for poll arrays.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WorkCompletion {
    /// The request's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Request kind.
    pub opcode: WcOpcode,
    /// Bytes received (for receives) or transferred.
    pub byte_len: u32,
    /// The local QP.
    pub qp_num: QpNumber,
    /// For receives of SEND_WITH_INV: the rkey the responder invalidated.
    pub invalidated_rkey: Option<Rkey>,
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            qp_num: QpNumber(0),
            invalidated_rkey: None,
        }
    }
}
