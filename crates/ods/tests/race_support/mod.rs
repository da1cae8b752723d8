//! Helpers for the RACE hashing tests: small table shapes (splits happen often), client
//! options for a virtual clock, a driver for the state machines, a wrapper that makes a CAS's
//! outcome unknown on command, and a seeded RNG.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // helpers, not #[test] fns

pub mod faulty;

use patronus_core::client::ClientConfig;
use patronus_core::cluster::Link;
use patronus_core::manager::{NodeConfig, SlabConfig};
use patronus_ods::PatronusMemory;
use patronus_ods::RemoteMemory;
use patronus_ods::race::{ClientOptions, LockMode, RaceConfig, RaceError, TableClient};
use rnic::soft::SoftProvider;
use std::task::Poll;
use std::time::Duration;

/// Remote memory of the test bed.
pub type Mem = PatronusMemory<SoftProvider>;

/// A table that splits after a few dozen keys: one bucket group of four-slot buckets.
pub fn small(lock: LockMode) -> RaceConfig {
    RaceConfig {
        initial_depth: 0,
        max_depth: 8,
        groups: 1,
        slots: 4,
        block_size: 128,
        lock,
        seed: 7,
    }
}

/// Client options for a virtual clock (leases only end when a test moves time).
pub fn opts() -> ClientOptions {
    ClientOptions {
        takeover_after: 4,
        max_wait_polls: 64,
        // Leases never run out on the virtual clock: release what is not needed.
        lapse: false,
        ..ClientOptions::default()
    }
}

/// Conflicting acquisitions fail at once: the virtual clock stands still while they wait.
pub fn client_cfg() -> ClientConfig {
    ClientConfig {
        acquire_wait: Duration::ZERO,
        // A round trip takes no virtual time: no slack on leases, which would otherwise be
        // sized from real round trips the virtual clock never sees (a test that moves time
        // past a lease would then depend on how fast the machine ran).
        lease_slack_rtts: 0,
        ..ClientConfig::default()
    }
}

/// A node whose permissions may live long on the virtual clock.
pub fn node_cfg() -> NodeConfig {
    NodeConfig {
        max_lifetime_us: 1_000_000,
        ..NodeConfig::default()
    }
}

/// A bed of `n` clients.
pub fn bed(t: Link, n: usize) -> (crate::support::Bed, Vec<Mem>) {
    crate::support::bed(t, n, node_cfg(), client_cfg())
}

/// A bed whose memory node reuses a freed block within a few dozen allocations (small slabs:
/// a freed object waits behind the rest of its slab's free ones).
pub fn reusing_bed(t: Link, n: usize) -> (crate::support::Bed, Vec<Mem>) {
    let node = NodeConfig {
        slab: SlabConfig {
            slab_bytes: 4096,
            ..SlabConfig::default()
        },
        ..node_cfg()
    };
    crate::support::bed(t, n, node, client_cfg())
}

pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

pub fn value(i: u64, version: u64) -> Vec<u8> {
    format!("value-{i}-v{version}-{}", "x".repeat((i % 7) as usize)).into_bytes()
}

/// Steps an operation to completion (bounded).
pub fn run<T, M: RemoteMemory>(
    t: &mut TableClient<M>,
    mem: &mut M,
    mut step: impl FnMut(&mut TableClient<M>, &mut M) -> Poll<Result<T, RaceError>>,
) -> Result<T, RaceError> {
    for _ in 0..100_000 {
        if let Poll::Ready(r) = step(t, mem) {
            return r;
        }
        settle(t, mem);
    }
    panic!("an operation did not finish in 100000 steps");
}

/// After a step that waited for an acquire's answer, sleeps until the answer is here (so a
/// test's bounded count of steps counts progress, not polls).
pub fn settle<M: RemoteMemory>(t: &TableClient<M>, mem: &mut M) {
    if t.awaiting_answer() {
        mem.wait(Duration::from_secs(1));
    }
}

/// A small seeded RNG (xorshift*), so the interleavings replay exactly.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Spins (yielding) until the node's manager has expired `n` permissions (bounded).
#[allow(clippy::disallowed_methods)] // a wall-time bound on a test that must not hang
pub fn wait_expired(bed: &crate::support::Bed, n: u64) {
    let t0 = std::time::Instant::now();
    loop {
        let s = bed.cluster.node.fresh_stats();
        if s.counters.expired >= n {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no expiry: {s:?}");
        std::thread::yield_now();
    }
}
