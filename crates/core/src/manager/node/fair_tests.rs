//! The fair queue's shares, checked by counting (no threads, no clock).

use super::*;
use rand::{Rng, SeedableRng};

const T0: Timestamp = Timestamp(0);
const A: Class = Class::Tenant(1);
const B: Class = Class::Tenant(2);

/// `n` messages of `cost` for `class` from `client`, numbered from `first`.
fn fill(q: &mut FairQueue<u32>, class: Class, client: ClientId, first: u32, n: u32, cost: u32) {
    for i in first..first + n {
        assert!(q.push(class, client, i, cost, T0));
    }
}

/// Served messages per class over `batches` batches of `max`, every class refilled to `depth`
/// queued after each batch (saturated senders), messages of `cost_of(class)`.
fn saturated(
    q: &mut FairQueue<u32>,
    classes: &[(Class, ClientId, u32)],
    depth: u32,
    batches: usize,
    max: usize,
) -> Vec<u64> {
    let owner = |item: u32| (item / 1_000_000) as usize;
    let mut next: Vec<u32> = (0..classes.len() as u32).map(|i| i * 1_000_000).collect();
    let mut queued = vec![0u32; classes.len()];
    let mut served = vec![0u64; classes.len()];
    let mut out = Vec::new();
    for _ in 0..batches {
        for (i, &(class, client, cost)) in classes.iter().enumerate() {
            while queued[i] < depth {
                assert!(q.push(class, client, next[i], cost, T0));
                next[i] += 1;
                queued[i] += 1;
            }
        }
        out.clear();
        q.next_batch(max, T0, &mut out);
        for &item in &out {
            queued[owner(item)] -= 1;
            served[owner(item)] += 1;
        }
    }
    served
}

#[test]
fn a_class_alone_fills_whole_batches() {
    let mut q = FairQueue::new(1000, 1, []);
    fill(&mut q, A, 1, 0, 100, 1);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    assert_eq!(out, (0..64).collect::<Vec<_>>(), "in order, a full batch");
    out.clear();
    q.next_batch(64, T0, &mut out);
    assert_eq!(out.len(), 36);
    assert!(q.is_empty());
}

#[test]
fn a_class_with_one_request_waits_for_one_round_of_the_others() {
    let mut q = FairQueue::new(1000, 1, []);
    fill(&mut q, B, 2, 100, 64, 1);
    fill(&mut q, A, 1, 0, 1, 1);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    // B was first: its quantum (4 bare requests), then A's one.
    assert_eq!(out, vec![100, 101, 102, 103, 0]);
}

#[test]
fn saturated_tenants_share_equally_whatever_their_sessions() {
    // B floods from 8 sessions, A from one: shares are per tenant.
    let mut q = FairQueue::new(16, 1, []);
    let mut classes = vec![(A, 1, 1)];
    classes.extend((0..8).map(|s| (B, 10 + s, 1)));
    let served = saturated(&mut q, &classes, 16, 1000, 64);
    let b: u64 = served[1..].iter().sum();
    assert_eq!(served[0], b, "A {} vs B {b}", served[0]);
}

#[test]
fn sessions_of_one_class_take_turns() {
    // A client of tenant A keeps 16 requests queued, another of A sends two: they alternate.
    let mut q = FairQueue::new(16, 1, []);
    fill(&mut q, A, 1, 0, 16, 1);
    fill(&mut q, A, 2, 100, 2, 1);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    assert_eq!(&out[..5], &[0, 100, 1, 101, 2]);
    assert_eq!(out.len(), 18);
}

#[test]
fn saturated_sessions_of_one_class_share_equally() {
    // Three saturated sessions of one tenant: each gets a third of the tenant's turns.
    let mut q = FairQueue::new(16, 1, []);
    let served = saturated(&mut q, &[(A, 1, 1), (A, 2, 1), (A, 3, 1)], 16, 1000, 64);
    assert_eq!(served[0], served[1], "{served:?}");
    assert_eq!(served[1], served[2], "{served:?}");
}

#[test]
fn weights_set_the_shares() {
    let mut q = FairQueue::new(64, 1, [(1, 3), (2, 1)]);
    let served = saturated(&mut q, &[(A, 1, 1), (B, 2, 1)], 64, 1000, 64);
    assert_eq!(served[0], 3 * served[1], "{served:?}");
}

#[test]
fn costly_requests_cost_their_class() {
    // A asks for permission changes (4 units), B for extensions (1): equal units, so B gets
    // four requests for each of A's.
    let mut q = FairQueue::new(64, 1, []);
    let served = saturated(&mut q, &[(A, 1, QUANTUM_UNITS), (B, 2, 1)], 64, 1000, 64);
    assert_eq!(4 * served[0], served[1], "{served:?}");
    let units: Vec<u64> = q.counters().map(|(_, c)| c.cost_units).collect();
    assert_eq!(units[0], units[1], "{units:?}");
}

#[test]
fn unauthenticated_sessions_share_a_small_budget() {
    let u = Class::Unauthenticated;
    let mut q = FairQueue::new(16, 1, []);
    let mut classes = vec![(A, 1, 1)];
    classes.extend((0..20).map(|s| (u, 100 + s, 1)));
    let served = saturated(&mut q, &classes, 16, 1000, 64);
    let garbage: u64 = served[1..].iter().sum();
    assert_eq!(
        served[0],
        4 * garbage,
        "A {} vs unauthenticated {garbage}",
        served[0]
    );
}

#[test]
fn a_session_past_its_share_is_refused_and_counted() {
    let mut q = FairQueue::new(2, 1, []);
    assert!(q.push(A, 1, 0, 1, T0));
    assert!(q.push(A, 1, 1, 1, T0));
    assert!(!q.push(A, 1, 2, 1, T0), "a third message of one session");
    assert!(
        q.push(A, 2, 3, 1, T0),
        "another session of the tenant has its own share"
    );
    let counters: FastMap<Class, ClassCounters> = q.counters().collect();
    assert_eq!(counters[&A].refused, 1);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    assert_eq!(out, vec![0, 3, 1], "the sessions take turns");
    assert!(
        q.push(A, 1, 4, 1, T0),
        "taken messages free the session's share"
    );
}

#[test]
fn an_idle_class_hoards_no_credit() {
    let mut q = FairQueue::new(1000, 1, []);
    // A is served alone for a long while...
    for round in 0..100 {
        fill(&mut q, A, 1, round * 10, 10, 1);
        let mut out = Vec::new();
        q.next_batch(64, T0, &mut out);
        assert_eq!(out.len(), 10);
    }
    // ... then both are backlogged: A's first turn is one quantum, as B's.
    fill(&mut q, B, 2, 5000, 64, 1);
    fill(&mut q, A, 1, 6000, 64, 1);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    assert_eq!(out.iter().filter(|&&i| i >= 6000).count(), 4);
    assert_eq!(out.iter().filter(|&&i| i < 6000).count(), 4);
}

#[test]
fn queue_delay_is_counted_when_served() {
    let mut q = FairQueue::new(16, 1, []);
    assert!(q.push(A, 1, 0, 1, Timestamp(100)));
    assert!(q.push(A, 1, 1, 1, Timestamp(150)));
    let mut out = Vec::new();
    q.next_batch(64, Timestamp(400), &mut out);
    let c: FastMap<Class, ClassCounters> = q.counters().collect();
    assert_eq!(c[&A].queue_delay_us, 300 + 250);
    assert_eq!(c[&A].max_queue_delay_us, 300);
    assert_eq!(c[&A].served, 2);
}

#[test]
fn a_departed_client_leaves_nothing_queued() {
    let mut q = FairQueue::new(16, 1, []);
    fill(&mut q, A, 1, 0, 5, 1);
    fill(&mut q, A, 2, 10, 5, 1);
    fill(&mut q, B, 3, 20, 5, 1);
    q.forget(1);
    assert_eq!(q.len(), 10);
    q.forget(3);
    let mut out = Vec::new();
    q.next_batch(64, T0, &mut out);
    assert_eq!(out, (10..15).collect::<Vec<_>>());
    assert!(q.is_empty());
}

#[test]
fn every_message_comes_out_once_in_its_sessions_order() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut q = FairQueue::new(8, 1, [(3, 2)]);
    let classes = [Class::Unauthenticated, A, B, Class::Tenant(3)];
    // Per client: what it queued and is not yet taken or dropped; what was taken, in order.
    let mut queued: FastMap<ClientId, VecDeque<u32>> = FastMap::default();
    let mut taken_by: FastMap<u32, ClientId> = FastMap::default();
    let mut next = 0u32;
    let mut out = Vec::new();
    let take = |out: &mut Vec<u32>,
                queued: &mut FastMap<ClientId, VecDeque<u32>>,
                taken_by: &FastMap<u32, ClientId>| {
        for item in out.drain(..) {
            let client = taken_by[&item];
            // In each session's order, and only what is queued (nothing twice).
            assert_eq!(
                queued.get_mut(&client).and_then(VecDeque::pop_front),
                Some(item)
            );
        }
    };
    for _ in 0..2000 {
        for _ in 0..rng.random_range(0..20) {
            let client: ClientId = rng.random_range(0..12);
            let class = classes[client as usize % classes.len()];
            let cost = if rng.random_bool(0.3) {
                QUANTUM_UNITS
            } else {
                1
            };
            if q.push(class, client, next, cost, T0) {
                queued.entry(client).or_default().push_back(next);
                taken_by.insert(next, client);
            }
            next += 1;
        }
        q.next_batch(rng.random_range(1..70), T0, &mut out);
        take(&mut out, &mut queued, &taken_by);
        if rng.random_bool(0.01) {
            let gone: ClientId = rng.random_range(0..12);
            q.forget(gone);
            queued.remove(&gone);
        }
        assert_eq!(q.len(), queued.values().map(VecDeque::len).sum::<usize>());
    }
    while !q.is_empty() {
        q.next_batch(64, T0, &mut out);
        take(&mut out, &mut queued, &taken_by);
    }
    assert!(
        queued.values().all(VecDeque::is_empty),
        "every queued message came out"
    );
}
