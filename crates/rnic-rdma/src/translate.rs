//! Pure translations between the verbs contract's types and libibverbs' numbers.
//!
//! Every function here is total and free of I/O, so the tests check each mapping against the
//! bindings' `IBV_*` constants. Where libibverbs has values the contract has no name for, the
//! mapping is lossy and says so (a completion status, a QP state); nothing is dropped silently.

use rdma_mummy_sys as sys;
use rnic::{AccessFlags, AsyncEvent, MwType, QpNumber, QpState, VerbsError, WcOpcode, WcStatus};
use std::io;

/// `IBV_LINK_LAYER_INFINIBAND` (a `#define` in `verbs.h`, not in the bindings).
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// The contract's access flags as `IBV_ACCESS_*` bits.
pub fn access_to_ibv(a: AccessFlags) -> u32 {
    use sys::ibv_access_flags as F;
    let pairs = [
        (AccessFlags::LOCAL_WRITE, F::IBV_ACCESS_LOCAL_WRITE),
        (AccessFlags::REMOTE_WRITE, F::IBV_ACCESS_REMOTE_WRITE),
        (AccessFlags::REMOTE_READ, F::IBV_ACCESS_REMOTE_READ),
        (AccessFlags::REMOTE_ATOMIC, F::IBV_ACCESS_REMOTE_ATOMIC),
        (AccessFlags::MW_BIND, F::IBV_ACCESS_MW_BIND),
        (AccessFlags::ZERO_BASED, F::IBV_ACCESS_ZERO_BASED),
    ];
    pairs
        .iter()
        .filter(|(ours, _)| a.contains(*ours))
        .fold(0, |acc, (_, theirs)| acc | theirs.0)
}

/// `IBV_ACCESS_*` bits as the contract's flags; bits the contract has no name for are dropped.
pub fn access_from_ibv(bits: u32) -> AccessFlags {
    use sys::ibv_access_flags as F;
    let pairs = [
        (F::IBV_ACCESS_LOCAL_WRITE, AccessFlags::LOCAL_WRITE),
        (F::IBV_ACCESS_REMOTE_WRITE, AccessFlags::REMOTE_WRITE),
        (F::IBV_ACCESS_REMOTE_READ, AccessFlags::REMOTE_READ),
        (F::IBV_ACCESS_REMOTE_ATOMIC, AccessFlags::REMOTE_ATOMIC),
        (F::IBV_ACCESS_MW_BIND, AccessFlags::MW_BIND),
        (F::IBV_ACCESS_ZERO_BASED, AccessFlags::ZERO_BASED),
    ];
    pairs
        .iter()
        .filter(|(theirs, _)| bits & theirs.0 != 0)
        .fold(AccessFlags::empty(), |acc, (_, ours)| acc | *ours)
}

/// `IBV_MW_TYPE_*` of a window type.
pub fn mw_type_to_ibv(t: MwType) -> u32 {
    match t {
        MwType::Type1 => sys::ibv_mw_type::IBV_MW_TYPE_1,
        MwType::Type2 => sys::ibv_mw_type::IBV_MW_TYPE_2,
    }
}

/// A completion status. Statuses the contract has no name for map to the nearest meaning:
/// `LOC_ACCESS_ERR` → local protection, `REM_INV_RD_REQ_ERR` → remote invalid request,
/// `REM_ABORT_ERR` → remote operation, `RESP_TIMEOUT_ERR` → retry exceeded, and the
/// reliable-datagram, tag-matching, fatal and general errors → local QP operation error.
pub fn wc_status_from_ibv(s: u32) -> WcStatus {
    use sys::ibv_wc_status as S;
    match s {
        S::IBV_WC_SUCCESS => WcStatus::Success,
        S::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        S::IBV_WC_LOC_QP_OP_ERR => WcStatus::LocalQpOperationError,
        S::IBV_WC_LOC_PROT_ERR | S::IBV_WC_LOC_ACCESS_ERR => WcStatus::LocalProtectionError,
        S::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushError,
        S::IBV_WC_MW_BIND_ERR => WcStatus::MwBindError,
        S::IBV_WC_BAD_RESP_ERR => WcStatus::BadResponseError,
        S::IBV_WC_REM_INV_REQ_ERR | S::IBV_WC_REM_INV_RD_REQ_ERR => {
            WcStatus::RemoteInvalidRequestError
        }
        S::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        S::IBV_WC_REM_OP_ERR | S::IBV_WC_REM_ABORT_ERR => WcStatus::RemoteOperationError,
        S::IBV_WC_RETRY_EXC_ERR | S::IBV_WC_RESP_TIMEOUT_ERR => WcStatus::RetryExceeded,
        S::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        _ => WcStatus::LocalQpOperationError,
    }
}

/// The opcode of a *successful* completion (`ibv_wc.opcode` is undefined on errors; the QP's
/// record of posted requests answers then). `None` for opcodes this crate never posts.
pub fn wc_opcode_from_ibv(op: u32) -> Option<WcOpcode> {
    use sys::ibv_wc_opcode as O;
    Some(match op {
        O::IBV_WC_SEND => WcOpcode::Send,
        O::IBV_WC_RDMA_WRITE => WcOpcode::Write,
        O::IBV_WC_RDMA_READ => WcOpcode::Read,
        O::IBV_WC_COMP_SWAP => WcOpcode::CompareSwap,
        O::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        O::IBV_WC_BIND_MW => WcOpcode::BindMw,
        O::IBV_WC_LOCAL_INV => WcOpcode::LocalInvalidate,
        O::IBV_WC_RECV | O::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::Recv,
        _ => return None,
    })
}

/// The contract's QP state of an `IBV_QPS_*` value. SQD (drained) still sends, so it reads as
/// RTS; SQE (send-queue error) and UNKNOWN read as ERR.
pub fn qp_state_from_ibv(s: u32) -> QpState {
    use sys::ibv_qp_state as Q;
    match s {
        Q::IBV_QPS_RESET => QpState::Reset,
        Q::IBV_QPS_INIT => QpState::Init,
        Q::IBV_QPS_RTR => QpState::ReadyToReceive,
        Q::IBV_QPS_RTS | Q::IBV_QPS_SQD => QpState::ReadyToSend,
        _ => QpState::Error,
    }
}

/// `IBV_QPS_*` of a contract state.
pub fn qp_state_to_ibv(s: QpState) -> u32 {
    use sys::ibv_qp_state as Q;
    match s {
        QpState::Reset => Q::IBV_QPS_RESET,
        QpState::Init => Q::IBV_QPS_INIT,
        QpState::ReadyToReceive => Q::IBV_QPS_RTR,
        QpState::ReadyToSend => Q::IBV_QPS_RTS,
        QpState::Error => Q::IBV_QPS_ERR,
    }
}

/// An asynchronous event, if the contract has a name for it (`IBV_EVENT_*` as an integer).
pub fn async_event_from_ibv(event_type: u32, qp_num: Option<u32>) -> Option<AsyncEvent> {
    use sys::ibv_event_type as E;
    let qp = QpNumber(qp_num.unwrap_or(0));
    let is = |e: E| event_type == e as u32;
    if is(E::IBV_EVENT_QP_FATAL) {
        Some(AsyncEvent::QpFatal(qp))
    } else if is(E::IBV_EVENT_QP_ACCESS_ERR) {
        Some(AsyncEvent::QpAccessError(qp))
    } else if is(E::IBV_EVENT_QP_REQ_ERR) {
        Some(AsyncEvent::QpRequestError(qp))
    } else if is(E::IBV_EVENT_QP_LAST_WQE_REACHED) {
        Some(AsyncEvent::QpLastWqeReached(qp))
    } else if is(E::IBV_EVENT_CQ_ERR) {
        Some(AsyncEvent::CqOverrun)
    } else {
        None
    }
}

/// IB's local ACK timeout encoding: `4.096 µs · 2^t`; the smallest `t` in 1..=31 that waits
/// at least `us` (0 would mean "wait forever", which the contract never asks for).
pub fn ack_timeout_to_ib(us: u64) -> u8 {
    (1u8..=31)
        .find(|t| 4096u128 << t >= u128::from(us) * 1000)
        .unwrap_or(31)
}

/// IB's RNR NAK timer table (IB spec 9.7.5.2.8, table 45), in µs, indexed by code; code 0 is
/// the longest (655.36 ms).
const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The smallest RNR timer code that waits at least `us`.
pub fn rnr_timer_to_ib(us: u64) -> u8 {
    (1u8..=31)
        .find(|&c| RNR_TIMER_US[c as usize] >= us)
        .unwrap_or(0)
}

/// The delay of an RNR timer code, µs.
pub fn rnr_timer_us(code: u8) -> u64 {
    RNR_TIMER_US[usize::from(code & 31)]
}

/// `rnr_retry` for the QP: 7 means "retry forever" in IB, and the contract promises finite
/// retries (a client that never posts receives must not freeze the memory node), so 7 is
/// lowered to 6.
pub fn rnr_retry_to_ib(n: u8) -> u8 {
    n.min(6)
}

/// `retry_cnt` (3 bits).
pub fn retry_count_to_ib(n: u8) -> u8 {
    n.min(7)
}

/// MTU in bytes of an `IBV_MTU_*` value (0 if unknown).
pub fn mtu_bytes(mtu: u32) -> u32 {
    use sys::ibv_mtu as M;
    match mtu {
        M::IBV_MTU_256 => 256,
        M::IBV_MTU_512 => 512,
        M::IBV_MTU_1024 => 1024,
        M::IBV_MTU_2048 => 2048,
        M::IBV_MTU_4096 => 4096,
        _ => 0,
    }
}

/// A verb call's errno as the contract's error. `what` names the call for messages.
pub fn verbs_error(what: &'static str, resource: rnic::Resource, err: io::Error) -> VerbsError {
    match err.raw_os_error() {
        Some(libc::EINVAL) => VerbsError::InvalidArgument(what),
        Some(libc::EPERM) => VerbsError::PdMismatch,
        Some(libc::ENOMEM) | Some(libc::ENOSPC) | Some(libc::EAGAIN) => {
            VerbsError::Exhausted(resource)
        }
        Some(libc::EBUSY) => VerbsError::Busy(what),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => VerbsError::Io(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{what}: not supported by this device or libibverbs ({err})"),
        )),
        _ => VerbsError::Io(io::Error::new(err.kind(), format!("{what}: {err}"))),
    }
}

#[cfg(test)]
mod tests;
