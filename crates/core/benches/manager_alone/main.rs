//! The manager alone (`workload.rs`): nanoseconds per request of each kind, at batch sizes
//! 1, 2, 16 and 64, over populations of live permissions, in one thread with a NIC that
//! completes every chain at once. Criterion reports time per batch and requests per second
//! (throughput in elements: the requests of a batch).
//!
//! `cargo bench -p patronus-core --bench manager_alone` runs it (`-- --quick` for a short
//! run); `cargo test --bench manager_alone` runs each case once, as CI does.
//!
//! `PATRONUS_MANAGER_PROBE=KIND,BATCH,BATCHES` runs that many batches of one kind over 10^3
//! live permissions and nothing else, for a deterministic instruction count
//! (`scripts/manager-instructions` runs it twice under callgrind and takes the difference).

mod workload;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use workload::{Bed, Kind};

/// Batch sizes (Figure 6 runs at about 2 requests per batch).
const BATCHES: [usize; 4] = [1, 2, 16, 64];

/// Live permissions of the populations (`PATRONUS_BENCH_LIVE`, comma-separated, else 10^3
/// and 10^5; 10^6 takes a minute to set up).
fn populations() -> Vec<usize> {
    std::env::var("PATRONUS_BENCH_LIVE")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000])
}

fn manager_alone(c: &mut Criterion) {
    for live in populations() {
        for kind in Kind::ALL {
            let mut group = c.benchmark_group(format!("{} / {live} live", kind.name()));
            for batch in BATCHES {
                let mut bed = Bed::new(live);
                group.throughput(Throughput::Elements(batch as u64));
                group.bench_function(BenchmarkId::from_parameter(batch), |b| {
                    b.iter(|| bed.batch(kind, batch));
                });
                assert!(bed.replies > 0, "{kind:?}: no request was answered");
            }
            group.finish();
        }
    }
}

criterion_group!(benches, manager_alone);

/// `KIND,BATCH,BATCHES` of `PATRONUS_MANAGER_PROBE`, run with no timing around it.
fn probe(spec: &str) {
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    let (Some(kind), Some(Ok(batch)), Some(Ok(batches))) = (
        parts
            .first()
            .and_then(|k| Kind::ALL.into_iter().find(|x| x.name() == *k)),
        parts.get(1).map(|b| b.parse::<usize>()),
        parts.get(2).map(|n| n.parse::<usize>()),
    ) else {
        eprintln!(
            "PATRONUS_MANAGER_PROBE: expected KIND,BATCH,BATCHES with KIND one of {:?}",
            Kind::ALL.map(Kind::name)
        );
        std::process::exit(2);
    };
    let mut bed = Bed::new(1_000);
    // Warm: pools, maps and queues at their steady size before the counted batches.
    for _ in 0..400 {
        bed.batch(kind, batch);
    }
    let mut requests = 0;
    for _ in 0..batches {
        requests += bed.batch(kind, batch);
    }
    println!("{} batch {batch}: {requests} requests", kind.name());
}

fn main() {
    if let Ok(spec) = std::env::var("PATRONUS_MANAGER_PROBE") {
        probe(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
