//! Bind checks (`rxe_check_bind_mw`; `docs/conformance.md`, "Bind checks"). A failed bind
//! completes with `MwBindError`, moves the QP it was posted on to ERR, and changes nothing:
//! a dedicated region's `deregister` succeeding proves no window got bound over it.

use super::harness::*;
use rnic::{
    AccessFlags, MemoryBuffer, MemoryKey, MemoryWindow, MwType, ProtectionDomain, Provider,
    QpState, QueuePair, WcStatus,
};

const R: AccessFlags = AccessFlags::REMOTE_READ;
const W: AccessFlags = AccessFlags::REMOTE_WRITE;
const A: AccessFlags = AccessFlags::REMOTE_ATOMIC;

/// Posts a bind expected to fail on the admin QP; checks `MwBindError` and the QP in ERR, then
/// the caller replaces the admin QP with `fresh_admin` before binding again.
fn expect_admin_bind_error<P: Provider, B: TestBed<P>>(
    w: &World<P, B>,
    mw: &P::Mw,
    mr: Option<&P::Mr>,
    addr: u64,
    len: u64,
    access: AccessFlags,
    what: &str,
) {
    let st = w.bind_on(&w.admin.cqp, &w.admin.ccq, mw, mr, addr, len, access);
    assert_eq!(st, WcStatus::MwBindError, "{what}");
    assert_eq!(
        w.admin.cqp.state(),
        QpState::Error,
        "{what}: a failed bind moves its QP to ERR"
    );
}

/// C10-72 / `ibv_bind_mw` EPERM: the region must belong to the window's PD (both types).
pub fn bind_mr_of_other_pd_rejected<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    let foreign = w.extra_mr(&w.mpd2, 0, 4096, mn_mr_access());
    let mw1 = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let a = w.maddr(0);
    expect_admin_bind_error(
        &w,
        &mw1,
        Some(&foreign),
        a,
        64,
        R,
        "type-1 over an MR of another PD",
    );
    w.fresh_admin();

    let conn = w.connect();
    let mw2 = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw2, Some(&foreign), a, 64, R);
    assert_eq!(st, WcStatus::MwBindError, "type-2 over an MR of another PD");
    assert_eq!(conn.sqp.state(), QpState::Error);
    assert_dereg_ok(foreign);
}

/// C10-72: a type-2 window binds only on a QP of its own PD.
pub fn bind_type2_on_qp_of_other_pd_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mine = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let other = w.connect_with(ConnOpts {
        server_pd: Some(w.mpd2.clone()),
        ..ConnOpts::default()
    });
    let mw2 = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(
        &other.sqp,
        other.scq(),
        &mw2,
        Some(&mine),
        w.maddr(0),
        64,
        R,
    );
    assert_eq!(st, WcStatus::MwBindError);
    assert_eq!(other.sqp.state(), QpState::Error);
    assert_dereg_ok(mine);
    // Control: the same bind on a QP of the window's PD succeeds.
    let conn = w.connect();
    let mine = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw2, Some(&mine), w.maddr(0), 64, R);
    assert_eq!(st, WcStatus::Success);
    // The window goes before the QP it is bound to (rxe stalls ~50 s destroying a QP that
    // still has a type-2 window bound: docs/rdma.md, "rxe deviations").
    drop(mw2);
}

/// C10-73: the region must allow window binding (`MW_BIND`).
pub fn bind_mr_without_mw_bind_rejected<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    let plain = w.extra_mr(
        &w.mpd,
        0,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL,
    );
    let mw1 = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let a = w.maddr(0);
    expect_admin_bind_error(
        &w,
        &mw1,
        Some(&plain),
        a,
        64,
        R,
        "type-1 over an MR without MW_BIND",
    );
    w.fresh_admin();
    let conn = w.connect();
    let mw2 = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw2, Some(&plain), a, 64, R);
    assert_eq!(
        st,
        WcStatus::MwBindError,
        "type-2 over an MR without MW_BIND"
    );
    assert_dereg_ok(plain);
}

/// C10-74: remote write or atomic rights through a window need LOCAL_WRITE on the region.
pub fn bind_write_or_atomic_needs_local_write<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    let ro = w.extra_mr(
        &w.mpd,
        0,
        4096,
        AccessFlags::MW_BIND | AccessFlags::REMOTE_READ,
    );
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let a = w.maddr(0);
    expect_admin_bind_error(
        &w,
        &mw,
        Some(&ro),
        a,
        64,
        R | W,
        "REMOTE_WRITE without LOCAL_WRITE",
    );
    w.fresh_admin();
    expect_admin_bind_error(
        &w,
        &mw,
        Some(&ro),
        a,
        64,
        A,
        "REMOTE_ATOMIC without LOCAL_WRITE",
    );
    w.fresh_admin();
    // Neither failed bind bound anything.
    assert_dereg_ok(ro);
    let ro = w.extra_mr(
        &w.mpd,
        0,
        4096,
        AccessFlags::MW_BIND | AccessFlags::REMOTE_READ,
    );
    // Control: read-only rights need no LOCAL_WRITE.
    let st = w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw, Some(&ro), a, 64, R);
    assert_eq!(st, WcStatus::Success);
    let ro = assert_dereg_busy(ro, 1);
    drop(mw); // deallocation unbinds
    assert_dereg_ok(ro);
}

/// C10-75: the window must lie inside the region; one byte out at either end fails.
pub fn bind_range_outside_mr_rejected<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    // The region is [4096, 8192) of a larger buffer, so the bytes around it exist.
    let mr = w.extra_mr(&w.mpd, 4096, 4096, mn_mr_access());
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let lo = w.maddr(4096);
    expect_admin_bind_error(
        &w,
        &mw,
        Some(&mr),
        lo - 1,
        4096,
        R,
        "one byte before the region",
    );
    w.fresh_admin();
    expect_admin_bind_error(
        &w,
        &mw,
        Some(&mr),
        lo + 1,
        4096,
        R,
        "one byte past the region",
    );
    w.fresh_admin();
    expect_admin_bind_error(&w, &mw, Some(&mr), lo, 4097, R, "one byte too long");
    w.fresh_admin();
    let conn = w.connect();
    let mw2 = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw2, Some(&mr), lo + 4095, 2, R);
    assert_eq!(st, WcStatus::MwBindError, "type-2 straddling the end");
    // Control: exactly the region binds.
    let st = w.bind_on(&w.admin.cqp, &w.admin.ccq, &mw, Some(&mr), lo, 4096, R);
    assert_eq!(st, WcStatus::Success, "the full region");
    let mr = assert_dereg_busy(mr, 1);
    drop(mw);
    assert_dereg_ok(mr);
}

/// o10-37.2.30: a type-2 window must be FREE to be bound; the failed re-bind leaves the
/// existing binding in place.
pub fn bind_type2_not_free<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let first = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let second = w.extra_mr(&w.mpd, 4096, 4096, mn_mr_access());
    let conn = w.connect();
    let mw = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, Some(&first), w.maddr(0), 64, R);
    assert_eq!(st, WcStatus::Success);
    let rkey = mw.rkey();
    w.fill_mn(0, 64, 3);
    assert_eq!(w.read(&conn, 0, 0, 64, rkey).status, WcStatus::Success);
    // Bind again without invalidating.
    let st = w.bind_on(
        &conn.sqp,
        conn.scq(),
        &mw,
        Some(&second),
        w.maddr(4096),
        64,
        R,
    );
    assert_eq!(
        st,
        WcStatus::MwBindError,
        "re-binding a bound type-2 window"
    );
    assert_eq!(conn.sqp.state(), QpState::Error);
    // Unchanged: still bound over `first`, nothing over `second`.
    assert_dereg_ok(second);
    let first = assert_dereg_busy(first, 1);
    drop(mw);
    assert_dereg_ok(first);
}

/// o10-37.2.40: a type-2 window cannot be "unbound" by a zero-length bind or a NULL region.
pub fn bind_type2_zero_length_rejected<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mr = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let conn = w.connect();
    let mw = w.mpd.alloc_mw(MwType::Type2).unwrap();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, Some(&mr), w.maddr(0), 0, R);
    assert_eq!(st, WcStatus::MwBindError, "zero length with a region");
    let conn = w.connect();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, None, 0, 0, R);
    assert_eq!(st, WcStatus::MwBindError, "no region, zero length");
    let conn = w.connect();
    let st = w.bind_on(&conn.sqp, conn.scq(), &mw, None, w.maddr(0), 64, R);
    assert_eq!(st, WcStatus::MwBindError, "no region, non-zero length");
    assert_dereg_ok(mr);
}

/// Type 1: a zero-length bind is legal and unbinds — the old rkey fails afterwards (and the
/// new one names an unbound window).
pub fn bind_type1_zero_length_unbinds<P: Provider, B: TestBed<P>>() {
    let w = World::<P, B>::new();
    let mr = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let conn = w.connect();
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let st = w.bind_on(
        &w.admin.cqp,
        &w.admin.ccq,
        &mw,
        Some(&mr),
        w.maddr(0),
        64,
        R,
    );
    assert_eq!(st, WcStatus::Success);
    let old = mw.rkey();
    assert_eq!(w.read(&conn, 0, 0, 64, old).status, WcStatus::Success);
    let mr = assert_dereg_busy(mr, 1);
    let st = w.bind_on(
        &w.admin.cqp,
        &w.admin.ccq,
        &mw,
        None,
        0,
        0,
        AccessFlags::empty(),
    );
    assert_eq!(st, WcStatus::Success, "zero-length type-1 bind");
    assert_eq!(w.admin.cqp.state(), QpState::ReadyToSend);
    let new = mw.rkey();
    assert_eq!(new.index(), old.index(), "the index never changes");
    assert_ne!(new, old, "every bind changes the key");
    let wc = w.read(&conn, 0, 0, 64, old);
    w.assert_access_error(&conn, &wc);
    let conn = w.connect();
    let wc = w.read(&conn, 0, 0, 64, new);
    w.assert_access_error(&conn, &wc);
    assert_dereg_ok(mr);
}

/// o10-36.2.2: type-1 windows cannot be zero-based.
pub fn bind_type1_zero_based_rejected<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    let mr = w.extra_mr(&w.mpd, 0, 4096, mn_mr_access());
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let a = w.maddr(0);
    expect_admin_bind_error(
        &w,
        &mw,
        Some(&mr),
        a,
        64,
        R | AccessFlags::ZERO_BASED,
        "ZERO_BASED type-1 bind",
    );
    w.fresh_admin();
    assert_dereg_ok(mr);
}

/// A failed bind completes `MwBindError` and leaves a bound window exactly as it was: the old
/// rkey keeps working (checked from QPs other than the one the failed bind killed).
pub fn bind_failure_leaves_window_unchanged<P: Provider, B: TestBed<P>>() {
    let mut w = World::<P, B>::new();
    let conn = w.connect();
    let (mw, rkey) = w.window1(1024, 256, R | W);
    let data = w.fill_mn(1024, 256, 9);
    assert_eq!(w.read(&conn, 0, 1024, 256, rkey).status, WcStatus::Success);
    // Fails: out of the region's range (C10-75).
    let a = w.maddr(super::harness::BUF_LEN - 8);
    expect_admin_bind_error(&w, &mw, Some(&w.mmr), a, 64, R, "bind past the region");
    w.fresh_admin();
    // The posted rkey may have moved on (rdma-core updates it at post time); the window did not.
    w.cbuf.write(0, &[0u8; 256]).unwrap();
    let wc = w.read(&conn, 0, 1024, 256, rkey);
    assert_eq!(
        wc.status,
        WcStatus::Success,
        "old rkey after a failed re-bind"
    );
    assert_eq!(w.cn_bytes(0, 256), data);
    let fresh = w.connect();
    assert_eq!(w.read(&fresh, 0, 1024, 256, rkey).status, WcStatus::Success);
    let wrong = MemoryKey::new(rkey.index(), rkey.key_byte().wrapping_add(1));
    let wc = w.read(&fresh, 0, 1024, 256, wrong);
    w.assert_access_error(&fresh, &wc);
}
