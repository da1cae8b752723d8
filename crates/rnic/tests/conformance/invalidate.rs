//! Invalidation (`rxe_invalidate_mw`; `docs/conformance.md`, "Invalidation"): LOCAL_INV and
//! SEND_WITH_INV free a type-2 window; type-1 windows cannot be invalidated that way.

use super::harness::*;
use rnic::{
    AccessFlags, MemoryKey, MemoryRegion, MemoryWindow, MwType, ProtectionDomain, Provider,
    QpState, QueuePair, RecvWr, SendOp, WcOpcode, WcStatus,
};

const R: AccessFlags = AccessFlags::REMOTE_READ;
const W: AccessFlags = AccessFlags::REMOTE_WRITE;
const OFF: usize = 8192;
const LEN: u64 = 256;

/// A receive into `mbuf[off..off+64]`.
fn mn_recv<P: Provider, B: TestBed<P>>(w: &World<P, B>, id: u64, off: usize) -> RecvWr {
    RecvWr {
        wr_id: id,
        sge: Some(sge(&w.mbuf, w.mmr.lkey(), off, 64)),
    }
}

/// LOCAL_INV returns a type-2 window to FREE: its rkey fails afterwards, and it can be bound
/// again (to a new key).
pub fn local_inv_frees_type2<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (mw, rkey) = w.window2(&conn, OFF, LEN, R | W);
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = conn.exec_server(&w.bed, SendOp::LocalInvalidate { rkey });
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::LocalInvalidate)
    );
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
    // FREE again: a new bind succeeds, with a new key.
    let st = w.bind_on(
        &conn.sqp,
        conn.scq(),
        &mw,
        Some(&w.mmr),
        w.maddr(OFF),
        LEN,
        R,
    );
    assert_eq!(st, WcStatus::Success, "re-binding after LOCAL_INV");
    let new = mw.rkey();
    assert_ne!(new, rkey);
    assert_eq!(w.read(&conn, 0, OFF, 8, new).status, WcStatus::Success);
    // The invalidated key is dead.
    let wc = w.read(&conn, 0, OFF, 8, rkey);
    w.assert_access_error(&conn, &wc);
}

/// LOCAL_INV must name the window's current rkey; a stale one fails (and nothing changes).
pub fn local_inv_wrong_key_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let mr = w.extra_mr(&w.mpd, OFF, LEN as usize, mn_mr_access());
    let mw = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, Some(&mr), w.maddr(OFF), LEN, R);
    assert_eq!(st, WcStatus::Success);
    let rkey = mw.rkey();
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_sub(1));
    let wc = conn.exec_server(&w.bed, SendOp::LocalInvalidate { rkey: wrong });
    assert_ne!(wc.status, WcStatus::Success, "LOCAL_INV with a stale key");
    assert_eq!(conn.sqp.state(), QpState::Error);
    let _mr = assert_dereg_busy(mr, 1);
}

/// SEND_WITH_INV invalidates the responder's type-2 window bound to that QP, and the receive
/// completion reports the invalidated rkey.
pub fn send_with_inv_invalidates_type2<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![mn_recv(&w, 1, 0)],
        ..ConnOpts::default()
    });
    let (mw, rkey) = w.window2(&conn, OFF, LEN, R | W);
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let msg = w.fill_cn(1024, 16, 3);
    let wc = conn.exec(
        &w.bed,
        SendOp::SendWithInvalidate {
            local: Some(w.csge(1024, 16)),
            invalidate: rkey,
        },
    );
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!(
        (rc.wr_id, rc.status, rc.opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(rc.byte_len, 16);
    assert_eq!(
        rc.invalidated_rkey,
        Some(rkey),
        "the receive reports the invalidated rkey"
    );
    assert_eq!(rc.qp_num, conn.sqp.qp_num());
    assert_eq!(w.mn_bytes(0, 16), msg);
    // The window is FREE: the key fails, and the window can be bound again.
    let wc = w.read(&conn, 0, OFF, 8, rkey);
    w.assert_access_error(&conn, &wc);
    let conn = w.connect();
    let st = w.bind_on(
        &conn.sqp,
        conn.scq(),
        &mw,
        Some(&w.mmr),
        w.maddr(OFF),
        LEN,
        R,
    );
    assert_eq!(st, WcStatus::Success, "re-binding after SEND_WITH_INV");
    assert_eq!(
        w.read(&conn, 0, OFF, 8, mw.rkey()).status,
        WcStatus::Success
    );
}

/// SEND_WITH_INV naming a bad rkey is an error (`IBV_WC_REM_INV_REQ_ERR`), both QPs go to
/// ERR, and the window stays bound.
pub fn send_with_inv_bad_rkey_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![mn_recv(&w, 1, 0)],
        ..ConnOpts::default()
    });
    let mr = w.extra_mr(&w.mpd, OFF, LEN as usize, mn_mr_access());
    let mw = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, Some(&mr), w.maddr(OFF), LEN, R);
    assert_eq!(st, WcStatus::Success);
    let rkey = mw.rkey();
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    let wc = conn.exec(
        &w.bed,
        SendOp::SendWithInvalidate {
            local: None,
            invalidate: wrong,
        },
    );
    w.assert_invalid_request(&conn, &wc);
    let rc = wait_completions::<P, B>(&w.bed, conn.srcq(), 1)[0];
    assert_eq!(rc.wr_id, 1);
    assert_ne!(
        rc.status,
        WcStatus::Success,
        "the receive does not complete successfully"
    );
    let _mr = assert_dereg_busy(mr, 1);
}

/// SEND_WITH_INV naming another QP's type-2 window is rejected: it invalidates only windows
/// bound to the QP it arrives on.
pub fn send_with_inv_other_qps_window_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let owner = w.connect();
    let sender = w.connect_with(ConnOpts {
        server_recvs: vec![mn_recv(&w, 1, 0)],
        ..ConnOpts::default()
    });
    let (_mw, rkey) = w.window2(&owner, OFF, LEN, R | W);
    let wc = sender.exec(
        &w.bed,
        SendOp::SendWithInvalidate {
            local: None,
            invalidate: rkey,
        },
    );
    w.assert_invalid_request(&sender, &wc);
    assert_eq!(
        w.read(&owner, 0, OFF, 8, rkey).status,
        WcStatus::Success,
        "window untouched"
    );
}

/// o10-37.2.26: LOCAL_INV cannot invalidate a type-1 window (`IBV_WC_LOC_QP_OP_ERR`, as rxe);
/// the window keeps working.
pub fn local_inv_type1_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let wc = w.admin.exec(&w.bed, SendOp::LocalInvalidate { rkey });
    assert_eq!(
        wc.status,
        WcStatus::LocalQpOperationError,
        "LOCAL_INV of a type-1 window"
    );
    assert_eq!(w.admin.cqp.state(), QpState::Error);
    assert_eq!(
        w.read(&conn, 0, OFF, 8, rkey).status,
        WcStatus::Success,
        "window still valid"
    );
}

/// o10-37.2.26: SEND_WITH_INV cannot invalidate a type-1 window; the window keeps working.
pub fn send_with_inv_type1_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_recvs: vec![mn_recv(&w, 1, 0)],
        ..ConnOpts::default()
    });
    let (_mw, rkey) = w.window1(OFF, LEN, R | W);
    let wc = conn.exec(
        &w.bed,
        SendOp::SendWithInvalidate {
            local: None,
            invalidate: rkey,
        },
    );
    w.assert_invalid_request(&conn, &wc);
    let other = w.connect();
    assert_eq!(
        w.read(&other, 0, OFF, 8, rkey).status,
        WcStatus::Success,
        "window still valid"
    );
}

/// Deallocating a window unbinds it: its rkey fails and its region can be deregistered.
pub fn dealloc_mw_invalidates<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let mr = w.extra_mr(&w.mpd, OFF, LEN as usize, mn_mr_access());
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let st = w.bind_on(
        &w.admin.cqp,
        &w.admin.ccq,
        &mw,
        Some(&mr),
        w.maddr(OFF),
        LEN,
        R,
    );
    assert_eq!(st, WcStatus::Success);
    let rkey = mw.rkey();
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    drop(mw);
    assert_dereg_ok(mr);
    let wc = w.read(&conn, 0, OFF, 8, rkey);
    w.assert_access_error(&conn, &wc);
}

/// The rkey of a deallocated window must not come back through a new allocation of the same
/// index with the same key (FIFO reuse + key change on every allocation).
pub fn realloc_mw_new_key<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (mw, old) = w.window1(OFF, LEN, R | W);
    drop(mw);
    let mut fresh = Vec::new();
    for _ in 0..4 {
        let (mw, rkey) = w.window1(OFF, LEN, R | W);
        assert_ne!(rkey, old, "a new window reuses a dead rkey");
        fresh.push(mw);
    }
    let wc = w.read(&conn, 0, OFF, 8, old);
    w.assert_access_error(&conn, &wc);
}
