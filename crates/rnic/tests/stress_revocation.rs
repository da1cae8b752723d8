//! Revocation under fire: worker threads hammer a memory window with READs and WRITEs through
//! in-process QPs while another thread rebinds the window back and forth between two buffers.
//!
//! Invariants (`docs/architecture.md`: "Protection table and the revocation barrier", and
//! invariants 1 and 2 of "Invariants and where they are tested"):
//! - Once a rebind away from a buffer has completed, no access ever touches that buffer again
//!   until the window is bound back over it: the binder snapshots the buffer right after the
//!   bind completes and compares just before binding back.
//! - Every access either succeeds within the binding its rkey names — a WRITE lands in that
//!   binding's buffer (every record a writer leaves carries the rkey it used and that rkey's
//!   buffer), a READ returns only that buffer's records — or fails with `RemoteAccessError`.
//!
//! Bounded operation counts; nothing about timing is asserted. With +1 keys a key byte repeats
//! every 256 binds (a stale rkey may then legitimately match again); the window alternates
//! between the buffers and 256 is even, so an rkey always names the same buffer and the
//! record checks stay exact.

// Test code: rule and helper functions outside `#[test]` fns may panic on setup failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "conformance/beds.rs"]
mod beds;
#[path = "conformance/harness.rs"]
mod harness;

use beds::InProcBed;
use harness::*;
use rnic::soft::SoftProvider;
use rnic::{
    AccessFlags, Clock, Context, MemoryBuffer, MemoryKey, MemoryWindow, MwType, ProtectionDomain,
    RealClock, WcStatus,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

type P = SoftProvider;

const WORKERS: usize = 4;
const OPS_PER_WORKER: usize = 3000;
const REBINDS: usize = 600;
const ROUNDS: usize = 3;
/// Bytes per buffer (and window length).
const WIN: usize = 4096;
/// One record: buffer id, rkey, worker, sequence number (4 × u32).
const REC: usize = 16;
const SLOTS: usize = WIN / REC;

fn record(buf: u32, rkey: u32, worker: u32, seq: u32) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[0..4].copy_from_slice(&buf.to_le_bytes());
    r[4..8].copy_from_slice(&rkey.to_le_bytes());
    r[8..12].copy_from_slice(&worker.to_le_bytes());
    r[12..16].copy_from_slice(&seq.to_le_bytes());
    r
}

fn fields(r: &[u8]) -> (u32, u32) {
    let word = |i: usize| u32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
    (word(0), word(4))
}

/// Reads a buffer back to front. A late copy (one the rebind failed to wait for) moves front to
/// back, so the two cross and the part of the copy beyond the crossing lands after it was read:
/// the later comparison then catches it.
fn snapshot_backwards<Buf: MemoryBuffer>(buf: &Buf) -> Vec<u8> {
    let mut v = vec![0u8; WIN];
    for off in (0..WIN).step_by(64).rev() {
        buf.read(off, &mut v[off..off + 64]).unwrap();
    }
    v
}

/// Which buffer each rkey ever published was bound over.
type Bindings = Mutex<HashMap<u32, u32>>;

/// Checks every record of a buffer's contents: it names this buffer and, if written through a
/// window, an rkey that was bound over this buffer.
fn check_records(bytes: &[u8], buf: u32, bindings: &Bindings, what: &str) {
    let map = bindings.lock().expect("bindings lock");
    for (slot, r) in bytes.chunks(REC).enumerate() {
        let (b, rkey) = fields(r);
        assert_eq!(b, buf, "{what}: slot {slot} holds a record for buffer {b}");
        if rkey != 0 {
            assert_eq!(
                map.get(&rkey),
                Some(&buf),
                "{what}: slot {slot} was written through rkey {rkey:#x}, not bound over buffer {buf}"
            );
        }
    }
}

/// Set when any thread of the round panics, so the others stop waiting for it.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Spins until `cond` holds; returns false if another thread panicked meanwhile. Fails after
/// the harness's wall-clock bound.
fn spin_until(stop: &AtomicBool, what: &str, cond: impl Fn() -> bool) -> bool {
    let clock = RealClock::new();
    let mut spins = 0u64;
    while !cond() {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        assert!(
            clock.now().0 < WAIT_BOUND.as_micros() as u64,
            "timed out waiting for {what}"
        );
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    true
}

#[test]
fn rebinding_never_lets_an_old_rkey_touch_the_old_buffer() {
    // A few independent rounds: each is short, and more rounds give the race more chances.
    for _ in 0..ROUNDS {
        round();
    }
}

fn round() {
    let w = World::<P, InProcBed>::new();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    let bufs: Vec<_> = (0..2).map(|_| w.mn().alloc_buffer(WIN).unwrap()).collect();
    let mrs: Vec<_> = bufs
        .iter()
        .map(|b| w.mpd.reg_mr(b, 0, WIN, access).unwrap())
        .collect();
    for (i, b) in bufs.iter().enumerate() {
        let init: Vec<u8> = (0..SLOTS).flat_map(|_| record(i as u32, 0, 0, 0)).collect();
        b.write(0, &init).unwrap();
    }
    let rights = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mw = w.mpd.alloc_mw(MwType::Type1).unwrap();
    let bind = |target: usize| {
        let st = w.bind_on(
            &w.admin.cqp,
            &w.admin.ccq,
            &mw,
            Some(&mrs[target]),
            bufs[target].addr(),
            WIN as u64,
            rights,
        );
        assert_eq!(st, WcStatus::Success, "rebind onto buffer {target}");
        mw.rkey()
    };

    let bindings: Bindings = Mutex::new(HashMap::new());
    // Published binding: rkey << 32 | buffer. Workers read it; it may be stale when used.
    let first = bind(0);
    bindings.lock().unwrap().insert(first.0, 0);
    let published = AtomicU64::new(u64::from(first.0) << 32);
    // The binding that the current one replaced (0: none yet) — revoked for sure.
    let previous = AtomicU64::new(0);
    let ops_done = AtomicUsize::new(0);
    let rebinds_done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut conns: Vec<Conn<P>> = (0..WORKERS).map(|_| w.connect()).collect();
    // (successes, access errors, stale probes)
    let outcome = Mutex::new((0usize, 0usize, 0usize));

    std::thread::scope(|s| {
        for (id, conn) in conns.iter_mut().enumerate() {
            let (w, published, previous, ops_done, rebinds_done, bindings, outcome, bufs, stop) = (
                &w,
                &published,
                &previous,
                &ops_done,
                &rebinds_done,
                &bindings,
                &outcome,
                &bufs,
                &stop,
            );
            s.spawn(move || {
                let _stop = StopOnPanic(stop);
                let local = id * 2 * WIN; // this worker's part of the CN buffer
                let (mut ok, mut denied, mut probes) = (0, 0, 0);
                let mut rng = 0x9e37_79b9_u32.wrapping_mul(id as u32 + 1);
                // Like a client, cache the binding and refresh it now and then (or when denied),
                // so accesses through rkeys revoked meanwhile happen all the time.
                let mut cached = published.load(Ordering::SeqCst);
                for seq in 0..OPS_PER_WORKER {
                    // Workers run freely (the binder follows their progress, so rebinds land
                    // while copies are in flight); one rendezvous half-way guarantees that
                    // revoked keys exist for the probes below.
                    let need = if seq == OPS_PER_WORKER / 2 {
                        REBINDS / 4
                    } else {
                        0
                    };
                    if !spin_until(stop, "rebinds", || {
                        rebinds_done.load(Ordering::SeqCst) >= need
                    }) {
                        return;
                    }
                    if seq % 8 == 0 {
                        cached = published.load(Ordering::SeqCst);
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    // Runs of up to the whole window: copies long enough to overlap rebinds.
                    let n = 1 + (rng >> 8) as usize % SLOTS;
                    let slot = rng as usize % (SLOTS - n + 1);
                    let len = n * REC;
                    let stale = previous.load(Ordering::SeqCst);
                    let probe = seq % 10 == 9 && stale != 0;
                    let p = if probe { stale } else { cached };
                    let (rkey, buf) = (MemoryKey((p >> 32) as u32), (p & 0xffff_ffff) as u32);
                    let remote = bufs[buf as usize].addr() + (slot * REC) as u64;
                    let write = probe || seq % 2 == 0;
                    let wc = if write {
                        let recs: Vec<u8> = (0..n)
                            .flat_map(|_| record(buf, rkey.0, id as u32 + 1, seq as u32))
                            .collect();
                        w.cbuf.write(local, &recs).unwrap();
                        conn.exec(
                            &w.bed,
                            op_write::<P>(w.csge(local, len as u32), remote, rkey),
                        )
                    } else {
                        w.cbuf.write(local + WIN, &vec![0xffu8; len]).unwrap();
                        conn.exec(
                            &w.bed,
                            op_read::<P>(w.csge(local + WIN, len as u32), remote, rkey),
                        )
                    };
                    if probe {
                        // A binding replaced by a completed rebind: must be refused.
                        probes += 1;
                        assert_eq!(
                            wc.status,
                            WcStatus::RemoteAccessError,
                            "worker {id}: WRITE through revoked {rkey:?}"
                        );
                    }
                    match wc.status {
                        WcStatus::Success => {
                            ok += 1;
                            if !write {
                                let got = w.cn_bytes(local + WIN, len);
                                check_records(&got, buf, bindings, "data a READ returned");
                            }
                        }
                        WcStatus::RemoteAccessError => {
                            denied += 1;
                            conn.reconnect(&w.bed);
                            cached = published.load(Ordering::SeqCst);
                        }
                        other => panic!("worker {id}: access completed with {other}"),
                    }
                    ops_done.fetch_add(1, Ordering::SeqCst);
                }
                let mut o = outcome.lock().unwrap();
                o.0 += ok;
                o.1 += denied;
                o.2 += probes;
            });
        }

        // The binder: rebinds spread over the workers' operations (progress-driven, not timed).
        s.spawn(|| {
            let _stop = StopOnPanic(&stop);
            let total = WORKERS * OPS_PER_WORKER;
            let mut current = 0usize;
            let mut snapshot_of_other: Option<Vec<u8>> = None;
            for k in 1..=REBINDS {
                let due = k * total / (REBINDS + 1);
                if !spin_until(&stop, "worker progress", || ops_done.load(Ordering::SeqCst) >= due) {
                    return;
                }
                let target = 1 - current;
                // The target buffer was unbound since the last rebind away from it.
                if let Some(snap) = snapshot_of_other.take() {
                    let now = {
                        let mut v = vec![0u8; WIN];
                        bufs[target].read(0, &mut v).unwrap();
                        v
                    };
                    assert!(
                        now == snap,
                        "buffer {target} changed while no window was bound over it (before rebind #{k})"
                    );
                }
                let rkey = bind(target);
                // Completed: every access through the old rkey has finished. Freeze the old buffer.
                let v = snapshot_backwards(&bufs[current]);
                check_records(&v, current as u32, &bindings, "buffer after its unbinding");
                snapshot_of_other = Some(v);
                let earlier = bindings.lock().unwrap().insert(rkey.0, target as u32);
                assert!(earlier.is_none_or(|b| b == target as u32), "an rkey changed buffers");
                let old = published.swap(u64::from(rkey.0) << 32 | target as u64, Ordering::SeqCst);
                previous.store(old, Ordering::SeqCst);
                rebinds_done.fetch_add(1, Ordering::SeqCst);
                current = target;
            }
            // Let the workers finish, then check the buffer left unbound stayed frozen.
            if !spin_until(&stop, "the workers to finish", || ops_done.load(Ordering::SeqCst) >= total) {
                return;
            }
            if let Some(snap) = snapshot_of_other {
                let mut v = vec![0u8; WIN];
                bufs[1 - current].read(0, &mut v).unwrap();
                assert!(v == snap, "the unbound buffer changed after the last rebind");
            }
        });
    });

    for (i, b) in bufs.iter().enumerate() {
        let mut v = vec![0u8; WIN];
        b.read(0, &mut v).unwrap();
        check_records(&v, i as u32, &bindings, "final contents");
    }
    let (ok, denied, probes) = *outcome.lock().unwrap();
    assert_eq!(ok + denied, WORKERS * OPS_PER_WORKER);
    eprintln!(
        "stress: {ok} accesses succeeded, {denied} denied ({probes} revoked-key probes), {REBINDS} rebinds"
    );
    assert!(ok > 0, "no access succeeded");
    assert!(
        probes > 0 && denied >= probes,
        "revoked keys were probed and refused"
    );
    assert_eq!(
        bindings.lock().unwrap().len(),
        (REBINDS + 1).min(256),
        "one rkey per key byte"
    );
    drop(conns);
    drop(mw);
    for mr in mrs {
        assert_dereg_ok(mr);
    }
}
