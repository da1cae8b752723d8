//! The remote-memory interface on Patronus: pre-allocation in one call, batches, and the
//! NIC's refusal once a right has ended.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_core::cluster::Transport;
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::{MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use std::time::Duration;
use support::bed;

const LEASE: Duration = Duration::from_millis(500);

fn four_objects_in_one_call_each_with_its_own_right(t: Transport) {
    let (_bed, mut mems) = bed(t, 2, NodeConfig::default(), Default::default());
    let mut other = mems.pop().unwrap();
    let mut mem = mems.pop().unwrap();
    let rpcs = mem.client().rpcs();
    let blocks = mem
        .allocate(&[4096, 4096, 64, 64], LEASE, Mode::Shared)
        .unwrap();
    assert_eq!(mem.client().rpcs() - rpcs, 4, "one request per object");
    assert_eq!(
        blocks.iter().map(Region::len).collect::<Vec<_>>(),
        [4096, 4096, 64, 64]
    );
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(mem.read(b, 0, 64).unwrap(), vec![0; 64], "zeroed");
        for c in &blocks[i + 1..] {
            assert!(b.addr() + b.len() <= c.addr() || c.addr() + c.len() <= b.addr());
        }
    }
    // One batch: a write, an atomic on each side of it, a read of everything.
    let (a, b) = (&blocks[0], &blocks[2]);
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
    // Another client acquires one (shared: no wait), reads it; once the owner frees it, the
    // reader's right is gone and its READ is refused by the NIC.
    mem.publish("block", a.addr(), a.len()).unwrap();
    assert_eq!(mem.publish("block", a.addr(), 8), Err(MemError::NameTaken));
    let (at, len) = other.lookup("block").unwrap();
    let seen = other
        .acquire(at, len, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    assert_eq!(other.read(&seen, 8, 8).unwrap(), b"payload!");
    assert!(!other.expires_within(&seen, Duration::ZERO));
    let mut blocks = blocks.into_iter();
    mem.free(blocks.next().unwrap()).unwrap();
    assert_eq!(other.read(&seen, 8, 8), Err(MemError::Rejected));
    assert_eq!(
        other
            .acquire(seen.addr(), 64, LEASE, Access::Read, Mode::Shared)
            .err(),
        Some(MemError::NotFound)
    );
    for b in blocks {
        mem.free(b).unwrap();
    }
    other.unpublish("block").unwrap();
    assert_eq!(other.lookup("block"), Err(MemError::NotFound));
}

both_transports!(four_objects_in_one_call_each_with_its_own_right);
