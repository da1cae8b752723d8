//! The manager alone (`benches/manager_alone/workload.rs`) as a test: every kind of request
//! is answered as it should be over a warm population, and the heap allocations each costs at
//! steady state are counted (dhat's global allocator, in its testing mode; this test binary
//! runs nothing else while it counts: one test, one thread).

#[path = "../benches/manager_alone/workload.rs"]
mod workload;

use workload::{Bed, Kind};

// dhat's allocator counts every heap block allocated (its testing mode reads the counts).
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Heap blocks allocated so far.
fn allocations() -> u64 {
    dhat::HeapStats::get().total_blocks
}

/// Batches run before counting (pools, maps and queues grown to their steady size).
const WARM: usize = 400;
/// Batches counted.
const COUNTED: usize = 200;

#[test]
fn every_kind_is_answered_and_its_allocations_are_counted() {
    let _profiler = dhat::Profiler::builder().testing().build();
    println!("heap allocations per request at steady state (1,000 live permissions)");
    println!(
        "{:<16} {:>8} {:>8} {:>8}",
        "kind", "batch 1", "batch 2", "batch 16"
    );
    for kind in Kind::ALL {
        let mut per_batch = Vec::new();
        for batch in [1, 2, 16] {
            let mut bed = Bed::new(1_000);
            for _ in 0..WARM {
                bed.batch(kind, batch);
            }
            bed.reset_counts();
            let before = allocations();
            let mut requests = 0;
            for _ in 0..COUNTED {
                requests += bed.batch(kind, batch);
            }
            let allocations = allocations() - before;
            per_batch.push(allocations as f64 / requests as f64);
            // What each kind must be answered with.
            match kind {
                // Answered blandly: identity is the driver's business.
                Kind::Bare => {
                    assert_eq!(bed.replies, requests, "{kind:?}: every request answered");
                    assert_eq!(bed.grants, 0, "{kind:?}");
                }
                Kind::Extend => {
                    assert_eq!(bed.replies, requests, "{kind:?}: every request answered");
                    assert_eq!(bed.refusals, 0, "{kind:?}");
                }
                Kind::Expr => {
                    assert_eq!(bed.grants, requests, "{kind:?}: every acquire granted");
                }
                Kind::AllocateFree | Kind::AcquireRevoke => {
                    assert_eq!(bed.grants, requests, "{kind:?}: every request granted");
                    assert_eq!(bed.refusals, 0, "{kind:?}");
                }
            }
        }
        // None at steady state (`docs/evaluation.md`, "The manager alone"): a bare turn and
        // an RPC extension allocate nothing at all; a grant may still grow a table now and
        // then (the deadline heap, a map doubling: amortized, under 0.01 per request), never
        // once per request or per batch.
        let ceiling = match kind {
            Kind::Bare | Kind::Extend => 0.0,
            Kind::Expr | Kind::AllocateFree | Kind::AcquireRevoke => 0.01,
        };
        assert!(
            per_batch[2] <= ceiling,
            "{kind:?}: {:.4} heap allocations per request at batch 16 (at most {ceiling})",
            per_batch[2]
        );
        println!(
            "{:<16} {:>8.2} {:>8.2} {:>8.2}",
            kind.name(),
            per_batch[0],
            per_batch[1],
            per_batch[2]
        );
    }
}
