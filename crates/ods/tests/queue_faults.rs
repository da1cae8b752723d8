//! The segmented queue when clients fail: a producer that crashed (or stalled) holding a
//! claimed slot, clients delayed past the reclamation of their segment (whose memory is then
//! reused), and operations whose outcome a link failure hid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod queue_support;
mod support;

use patronus_core::cluster::Link;
use patronus_core::manager::{NodeConfig, SlabConfig};
use patronus_ods::PatronusMemory;
use patronus_ods::queue::{
    PopOp, PopPhase, PushOp, PushPhase, Queue, QueueConfig, QueueOptions, QueueStats,
};
use queue_support::{Actor, Flaky, Item, Rng, check_exactly_once_in_order, interleave};
use rnic::soft::SoftProvider;
use std::task::Poll;
use std::time::Duration;
use support::bed;

type Mem = PatronusMemory<SoftProvider>;

/// The longest a test waits for an acquire's answer (real time: the node answers at once).
const ANSWER_WAIT: Duration = Duration::from_secs(1);

const CONFIG: QueueConfig = QueueConfig {
    entries: 8,
    item_size: 16,
};

fn queues<M: patronus_ods::RemoteMemory>(mems: Vec<M>, opts: QueueOptions) -> Vec<Queue<M>> {
    let mut mems = mems.into_iter();
    let mut first = mems.next().unwrap();
    let root = Queue::create(&mut first, &CONFIG).unwrap();
    std::iter::once(first)
        .chain(mems)
        .map(|m| Queue::open(m, root, opts).unwrap())
        .collect()
}

/// A memory node that carves one object per slab, so freed memory is handed out again at
/// the next allocation of its size (instead of after a whole slab of fresh objects).
fn reusing_node() -> NodeConfig {
    NodeConfig {
        slab: SlabConfig {
            slab_bytes: 1,
            ..SlabConfig::default()
        },
        ..NodeConfig::default()
    }
}

fn item(producer: u32, seq: u32) -> Vec<u8> {
    Item { producer, seq }.bytes(CONFIG.item_size as usize)
}

/// Options with a small step budget: a blocking pop that waits on a slot no one fills (time
/// is frozen here) fails within seconds, saying so.
fn options() -> QueueOptions {
    QueueOptions {
        max_steps: 20_000,
        ..QueueOptions::default()
    }
}

fn pop_item(q: &mut Queue<Mem>) -> Option<Item> {
    match q.pop() {
        Ok(got) => got.map(|b| Item::parse(&b)),
        Err(e) => panic!("pop: {e}; {:?}", q.stats()),
    }
}

/// Steps a push until it is in `phase` (bounded).
fn push_until(op: &mut PushOp, q: &mut Queue<Mem>, phase: PushPhase) {
    for _ in 0..100 {
        if op.phase() == phase {
            return;
        }
        assert_eq!(op.step(q).unwrap(), Poll::Pending);
        q.wait_for_answer(ANSWER_WAIT);
    }
    panic!("the push never reached {phase:?}");
}

/// Steps a pop until it is in `phase` (bounded).
fn pop_until(op: &mut PopOp, q: &mut Queue<Mem>, phase: PopPhase) {
    for _ in 0..100 {
        if op.phase() == phase {
            return;
        }
        assert_eq!(op.step(q).unwrap(), Poll::Pending);
        q.wait_for_answer(ANSWER_WAIT);
    }
    panic!("the pop never reached {phase:?}");
}

/// Steps a pop to its end (bounded).
fn pop_to_end(op: &mut PopOp, q: &mut Queue<Mem>) -> Option<Item> {
    for _ in 0..100 {
        if let Poll::Ready(got) = op.step(q).unwrap() {
            return got.map(|b| Item::parse(&b));
        }
        q.wait_for_answer(ANSWER_WAIT);
    }
    panic!("the pop did not finish");
}

fn crashed_producer_slot_is_skipped_after_its_lease(t: Link) {
    let (bed, mems) = bed(t, 3, NodeConfig::default(), Default::default());
    let opts = options();
    let mut qs = queues(mems, opts);
    let [a, b, c] = &mut qs[..] else {
        unreachable!()
    };
    // A claims slot 0 and stops there; B pushes into slots 1 and 2.
    let mut stuck = PushOp::new(a, &item(0, 0)).unwrap();
    push_until(&mut stuck, a, PushPhase::Filling);
    b.push(&item(1, 0)).unwrap();
    b.push(&item(1, 1)).unwrap();
    // C waits on slot 0 while its producer may still be alive...
    let mut pop = PopOp::new(c);
    pop_until(&mut pop, c, PopPhase::Waiting);
    for _ in 0..10 {
        assert_eq!(pop.step(c).unwrap(), Poll::Pending);
        assert_eq!(pop.phase(), PopPhase::Waiting);
    }
    bed.clock.advance(opts.skip_after / 2);
    assert_eq!(pop.step(c).unwrap(), Poll::Pending);
    assert_eq!(pop.phase(), PopPhase::Waiting);
    // ...and skips it once it has seen it empty for `skip_after`.
    bed.clock.advance(opts.skip_after);
    assert_eq!(
        pop_to_end(&mut pop, c),
        Some(Item {
            producer: 1,
            seq: 0
        })
    );
    assert_eq!(c.stats().slots_skipped, 1);
    // A was only slow: its publish finds the slot skipped, it claims another, and its item
    // comes out after B's (its leases ran out meanwhile: it acquires again).
    for _ in 0..100 {
        if stuck.step(a).unwrap().is_ready() {
            break;
        }
        a.wait_for_answer(ANSWER_WAIT);
    }
    assert_eq!(stuck.phase(), PushPhase::Done);
    assert_eq!(a.stats().claims_lost, 1);
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 1,
            seq: 1
        })
    );
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 0,
            seq: 0
        })
    );
    assert_eq!(pop_item(c), None);
}

fn delayed_consumer_is_rejected_and_recovers(t: Link) {
    let (_bed, mems) = bed(t, 3, reusing_node(), Default::default());
    let mut qs = queues(mems, options());
    let [p, late, c] = &mut qs[..] else {
        unreachable!()
    };
    for seq in 0..16 {
        p.push(&item(0, seq)).unwrap(); // segments 1 and 2, full
    }
    // The late consumer has read slot 0 of segment 1 as filled, and is about to take it.
    let mut pop = PopOp::new(late);
    pop_until(&mut pop, late, PopPhase::Claiming);
    let first = late.head_hint().unwrap();
    // Meanwhile C drains segments 1 and 2 (freeing segment 1), and P pushes on.
    for seq in 0..16 {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    for seq in 16..32 {
        p.push(&item(0, seq)).unwrap();
    }
    // The late claim goes through a permission that ended with segment 1: the NIC refuses
    // it. The client finds the segment gone and pops from the live head instead.
    let before = late.stats();
    assert_eq!(
        pop_to_end(&mut pop, late),
        Some(Item {
            producer: 0,
            seq: 16
        })
    );
    let d = late.stats().since(&before);
    assert!(d.rejected >= 1 && d.gone >= 1, "{d:?}");
    assert_ne!(late.head_hint(), Some(first));
    for seq in 17..32 {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    assert_eq!(pop_item(c), None);
}

fn delayed_producer_is_refused_and_leaves_reused_memory_alone(t: Link) {
    let (_bed, mems) = bed(t, 3, reusing_node(), Default::default());
    let mut qs = queues(mems, options());
    let [d, p, c] = &mut qs[..] else {
        unreachable!()
    };
    // D pushes once into segment 1 and keeps its permission and its tail hint.
    d.push(&item(9, 0)).unwrap();
    let old = d.tail_hint().unwrap();
    for seq in 0..8 {
        p.push(&item(0, seq)).unwrap(); // the last one opens segment 2
    }
    // C drains segment 1 and moves on to segment 2, retiring and freeing segment 1.
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 9,
            seq: 0
        })
    );
    for seq in 0..8 {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    assert_eq!(c.stats().segments_freed, 1);
    // P pushes on until a new segment takes the memory segment 1 had (with one object per
    // slab, the node hands freed memory out again at once; with several shards, once an
    // allocation comes back to segment 1's shard).
    let mut end = 8;
    while p.tail_hint().unwrap().addr != old.addr {
        assert!(end < 8 * 8, "segment 1's memory never reused");
        p.push(&item(0, end)).unwrap();
        end += 1;
    }
    assert!(p.tail_hint().unwrap().after(old));
    // D's next push claims through its old permission: refused by the NIC (the FAA would
    // otherwise have taken a slot of whatever segment lives there now).
    let before = d.stats();
    d.push(&item(9, 1)).unwrap();
    let s = d.stats().since(&before);
    assert!(s.rejected >= 1 && s.gone >= 1, "{s:?}");
    // Every slot of the live segments is intact: all items come out, in order, no hole.
    for seq in 8..end {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 9,
            seq: 1
        })
    );
    assert_eq!(pop_item(c), None);
    assert_eq!(c.stats().waits, 0, "no hole in a reused segment");
}

fn stalled_producer_outlives_its_segment(t: Link) {
    let (bed, mems) = bed(t, 3, reusing_node(), Default::default());
    let opts = options();
    let mut qs = queues(mems, opts);
    let [z, p, c] = &mut qs[..] else {
        unreachable!()
    };
    let mut stuck = PushOp::new(z, &item(9, 0)).unwrap();
    push_until(&mut stuck, z, PushPhase::Filling); // slot 0 of segment 1
    for seq in 0..8 {
        p.push(&item(0, seq)).unwrap();
    }
    let mut pop = PopOp::new(c);
    pop_until(&mut pop, c, PopPhase::Waiting);
    bed.clock
        .advance(opts.skip_after + Duration::from_millis(1));
    assert_eq!(
        pop_to_end(&mut pop, c),
        Some(Item {
            producer: 0,
            seq: 0
        })
    );
    for seq in 1..8 {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    assert_eq!(c.stats().segments_freed, 1);
    // P pushes on until a new segment takes the memory segment 1 had.
    let old = z.tail_hint().unwrap();
    let mut end = 8;
    while p.tail_hint().unwrap().addr != old.addr {
        assert!(end < 8 * 8, "segment 1's memory never reused");
        p.push(&item(0, end)).unwrap();
        end += 1;
    }
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 0,
            seq: 8
        })
    );
    // Z wakes up: its segment is gone, its claim with it; it pushes elsewhere, and writes
    // nothing into the memory its segment had.
    for _ in 0..100 {
        if stuck.step(z).unwrap().is_ready() {
            break;
        }
        z.wait_for_answer(ANSWER_WAIT);
    }
    assert_eq!(stuck.phase(), PushPhase::Done);
    let s = z.stats();
    assert!(s.gone >= 1 && s.claims_lost == 1, "{s:?}");
    for seq in 9..end {
        assert_eq!(pop_item(c), Some(Item { producer: 0, seq }));
    }
    assert_eq!(
        pop_item(c),
        Some(Item {
            producer: 9,
            seq: 0
        })
    );
    assert_eq!(pop_item(c), None);
}

fn unknown_outcomes_are_settled_by_reading(t: Link) {
    let (bed, mems) = bed(t, 5, NodeConfig::default(), Default::default());
    let mems: Vec<_> = mems
        .into_iter()
        .enumerate()
        .map(|(i, m)| Flaky::new(m, 100 + i as u64, 0.05))
        .collect();
    let opts = QueueOptions {
        skip_after: Duration::from_millis(1),
        ..options()
    };
    let mut qs = queues(mems, opts);
    let mut actors = vec![
        Actor::producer(0, 0, 40),
        Actor::producer(1, 1, 40),
        Actor::producer(2, 2, 40),
        Actor::consumer(2),
        Actor::consumer(3),
        Actor::consumer(4),
    ];
    // One producer crashes while it holds a claim (its slot becomes a hole).
    actors[1].crash = 0.1;
    let clock = bed.clock.clone();
    let out = interleave(&mut qs, &mut actors, &mut Rng::new(3), 300_000, || {
        clock.advance(Duration::from_micros(5))
    });
    check_exactly_once_in_order(&out);
    let mut s = QueueStats::default();
    for q in &qs {
        s.add(&q.stats());
    }
    let lost: u64 = qs.iter().map(|q| q.memory().lost).sum();
    let landed: u64 = qs.iter().map(|q| q.memory().landed).sum();
    eprintln!(
        "{t:?}: {} popped, maybe pushed {:?}, maybe popped {:?}; batches losing outcomes {lost} \
         ({landed} landed); {s:?}",
        out.popped.len(),
        out.maybe_pushed,
        out.maybe_popped
    );
    assert!(lost >= 10 && landed >= 3 && s.unknown >= 10, "{s:?}");
    assert!(actors[1].crashed && s.slots_skipped >= 1, "{s:?}");
    assert!(
        out.popped.len() >= 80,
        "the two producers that never crash deliver all"
    );
}

patronus_core::both_transports!(
    crashed_producer_slot_is_skipped_after_its_lease,
    delayed_consumer_is_rejected_and_recovers,
    delayed_producer_is_refused_and_leaves_reused_memory_alone,
    stalled_producer_outlives_its_segment,
    unknown_outcomes_are_settled_by_reading,
);
