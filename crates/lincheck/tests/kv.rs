//! Hand-written key-value histories: accepted ones, and violations with their exact minimal
//! witnesses.
#![allow(clippy::unwrap_used)] // test helpers, not #[test] fns

use std::collections::BTreeMap;

use lincheck::kv::{History, Kv, Op, Outcome};
use lincheck::{Budget, Status, Verdict, Witness, check_kv};

fn budget() -> Budget {
    Budget::states(1_000_000)
}

fn accepted(h: &History) {
    match check_kv(h, budget()) {
        Verdict::Linearizable(_) => {}
        other => panic!("expected linearizable, got {other:?}"),
    }
}

fn rejected(h: &History) -> Witness<Kv> {
    match check_kv(h, budget()) {
        Verdict::Violation(w) => {
            println!("{w}");
            // The witness is a standalone history that fails on its own.
            assert!(matches!(
                check_kv(&w.history, budget()),
                Verdict::Violation(_)
            ));
            assert!(w.minimal);
            *w
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn sequential_history_is_accepted() {
    let mut h = History::new();
    h.done(1, 0, 1, Op::get("k"), Outcome::Absent).unwrap();
    h.done(1, 2, 3, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 4, 5, Op::put("k", "b"), Outcome::Updated)
        .unwrap();
    h.done(1, 6, 7, Op::insert("k", "c"), Outcome::Exists)
        .unwrap();
    h.done(2, 8, 9, Op::get("k"), Outcome::value("b")).unwrap();
    h.done(1, 10, 11, Op::update("k", "d"), Outcome::Updated)
        .unwrap();
    h.done(2, 12, 13, Op::delete("k"), Outcome::Deleted)
        .unwrap();
    h.done(1, 14, 15, Op::delete("k"), Outcome::Absent).unwrap();
    h.done(2, 16, 17, Op::update("k", "e"), Outcome::Absent)
        .unwrap();
    h.done(1, 18, 19, Op::insert("k", "f"), Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 21, Op::get("k"), Outcome::value("f"))
        .unwrap();
    accepted(&h);
}

#[test]
fn overlapping_history_with_one_working_order_is_accepted() {
    // Two racing inserts: only "a first" explains both results and the later read.
    let mut h = History::new();
    h.done(1, 0, 100, Op::insert("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 0, 100, Op::insert("k", "b"), Outcome::Exists)
        .unwrap();
    h.done(3, 10, 90, Op::get("k"), Outcome::Absent).unwrap();
    h.done(3, 200, 210, Op::get("k"), Outcome::value("a"))
        .unwrap();
    accepted(&h);
    // The loser's value was never written. The witness does not lean on the loser's `exists`
    // (shrinking lets removed operations do anything): b cannot appear once a is there.
    let mut bad = h.clone();
    bad.done(4, 300, 310, Op::get("k"), Outcome::value("b"))
        .unwrap();
    let w = rejected(&bad);
    assert_eq!(w.indices, vec![0, 1, 3, 4]);
    assert!(
        w.explanation.contains("saw it \"a\" before it started"),
        "{}",
        w.explanation
    );
}

#[test]
fn unknown_operation_taken_as_applied() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.unknown(2, 20, Op::put("k", "b")).unwrap();
    h.done(3, 30, 40, Op::get("k"), Outcome::value("b"))
        .unwrap();
    h.done(3, 50, 60, Op::get("k"), Outcome::value("b"))
        .unwrap();
    accepted(&h);
}

#[test]
fn unknown_operation_taken_as_never_applied() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.unknown(2, 20, Op::delete("k")).unwrap();
    h.unknown(2, 25, Op::put("k", "z")).unwrap();
    h.done(3, 30, 40, Op::get("k"), Outcome::value("a"))
        .unwrap();
    h.done(3, 50, 60, Op::update("k", "b"), Outcome::Updated)
        .unwrap();
    h.done(3, 70, 80, Op::get("k"), Outcome::value("b"))
        .unwrap();
    accepted(&h);
}

#[test]
fn unknown_operation_takes_effect_at_most_once() {
    // b appears, a comes back, b appears again: the one unknown put of b cannot do both.
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.unknown(2, 20, Op::put("k", "b")).unwrap();
    h.done(3, 30, 40, Op::get("k"), Outcome::value("b"))
        .unwrap();
    h.done(1, 50, 60, Op::put("k", "a2"), Outcome::Updated)
        .unwrap();
    h.done(3, 70, 80, Op::get("k"), Outcome::value("b"))
        .unwrap();
    let w = rejected(&h);
    assert!(w.indices.contains(&3) && w.indices.contains(&4), "{w}");
}

#[test]
fn failed_operations_are_dropped() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    let failed = lincheck::Entry {
        client: 2,
        invoke: 20,
        complete: Some(30),
        op: Op::delete("k"),
        status: Status::Failed,
    };
    h.push(failed).unwrap();
    h.done(3, 40, 50, Op::get("k"), Outcome::value("a"))
        .unwrap();
    accepted(&h);
}

#[test]
fn put_result_kinds_are_checked() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(1, 20, 30, Op::put("k", "b"), Outcome::Updated)
        .unwrap();
    h.done(1, 40, 50, Op::delete("k"), Outcome::Deleted)
        .unwrap();
    h.done(1, 60, 70, Op::put("k", "c"), Outcome::Inserted)
        .unwrap();
    accepted(&h);
}

#[test]
fn initial_values_are_honoured() {
    let initial = BTreeMap::from([("k".to_string(), "v0".to_string())]);
    let mut h = History::with_initial(initial);
    h.done(1, 0, 10, Op::get("k"), Outcome::value("v0"))
        .unwrap();
    h.done(1, 20, 30, Op::put("k", "a"), Outcome::Updated)
        .unwrap();
    h.done(2, 0, 5, Op::get("other"), Outcome::Absent).unwrap();
    accepted(&h);
}

#[test]
fn stale_read_is_rejected() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, Op::put("k", "b"), Outcome::Updated)
        .unwrap();
    h.done(3, 5, 15, Op::get("other"), Outcome::Absent).unwrap();
    h.done(3, 40, 50, Op::get("k"), Outcome::value("a"))
        .unwrap();
    h.done(1, 60, 70, Op::get("k"), Outcome::value("b"))
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.key.as_deref(), Some("k"));
    assert_eq!(w.indices, vec![0, 1, 3]);
    assert!(
        w.explanation.contains("`get k -> \"a\"`"),
        "{}",
        w.explanation
    );
    assert!(
        w.explanation.contains("`put k \"b\" -> updated`"),
        "{}",
        w.explanation
    );
}

#[test]
fn lost_write_is_rejected() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 5, 8, Op::get("k"), Outcome::Absent).unwrap();
    h.done(2, 20, 30, Op::get("k"), Outcome::Absent).unwrap();
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0, 2]);
    assert_eq!(w.history.entries()[1].op, Op::get("k"));
    assert!(
        w.explanation.contains("needs k absent"),
        "{}",
        w.explanation
    );
}

#[test]
fn value_never_written_is_rejected() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, Op::get("k"), Outcome::value("zz"))
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.indices, vec![1]);
    assert!(
        w.explanation.contains("needs k = \"zz\" but nothing"),
        "{}",
        w.explanation
    );
}

#[test]
fn resurrected_key_is_rejected() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, Op::delete("k"), Outcome::Deleted)
        .unwrap();
    h.done(3, 40, 50, Op::get("k"), Outcome::value("a"))
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0, 1, 2]);
    assert!(
        w.explanation.contains("`delete k -> deleted`"),
        "{}",
        w.explanation
    );
}

#[test]
fn wrong_put_kind_is_rejected() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Inserted)
        .unwrap();
    h.done(2, 20, 30, Op::put("k", "b"), Outcome::Inserted)
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0, 1]);
    assert!(
        w.explanation.contains("needs k absent"),
        "{}",
        w.explanation
    );
}

#[test]
fn impossible_result_is_rejected_alone() {
    let mut h = History::new();
    h.done(1, 0, 10, Op::put("k", "a"), Outcome::Exists)
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0]);
    assert!(
        w.explanation.contains("not a possible result"),
        "{}",
        w.explanation
    );
}

#[test]
fn witness_is_about_the_failing_key_only() {
    let mut h = History::new();
    for i in 0..50u64 {
        let key = format!("k{}", i % 5);
        let t = i * 100;
        h.done(
            i % 4,
            t,
            t + 50,
            Op::put(&key, format!("v{i}")),
            if i < 5 {
                Outcome::Inserted
            } else {
                Outcome::Updated
            },
        )
        .unwrap();
        h.done(
            i % 4,
            t + 60,
            t + 70,
            Op::get(&key),
            Outcome::value(format!("v{i}")),
        )
        .unwrap();
    }
    // A stale read of k3 at the end.
    h.done(9, 10_000, 10_010, Op::get("k3"), Outcome::value("v38"))
        .unwrap();
    let w = rejected(&h);
    assert_eq!(w.key.as_deref(), Some("k3"));
    // The stale read, the read that saw a newer value, and where both values came from.
    assert_eq!(w.indices, vec![76, 96, 97, 100], "{w}");
    assert_eq!(*w.indices.last().unwrap(), 100);
}

#[test]
fn a_tiny_budget_is_undecided() {
    let mut h = History::new();
    for i in 0..20u64 {
        h.done(
            i,
            0,
            100,
            Op::put("k", format!("v{i}")),
            if i == 0 {
                Outcome::Inserted
            } else {
                Outcome::Updated
            },
        )
        .unwrap();
    }
    match check_kv(&h, Budget::states(3)) {
        Verdict::Undecided(stats) => assert_eq!(stats.exhausted, Some(lincheck::Limit::States)),
        other => panic!("expected undecided, got {other:?}"),
    }
    assert!(check_kv(&h, Budget::states(3)).into_result().is_err());
}
