//! Seeded randomized tests: histories linearizable by construction must pass; mutated ones
//! that are surely wrong must fail; on small histories the verdict must agree with a
//! brute-force enumeration of every order; and the search must stay fast on large histories.
#![allow(clippy::unwrap_used)] // test helpers, not #[test] fns

mod support;

use lincheck::{Budget, Entry, Status, Verdict, check_kv, check_queue, kv, queue};
use support::{Rng, Shape, brute_kv, brute_queue, gen_kv, gen_queue};

fn budget() -> Budget {
    Budget::states(2_000_000)
}

/// Every witness entry is the checked history's entry at its index (or that entry made
/// unknown by truncation), and the witness fails on its own.
fn check_witness<M: lincheck::Model>(h: &lincheck::History<M>, w: &lincheck::Witness<M>) {
    for (e, &i) in w.history.entries().iter().zip(&w.indices) {
        let orig = &h.entries()[i];
        assert_eq!(
            (e.client, e.invoke, &e.op),
            (orig.client, orig.invoke, &orig.op)
        );
        assert!(e.status == orig.status || e.status == Status::Unknown);
    }
    assert!(
        matches!(M::check(&w.history, budget()), Verdict::Violation(_)),
        "witness passes alone:\n{w}"
    );
}

#[test]
fn generated_kv_histories_are_accepted() {
    for seed in 0..20 {
        let mut rng = Rng::new(seed);
        let shape =
            Shape::new(1500, 1 + seed as usize % 16, 1 + seed as usize % 7).faults(20, 20, 20);
        let h = gen_kv(&mut rng, shape);
        let verdict = check_kv(&h, budget());
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict:?}");
    }
}

#[test]
fn generated_queue_histories_are_accepted() {
    for seed in 0..20 {
        let mut rng = Rng::new(seed);
        let shape = Shape::new(800, 1 + seed as usize % 8, 1).faults(10, 10, 10);
        let h = gen_queue(&mut rng, shape);
        let verdict = check_queue(&h, budget());
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict:?}");
    }
}

/// Indices of entries with a known result matching `pred`.
fn known<O, R>(entries: &[Entry<O, R>], pred: impl Fn(&O, &R) -> bool) -> Vec<usize> {
    (0..entries.len())
        .filter(|&i| {
            entries[i]
                .status
                .done()
                .is_some_and(|r| pred(&entries[i].op, r))
        })
        .collect()
}

#[test]
fn kv_read_of_a_value_never_written_is_rejected() {
    for seed in 0..20 {
        let mut rng = Rng::new(100 + seed);
        let h = gen_kv(&mut rng, Shape::new(600, 8, 4).faults(20, 20, 20));
        let gets = known(h.entries(), |op, _| matches!(op, kv::Op::Get { .. }));
        let victim = gets[rng.below(gets.len() as u64) as usize];
        let mut entries = h.entries().to_vec();
        entries[victim].status = Status::Done(kv::Outcome::value("never-written"));
        let bad = kv::History::from_entries(h.initial().clone(), entries).unwrap();
        let Verdict::Violation(w) = check_kv(&bad, budget()) else {
            panic!("seed {seed}: accepted")
        };
        assert_eq!(w.indices, vec![victim], "seed {seed}:\n{w}");
        check_witness(&bad, &w);
    }
}

#[test]
fn queue_items_popped_twice_or_never_pushed_are_rejected() {
    for seed in 0..20 {
        let mut rng = Rng::new(200 + seed);
        let h = gen_queue(&mut rng, Shape::new(400, 6, 1).faults(10, 10, 10));
        let pops = known(h.entries(), |_, r| matches!(r, queue::Outcome::Item { .. }));
        let victim = pops[rng.below(pops.len() as u64) as usize];
        // Popped twice: the same pop again, after everything.
        let mut twice = h.clone();
        let mut again = h.entries()[victim].clone();
        again.invoke = u64::MAX - 10;
        again.complete = Some(u64::MAX - 5);
        twice.push(again).unwrap();
        let Verdict::Violation(w) = check_queue(&twice, budget()) else {
            panic!("seed {seed}: accepted")
        };
        assert_eq!(w.history.len(), 3, "seed {seed}:\n{w}");
        check_witness(&twice, &w);
        // Never pushed.
        let mut entries = h.entries().to_vec();
        entries[victim].status = Status::Done(queue::Outcome::item("ghost"));
        let ghost = queue::History::from_entries(vec![], entries).unwrap();
        let Verdict::Violation(w) = check_queue(&ghost, budget()) else {
            panic!("seed {seed}: accepted")
        };
        assert_eq!(w.indices, vec![victim], "seed {seed}:\n{w}");
    }
}

/// Replaces the result of one known entry by another result its op can return.
fn mutate_kv(rng: &mut Rng, h: &kv::History) -> Option<kv::History> {
    use kv::{Op, Outcome};
    let candidates = known(h.entries(), |_, _| true);
    let victim = *candidates.get(rng.below(candidates.len().max(1) as u64) as usize)?;
    let mut entries = h.entries().to_vec();
    let e = &mut entries[victim];
    let values: Vec<String> = h
        .entries()
        .iter()
        .filter_map(|e| e.op.value().map(str::to_string))
        .collect();
    let other = match (&e.op, e.status.done()?) {
        (Op::Put { .. }, Outcome::Inserted) => Outcome::Updated,
        (Op::Put { .. } | Op::Update { .. }, _) | (Op::Delete { .. }, Outcome::Deleted) => {
            Outcome::Absent
        }
        (Op::Insert { .. }, Outcome::Inserted) => Outcome::Exists,
        (Op::Insert { .. }, _) => Outcome::Inserted,
        (Op::Delete { .. }, _) => Outcome::Deleted,
        (Op::Get { .. }, _) if values.is_empty() || rng.below(3) == 0 => Outcome::Absent,
        (Op::Get { .. }, _) => {
            Outcome::value(values[rng.below(values.len() as u64) as usize].clone())
        }
    };
    let other = if e.op.allows(&other) {
        other
    } else {
        Outcome::Updated
    };
    e.status = Status::Done(other);
    kv::History::from_entries(h.initial().clone(), entries).ok()
}

#[test]
fn mutated_kv_histories_are_decided_with_sound_witnesses() {
    let (mut rejected, mut total) = (0, 0);
    for seed in 0..60 {
        let mut rng = Rng::new(300 + seed);
        let h = gen_kv(&mut rng, Shape::new(300, 6, 3).faults(20, 20, 0));
        let Some(bad) = mutate_kv(&mut rng, &h) else {
            continue;
        };
        total += 1;
        match check_kv(&bad, budget()) {
            Verdict::Violation(w) => {
                rejected += 1;
                check_witness(&bad, &w);
            }
            Verdict::Linearizable(_) => {}
            Verdict::Undecided(s) => panic!("seed {seed}: undecided {s:?}"),
        }
    }
    println!("{rejected} of {total} mutated histories rejected");
    assert!(rejected * 2 > total, "only {rejected} of {total} rejected");
}

/// A small random kv history: half linearizable by construction, half with one result
/// changed.
fn small_kv(rng: &mut Rng) -> kv::History {
    let ops = 2 + rng.below(7) as usize;
    let (keys, clients) = (1 + rng.below(2) as usize, 2 + rng.below(4) as usize);
    let h = gen_kv(rng, Shape::new(ops, clients, keys).faults(100, 100, 50));
    if rng.below(2) == 0 {
        mutate_kv(rng, &h).unwrap_or(h)
    } else {
        h
    }
}

#[test]
fn kv_verdicts_agree_with_brute_force() {
    let mut rng = Rng::new(7);
    let (mut bad, mut n) = (0, 0);
    for _ in 0..4000 {
        let h = small_kv(&mut rng);
        let expected = brute_kv(&h);
        let verdict = check_kv(&h, budget());
        assert_eq!(
            verdict.is_linearizable(),
            expected,
            "{}",
            lincheck::jsonl::to_jsonl(&h)
        );
        if let Verdict::Violation(w) = verdict {
            assert!(!brute_kv(&w.history), "witness passes alone:\n{w}");
            check_witness(&h, &w);
            bad += 1;
        }
        n += 1;
    }
    assert!(
        bad > n / 5 && bad < n * 4 / 5,
        "{bad} of {n} non-linearizable: too lopsided to compare"
    );
}

/// A small random queue history with some duplicate items and changed results.
fn small_queue(rng: &mut Rng) -> queue::History {
    let ops = 2 + rng.below(7) as usize;
    let clients = 2 + rng.below(4) as usize;
    let h = gen_queue(rng, Shape::new(ops, clients, 1).faults(120, 120, 50));
    let mut entries = h.entries().to_vec();
    let items = ["i0", "i1", "i2"];
    for e in &mut entries {
        match (&mut e.op, &mut e.status) {
            (queue::Op::Push { item }, _) if rng.below(4) == 0 => {
                *item = items[rng.below(3) as usize].into()
            }
            (queue::Op::Pop, Status::Done(r)) if rng.below(5) == 0 => {
                *r = if rng.below(3) == 0 {
                    queue::Outcome::Empty
                } else {
                    queue::Outcome::item(items[rng.below(3) as usize])
                }
            }
            _ => {}
        }
    }
    let initial = if rng.below(4) == 0 {
        vec!["i1".to_string()]
    } else {
        vec![]
    };
    queue::History::from_entries(initial, entries).unwrap()
}

#[test]
fn queue_verdicts_agree_with_brute_force() {
    let mut rng = Rng::new(8);
    let (mut bad, mut n) = (0, 0);
    for _ in 0..4000 {
        let h = small_queue(&mut rng);
        let expected = brute_queue(&h);
        let verdict = check_queue(&h, budget());
        assert_eq!(
            verdict.is_linearizable(),
            expected,
            "{}",
            lincheck::jsonl::to_jsonl(&h)
        );
        if let Verdict::Violation(w) = verdict {
            assert!(!brute_queue(&w.history), "witness passes alone:\n{w}");
            check_witness(&h, &w);
            bad += 1;
        }
        n += 1;
    }
    assert!(
        bad > n / 5 && bad < n * 4 / 5,
        "{bad} of {n} non-linearizable: too lopsided to compare"
    );
}

/// Sizes of the performance histories: the brief's in optimized builds and in the test
/// profile; `LINCHECK_PERF_SCALE` (a divisor) shrinks them.
fn scaled(n: usize) -> usize {
    let div: usize = std::env::var("LINCHECK_PERF_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    n / div.max(1)
}

#[test]
fn large_histories_are_decided_within_budget() {
    let mut rng = Rng::new(42);
    let h = gen_kv(&mut rng, Shape::new(scaled(20_000), 16, 64).faults(5, 5, 5));
    let verdict = check_kv(&h, Budget::states(5_000_000));
    println!("kv 20k/16 clients/64 keys: {:?}", verdict.stats());
    assert!(verdict.is_linearizable(), "{verdict:?}");

    let h = gen_kv(&mut rng, Shape::new(scaled(20_000), 16, 1).faults(5, 5, 5));
    let verdict = check_kv(&h, Budget::states(5_000_000));
    println!("kv 20k/16 clients/1 key: {:?}", verdict.stats());
    assert!(verdict.is_linearizable(), "{verdict:?}");

    let h = gen_queue(&mut rng, Shape::new(scaled(5_000), 8, 1).faults(2, 2, 2));
    let verdict = check_queue(&h, Budget::states(5_000_000));
    println!("queue 5k/8 clients: {:?}", verdict.stats());
    assert!(verdict.is_linearizable(), "{verdict:?}");
}
