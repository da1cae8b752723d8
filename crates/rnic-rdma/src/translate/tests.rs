//! Each mapping is checked against the bindings' `IBV_*` constants, one pair at a time.

use super::*;
use rdma_mummy_sys as sys;

#[test]
fn access_flags_map_to_ibv_bits() {
    use sys::ibv_access_flags as F;
    let cases = [
        (AccessFlags::LOCAL_WRITE, F::IBV_ACCESS_LOCAL_WRITE.0),
        (AccessFlags::REMOTE_WRITE, F::IBV_ACCESS_REMOTE_WRITE.0),
        (AccessFlags::REMOTE_READ, F::IBV_ACCESS_REMOTE_READ.0),
        (AccessFlags::REMOTE_ATOMIC, F::IBV_ACCESS_REMOTE_ATOMIC.0),
        (AccessFlags::MW_BIND, F::IBV_ACCESS_MW_BIND.0),
        (AccessFlags::ZERO_BASED, F::IBV_ACCESS_ZERO_BASED.0),
    ];
    for (ours, theirs) in cases {
        assert_eq!(access_to_ibv(ours), theirs, "{ours:?}");
        assert_eq!(access_from_ibv(theirs), ours, "{theirs:#x}");
    }
    assert_eq!(
        access_to_ibv(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | AccessFlags::REMOTE_ALL),
        F::IBV_ACCESS_LOCAL_WRITE.0
            | F::IBV_ACCESS_MW_BIND.0
            | F::IBV_ACCESS_REMOTE_READ.0
            | F::IBV_ACCESS_REMOTE_WRITE.0
            | F::IBV_ACCESS_REMOTE_ATOMIC.0
    );
    assert_eq!(access_to_ibv(AccessFlags::empty()), 0);
    // Bits the contract does not name (e.g. relaxed ordering) are not invented as rights.
    assert_eq!(
        access_from_ibv(F::IBV_ACCESS_RELAXED_ORDERING.0 | F::IBV_ACCESS_REMOTE_READ.0),
        AccessFlags::REMOTE_READ
    );
}

#[test]
fn mw_types_map_to_ibv() {
    assert_eq!(
        mw_type_to_ibv(MwType::Type1),
        sys::ibv_mw_type::IBV_MW_TYPE_1
    );
    assert_eq!(
        mw_type_to_ibv(MwType::Type2),
        sys::ibv_mw_type::IBV_MW_TYPE_2
    );
}

#[test]
fn completion_statuses_map_from_ibv() {
    use sys::ibv_wc_status as S;
    let exact = [
        (S::IBV_WC_SUCCESS, WcStatus::Success),
        (S::IBV_WC_LOC_LEN_ERR, WcStatus::LocalLengthError),
        (S::IBV_WC_LOC_QP_OP_ERR, WcStatus::LocalQpOperationError),
        (S::IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtectionError),
        (S::IBV_WC_WR_FLUSH_ERR, WcStatus::WrFlushError),
        (S::IBV_WC_MW_BIND_ERR, WcStatus::MwBindError),
        (S::IBV_WC_BAD_RESP_ERR, WcStatus::BadResponseError),
        (
            S::IBV_WC_REM_INV_REQ_ERR,
            WcStatus::RemoteInvalidRequestError,
        ),
        (S::IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccessError),
        (S::IBV_WC_REM_OP_ERR, WcStatus::RemoteOperationError),
        (S::IBV_WC_RETRY_EXC_ERR, WcStatus::RetryExceeded),
        (S::IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
    ];
    for (theirs, ours) in exact {
        assert_eq!(wc_status_from_ibv(theirs), ours, "IBV status {theirs}");
    }
    let nearest = [
        (S::IBV_WC_LOC_ACCESS_ERR, WcStatus::LocalProtectionError),
        (
            S::IBV_WC_REM_INV_RD_REQ_ERR,
            WcStatus::RemoteInvalidRequestError,
        ),
        (S::IBV_WC_REM_ABORT_ERR, WcStatus::RemoteOperationError),
        (S::IBV_WC_RESP_TIMEOUT_ERR, WcStatus::RetryExceeded),
        (S::IBV_WC_FATAL_ERR, WcStatus::LocalQpOperationError),
        (S::IBV_WC_GENERAL_ERR, WcStatus::LocalQpOperationError),
        (S::IBV_WC_LOC_EEC_OP_ERR, WcStatus::LocalQpOperationError),
        (S::IBV_WC_TM_ERR, WcStatus::LocalQpOperationError),
    ];
    for (theirs, ours) in nearest {
        assert_eq!(wc_status_from_ibv(theirs), ours, "IBV status {theirs}");
    }
    // An error status never reads as success.
    for s in 1..=64 {
        assert!(!wc_status_from_ibv(s).is_success(), "status {s}");
    }
}

#[test]
fn completion_opcodes_map_from_ibv() {
    use sys::ibv_wc_opcode as O;
    let cases = [
        (O::IBV_WC_SEND, WcOpcode::Send),
        (O::IBV_WC_RDMA_WRITE, WcOpcode::Write),
        (O::IBV_WC_RDMA_READ, WcOpcode::Read),
        (O::IBV_WC_COMP_SWAP, WcOpcode::CompareSwap),
        (O::IBV_WC_FETCH_ADD, WcOpcode::FetchAdd),
        (O::IBV_WC_BIND_MW, WcOpcode::BindMw),
        (O::IBV_WC_LOCAL_INV, WcOpcode::LocalInvalidate),
        (O::IBV_WC_RECV, WcOpcode::Recv),
        (O::IBV_WC_RECV_RDMA_WITH_IMM, WcOpcode::Recv),
    ];
    for (theirs, ours) in cases {
        assert_eq!(
            wc_opcode_from_ibv(theirs),
            Some(ours),
            "IBV opcode {theirs}"
        );
    }
    assert_eq!(wc_opcode_from_ibv(O::IBV_WC_TSO), None);
}

#[test]
fn qp_states_map_both_ways() {
    use sys::ibv_qp_state as Q;
    let cases = [
        (QpState::Reset, Q::IBV_QPS_RESET),
        (QpState::Init, Q::IBV_QPS_INIT),
        (QpState::ReadyToReceive, Q::IBV_QPS_RTR),
        (QpState::ReadyToSend, Q::IBV_QPS_RTS),
        (QpState::Error, Q::IBV_QPS_ERR),
    ];
    for (ours, theirs) in cases {
        assert_eq!(qp_state_to_ibv(ours), theirs, "{ours:?}");
        assert_eq!(qp_state_from_ibv(theirs), ours, "IBV state {theirs}");
    }
    assert_eq!(qp_state_from_ibv(Q::IBV_QPS_SQD), QpState::ReadyToSend);
    assert_eq!(qp_state_from_ibv(Q::IBV_QPS_SQE), QpState::Error);
    assert_eq!(qp_state_from_ibv(Q::IBV_QPS_UNKNOWN), QpState::Error);
}

#[test]
fn async_events_map_from_ibv() {
    use sys::ibv_event_type as E;
    let q = Some(7);
    let cases = [
        (
            E::IBV_EVENT_QP_FATAL,
            Some(AsyncEvent::QpFatal(QpNumber(7))),
        ),
        (
            E::IBV_EVENT_QP_ACCESS_ERR,
            Some(AsyncEvent::QpAccessError(QpNumber(7))),
        ),
        (
            E::IBV_EVENT_QP_REQ_ERR,
            Some(AsyncEvent::QpRequestError(QpNumber(7))),
        ),
        (
            E::IBV_EVENT_QP_LAST_WQE_REACHED,
            Some(AsyncEvent::QpLastWqeReached(QpNumber(7))),
        ),
        (E::IBV_EVENT_CQ_ERR, Some(AsyncEvent::CqOverrun)),
        (E::IBV_EVENT_PORT_ACTIVE, None),
        (E::IBV_EVENT_DEVICE_FATAL, None),
    ];
    for (theirs, ours) in cases {
        assert_eq!(
            async_event_from_ibv(theirs as u32, q),
            ours,
            "event {}",
            theirs as u32
        );
    }
}

#[test]
fn ack_timeout_uses_ib_exponent_encoding() {
    // 4.096 µs · 2^t: t = 12 is 16.8 ms, the smallest that covers the default 16 ms.
    assert_eq!(ack_timeout_to_ib(16_000), 12);
    assert_eq!(ack_timeout_to_ib(1), 1);
    assert_eq!(ack_timeout_to_ib(8), 1); // 8.192 µs
    assert_eq!(ack_timeout_to_ib(9), 2);
    assert_eq!(ack_timeout_to_ib(2_000_000), 19); // 2.147 s
    assert_eq!(ack_timeout_to_ib(u64::MAX), 31);
}

#[test]
fn rnr_timer_uses_ib_table() {
    assert_eq!(rnr_timer_to_ib(10), 1); // 0.01 ms
    assert_eq!(rnr_timer_to_ib(100), 7); // 0.12 ms is the first ≥ 0.1 ms
    assert_eq!(rnr_timer_to_ib(1_000), 14); // 0.96 ms (13) is too short: 1.28 ms
    assert_eq!(rnr_timer_us(rnr_timer_to_ib(1_000)), 1_280);
    assert_eq!(rnr_timer_to_ib(491_520), 31);
    assert_eq!(rnr_timer_to_ib(600_000), 0); // only code 0 (655.36 ms) is longer
    assert_eq!(rnr_timer_us(0), 655_360);
    for code in 1..31u8 {
        assert!(rnr_timer_us(code) < rnr_timer_us(code + 1));
    }
}

#[test]
fn retries_stay_finite() {
    assert_eq!(
        rnr_retry_to_ib(7),
        6,
        "7 would mean infinite RNR retries in IB"
    );
    assert_eq!(rnr_retry_to_ib(3), 3);
    assert_eq!(retry_count_to_ib(9), 7);
}

#[test]
fn mtu_sizes() {
    use sys::ibv_mtu as M;
    assert_eq!(mtu_bytes(M::IBV_MTU_256), 256);
    assert_eq!(mtu_bytes(M::IBV_MTU_1024), 1024);
    assert_eq!(mtu_bytes(M::IBV_MTU_4096), 4096);
    assert_eq!(mtu_bytes(0), 0);
}

#[test]
fn errnos_map_to_verbs_errors() {
    use rnic::Resource;
    let e = |n| io::Error::from_raw_os_error(n);
    assert!(matches!(
        verbs_error("ibv_alloc_mw", Resource::MemoryWindow, e(libc::ENOMEM)),
        VerbsError::Exhausted(Resource::MemoryWindow)
    ));
    assert!(matches!(
        verbs_error("ibv_modify_qp", Resource::QueuePair, e(libc::EINVAL)),
        VerbsError::InvalidArgument("ibv_modify_qp")
    ));
    assert!(matches!(
        verbs_error("ibv_dereg_mr", Resource::MemoryRegion, e(libc::EBUSY)),
        VerbsError::Busy("ibv_dereg_mr")
    ));
    let unsupported = verbs_error("ibv_alloc_mw", Resource::MemoryWindow, e(libc::EOPNOTSUPP));
    assert!(
        unsupported.to_string().contains("not supported"),
        "{unsupported}"
    );
}
