//! Error propagation and flushing (`docs/conformance.md`, "Errors, flushing, recovery"), QP
//! recovery, batched posts with signaled/unsignaled requests, and local buffer checks.

use super::harness::*;
use rnic::{
    AccessFlags, AsyncEvent, Context, MemoryBuffer, MemoryKey, MemoryRegion, ProtectionDomain,
    Provider, QpState, QueuePair, RecvWr, WcOpcode, WcStatus,
};

const R: AccessFlags = AccessFlags::REMOTE_READ;
const W: AccessFlags = AccessFlags::REMOTE_WRITE;
const A: AccessFlags = AccessFlags::REMOTE_ATOMIC;
const OFF: usize = 8192;
const LEN: u64 = 1024;

/// After an error, every outstanding and later request of the batch completes flushed, in
/// posting order (flushes are reported even for unsignaled requests), and none executes.
pub fn error_flushes_outstanding_in_order<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W | A);
    let mem = w.fill_mn(OFF, LEN as usize, 1);
    w.fill_cn(0, 64, 2);
    w.mbuf.store_u64(OFF + 512, 100).unwrap();
    let bad = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    conn.post(&[
        wr::<P>(1, op_read::<P>(w.csge(1024, 8), w.maddr(OFF), rkey)),
        wr::<P>(2, op_read::<P>(w.csge(1032, 8), w.maddr(OFF), bad)),
        wr::<P>(3, op_write::<P>(w.csge(0, 64), w.maddr(OFF), rkey)),
        wr::<P>(4, op_faa::<P>(w.csge(1040, 8), w.maddr(OFF + 512), rkey, 1)),
        wr_unsignaled::<P>(5, op_read::<P>(w.csge(1048, 8), w.maddr(OFF), rkey)),
    ]);
    let wcs = wait_completions::<P, B>(&w.bed, &conn.ccq, 5);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemoteAccessError),
            (3, WcStatus::WrFlushError),
            (4, WcStatus::WrFlushError),
            (5, WcStatus::WrFlushError),
        ]
    );
    assert_eq!(
        wcs[2].opcode,
        WcOpcode::Write,
        "flushed completions keep their opcode"
    );
    assert_eq!(conn.cqp.state(), QpState::Error);
    let mut expected = mem;
    expected[512..520].copy_from_slice(&100u64.to_ne_bytes());
    assert_eq!(
        w.mn_bytes(OFF, LEN as usize),
        expected,
        "flushed requests must not execute"
    );
    // Later posts complete flushed too, in order.
    conn.post(&[
        wr_unsignaled::<P>(6, op_write::<P>(w.csge(0, 8), w.maddr(OFF), rkey)),
        wr::<P>(7, op_read::<P>(w.csge(0, 8), w.maddr(OFF), rkey)),
    ]);
    let wcs = wait_completions::<P, B>(&w.bed, &conn.ccq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(6, WcStatus::WrFlushError), (7, WcStatus::WrFlushError)]
    );
    assert_cq_empty::<P, B>(&w.bed, &conn.ccq, "client send CQ");
    assert_eq!(
        w.mn_bytes(OFF, 8),
        expected[..8],
        "posts after ERR must not execute"
    );
}

/// Posted receives flush when a QP enters ERR: the responder's (killed by the peer's bad
/// access) and the requester's own.
pub fn error_flushes_posted_receives<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let recv = |id: u64, off: usize| RecvWr {
        wr_id: id,
        sge: Some(sge(&w.mbuf, w.mmr.lkey(), off, 64)),
    };
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![recv(10, 0), recv(11, 64), recv(12, 128)],
        ..ConnOpts::default()
    });
    conn.cqp
        .post_recv(&[
            RecvWr {
                wr_id: 20,
                sge: Some(w.csge(4096, 64)),
            },
            RecvWr {
                wr_id: 21,
                sge: None,
            },
        ])
        .unwrap();
    let wc = w.read(&conn, 0, OFF, 8, GARBAGE_RKEY);
    w.assert_access_error(&conn, &wc);
    let server = wait_completions::<P, B>(&w.bed, conn.srcq(), 3);
    let got: Vec<(u64, WcStatus, WcOpcode)> = server
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, WcStatus::WrFlushError, WcOpcode::Recv),
            (11, WcStatus::WrFlushError, WcOpcode::Recv),
            (12, WcStatus::WrFlushError, WcOpcode::Recv),
        ]
    );
    let client = wait_completions::<P, B>(&w.bed, &conn.crcq, 2);
    let got: Vec<(u64, WcStatus)> = client.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(20, WcStatus::WrFlushError), (21, WcStatus::WrFlushError)]
    );
    // A receive posted after ERR flushes too.
    conn.sqp.post_recv(&[recv(13, 192)]).unwrap();
    let late = wait_completions::<P, B>(&w.bed, conn.srcq(), 1);
    assert_eq!(
        (late[0].wr_id, late[0].status),
        (13, WcStatus::WrFlushError)
    );
}

/// A QP moved to ERR by the application (`ibv_modify_qp(ERR)`) flushes every post, and its
/// peer learns nothing until it talks to it.
pub fn post_after_error_flushes<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let before = w.fill_mn(OFF, 64, 3);
    conn.cqp.set_error();
    assert_eq!(conn.cqp.state(), QpState::Error);
    conn.post(&[
        wr::<P>(1, op_write::<P>(w.csge(0, 64), w.maddr(OFF), rkey)),
        wr_unsignaled::<P>(2, op_read::<P>(w.csge(0, 64), w.maddr(OFF), rkey)),
    ]);
    let wcs = wait_completions::<P, B>(&w.bed, &conn.ccq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::WrFlushError), (2, WcStatus::WrFlushError)]
    );
    conn.cqp
        .post_recv(&[RecvWr {
            wr_id: 3,
            sge: Some(w.csge(0, 64)),
        }])
        .unwrap();
    let wcs = wait_completions::<P, B>(&w.bed, &conn.crcq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (3, WcStatus::WrFlushError, WcOpcode::Recv)
    );
    assert_eq!(w.mn_bytes(OFF, 64), before);
}

/// Recovery: reset + connect (a new handshake) restores service on the same QP object.
pub fn reset_reconnect_restores_service<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mut conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let wc = w.read(&conn, 0, OFF, 8, GARBAGE_RKEY);
    w.assert_access_error(&conn, &wc);
    // A QP in ERR cannot simply connect again.
    assert!(conn.cqp.connect(conn.address(), b"x").is_err());
    conn.reconnect(&w.bed);
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    let data = w.fill_mn(OFF, 64, 4);
    assert_eq!(w.read(&conn, 0, OFF, 64, rkey).status, WcStatus::Success);
    assert_eq!(w.cn_bytes(0, 64), data);
    assert_eq!(
        w.write(&conn, 0, OFF + 64, 64, rkey).status,
        WcStatus::Success
    );
    // Reconnecting a healthy QP works too (reset drops the old connection).
    conn.reconnect(&w.bed);
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
}

/// Patronus `correct_mw_valid_cross_qp`: a type-1 window belongs to the PD, so it stays valid
/// on a new QP of the same PD after the QP that used it errored.
pub fn type1_window_survives_qp_error<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let data = w.fill_mn(OFF, 64, 5);
    let mut first = w.connect();
    assert_eq!(w.read(&first, 0, OFF, 64, rkey).status, WcStatus::Success);
    let wc = w.read(&first, 0, OFF, 8, GARBAGE_RKEY);
    w.assert_access_error(&first, &wc);
    let second = w.connect();
    w.cbuf.write(0, &[0; 64]).unwrap();
    assert_eq!(w.read(&second, 0, OFF, 64, rkey).status, WcStatus::Success);
    assert_eq!(w.cn_bytes(0, 64), data);
    first.reconnect(&w.bed);
    assert_eq!(w.read(&first, 0, OFF, 64, rkey).status, WcStatus::Success);
}

/// `ibv_dereg_mr` fails while a window is bound over the region and succeeds once unbound
/// (type 1: zero-length bind; type 2: LOCAL_INV).
pub fn dereg_mr_with_bound_window_fails<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mr = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let mw1 = w.mpd.alloc_mw(rnic::MwType::Type1).unwrap();
    let mw1b = w.mpd.alloc_mw(rnic::MwType::Type1).unwrap();
    let a = w.maddr(0);
    assert_eq!(
        w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw1, Some(&mr), a, 64, R),
        WcStatus::Success
    );
    assert_eq!(
        w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw1b, Some(&mr), a + 64, 64, R),
        WcStatus::Success
    );
    let mr = assert_dereg_busy(mr, 2);
    assert_eq!(
        w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw1, None, 0, 0, R),
        WcStatus::Success
    );
    let mr = assert_dereg_busy(mr, 1);
    assert_eq!(
        w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw1b, None, 0, 0, R),
        WcStatus::Success
    );
    assert_dereg_ok(mr);

    let mr = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let conn = w.connect();
    let mw2 = w.mpd.alloc_mw(rnic::MwType::Type2).unwrap();
    assert_eq!(
        w.bind_on(&conn.sqp, conn.scq(), &mw2, Some(&mr), a, 64, R),
        WcStatus::Success
    );
    let rkey = rnic::MemoryWindow::rkey(&mw2);
    let mr = assert_dereg_busy(mr, 1);
    let wc = conn.exec_server(&w.bed, rnic::SendOp::LocalInvalidate { rkey });
    assert_eq!(wc.status, WcStatus::Success);
    assert_dereg_ok(mr);
}

/// Doorbell batching: only signaled successes complete; unsignaled ones execute silently.
pub fn batch_unsignaled_successes_are_silent<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W | A);
    let d1 = w.fill_cn(0, 32, 1);
    let d2 = w.fill_cn(32, 32, 2);
    w.mbuf.store_u64(OFF + 512, 5).unwrap();
    conn.post(&[
        wr_unsignaled::<P>(1, op_write::<P>(w.csge(0, 32), w.maddr(OFF), rkey)),
        wr::<P>(2, op_write::<P>(w.csge(32, 32), w.maddr(OFF + 32), rkey)),
        wr_unsignaled::<P>(
            3,
            op_faa::<P>(w.csge(1024, 8), w.maddr(OFF + 512), rkey, 10),
        ),
        wr_unsignaled::<P>(4, op_read::<P>(w.csge(2048, 64), w.maddr(OFF), rkey)),
        wr::<P>(
            5,
            op_faa::<P>(w.csge(1032, 8), w.maddr(OFF + 512), rkey, 100),
        ),
        wr_unsignaled::<P>(6, op_write::<P>(w.csge(0, 8), w.maddr(OFF + 256), rkey)),
    ]);
    let wcs = wait_completions::<P, B>(&w.bed, &conn.ccq, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(2, WcStatus::Success), (5, WcStatus::Success)]);
    // A final signaled request: everything before it has executed, nothing else completes.
    assert_eq!(
        w.read(&conn, 4096, OFF + 256, 8, rkey).status,
        WcStatus::Success
    );
    assert_cq_empty::<P, B>(&w.bed, &conn.ccq, "client send CQ");
    assert_eq!(w.mn_bytes(OFF, 32), d1);
    assert_eq!(w.mn_bytes(OFF + 32, 32), d2);
    assert_eq!(w.cbuf.load_u64(1024).unwrap(), 5);
    assert_eq!(w.cbuf.load_u64(1032).unwrap(), 15);
    assert_eq!(w.mbuf.load_u64(OFF + 512).unwrap(), 115);
    let mut both = d1.clone();
    both.extend_from_slice(&d2);
    assert_eq!(w.cn_bytes(2048, 64), both, "unsignaled READ delivered");
    assert_eq!(w.cn_bytes(4096, 8), d1[..8]);
}

/// Doorbell batching: errors complete even when unsignaled, and so do the flushes after them.
pub fn batch_errors_always_complete<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W | A);
    let mem = w.fill_mn(OFF, 128, 9);
    let d1 = w.fill_cn(0, 32, 1);
    w.fill_cn(32, 32, 2);
    conn.post(&[
        wr_unsignaled::<P>(1, op_write::<P>(w.csge(0, 32), w.maddr(OFF), rkey)),
        wr_unsignaled::<P>(
            2,
            op_write::<P>(w.csge(32, 32), w.maddr(OFF + 64), GARBAGE_RKEY),
        ),
        wr_unsignaled::<P>(3, op_write::<P>(w.csge(32, 32), w.maddr(OFF + 32), rkey)),
        wr::<P>(4, op_read::<P>(w.csge(1024, 8), w.maddr(OFF), rkey)),
    ]);
    let wcs = wait_completions::<P, B>(&w.bed, &conn.ccq, 3);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (2, WcStatus::RemoteAccessError),
            (3, WcStatus::WrFlushError),
            (4, WcStatus::WrFlushError),
        ]
    );
    assert_cq_empty::<P, B>(&w.bed, &conn.ccq, "client send CQ");
    let mut expected = mem;
    expected[..32].copy_from_slice(&d1);
    assert_eq!(
        w.mn_bytes(OFF, 128),
        expected,
        "only the request before the error executed"
    );
    w.assert_access_error(&conn, &wcs[0]);
}

/// Local buffers are checked: an unknown lkey, or a buffer outside its region, is a local
/// protection error (the request never reaches the peer) and moves the QP to ERR.
pub fn local_bad_lkey<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let before = w.fill_mn(OFF, 64, 6);
    let conn = w.connect();
    let bad = rnic::Sge {
        addr: w.cbuf.addr(),
        length: 64,
        lkey: GARBAGE_RKEY,
    };
    let wc = conn.exec(&w.bed, op_write::<P>(bad, w.maddr(OFF), rkey));
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "WRITE from an unknown lkey"
    );
    assert_eq!(conn.cqp.state(), QpState::Error);
    assert_eq!(w.mn_bytes(OFF, 64), before, "nothing reached the responder");
    // Where the requester's ERR hangs up the connection, the responder fails too, as soon as
    // it reads the hang-up: at a moment the test does not control (as in `two_sided`).
    if !w.bed.hangs_up_on_error() {
        assert_eq!(
            conn.sqp.state(),
            QpState::ReadyToSend,
            "nothing reached the responder"
        );
    }

    let conn = w.connect();
    let wc = conn.exec(&w.bed, op_read::<P>(bad, w.maddr(OFF), rkey));
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "READ into an unknown lkey"
    );

    // A region covering only [0, 4096) of the buffer: an SGE straddling its end is rejected.
    let small = w
        .cpd
        .reg_mr(&w.cbuf, 0, 4096, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let conn = w.connect();
    let straddle = sge(&w.cbuf, small.lkey(), 4090, 16);
    let wc = conn.exec(&w.bed, op_read::<P>(straddle, w.maddr(OFF), rkey));
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "SGE outside its region"
    );

    // A region of another PD cannot serve as a local buffer either.
    let other_pd = w.cn().alloc_pd().unwrap();
    let foreign = other_pd
        .reg_mr(&w.cbuf, 0, 4096, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let conn = w.connect();
    let wc = conn.exec(
        &w.bed,
        op_write::<P>(sge(&w.cbuf, foreign.lkey(), 0, 8), w.maddr(OFF), rkey),
    );
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "lkey of another PD"
    );
    assert_eq!(w.mn_bytes(OFF, 64), before);
}

/// A READ (or atomic) destination needs LOCAL_WRITE; a WRITE source does not.
pub fn local_read_destination_needs_local_write<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W | A);
    let ro = w
        .cpd
        .reg_mr(&w.cbuf, 8192, 4096, AccessFlags::empty())
        .unwrap();
    let data = w.fill_cn(8192, 64, 8);
    let conn = w.connect();
    let wc = conn.exec(
        &w.bed,
        op_write::<P>(sge(&w.cbuf, ro.lkey(), 8192, 64), w.maddr(OFF), rkey),
    );
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "a WRITE source needs no LOCAL_WRITE"
    );
    assert_eq!(w.mn_bytes(OFF, 64), data);
    w.fill_mn(OFF, 64, 9);
    let wc = conn.exec(
        &w.bed,
        op_read::<P>(sge(&w.cbuf, ro.lkey(), 8192, 64), w.maddr(OFF), rkey),
    );
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "READ into a read-only region"
    );
    assert_eq!(conn.cqp.state(), QpState::Error);
    assert_eq!(w.cn_bytes(8192, 64), data, "nothing landed");
    let conn = w.connect();
    let wc = conn.exec(
        &w.bed,
        op_faa::<P>(sge(&w.cbuf, ro.lkey(), 8192, 8), w.maddr(OFF), rkey, 1),
    );
    assert_eq!(
        wc.status,
        WcStatus::LocalProtectionError,
        "atomic result into a read-only region"
    );
    // The requester's own failure raises no access event on the MN.
    let events = drain_events::<P>(w.mn());
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AsyncEvent::QpAccessError(_))),
        "MN events: {events:?}"
    );
}
