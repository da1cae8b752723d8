//! `SoftContext::resources`: every kind of verbs object is counted while alive and uncounted
//! once dropped, on both ends of a connection; over TCP, the connection is counted too
//! (`TcpStats::live`).
#![allow(clippy::unwrap_used)] // tests panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use parking_lot::Mutex;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;

/// Accepts with a QP on its own PD and CQ, keeping the QP.
struct Policy {
    pd: SoftPd,
    cq: SoftCq,
    got: Mutex<Option<SoftQp>>,
}

impl AcceptPolicy<SoftProvider> for Policy {
    fn create_qp(&self, _p: &[u8]) -> Result<SoftQp, String> {
        self.pd
            .create_qp(init(&self.cq, None))
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _p: &[u8]) {
        *self.got.lock() = Some(qp);
    }
}

fn init<'a>(cq: &'a SoftCq, srq: Option<&'a SoftSrq>) -> QpInit<'a, SoftProvider> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq,
        max_send_wr: 16,
        max_recv_wr: 16,
        access: AccessFlags::REMOTE_ALL,
        timing: QpTiming::default(),
    }
}

fn bind(qp: &SoftQp, cq: &SoftCq, mw: &SoftMw, mr: &SoftMr) {
    qp.post_send(&[SendWr {
        wr_id: 7,
        signaled: true,
        op: SendOp::BindMw {
            mw,
            bind: BindInfo {
                mr: Some(mr),
                addr: mr.addr(),
                length: 64,
                access: AccessFlags::REMOTE_READ,
                key: None,
                target_qp: None,
            },
        },
    }])
    .unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
}

#[test]
fn resources_count_every_live_object_and_return_to_the_start() {
    let fabric = SoftFabric::new();
    let mn = fabric.open_device(SoftConfig::default());
    let cn = fabric.open_device(SoftConfig::default());
    assert_eq!(mn.resources(), DeviceResources::default());
    assert_eq!(cn.resources(), DeviceResources::default());

    let policy = Arc::new(Policy {
        pd: mn.alloc_pd().unwrap(),
        cq: mn.create_cq(16).unwrap(),
        got: Mutex::new(None),
    });
    let listener = mn.listen(policy.clone()).unwrap();
    let start = mn.resources();

    let pd = cn.alloc_pd().unwrap();
    let cq = cn.create_cq(16).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let qp = pd.create_qp(init(&cq, Some(&srq))).unwrap();
    let buf = cn.alloc_buffer(4096).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | AccessFlags::REMOTE_READ;
    let mr = pd.reg_mr(&buf, 0, 4096, access).unwrap();
    let type1 = pd.alloc_mw(MwType::Type1).unwrap();
    let type2 = pd.alloc_mw(MwType::Type2).unwrap();
    let unbound = pd.alloc_mw(MwType::Type2).unwrap();
    qp.connect(listener.address(), b"").unwrap();
    bind(&qp, &cq, &type1, &mr);
    bind(&qp, &cq, &type2, &mr);

    let r = cn.resources();
    assert_eq!(
        (r.pds, r.cqs, r.srqs, r.qps, r.mrs, r.mws),
        (1, 1, 1, 1, 1, 3),
        "{r:?}"
    );
    let r = mn.resources();
    assert_eq!((r.pds, r.cqs, r.qps), (1, 1, 1), "{r:?}");

    // Windows first (the region stays registered while they are bound), then the rest.
    drop((type1, type2, unbound));
    assert_eq!(cn.resources().mws, 0);
    drop((mr, buf));
    assert_eq!(cn.resources().mrs, 0);
    drop(qp);
    drop((srq, cq, pd));
    assert_eq!(cn.resources(), DeviceResources::default());

    // The server QP lives until the accept policy lets it go.
    let server_qp = policy.got.lock().take().unwrap();
    assert_eq!(mn.resources().qps, 1);
    drop(server_qp);
    assert_eq!(mn.resources(), start);
    drop((listener, policy));
    assert_eq!(mn.resources(), DeviceResources::default());
}

#[test]
fn tcp_a_closed_connection_leaves_nothing_behind_on_the_node() {
    let s = util::Server::new();
    let start = s.ctx.resources();
    assert_eq!(TcpNode::stats(&s.ctx).unwrap().live, 0);

    let c = util::Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    assert_eq!(s.ctx.resources().qps, start.qps + 1);
    assert_eq!(TcpNode::stats(&s.ctx).unwrap().live, 1);

    drop(c);
    util::wait_until("server QP in ERR", || sqp.state() == QpState::Error);
    drop(sqp);
    s.policy.got.lock().clear(); // the node's manager forgets the connection
    assert_eq!(s.ctx.resources(), start);
    // The engine drops the dead connection on its own thread.
    util::wait_until("connection dropped", || {
        TcpNode::stats(&s.ctx).unwrap().live == 0
    });
}
