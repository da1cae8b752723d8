//! The remote-memory interface on Patronus: pre-allocation in one call, batches, and the
//! NIC's refusal once a right has ended.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use patronus_core::cluster::Link;
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::Mode;
use patronus_ods::conformance;
use patronus_ods::{MemError, NamedRoots, RemoteMemory};
use std::time::Duration;
use support::bed;

const LEASE: Duration = Duration::from_millis(500);

fn four_objects_in_one_call_each_with_its_own_right(t: Link) {
    let (_bed, mut mems) = bed(t, 2, NodeConfig::default(), Default::default());
    let mut other = mems.pop().unwrap();
    let mut mem = mems.pop().unwrap();
    let rpcs = mem.client().status().rpcs();
    let sizes = [4096, 4096, 64, 64];
    let blocks = mem.allocate(&sizes, LEASE, Mode::Shared).unwrap();
    assert_eq!(
        mem.client().status().rpcs() - rpcs,
        4,
        "one request per object"
    );
    conformance::allocated_objects_are_zeroed_and_disjoint(&mut mem, &blocks, &sizes);
    let (a, b) = (&blocks[0], &blocks[2]);
    conformance::one_batch_runs_in_order(&mut mem, a, b);
    // Another client acquires one (shared: no wait), reads it; once the owner frees it, the
    // reader's right is gone, and its stale rkey reads nothing foreign.
    let seen = conformance::a_named_root_is_shared(&mut mem, &mut other, a, LEASE);
    assert!(!other.expires_within(&seen, Duration::ZERO));
    let mut blocks = blocks.into_iter();
    mem.free(blocks.next().unwrap()).unwrap();
    conformance::a_freed_objects_stale_right_reads_nothing_foreign(&mut other, &seen, LEASE);
    for b in blocks {
        mem.free(b).unwrap();
    }
    other.unpublish("block").unwrap();
    assert_eq!(other.lookup("block"), Err(MemError::NotFound));
}

patronus_core::both_transports!(four_objects_in_one_call_each_with_its_own_right);
