//! The soft device's cross-channel capabilities as configuration: what a device without them
//! refuses, and what a cross-channel QP costs (one memory region of its PD for its WQE ring).
//! The chain rules themselves are in the conformance suite (`conformance.md`, "Work-request
//! chains").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use parking_lot::Mutex;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;

/// Accepts one connection on `pd` with an ordinary QP.
struct Policy {
    pd: SoftPd,
    cq: SoftCq,
    got: Mutex<Option<SoftQp>>,
}

impl AcceptPolicy<SoftProvider> for Policy {
    fn create_qp(&self, _p: &[u8]) -> Result<SoftQp, String> {
        self.pd.create_qp(init(&self.cq)).map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _p: &[u8]) {
        *self.got.lock() = Some(qp);
    }
}

fn init(cq: &SoftCq) -> QpInit<'_, SoftProvider> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: 16,
        access: AccessFlags::REMOTE_ALL,
        timing: QpTiming::default(),
    }
}

fn device(fabric: &SoftFabric, cross_channel: bool, mw_bind_target_qp: bool) -> SoftContext {
    fabric.open_device(SoftConfig {
        attr: DeviceAttr {
            max_mr: 64,
            max_mw: 64,
            cross_channel,
            mw_bind_target_qp,
            ..DeviceAttr::default()
        },
        ..SoftConfig::default()
    })
}

#[test]
fn a_device_without_cross_channel_refuses_chain_qps() {
    let fabric = SoftFabric::new();
    let dev = device(&fabric, false, true);
    assert!(!dev.query_device().cross_channel);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let refused = pd.create_cross_channel_qp(init(&cq), CrossChannel::default());
    assert!(
        matches!(refused, Err(VerbsError::Unsupported(_))),
        "{refused:?}"
    );
    let ordinary = pd.create_qp(init(&cq)).unwrap();
    assert_eq!(ordinary.wqe_ring(), None);
}

#[test]
fn a_managed_receive_queue_cannot_use_an_srq() {
    let fabric = SoftFabric::new();
    let dev = device(&fabric, true, true);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let with_srq = QpInit {
        srq: Some(&srq),
        ..init(&cq)
    };
    let refused = pd.create_cross_channel_qp(
        with_srq,
        CrossChannel {
            managed_send: false,
            managed_recv: true,
        },
    );
    assert!(
        matches!(refused, Err(VerbsError::InvalidArgument(_))),
        "{refused:?}"
    );
}

#[test]
fn a_cross_channel_qp_takes_one_region_for_its_ring() {
    let fabric = SoftFabric::new();
    let dev = device(&fabric, true, true);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let before = dev.resources().mrs;
    let qp = pd
        .create_cross_channel_qp(init(&cq), CrossChannel::default())
        .unwrap();
    assert_eq!(dev.resources().mrs, before + 1);
    let ring = qp.wqe_ring().expect("a cross-channel QP has a ring");
    assert_eq!(ring.slots, 16, "one slot per send-queue entry");
    assert_eq!(ring.slot_addr(16), ring.addr, "request 16 reuses slot 0");
    drop(qp);
    assert_eq!(dev.resources().mrs, before, "the ring goes with its QP");
}

#[test]
fn a_device_without_targeted_binds_fails_them() {
    let fabric = SoftFabric::new();
    let dev = device(&fabric, true, false);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let policy = Arc::new(Policy {
        pd: pd.clone(),
        cq: cq.clone(),
        got: Mutex::new(None),
    });
    let listener = dev.listen(policy.clone()).unwrap();
    let qp = pd.create_qp(init(&cq)).unwrap();
    qp.connect(listener.address(), b"loopback").unwrap();
    let peer = policy.got.lock().clone().expect("accepted");
    let buf = dev.alloc_buffer(4096).unwrap();
    let mr = pd
        .reg_mr(
            &buf,
            0,
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )
        .unwrap();
    let mw = pd.alloc_mw(MwType::Type2).unwrap();
    qp.post_send(&[SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::BindMw {
            mw: &mw,
            bind: BindInfo {
                mr: Some(&mr),
                addr: mr.addr(),
                length: 64,
                access: AccessFlags::REMOTE_READ,
                key: None,
                target_qp: Some(peer.qp_num()),
            },
        },
    }])
    .unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut wc);
    assert_eq!(n, 1, "{:?}", &wc[..n]);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (1, WcStatus::MwBindError),
        "no binds for another QP on this device"
    );
}
