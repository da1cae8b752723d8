//! The remote-memory interface on the baselines (Unprot, MR, RPC), with the test body of
//! `patronus-ods`'s `patronus_memory.rs`: four objects in one call, zeroed and disjoint; one
//! batch of WRITE, CAS, FAA and READ; a root shared by name; then the object is freed under a
//! reader's right. What happens to the stale access is each scheme's own, and asserted as it
//! is: MR's NIC refuses it; Unprot and RPC carry it out — it reads the freed memory, and once
//! the block is handed out again, it reads and writes the new owner's object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_bench::baseline::{BaselineClientConfig, BaselineError, BaselineMemory, Scheme};
use patronus_core::cluster::Link;
use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::conformance;
use patronus_ods::{MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use rnic::soft::SoftProvider;
use std::time::Duration;
use support::{Bed, bed, small};

type Mem = BaselineMemory<SoftProvider>;

const LEASE: Duration = Duration::from_millis(500);

fn memory(bed: &Bed, scheme: Scheme) -> Mem {
    let cfg = BaselineClientConfig::default();
    Mem::connect(&bed.dev, bed.node.address(), scheme, cfg).unwrap()
}

fn four_objects_in_one_call_each_with_its_own_right(t: Link, scheme: Scheme) {
    let bed = bed(t, small(scheme == Scheme::Mr));
    let mut mem = memory(&bed, scheme);
    let mut other = memory(&bed, scheme);
    let before = bed.node.stats();
    let sizes = [4096, 4096, 64, 64];
    let blocks = mem.allocate(&sizes, LEASE, Mode::Shared).unwrap();
    let after = bed.node.stats();
    assert_eq!(
        after.requests - before.requests,
        4,
        "one request per object"
    );
    assert_eq!(
        mem.control().peak_in_flight(),
        4,
        "all four in one round trip"
    );
    let registered = after.mrs_registered - before.mrs_registered;
    assert_eq!(registered, if scheme == Scheme::Mr { 4 } else { 0 });
    conformance::allocated_objects_are_zeroed_and_disjoint(&mut mem, &blocks, &sizes);
    let (a, b) = (&blocks[0], &blocks[2]);
    conformance::one_batch_runs_in_order(&mut mem, a, b);
    // Another client finds it by name, acquires it and reads it; no lease ever runs out.
    let seen = conformance::a_named_root_is_shared(&mut mem, &mut other, a, LEASE);
    assert!(!other.expires_within(&seen, Duration::from_secs(3600)));
    other.extend(&seen, LEASE).unwrap();
    let mut blocks = blocks.into_iter();
    mem.free(blocks.next().unwrap()).unwrap();
    match scheme {
        Scheme::Mr => {
            // The reader's region went with the object: the NIC refuses the stale rkey, and
            // the object cannot be acquired again.
            assert_eq!(other.read(&seen, 8, 8), Err(MemError::Rejected));
            let again = other.acquire(seen.addr(), 64, LEASE, Access::Read, Mode::Shared);
            assert_eq!(again.err(), Some(MemError::NotFound));
            assert_eq!(other.release(seen), Err(MemError::NotFound), "deregistered");
            // The refusal cost the reader its data connection only: it carries on.
            let live = other
                .acquire(
                    blocks.as_slice()[1].addr(),
                    64,
                    LEASE,
                    Access::Read,
                    Mode::Shared,
                )
                .unwrap();
            assert_eq!(other.read(&live, 0, 8).unwrap(), 12u64.to_ne_bytes());
            assert_eq!(other.reconnects(), 1);
            other.release(live).unwrap();
        }
        _ => {
            // No protection: the stale access is carried out on the freed memory...
            assert_eq!(other.read(&seen, 8, 8).unwrap(), b"payload!");
            let stale = other
                .acquire(seen.addr(), 4096, LEASE, Access::ReadWrite, Mode::Shared)
                .unwrap();
            assert_eq!(other.free(stale), Err(MemError::NotFound), "double free");
            // ...and once the block is handed out again, on the new owner's object.
            let reused = mem.allocate(&[4096], LEASE, Mode::Shared).unwrap();
            assert_eq!(reused[0].addr(), seen.addr(), "the freed block, reused");
            assert_eq!(other.read(&seen, 8, 8).unwrap(), [0; 8], "zeroed");
            let stale = other
                .acquire(seen.addr(), 16, LEASE, Access::ReadWrite, Mode::Shared)
                .unwrap();
            other.write(&stale, 0, b"intruder").unwrap();
            assert_eq!(mem.read(&reused[0], 0, 8).unwrap(), b"intruder");
            other.release(stale).unwrap();
            other.release(seen).unwrap();
            for r in reused {
                mem.free(r).unwrap();
            }
        }
    }
    for b in blocks {
        mem.free(b).unwrap();
    }
    other.unpublish("block").unwrap();
    assert_eq!(other.lookup("block"), Err(MemError::NotFound));
    assert_eq!(
        other.publish(&"x".repeat(33), 0, 1),
        Err(MemError::Invalid(
            "a root name is 1 to 32 bytes of UTF-8 without NUL"
        ))
    );
}

/// Batches beyond the easy case: pages, more ops than requests in flight, bad ops beside
/// good ones, and (MR) the ops behind a refused one run once more, exactly once.
fn batches_keep_order_and_run_each_op_once(t: Link, scheme: Scheme) {
    let bed = bed(t, small(scheme == Scheme::Mr));
    let mut mem = memory(&bed, scheme);
    let r = mem
        .allocate(&[3 * 4096 + 100], LEASE, Mode::Shared)
        .unwrap()
        .pop()
        .unwrap();
    // Larger than a page (RPC: one request per page).
    let big: Vec<u8> = (0..r.len()).map(|i| (i % 251) as u8).collect();
    mem.write(&r, 0, &big).unwrap();
    assert_eq!(mem.read(&r, 0, r.len() as u32).unwrap(), big);
    // 40 FAAs and a read in one batch (RPC: more than the 16 requests in flight).
    let mut ops: Vec<MemOp<'_, _>> = (0..40)
        .map(|i| MemOp::Faa {
            on: &r,
            offset: 8 * (i % 4),
            add: 1,
        })
        .collect();
    ops.push(MemOp::Read {
        on: &r,
        offset: 0,
        len: 32,
    });
    // Ops the interface refuses before anything is sent, beside them.
    ops.push(MemOp::Faa {
        on: &r,
        offset: 4,
        add: 1,
    });
    ops.push(MemOp::Read {
        on: &r,
        offset: r.len() - 4,
        len: 8,
    });
    let out = mem.execute(&ops);
    let words: Vec<u64> = (0..4)
        .map(|w| u64::from_ne_bytes(big[8 * w..8 * w + 8].try_into().unwrap()))
        .collect();
    for (i, o) in out[..40].iter().enumerate() {
        let w = i % 4;
        assert_eq!(o, &Ok(MemOut::Atomic(words[w] + (i / 4) as u64)), "op {i}");
    }
    let after: Vec<u8> = (0..4).flat_map(|w| (words[w] + 10).to_ne_bytes()).collect();
    assert_eq!(out[40], Ok(MemOut::Read(after)));
    assert!(matches!(out[41], Err(MemError::Invalid(_))), "misaligned");
    assert!(
        matches!(out[42], Err(MemError::Invalid(_))),
        "outside the region"
    );
    if scheme == Scheme::Rpc {
        assert!(mem.control().peak_in_flight() >= 16, "pipelined");
    }
    if scheme == Scheme::Mr {
        // A refused op in the middle of a batch (a WRITE through a read-only region): the
        // ops flushed behind it never ran, so they run once more on a new data connection —
        // each takes effect once.
        let ro = mem
            .acquire(r.addr(), 64, LEASE, Access::Read, Mode::Shared)
            .unwrap();
        let out = mem.execute(&[
            MemOp::Faa {
                on: &r,
                offset: 64,
                add: 1,
            },
            MemOp::Write {
                on: &ro,
                offset: 0,
                data: b"read-only",
            },
            MemOp::Faa {
                on: &r,
                offset: 72,
                add: 1,
            },
            MemOp::Read {
                on: &r,
                offset: 64,
                len: 16,
            },
        ]);
        let old = |at: usize| u64::from_ne_bytes(big[at..at + 8].try_into().unwrap());
        assert_eq!(out[0], Ok(MemOut::Atomic(old(64))));
        assert_eq!(out[1], Err(MemError::Rejected), "refused by the NIC");
        assert_eq!(out[2], Ok(MemOut::Atomic(old(72))), "ran once, after all");
        let both: Vec<u8> = [old(64) + 1, old(72) + 1]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(out[3], Ok(MemOut::Read(both)));
        assert_eq!(mem.reconnects(), 1);
        mem.release(ro).unwrap();
    }
    mem.free(r).unwrap();
}

macro_rules! every_scheme {
    ($($name:ident),* $(,)?) => {
        every_scheme!(@t inproc, InProc, $($name),*);
        every_scheme!(@t tcp, Tcp, $($name),*);
    };
    (@t $m:ident, $t:ident, $($name:ident),*) => {
        mod $m {
            use patronus_bench::baseline::Scheme;
            use patronus_core::cluster::Link::$t;
            $(
                mod $name {
                    use super::*;
                    #[test] fn unprot() { super::super::$name($t, Scheme::Unprot) }
                    #[test] fn mr() { super::super::$name($t, Scheme::Mr) }
                    #[test] fn rpc() { super::super::$name($t, Scheme::Rpc) }
                }
            )*
        }
    };
}

every_scheme!(
    four_objects_in_one_call_each_with_its_own_right,
    batches_keep_order_and_run_each_op_once,
);

#[test]
fn a_scheme_without_the_interface_is_refused_at_connect() {
    let cfg = BaselineClientConfig::default();
    // QP flags gate a whole QP, not a region.
    let bed = bed(Link::InProc, small(false));
    let qp = Mem::connect(&bed.dev, bed.node.address(), Scheme::Qp, cfg);
    assert!(matches!(qp, Err(BaselineError::InvalidUse(_))));
    // An MR node has no whole-pool region for Unprot to use.
    let bed = support::bed(Link::InProc, small(true));
    let unprot = Mem::connect(&bed.dev, bed.node.address(), Scheme::Unprot, cfg);
    assert!(matches!(unprot, Err(BaselineError::InvalidUse(_))));
}
