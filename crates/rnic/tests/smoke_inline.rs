use parking_lot::Mutex;
use rnic::soft::*;
use rnic::*;
use std::sync::Arc;

struct Policy {
    pd: SoftPd,
    cq: SoftCq,
    got: Mutex<Option<SoftQp>>,
}
impl AcceptPolicy<SoftProvider> for Policy {
    fn create_qp(&self, _p: &[u8]) -> Result<SoftQp, String> {
        self.pd
            .create_qp(QpInit {
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                max_send_wr: 64,
                max_recv_wr: 64,
                access: AccessFlags::REMOTE_ALL,
                timing: QpTiming::default(),
            })
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _p: &[u8]) {
        *self.got.lock() = Some(qp);
    }
}

#[test]
fn read_write_atomics_and_windows() {
    let fabric = SoftFabric::new();
    let mn = fabric.open_device(SoftConfig::default());
    let cn = fabric.open_device(SoftConfig::default());
    let mpd = mn.alloc_pd().unwrap();
    let mcq = mn.create_cq(256).unwrap();
    let policy = Arc::new(Policy {
        pd: mpd.clone(),
        cq: mcq.clone(),
        got: Mutex::new(None),
    });
    let listener = mn.listen(policy.clone()).unwrap();

    let mbuf = mn.alloc_buffer(1 << 16).unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
    let mmr = mpd.reg_mr(&mbuf, 0, 1 << 16, all).unwrap();

    let cpd = cn.alloc_pd().unwrap();
    let ccq = cn.create_cq(256).unwrap();
    let cbuf = cn.alloc_buffer(4096).unwrap();
    let cmr = cpd
        .reg_mr(&cbuf, 0, 4096, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let qp = cpd
        .create_qp(QpInit {
            send_cq: &ccq,
            recv_cq: &ccq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 64,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(listener.address(), b"hello").unwrap();
    assert_eq!(qp.state(), QpState::ReadyToSend);
    let sqp = policy.got.lock().clone().unwrap();

    // write through the MR rkey
    cbuf.write(0, b"0123456789abcdef").unwrap();
    let sge = Sge {
        addr: cbuf.addr(),
        length: 16,
        lkey: cmr.lkey(),
    };
    qp.post_send(&[SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Write {
            local: sge,
            remote_addr: mbuf.addr() + 100,
            rkey: mmr.rkey(),
        },
    }])
    .unwrap();
    let mut wc = [WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qp_num: QpNumber(0),
        invalidated_rkey: None,
    }; 4];
    assert_eq!(ccq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut check = [0u8; 16];
    mbuf.read(100, &mut check).unwrap();
    assert_eq!(&check, b"0123456789abcdef");

    // bind a type-1 window over [4096, 4096+64) on the MN via a loopback-free bind (any QP of the PD)
    let mw = mpd.alloc_mw(MwType::Type1).unwrap();
    let old = mw.rkey();
    sqp.post_send(&[SendWr {
        wr_id: 9,
        signaled: true,
        op: SendOp::BindMw {
            mw: &mw,
            bind: BindInfo {
                mr: Some(&mmr),
                addr: mbuf.addr() + 4096,
                length: 64,
                access: AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_ATOMIC,
                key: None,
                target_qp: None,
            },
        },
    }])
    .unwrap();
    assert_eq!(mcq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    assert_ne!(mw.rkey(), old);

    // CAS through the window
    let csge = Sge {
        addr: cbuf.addr() + 64,
        length: 8,
        lkey: cmr.lkey(),
    };
    qp.post_send(&[SendWr {
        wr_id: 2,
        signaled: true,
        op: SendOp::CompareSwap {
            local: csge,
            remote_addr: mbuf.addr() + 4096,
            rkey: mw.rkey(),
            compare: 0,
            swap: 42,
        },
    }])
    .unwrap();
    assert_eq!(ccq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(mbuf.load_u64(4096).unwrap(), 42);
    assert_eq!(cbuf.load_u64(64).unwrap(), 0);

    // out of bounds by one byte -> remote access error, QP to ERR, later WRs flushed
    let rsge = Sge {
        addr: cbuf.addr(),
        length: 8,
        lkey: cmr.lkey(),
    };
    qp.post_send(&[
        SendWr {
            wr_id: 3,
            signaled: true,
            op: SendOp::Read {
                local: rsge,
                remote_addr: mbuf.addr() + 4096 + 57,
                rkey: mw.rkey(),
            },
        },
        SendWr {
            wr_id: 4,
            signaled: true,
            op: SendOp::Read {
                local: rsge,
                remote_addr: mbuf.addr() + 4096,
                rkey: mw.rkey(),
            },
        },
    ])
    .unwrap();
    let n = ccq.poll(&mut wc);
    assert_eq!(n, 2);
    assert_eq!(wc[0].status, WcStatus::RemoteAccessError);
    assert_eq!(wc[1].status, WcStatus::WrFlushError);
    assert_eq!(qp.state(), QpState::Error);
    assert_eq!(sqp.state(), QpState::Error);
    assert_eq!(
        mn.poll_async_event(),
        Some(AsyncEvent::QpAccessError(sqp.qp_num()))
    );
}

/// Resetting a QP frees the type-2 windows bound to it (its number may come back on another
/// connection, which must not inherit them); type-1 windows are untouched.
#[test]
fn qp_reset_frees_its_type2_windows() {
    let fabric = SoftFabric::new();
    let dev = fabric.open_device(SoftConfig::default());
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let policy = Arc::new(Policy {
        pd: pd.clone(),
        cq: cq.clone(),
        got: Mutex::new(None),
    });
    let listener = dev.listen(policy.clone()).unwrap();
    let buf = dev.alloc_buffer(4096).unwrap();
    let mr = pd
        .reg_mr(
            &buf,
            0,
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )
        .unwrap();
    let qp = pd
        .create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 16,
            max_recv_wr: 16,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    qp.connect(listener.address(), b"").unwrap();
    let mw2 = pd.alloc_mw(MwType::Type2).unwrap();
    let mw1 = pd.alloc_mw(MwType::Type1).unwrap();
    fn bind<'a>(mw: &'a SoftMw, mr: &'a SoftMr, addr: u64) -> SendWr<'a, SoftMw, SoftMr> {
        SendWr {
            wr_id: 1,
            signaled: true,
            op: SendOp::BindMw {
                mw,
                bind: BindInfo {
                    mr: Some(mr),
                    addr,
                    length: 64,
                    access: AccessFlags::REMOTE_READ,
                    key: None,
                    target_qp: None,
                },
            },
        }
    }
    qp.post_send(&[bind(&mw2, &mr, buf.addr()), bind(&mw1, &mr, buf.addr())])
        .unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 2);
    let table = dev.protection_table();
    assert!(matches!(
        table.mw_state(mw2.rkey()),
        Some(mpt::MwState::Bound { .. })
    ));
    qp.reset().unwrap();
    assert!(matches!(
        table.mw_state(mw2.rkey()),
        Some(mpt::MwState::Unbound { .. })
    ));
    assert!(matches!(
        table.mw_state(mw1.rkey()),
        Some(mpt::MwState::Bound { .. })
    ));
}
