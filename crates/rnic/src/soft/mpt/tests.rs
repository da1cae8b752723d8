//! The type-2 window index: what a QP's reset frees, how the index follows binds,
//! invalidations and deallocations, and that the work of a reset is bounded by the windows
//! bound to the QP.
#![allow(clippy::unwrap_used)] // tests panic on unexpected failures

use super::*;
use crate::memory::{MemoryBlock, Pinning};
use crate::verbs::{AccessFlags, QpNumber};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

const PD: PdId = PdId(1);
const A: QpNumber = QpNumber(0x11);
const B: QpNumber = QpNumber(0x22);
const LEN: usize = 4096;

/// A table with `max_mw` window slots and one region of [`LEN`] bytes in [`PD`].
struct Bed {
    table: ProtectionTable,
    mr: Arc<MrEntry>,
    _block: MemoryBlock,
}

impl Bed {
    fn new(max_mw: u32) -> Bed {
        let attr = DeviceAttr {
            max_mr: 4,
            max_mw,
            ..DeviceAttr::default()
        };
        let table = ProtectionTable::new(&attr, KeyPolicy::Increment);
        let block = MemoryBlock::new(LEN).unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | AccessFlags::REMOTE_ALL;
        let entry = MrEntry::register(PD, &block, 0, LEN, access, Pinning::Never).unwrap();
        let key = table.insert_mr(entry).unwrap();
        let mr = table.mr(key).unwrap();
        Bed {
            table,
            mr,
            _block: block,
        }
    }

    fn alloc(&self, mw_type: MwType) -> MemoryKey {
        self.table.alloc_mw(PD, mw_type).unwrap()
    }

    /// Binds window `mw` (8 bytes at `offset`) as posted on `qp`; returns the new rkey.
    fn bind(&self, mw: MemoryKey, qp: QpNumber, offset: u64) -> MemoryKey {
        self.table
            .bind_mw(BindRequest {
                mw,
                qp,
                qp_pd: PD,
                mr: Some(self.mr.clone()),
                addr: self.mr.addr + offset,
                len: 8,
                access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
                key: None,
                named_qp: false,
            })
            .unwrap()
    }

    /// A new type-2 window bound to `qp`.
    fn bound_type2(&self, qp: QpNumber) -> MemoryKey {
        let mw = self.alloc(MwType::Type2);
        self.bind(mw, qp, 0)
    }

    fn owner(&self, rkey: MemoryKey) -> Option<QpNumber> {
        match self.table.mw_state(rkey) {
            Some(MwState::Bound { qp, .. }) => qp,
            _ => None,
        }
    }

    fn is_free(&self, rkey: MemoryKey) -> bool {
        matches!(self.table.mw_state(rkey), Some(MwState::Unbound { .. }))
    }

    /// Whether a remote READ through `rkey` on `qp`, at the window's address, is allowed.
    fn readable(&self, rkey: MemoryKey, qp: QpNumber) -> bool {
        let addr = match self.table.mw_state(rkey) {
            Some(MwState::Bound { addr, .. }) => addr,
            _ => self.mr.addr,
        };
        self.table
            .check_remote(rkey, addr, 8, RemoteOp::Read, PD, qp)
            .is_ok()
    }

    /// The index recomputed from the window entries (what it must equal when nothing runs).
    fn expected_index(&self) -> HashMap<QpNumber, HashSet<u32>> {
        let mut want: HashMap<QpNumber, HashSet<u32>> = HashMap::new();
        for (i, slot) in self.table.mws.iter().enumerate() {
            if let Some(qp) = slot.entry.load().as_ref().and_then(|e| e.bound_qp()) {
                want.entry(qp).or_default().insert(i as u32);
            }
        }
        want
    }

    fn assert_index_consistent(&self) {
        assert_eq!(self.table.qp_windows.snapshot(), self.expected_index());
    }
}

#[test]
fn windows_of_another_qp_survive_a_reset() {
    let bed = Bed::new(16);
    let on_a = [bed.bound_type2(A), bed.bound_type2(A)];
    let on_b = bed.bound_type2(B);

    assert_eq!(bed.table.invalidate_type2_of_qp(B), 1);
    assert!(bed.is_free(on_b));
    assert!(!bed.readable(on_b, B), "B's old key is dead");
    for k in on_a {
        assert_eq!(bed.owner(k), Some(A));
        assert!(bed.readable(k, A));
    }
    bed.assert_index_consistent();
}

#[test]
fn a_reset_frees_exactly_the_qps_windows() {
    let bed = Bed::new(16);
    let on_a = [bed.bound_type2(A), bed.bound_type2(A), bed.bound_type2(A)];
    let on_b = bed.bound_type2(B);
    let type1 = bed.alloc(MwType::Type1);
    let type1 = bed.bind(type1, A, 8);
    assert_eq!(bed.mr.bound_windows.load(Ordering::SeqCst), 5);

    assert_eq!(bed.table.invalidate_type2_of_qp(A), 3);
    for k in on_a {
        assert!(bed.is_free(k));
        // The number's next owner cannot use the old key.
        assert!(!bed.readable(k, A));
    }
    assert_eq!(bed.owner(on_b), Some(B));
    assert!(
        bed.readable(type1, A),
        "type-1 windows are not tied to a QP"
    );
    assert_eq!(bed.mr.bound_windows.load(Ordering::SeqCst), 2);
    assert_eq!(
        bed.table.invalidate_type2_of_qp(A),
        0,
        "nothing left to free"
    );
    bed.assert_index_consistent();

    // A freed window binds again (to anyone) under a new key.
    let again = bed.bind(on_a[0], A, 16);
    assert_ne!(again.key_byte(), on_a[0].key_byte());
    assert!(bed.readable(again, A) && !bed.readable(on_a[0], A));
}

#[test]
fn rebinding_to_another_qp_moves_the_window_in_the_index() {
    let bed = Bed::new(16);
    let on_a = bed.bound_type2(A);
    bed.table.invalidate_mw(on_a, PD, None).unwrap(); // LOCAL_INV
    bed.assert_index_consistent();
    let on_b = bed.bind(on_a, B, 0);
    bed.assert_index_consistent();

    assert_eq!(bed.table.invalidate_type2_of_qp(A), 0);
    assert_eq!(bed.owner(on_b), Some(B));
    // SEND_WITH_INV arriving on B frees it and takes it out of the index.
    bed.table.invalidate_mw(on_b, PD, Some(B)).unwrap();
    bed.assert_index_consistent();
    assert_eq!(bed.table.invalidate_type2_of_qp(B), 0);
}

#[test]
fn deallocation_takes_the_window_out_of_the_index() {
    let bed = Bed::new(16);
    let gone = bed.bound_type2(A);
    let kept = bed.bound_type2(A);
    bed.table.dealloc_mw(gone);
    bed.table.dealloc_mw(gone); // a second deallocation changes nothing
    bed.assert_index_consistent();
    assert_eq!(bed.table.in_use().1, 1);
    assert_eq!(bed.table.invalidate_type2_of_qp(A), 1);
    assert!(bed.is_free(kept));
    assert_eq!(bed.mr.bound_windows.load(Ordering::SeqCst), 0);
}

#[test]
fn a_reset_examines_only_the_qps_windows() {
    // A large table, mostly bound to other QPs: a reset of `A` must not look at them.
    let bed = Bed::new(4096);
    for i in 0..1000u32 {
        bed.bound_type2(QpNumber(0x1000 + i % 100));
    }
    let on_a: Vec<_> = (0..3).map(|_| bed.bound_type2(A)).collect();

    assert_eq!(bed.table.invalidate_type2_of_qp(A), on_a.len());
    assert_eq!(
        bed.table.invalidate_type2_of_qp(B),
        0,
        "a QP with no windows"
    );
    // Reconnecting many times costs nothing once the windows are gone.
    for _ in 0..1000 {
        assert_eq!(bed.table.invalidate_type2_of_qp(A), 0);
    }
    assert_eq!(bed.table.qp_windows.snapshot().len(), 100);
    bed.assert_index_consistent();
}

#[test]
fn concurrent_binds_invalidations_and_resets_keep_the_index_exact() {
    const QPS: u32 = 4;
    const ROUNDS: usize = 200;
    let bed = Bed::new(64);
    let windows: Vec<_> = (0..16).map(|_| bed.alloc(MwType::Type2)).collect();
    std::thread::scope(|s| {
        // Each QP binds free windows and resets (as its own posting thread would).
        for q in 0..QPS {
            let (bed, windows) = (&bed, &windows);
            s.spawn(move || {
                let qp = QpNumber(0x100 + q);
                for round in 0..ROUNDS {
                    for (i, &mw) in windows.iter().enumerate() {
                        if (i + round) % QPS as usize == q as usize {
                            let _ = bed.table.bind_mw(BindRequest {
                                mw,
                                qp,
                                qp_pd: PD,
                                mr: Some(bed.mr.clone()),
                                addr: bed.mr.addr,
                                len: 8,
                                access: AccessFlags::REMOTE_READ,
                                key: None,
                                named_qp: false,
                            });
                        }
                    }
                    if round % 3 == 0 {
                        bed.table.invalidate_type2_of_qp(qp);
                    }
                }
            });
        }
        // Another thread invalidates whatever it finds bound (LOCAL_INV on another QP).
        let (bed, windows) = (&bed, &windows);
        s.spawn(move || {
            for _ in 0..ROUNDS {
                for &mw in windows {
                    if let Some(MwState::Bound { key_byte, .. }) = bed.table.mw_state(mw) {
                        let key = MemoryKey::new(mw.index(), key_byte);
                        let _ = bed.table.invalidate_mw(key, PD, None);
                    }
                }
            }
        });
    });
    bed.assert_index_consistent();
    let bound: usize = bed.expected_index().values().map(HashSet::len).sum();
    assert_eq!(bed.mr.bound_windows.load(Ordering::SeqCst) as usize, bound);
    for q in 0..QPS {
        bed.table.invalidate_type2_of_qp(QpNumber(0x100 + q));
    }
    assert!(bed.table.qp_windows.snapshot().is_empty());
    assert_eq!(bed.mr.bound_windows.load(Ordering::SeqCst), 0);
}
