//! A seeded simulation of a whole cluster: the manager's shards (`ManagerCore` over the fake
//! NIC), several clients (each the real `ClientCore` with a random workload), FIFO channels
//! with random delays, a data link per client for one-sided ops (decided by the core's
//! exactly-once rule), one virtual clock, and faults (lost messages, freezes, crashes, node
//! restarts, clock skew, data links dying before or after an op executed) — all from one
//! seed, with the invariants checked after every step (see `cluster_sim/oracle.rs` and
//! `cluster_sim/client.rs` for what is checked, and `cluster_sim/world.rs` and
//! `cluster_sim/data.rs` for what is modelled).
//!
//! A failure names its seed and step; `PATRONUS_SIM_SEED=<seed>` replays that seed alone
//! (`PATRONUS_SIM_OPS` sets its length). The mutation tests switch holes fixed before back on
//! (`ManagerCore::set_mutation`, `ClientCore::keep_late_grants`, `ClientCore::set_mutation`,
//! `testing` feature only) and assert that the simulation catches each within 100 seeds.

mod support;

#[path = "cluster_sim/client.rs"]
mod client;
#[path = "cluster_sim/data.rs"]
mod data;
#[path = "cluster_sim/net.rs"]
mod net;
#[path = "cluster_sim/node.rs"]
mod node;
#[path = "cluster_sim/oracle.rs"]
mod oracle;
#[path = "cluster_sim/world.rs"]
mod world;

use patronus_core::client::core::ClientMutation;
use patronus_core::manager::Mutation;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;
use world::{Mut, Params, Report, STEP, World};

/// Seeds per `cargo test` run, and operations per seed.
const SEEDS: u64 = 400;
const OPS: u64 = 3_000;

/// A failure: the seed, the step and what broke.
#[derive(Debug)]
struct Failure {
    seed: u64,
    step: u64,
    what: String,
}

/// Runs one seed; an invariant violation, or a panic inside the system or the checks,
/// becomes a [`Failure`] naming the step.
fn run(p: Params) -> Result<Report, Failure> {
    let seed = p.seed;
    STEP.with(|s| s.set(0));
    let outcome = catch_unwind(AssertUnwindSafe(|| World::new(p).run()));
    let step = STEP.with(Cell::get);
    match outcome {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(what)) => Err(Failure { seed, step, what }),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(Failure {
                seed,
                step,
                what: format!("panicked: {what}"),
            })
        }
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn check(p: Params) -> Report {
    match run(p) {
        Ok(r) => r,
        Err(f) => panic!(
            "seed {} failed at step {}: {}\nreplay: PATRONUS_SIM_SEED={} cargo test -p \
             patronus-core --test cluster_sim",
            f.seed, f.step, f.what, f.seed
        ),
    }
}

#[test]
#[allow(clippy::disallowed_methods)] // wall time, to report the run's speed
fn seeds_keep_every_invariant() {
    let start = Instant::now();
    let ops = env("PATRONUS_SIM_OPS").unwrap_or(OPS);
    let seeds: Vec<u64> = match env("PATRONUS_SIM_SEED") {
        Some(s) => vec![s],
        None => (1..=SEEDS).collect(),
    };
    let mut total = Report::default();
    for &seed in &seeds {
        let r = check(Params {
            seed,
            ops,
            mutation: None,
        });
        total.ops += r.ops;
        total.steps += r.steps;
        for i in 0..4 {
            total.faults[i] += r.faults[i];
        }
        total.counts.grants += r.counts.grants;
        total.counts.accesses_allowed += r.counts.accesses_allowed;
        total.counts.stale_into_freed += r.counts.stale_into_freed;
        total.counts.scrubbed += r.counts.scrubbed;
        total.counts.ops_done += r.counts.ops_done;
        total.counts.ops_denied += r.counts.ops_denied;
        total.counts.ops_unknown += r.counts.ops_unknown;
        total.counts.ops_failed += r.counts.ops_failed;
        total.counts.link_lost_before += r.counts.link_lost_before;
        total.counts.link_lost_after += r.counts.link_lost_after;
        total.counts.renewals += r.counts.renewals;
        total.handed_back += r.handed_back;
        total.left_to_lease += r.left_to_lease;
        total.unknown += r.unknown;
    }
    println!(
        "{} seeds, {} ops, {} steps in {:?}: grants {}, accesses {}, stale into freed {}, \
         scrubs {}, handed back {}, left to lease {}, unknown outcomes {}, faults (lost, \
         freeze, crash, restart) {:?}; data ops done {}, refused {}, unknown {}, failed {}, \
         links lost before {} and after {} an op; exclusive renewals {}",
        seeds.len(),
        total.ops,
        total.steps,
        start.elapsed(),
        total.counts.grants,
        total.counts.accesses_allowed,
        total.counts.stale_into_freed,
        total.counts.scrubbed,
        total.handed_back,
        total.left_to_lease,
        total.unknown,
        total.faults,
        total.counts.ops_done,
        total.counts.ops_denied,
        total.counts.ops_unknown,
        total.counts.ops_failed,
        total.counts.link_lost_before,
        total.counts.link_lost_after,
        total.counts.renewals
    );
}

#[test]
#[ignore = "long: a million operations of one seed (run with --release)"]
#[allow(clippy::disallowed_methods)] // wall time, to report ops/s
fn one_seed_a_million_operations() {
    let seed = env("PATRONUS_SIM_SEED").unwrap_or(42);
    let ops = env("PATRONUS_SIM_OPS").unwrap_or(1_000_000);
    let start = Instant::now();
    let r = check(Params {
        seed,
        ops,
        mutation: None,
    });
    let secs = start.elapsed().as_secs_f64();
    println!(
        "seed {seed}: {} ops, {} steps, {} batches, {} messages, {:.1} s simulated in \
         {secs:.2} s: {:.0} ops/s; {r:?}",
        r.ops,
        r.steps,
        r.batches,
        r.messages,
        r.sim_us as f64 / 1e6,
        r.ops as f64 / secs
    );
}

/// Runs seeds 1..=100 with `m` on until one fails; returns it (panics if none does).
fn caught(m: Mut) -> Failure {
    for seed in 1..=100 {
        if let Err(f) = run(Params {
            seed,
            ops: OPS,
            mutation: Some(m),
        }) {
            println!(
                "{m:?} caught by seed {} at step {}: {}",
                f.seed, f.step, f.what
            );
            return f;
        }
    }
    panic!("{m:?} was not caught by seeds 1..=100");
}

#[test]
fn catches_freed_memory_handed_out_unscrubbed() {
    let f = caught(Mut::Manager(Mutation::SkipScrub));
    assert!(f.what.contains("unscrubbed"), "{f:?}");
}

#[test]
fn catches_a_retried_waiting_acquire_treated_as_new() {
    caught(Mut::Manager(Mutation::RetryIsNewRequest));
}

#[test]
fn catches_a_grant_of_another_tenants_object() {
    let f = caught(Mut::Manager(Mutation::SkipTenantCheck));
    assert!(f.what.contains("tenant"), "{f:?}");
}

#[test]
fn catches_a_late_grant_not_handed_back() {
    let f = caught(Mut::KeepLateGrants);
    assert!(f.what.contains("neither held nor handed back"), "{f:?}");
}

#[test]
fn catches_an_unknown_outcome_retried() {
    let f = caught(Mut::Client(ClientMutation::RetryFlushed));
    assert!(f.what.contains("not exactly once"), "{f:?}");
}

#[test]
fn catches_a_renewal_with_a_gap() {
    let f = caught(Mut::Client(ClientMutation::RenewWithGap));
    assert!(f.what.contains("renewal with a gap"), "{f:?}");
}
