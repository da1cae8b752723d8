//! Remote-access checks (`rxe_lookup_mw` + `check_rkey`, `check_op_valid`; `docs/conformance.md`,
//! "Remote access checks" and "Errors, flushing, recovery"). Every rejected request ends with the
//! status on the requester, both QPs in ERR, the MN's async event for the responder QP, and memory
//! untouched.

use super::harness::*;
use rnic::{
    AccessFlags, MemoryBuffer, MemoryKey, MemoryRegion, Provider, QpState, QueuePair, Sge,
    WcOpcode, WcStatus,
};

const R: AccessFlags = AccessFlags::REMOTE_READ;
const W: AccessFlags = AccessFlags::REMOTE_WRITE;
const A: AccessFlags = AccessFlags::REMOTE_ATOMIC;

/// Where the window under test lies in `mbuf` (away from both ends, so the bytes around it
/// exist and belong to the region).
const OFF: usize = 8192;
/// Its length.
const LEN: usize = 256;

/// A write that must be rejected: MN memory around the target stays as it was.
fn rejected_write<P: Provider, B: TestBed<P>>(
    w: &World<P, B>,
    conn: &Conn<P>,
    offset: usize,
    len: u32,
    rkey: MemoryKey,
) -> rnic::WorkCompletion {
    let before = w.fill_mn(OFF - 64, LEN + 128, 0x11);
    w.fill_cn(0, len as usize, 0xee);
    let wc = w.write(conn, 0, offset, len, rkey);
    assert_eq!(
        w.mn_bytes(OFF - 64, LEN + 128),
        before,
        "a rejected WRITE touched memory"
    );
    wc
}

/// A read that must be rejected: the local destination stays as it was.
fn rejected_read<P: Provider, B: TestBed<P>>(
    w: &World<P, B>,
    conn: &Conn<P>,
    offset: usize,
    len: u32,
    rkey: MemoryKey,
) -> rnic::WorkCompletion {
    w.fill_mn(OFF - 64, LEN + 128, 0x22);
    let before = w.fill_cn(0, len as usize, 0xcc);
    let wc = w.read(conn, 0, offset, len, rkey);
    assert_eq!(
        w.cn_bytes(0, len as usize),
        before,
        "a rejected READ delivered data"
    );
    wc
}

/// An atomic that must be rejected: neither the remote word nor the local result changes.
fn rejected_faa<P: Provider, B: TestBed<P>>(
    w: &World<P, B>,
    conn: &Conn<P>,
    offset: usize,
    rkey: MemoryKey,
) -> rnic::WorkCompletion {
    let before = w.fill_mn(OFF - 64, LEN + 128, 0x33);
    let local = w.fill_cn(0, 8, 0x44);
    let wc = w.faa(conn, 0, offset, rkey, 0x0101_0101);
    assert_eq!(
        w.mn_bytes(OFF - 64, LEN + 128),
        before,
        "a rejected atomic touched memory"
    );
    assert_eq!(
        w.cn_bytes(0, 8),
        local,
        "a rejected atomic returned a value"
    );
    wc
}

/// Baseline: READ, WRITE, CAS and FAA through a type-1 window with all rights.
pub fn window_read_write_atomics<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    let data = w.fill_cn(0, 128, 7);
    let wc = w.write(&conn, 0, OFF + 16, 128, rkey);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::Write, 128)
    );
    assert_eq!(w.mn_bytes(OFF + 16, 128), data);
    let wc = w.read(&conn, 1024, OFF + 16, 128, rkey);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::Read, 128)
    );
    assert_eq!(w.cn_bytes(1024, 128), data);
    w.mbuf.store_u64(OFF + 200, 40).unwrap();
    let wc = w.faa(&conn, 2048, OFF + 200, rkey, 2);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(w.cbuf.load_u64(2048).unwrap(), 40);
    assert_eq!(w.mbuf.load_u64(OFF + 200).unwrap(), 42);
    let cas = op_cas::<P>(w.csge(2056, 8), w.maddr(OFF + 200), rkey, 42, 7);
    let wc = conn.exec(&w.bed, cas);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::CompareSwap)
    );
    assert_eq!(w.cbuf.load_u64(2056).unwrap(), 42);
    assert_eq!(w.mbuf.load_u64(OFF + 200).unwrap(), 7);
    let cas = op_cas::<P>(w.csge(2064, 8), w.maddr(OFF + 200), rkey, 42, 9);
    let wc = conn.exec(&w.bed, cas);
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "a failed comparison is still a success"
    );
    assert_eq!(w.cbuf.load_u64(2064).unwrap(), 7);
    assert_eq!(
        w.mbuf.load_u64(OFF + 200).unwrap(),
        7,
        "comparison failed: no swap"
    );
    // A whole-window access, exactly at both ends, is fine.
    assert_eq!(
        w.read(&conn, 0, OFF, LEN as u32, rkey).status,
        WcStatus::Success
    );
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
}

/// The full 32-bit rkey must match: a wrong key byte (either neighbour) is rejected.
pub fn access_wrong_key_byte<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    for delta in [1u8, 255] {
        let conn = w.connect();
        assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
        let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(delta));
        let wc = rejected_write(&w, &conn, OFF, 8, wrong);
        w.assert_access_error(&conn, &wc);
    }
    // Another index with the right key byte is no better.
    let conn = w.connect();
    let wrong = MemoryKey::new(rkey.index() ^ 1, rkey.key_byte());
    let wc = rejected_read(&w, &conn, OFF, 8, wrong);
    w.assert_access_error(&conn, &wc);
}

/// After a rebind the previous rkey is dead at once; the new one works.
pub fn access_stale_rkey_after_rebind<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (mw, old) = w.window1(OFF, LEN as u64, R | W);
    assert_eq!(w.read(&conn, 0, OFF, 8, old).status, WcStatus::Success);
    assert_eq!(w.bind1(&mw, OFF, LEN as u64, R | W), WcStatus::Success);
    let new = rnic::MemoryWindow::rkey(&mw);
    assert_ne!(new, old);
    assert_eq!(w.read(&conn, 0, OFF, 8, new).status, WcStatus::Success);
    let wc = rejected_write(&w, &conn, OFF, 8, old);
    w.assert_access_error(&conn, &wc);
}

/// `pd(mw) == pd(qp)`: a window of PD A is useless on a QP of PD B.
pub fn access_window_of_other_pd<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W);
    let own = w.connect();
    assert_eq!(w.read(&own, 0, OFF, 8, rkey).status, WcStatus::Success);
    let other = w.connect_with(ConnOpts {
        server_pd: Some(w.mpd2.clone()),
        ..ConnOpts::default()
    });
    let wc = rejected_write(&w, &other, OFF, 8, rkey);
    w.assert_access_error(&other, &wc);
    assert_eq!(
        own.cqp.state(),
        QpState::ReadyToSend,
        "other connections are unaffected"
    );
}

/// Type 2 (`mw->qp == qp`): a type-2 window works only on the QP that bound it (ReDMArk M4).
pub fn access_type2_from_other_qp<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let owner = w.connect();
    let other = w.connect();
    let (_mw, rkey) = w.window2(&owner, OFF, LEN as u64, R | W);
    assert_eq!(w.read(&owner, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_write(&w, &other, OFF, 8, rkey);
    w.assert_access_error(&other, &wc);
    assert_eq!(w.read(&owner, 0, OFF, 8, rkey).status, WcStatus::Success);
}

/// Range check, low end: one byte before the window is out of bounds.
pub fn access_out_of_bounds_low<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W);
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_write(&w, &conn, OFF - 1, 8, rkey);
    w.assert_access_error(&conn, &wc);
    let conn = w.connect();
    let wc = rejected_read(&w, &conn, OFF - 1, 8, rkey);
    w.assert_access_error(&conn, &wc);
}

/// Range check, high end: one byte past the window is out of bounds.
pub fn access_out_of_bounds_high<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W);
    assert_eq!(
        w.write(&conn, 0, OFF + LEN - 8, 8, rkey).status,
        WcStatus::Success
    );
    let wc = rejected_write(&w, &conn, OFF + LEN - 7, 8, rkey);
    w.assert_access_error(&conn, &wc);
    let conn = w.connect();
    let wc = rejected_read(&w, &conn, OFF, LEN as u32 + 1, rkey);
    w.assert_access_error(&conn, &wc);
}

/// Rights: a WRITE through a read-only window is rejected.
pub fn access_write_through_read_only_window<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R);
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_write(&w, &conn, OFF, 8, rkey);
    w.assert_access_error(&conn, &wc);
}

/// Rights: an atomic through a window without REMOTE_ATOMIC is rejected.
pub fn access_atomic_without_remote_atomic<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W);
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_faa(&w, &conn, OFF, rkey);
    w.assert_access_error(&conn, &wc);
}

/// Rights: a READ through a write-only window is rejected.
pub fn access_read_without_remote_read<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, W);
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_read(&w, &conn, OFF, 8, rkey);
    w.assert_access_error(&conn, &wc);
}

/// A region's own rkey grants only the region's remote rights (here none).
pub fn access_mr_rkey_without_remote_rights<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let wc = rejected_read(&w, &conn, OFF, 8, w.mmr.rkey());
    w.assert_access_error(&conn, &wc);
    // A region registered with remote rights is reachable through its rkey.
    let open = w.extra_mr(&w.mpd, OFF, LEN, AccessFlags::LOCAL_WRITE | R);
    let conn = w.connect();
    assert_eq!(
        w.read(&conn, 0, OFF, 8, open.rkey()).status,
        WcStatus::Success
    );
    let wc = rejected_write(&w, &conn, OFF, 8, open.rkey());
    w.assert_access_error(&conn, &wc);
}

/// QP access flags come first (`check_op_valid`): a WRITE to a QP without REMOTE_WRITE is an
/// invalid request, even through a window that allows it.
pub fn qp_flags_write_denied<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    let conn = w.connect_with(ConnOpts {
        server_access: R | A,
        ..ConnOpts::default()
    });
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_write(&w, &conn, OFF, 8, rkey);
    w.assert_invalid_request(&conn, &wc);
}

/// QP access flags: a READ to a QP without REMOTE_READ is an invalid request.
pub fn qp_flags_read_denied<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    let conn = w.connect_with(ConnOpts {
        server_access: W,
        ..ConnOpts::default()
    });
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_read(&w, &conn, OFF, 8, rkey);
    w.assert_invalid_request(&conn, &wc);
}

/// QP access flags: an atomic to a QP without REMOTE_ATOMIC is an invalid request.
pub fn qp_flags_atomic_denied<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    let conn = w.connect_with(ConnOpts {
        server_access: R | W,
        ..ConnOpts::default()
    });
    let wc = rejected_faa(&w, &conn, OFF, rkey);
    w.assert_invalid_request(&conn, &wc);
}

/// QP access flags are checked before the rkey: a bad key on a QP lacking the right is an
/// invalid request, not an access error.
pub fn qp_flags_checked_before_rkey<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect_with(ConnOpts {
        server_access: R,
        ..ConnOpts::default()
    });
    let wc = rejected_write(&w, &conn, OFF, 8, GARBAGE_RKEY);
    w.assert_invalid_request(&conn, &wc);
}

/// `modify_access` (Patronus's `kAdminQPtoRO`) takes effect for later requests.
pub fn qp_flags_modify_access<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    let conn = w.connect();
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    conn.sqp.modify_access(R).unwrap();
    assert_eq!(w.read(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
    let wc = rejected_write(&w, &conn, OFF, 8, rkey);
    w.assert_invalid_request(&conn, &wc);
    // And back to read-write on a new connection's QP.
    let conn = w.connect_with(ConnOpts {
        server_access: R,
        ..ConnOpts::default()
    });
    conn.sqp.modify_access(R | W).unwrap();
    assert_eq!(w.write(&conn, 0, OFF, 8, rkey).status, WcStatus::Success);
}

/// Atomics must be 8-byte aligned: otherwise an invalid request (not an access error).
pub fn atomic_misaligned<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let (_mw, rkey) = w.window1(OFF, LEN as u64, R | W | A);
    assert_eq!(w.faa(&conn, 0, OFF + 8, rkey, 1).status, WcStatus::Success);
    let wc = rejected_faa(&w, &conn, OFF + 4, rkey);
    w.assert_invalid_request(&conn, &wc);
}

/// A zero-byte READ or WRITE skips the rkey check: it succeeds with a garbage key and address.
pub fn zero_byte_skips_rkey_check<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let conn = w.connect();
    let before = w.fill_mn(0, 1024, 5);
    let empty = Sge {
        addr: w.cbuf.addr(),
        length: 0,
        lkey: w.cmr.lkey(),
    };
    let wc = conn.exec(&w.bed, op_read::<P>(empty, 0x1234_5678, GARBAGE_RKEY));
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 0),
        "zero-byte READ"
    );
    let wc = conn.exec(&w.bed, op_write::<P>(empty, w.maddr(0), GARBAGE_RKEY));
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 0),
        "zero-byte WRITE"
    );
    assert_eq!(conn.cqp.state(), QpState::ReadyToSend);
    assert_eq!(conn.sqp.state(), QpState::ReadyToSend);
    assert_eq!(w.mn_bytes(0, 1024), before);
    // One byte with the same key is checked.
    let wc = rejected_write(&w, &conn, OFF, 1, GARBAGE_RKEY);
    w.assert_access_error(&conn, &wc);
}
