//! Checks of the [`RemoteMemory`] contract every implementation must meet, shared by the
//! tests of each (Patronus here, the baselines in the bench crate), so that one text states
//! what the data structures rely on. Test support (feature `testing`): the checks panic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::memory::{MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;

/// Checks that `blocks`, allocated in one call for `sizes`, are each as long as asked,
/// zeroed, and disjoint from the others.
pub fn allocated_objects_are_zeroed_and_disjoint<M: RemoteMemory>(
    mem: &mut M,
    blocks: &[M::Region],
    sizes: &[u64],
) {
    assert_eq!(blocks.iter().map(Region::len).collect::<Vec<_>>(), sizes);
    for (i, b) in blocks.iter().enumerate() {
        let n = b.len().min(64) as u32;
        assert_eq!(mem.read(b, 0, n).unwrap(), vec![0; n as usize], "zeroed");
        for c in &blocks[i + 1..] {
            assert!(b.addr() + b.len() <= c.addr() || c.addr() + c.len() <= b.addr());
        }
    }
}

/// One batch — a WRITE into `a` (16 bytes or more), a CAS and an FAA on `b`'s first word, a
/// READ back — runs in order with one result per operation.
pub fn one_batch_runs_in_order<M: RemoteMemory>(mem: &mut M, a: &M::Region, b: &M::Region) {
    let out = mem.execute(&[
        MemOp::Write {
            on: a,
            offset: 8,
            data: b"payload!",
        },
        MemOp::Cas {
            on: b,
            offset: 0,
            compare: 0,
            swap: 7,
        },
        MemOp::Faa {
            on: b,
            offset: 0,
            add: 5,
        },
        MemOp::Read {
            on: a,
            offset: 8,
            len: 8,
        },
    ]);
    let out: Vec<MemOut> = out.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        out,
        [
            MemOut::Written,
            MemOut::Atomic(0),
            MemOut::Atomic(7),
            MemOut::Read(b"payload!".to_vec())
        ]
    );
}

/// `mem` publishes `a` (written by [`one_batch_runs_in_order`]) as "block"; a second name
/// for it is refused; `other` finds it by name, acquires it and reads it. Returns `other`'s
/// right.
pub fn a_named_root_is_shared<M: RemoteMemory + NamedRoots>(
    mem: &mut M,
    other: &mut M,
    a: &M::Region,
    lease: Duration,
) -> M::Region {
    mem.publish("block", a.addr(), a.len()).unwrap();
    assert_eq!(mem.publish("block", a.addr(), 8), Err(MemError::NameTaken));
    let (at, len) = other.lookup("block").unwrap();
    let seen = other
        .acquire(at, len, lease, Access::Read, Mode::Shared)
        .unwrap();
    assert_eq!(other.read(&seen, 8, 8).unwrap(), b"payload!");
    seen
}

/// After the owner freed the object `seen` covers (shared by [`a_named_root_is_shared`]),
/// `other`'s stale right reads nothing that is not the object's own: the NIC refuses it, or —
/// delayed unbinding (§5.4; `docs/threat-model.md` §10, invariant 2's exception) keeps a
/// freed object's window bound until its memory is reused, which unbinds it first — it still
/// reads the freed object's own bytes. The right itself is gone at the memory node: acquiring
/// the object again is refused as not found.
pub fn a_freed_objects_stale_right_reads_nothing_foreign<M: RemoteMemory>(
    other: &mut M,
    seen: &M::Region,
    lease: Duration,
) {
    match other.read(seen, 8, 8) {
        Err(MemError::Rejected) => {}
        Ok(bytes) => assert_eq!(bytes, b"payload!", "only the freed object's own bytes"),
        Err(e) => panic!("a stale right's READ: {e:?}"),
    }
    assert_eq!(
        other
            .acquire(seen.addr(), 8, lease, Access::Read, Mode::Shared)
            .err(),
        Some(MemError::NotFound)
    );
}
