//! Hand-written queue histories: accepted ones, and violations with their exact minimal
//! witnesses.
#![allow(clippy::unwrap_used)] // test helpers, not #[test] fns

use lincheck::queue::{History, Op, Outcome, Queue};
use lincheck::{Budget, Verdict, Witness, check_queue};

fn budget() -> Budget {
    Budget::states(1_000_000)
}

fn accepted(h: &History) {
    match check_queue(h, budget()) {
        Verdict::Linearizable(_) => {}
        other => panic!("expected linearizable, got {other:?}"),
    }
}

fn rejected(h: &History) -> Witness<Queue> {
    match check_queue(h, budget()) {
        Verdict::Violation(w) => {
            println!("{w}");
            assert!(matches!(
                check_queue(&w.history, budget()),
                Verdict::Violation(_)
            ));
            assert!(w.minimal);
            assert_eq!(w.context, 0);
            *w
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

fn push(h: &mut History, client: u64, t: (u64, u64), item: &str) {
    h.done(client, t.0, t.1, Op::push(item), Outcome::Ok)
        .unwrap();
}

fn pop(h: &mut History, client: u64, t: (u64, u64), item: Option<&str>) {
    let outcome = item.map_or(Outcome::Empty, Outcome::item);
    h.done(client, t.0, t.1, Op::Pop, outcome).unwrap();
}

#[test]
fn sequential_history_is_accepted() {
    let mut h = History::new();
    pop(&mut h, 1, (0, 1), None);
    push(&mut h, 1, (2, 3), "a");
    push(&mut h, 2, (4, 5), "b");
    pop(&mut h, 1, (6, 7), Some("a"));
    push(&mut h, 2, (8, 9), "c");
    pop(&mut h, 1, (10, 11), Some("b"));
    pop(&mut h, 2, (12, 13), Some("c"));
    pop(&mut h, 1, (14, 15), None);
    accepted(&h);
}

#[test]
fn concurrent_pushes_may_go_either_way() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 2, (0, 10), "b");
    pop(&mut h, 3, (20, 30), Some("b"));
    pop(&mut h, 3, (40, 50), Some("a"));
    accepted(&h);
}

#[test]
fn empty_pop_overlapping_a_push_is_accepted() {
    let mut h = History::new();
    push(&mut h, 1, (0, 100), "a");
    pop(&mut h, 2, (10, 20), None);
    pop(&mut h, 2, (200, 210), Some("a"));
    accepted(&h);
}

#[test]
fn unknown_pop_taken_as_applied() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 1, (20, 30), "b");
    h.unknown(2, 40, Op::Pop).unwrap();
    pop(&mut h, 3, (50, 60), Some("b"));
    accepted(&h);
}

#[test]
fn unknown_push_taken_as_never_applied() {
    let mut h = History::new();
    h.unknown(1, 0, Op::push("a")).unwrap();
    pop(&mut h, 2, (10, 20), None);
    push(&mut h, 1, (30, 40), "b");
    pop(&mut h, 2, (50, 60), Some("b"));
    pop(&mut h, 2, (70, 80), None);
    accepted(&h);
}

#[test]
fn duplicate_items_are_handled_exactly() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 1, (20, 30), "b");
    push(&mut h, 1, (40, 50), "a");
    pop(&mut h, 2, (60, 70), Some("a"));
    pop(&mut h, 2, (80, 90), Some("b"));
    pop(&mut h, 2, (100, 110), Some("a"));
    accepted(&h);
    // a, a, b is not FIFO: b was pushed between the two a's.
    let mut bad = History::new();
    push(&mut bad, 1, (0, 10), "a");
    push(&mut bad, 1, (20, 30), "b");
    push(&mut bad, 1, (40, 50), "a");
    pop(&mut bad, 2, (60, 70), Some("a"));
    pop(&mut bad, 2, (80, 90), Some("a"));
    let w = rejected(&bad);
    assert_eq!(w.indices, vec![0, 1, 2, 3, 4]);
}

#[test]
fn item_popped_twice_is_rejected() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 1, (20, 30), "b");
    pop(&mut h, 2, (40, 50), Some("a"));
    pop(&mut h, 3, (60, 70), Some("a"));
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0, 2, 3]);
    assert!(
        w.explanation
            .contains("\"a\" was popped 2 times but pushed only once"),
        "{}",
        w.explanation
    );
}

#[test]
fn item_popped_but_never_pushed_is_rejected() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    pop(&mut h, 2, (20, 30), Some("ghost"));
    let w = rejected(&h);
    assert_eq!(w.indices, vec![1]);
    assert!(
        w.explanation
            .contains("popped \"ghost\", but no push of it"),
        "{}",
        w.explanation
    );
}

#[test]
fn item_popped_before_its_push_is_rejected() {
    let mut h = History::new();
    pop(&mut h, 2, (0, 10), Some("a"));
    push(&mut h, 1, (20, 30), "a");
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0]);
}

#[test]
fn fifo_order_violation_is_rejected() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 1, (20, 30), "b");
    push(&mut h, 4, (21, 29), "c");
    pop(&mut h, 2, (40, 50), Some("b"));
    pop(&mut h, 3, (60, 70), Some("a"));
    pop(&mut h, 3, (80, 90), Some("c"));
    let w = rejected(&h);
    assert_eq!(w.indices, vec![0, 1, 3]);
    assert!(
        w.explanation.contains("\"a\" was pushed before \"b\""),
        "{}",
        w.explanation
    );
}

#[test]
fn empty_while_an_item_was_surely_queued_is_rejected() {
    let mut h = History::new();
    push(&mut h, 1, (0, 10), "a");
    push(&mut h, 1, (20, 30), "b");
    pop(&mut h, 2, (40, 50), Some("a"));
    pop(&mut h, 2, (60, 70), None);
    pop(&mut h, 3, (80, 90), Some("b"));
    let w = rejected(&h);
    assert_eq!(w.indices, vec![1, 3]);
    assert!(
        w.explanation.contains("found the queue empty"),
        "{}",
        w.explanation
    );
}

#[test]
fn initial_items_come_first() {
    let mut h = History::with_initial(vec!["x".into()]);
    push(&mut h, 1, (0, 10), "a");
    pop(&mut h, 2, (20, 30), Some("x"));
    pop(&mut h, 2, (40, 50), Some("a"));
    accepted(&h);
    let mut bad = History::with_initial(vec!["x".into()]);
    push(&mut bad, 1, (0, 10), "a");
    pop(&mut bad, 2, (20, 30), Some("a"));
    rejected(&bad);
}
