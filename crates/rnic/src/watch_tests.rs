//! The soft NIC's CQ watch lists (a test at the crate root: it needs a whole device).
//!
//! A QP whose send and receive CQs differ is on each CQ's watch list at most once, however
//! often one of them is polled while its timers run (each poll used to put it on the other
//! list again: a memory node's reply CQ, reaped rarely, collected one copy per poll of its
//! request CQ until a poll took seconds).

use crate::soft::link::queued::QueuedNetwork;
use crate::soft::{LinkMode, SoftConfig, SoftFabric};
use crate::verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QpTiming,
    QueuePair, SendOp, SendWr, Sge, VirtualClock, WorkCompletion,
};

#[test]
fn a_qp_awaiting_a_response_is_on_each_cq_watch_list_once() {
    let clock = VirtualClock::new();
    // Nothing steps the network: the READ below stays unanswered, its QP armed.
    let net = QueuedNetwork::new(clock.clone(), 1);
    let fabric = SoftFabric::with_mode(LinkMode::Queued(net), None);
    let config = SoftConfig {
        clock: clock.clone(),
        ..SoftConfig::default()
    };
    let (mn, cn) = (
        fabric.open_device(config.clone()),
        fabric.open_device(config),
    );
    let responder = crate::endpoints::OpenResponder::<crate::soft::SoftProvider>::new(mn, 16, 1)
        .expect("a responder");
    let pd = cn.alloc_pd().expect("a PD");
    let (send_cq, recv_cq) = (cn.create_cq(16).unwrap(), cn.create_cq(16).unwrap());
    let qp = pd
        .create_qp(QpInit {
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            srq: None,
            max_send_wr: 16,
            max_recv_wr: 16,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(responder.address(), b"").expect("connected");
    let buf = cn.alloc_buffer(64).unwrap();
    let mr = pd.reg_mr(&buf, 0, 64, AccessFlags::LOCAL_WRITE).unwrap();
    let read = SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Read {
            local: Sge {
                addr: buf.addr(),
                length: 8,
                lkey: mr.lkey(),
            },
            remote_addr: 0,
            rkey: crate::MemoryKey(1),
        },
    };
    qp.post_send(&[read]).expect("posted");
    let mut wcs = [WorkCompletion::default(); 4];
    for _ in 0..100 {
        assert_eq!(send_cq.poll(&mut wcs), 0);
    }
    assert_eq!(recv_cq.inner.watched(), 1, "once on the receive CQ's list");
    assert_eq!(send_cq.inner.watched(), 1, "once on the send CQ's list");
}
