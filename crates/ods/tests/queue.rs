//! The segmented queue on Patronus: FIFO and exactly-once delivery under many interleaved
//! clients and under real threads, emptiness, reclamation of drained segments, and the
//! permission operations each segment costs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod queue_support;
mod support;

use patronus_core::cluster::Link;
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::Mode;
use patronus_ods::queue::{Queue, QueueConfig, QueueError, QueueOptions, QueueStats};
use patronus_ods::{PatronusMemory, RemoteMemory};
use queue_support::{Actor, Item, Rng, check_exactly_once_in_order, interleave};
use rnic::soft::SoftProvider;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::bed;

type Mem = PatronusMemory<SoftProvider>;

/// A queue made by the first of `mems`, opened by every one of them.
fn queues(mems: Vec<Mem>, config: QueueConfig, opts: QueueOptions) -> Vec<Queue<Mem>> {
    let mut mems = mems.into_iter();
    let mut first = mems.next().unwrap();
    let root = Queue::create(&mut first, &config).unwrap();
    std::iter::once(first)
        .chain(mems)
        .map(|m| Queue::open(m, root, opts).unwrap())
        .collect()
}

/// Options with a small step budget: a blocking operation that cannot finish (time is frozen
/// here, so a hole would never be skipped) fails within seconds, saying so.
fn options() -> QueueOptions {
    QueueOptions {
        max_steps: 20_000,
        ..QueueOptions::default()
    }
}

fn total(qs: &[Queue<Mem>]) -> QueueStats {
    let mut s = QueueStats::default();
    for q in qs {
        s.add(&q.stats());
    }
    s
}

fn empty_queue_pops_none_and_items_come_back_in_order(t: Link) {
    let (_bed, mems) = bed(t, 1, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 4,
        item_size: 16,
    };
    let mut q = queues(mems, config, options()).remove(0);
    assert_eq!(q.shape(), config.shape());
    assert_eq!(q.pop().unwrap(), None);
    let it = |seq| Item { producer: 1, seq };
    for seq in 0..10 {
        q.push(&it(seq).bytes(16)).unwrap();
    }
    for seq in 0..10 {
        assert_eq!(q.pop().unwrap().map(|b| Item::parse(&b)), Some(it(seq)));
    }
    assert_eq!(q.pop().unwrap(), None);
    assert_eq!(
        q.push(&[0; 8]),
        Err(QueueError::ItemSize {
            expected: 16,
            got: 8
        })
    );
    let s = q.stats();
    assert_eq!((s.pushes, s.pops, s.empty_pops), (10, 10, 2));
    assert_eq!((s.segments_linked, s.segments_freed), (2, 2), "{s:?}");
    // An object that is not a queue's root is refused, and not written.
    let mut mem = q.into_memory();
    let obj = mem
        .allocate(&[64], Duration::from_millis(5), Mode::Shared)
        .unwrap()
        .remove(0);
    let addr = obj.addr();
    assert!(matches!(
        Queue::open(mem, addr, QueueOptions::default()),
        Err(QueueError::NotAQueue { .. })
    ));
}

fn interleaved_clients_get_every_item_once_in_order(t: Link) {
    let (bed, mems) = bed(t, 5, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 8,
        item_size: 16,
    };
    let mut qs = queues(mems, config, options());
    // Handle 0 carries two producers, handle 2 a producer and a consumer, handle 4 two
    // consumers: logical clients multiplexed on one connection.
    let mut actors = vec![
        Actor::producer(0, 0, 40),
        Actor::producer(0, 1, 40),
        Actor::producer(1, 2, 40),
        Actor::producer(2, 3, 40),
        Actor::consumer(2),
        Actor::consumer(3),
        Actor::consumer(4),
        Actor::consumer(4),
    ];
    let clock = bed.clock.clone();
    let out = interleave(&mut qs, &mut actors, &mut Rng::new(7), 200_000, || {
        clock.advance(Duration::from_micros(5))
    });
    check_exactly_once_in_order(&out);
    assert_eq!(out.popped.len(), 160);
    assert!(out.maybe_pushed.is_empty() && out.maybe_popped.is_empty());
    let s = total(&qs);
    assert!(s.segments_linked >= 160 / 8 - 1, "{s:?}"); // the first came with the queue
    assert_eq!(
        s.segments_freed, s.segments_linked,
        "every drained segment freed"
    );
    // Every segment allocated was linked, but for spares kept for later: at most one per
    // push under way (four producers).
    assert!(s.allocates <= s.segments_linked + 4, "{s:?}");
    // Uncontended, a push is two batches and a pop two (`permission_operations_per_segment`);
    // here four consumers race for each head slot (a lost claim or a stale guess of the head
    // costs a batch) and every handle checks each segment it acquires.
    let per_item = (s.batches + s.extends) as f64 / 160.0;
    eprintln!("{t:?}: {s:?}\nbatches per item (push + pop): {per_item:.2}");
    assert!(per_item < 12.0, "{per_item}");
}

fn threads_get_every_item_once(t: Link) {
    const PRODUCERS: usize = 3;
    const ITEMS: u32 = 100;
    let (_bed, mems) = bed(t, 5, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 16,
        item_size: 8,
    };
    let mut qs = queues(mems, config, options());
    let consumers = qs.split_off(PRODUCERS);
    let popped = AtomicUsize::new(0);
    let all = PRODUCERS * ITEMS as usize;
    let got: Vec<Vec<Item>> = std::thread::scope(|s| {
        for (id, mut q) in qs.into_iter().enumerate() {
            std::thread::Builder::new()
                .name(format!("producer-{id}"))
                .spawn_scoped(s, move || {
                    for seq in 0..ITEMS {
                        let item = Item {
                            producer: id as u32,
                            seq,
                        };
                        q.push(&item.bytes(8)).unwrap();
                    }
                })
                .unwrap();
        }
        let handles: Vec<_> = consumers
            .into_iter()
            .enumerate()
            .map(|(i, mut q)| {
                let popped = &popped;
                std::thread::Builder::new()
                    .name(format!("consumer-{i}"))
                    .spawn_scoped(s, move || {
                        let mut got = Vec::new();
                        for _ in 0..2_000_000 {
                            if popped.load(Ordering::SeqCst) >= all {
                                break;
                            }
                            let out = q.pop().unwrap_or_else(|e| panic!("{e}: {:?}", q.stats()));
                            if let Some(b) = out {
                                got.push(Item::parse(&b));
                                popped.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        got
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut count: HashMap<Item, usize> = HashMap::new();
    for items in &got {
        // One consumer takes slots in order, so it sees each producer's items in order.
        let mut last: HashMap<u32, u32> = HashMap::new();
        for it in items {
            *count.entry(*it).or_default() += 1;
            if let Some(prev) = last.insert(it.producer, it.seq) {
                assert!(prev < it.seq, "{it:?} after seq {prev}");
            }
        }
    }
    assert_eq!(count.len(), all, "every item popped");
    assert!(count.values().all(|&n| n == 1), "no item popped twice");
}

fn drained_segments_are_freed(t: Link) {
    let (bed, mems) = bed(t, 2, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 8,
        item_size: 8,
    };
    let mut qs = queues(mems, config, options());
    let in_use = || bed.cluster.node.fresh_stats().pool_bytes_in_use;
    let start = in_use();
    for seq in 0..8 * 6 {
        qs[0].push(&Item { producer: 0, seq }.bytes(8)).unwrap();
    }
    let full = in_use();
    let segment = config.shape().segment_len();
    assert!(full >= start + 5 * segment, "{start} -> {full}");
    for seq in 0..8 * 6 {
        let got = qs[1].pop().unwrap().map(|b| Item::parse(&b));
        assert_eq!(got, Some(Item { producer: 0, seq }));
    }
    assert_eq!(qs[1].pop().unwrap(), None);
    for q in &mut qs {
        q.close().unwrap();
    }
    let end = in_use();
    eprintln!("{t:?}: pool bytes in use {start} -> {full} -> {end}");
    assert!(end <= start, "{start} -> {full} -> {end}");
    // Six full segments; the last stays (it has no successor yet).
    assert_eq!(qs[1].stats().segments_freed, 5);
}

fn destroy_frees_the_root_and_every_linked_segment(t: Link) {
    let (bed, mems) = bed(t, 2, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 8,
        item_size: 8,
    };
    let in_use = || bed.cluster.node.fresh_stats().pool_bytes_in_use;
    let start = in_use();
    let mut qs = queues(mems, config, options());
    let root = qs[0].root();
    for seq in 0..8 * 5 + 3 {
        qs[0].push(&Item { producer: 0, seq }.bytes(8)).unwrap();
    }
    for q in &mut qs {
        q.close().unwrap();
    }
    let full = in_use();
    assert!(full > start, "{start} -> {full}");
    let mut q = qs.remove(0);
    let freed = Queue::destroy(q.memory_mut(), root).unwrap();
    assert_eq!(freed, 6, "five full segments and the one being filled");
    let end = in_use();
    assert!(end <= start, "{start} -> {full} -> {end}");
    // Gone: neither opened nor destroyed again.
    assert!(matches!(
        Queue::destroy(q.memory_mut(), root),
        Err(QueueError::NotAQueue { .. })
    ));
}

fn permission_operations_per_segment(t: Link) {
    let (_bed, mems) = bed(t, 3, NodeConfig::default(), Default::default());
    let config = QueueConfig {
        entries: 8,
        item_size: 8,
    };
    let mut qs = queues(mems, config, options());
    let it = |producer, seq| Item { producer, seq }.bytes(8);
    // A fills segment 1 (made by create) and creates segments 2 and 3.
    for seq in 0..17 {
        qs[0].push(&it(0, seq)).unwrap();
    }
    let a = qs[0].stats();
    assert_eq!(
        (a.allocates, a.segments_linked),
        (2, 2),
        "one allocate per new segment"
    );
    assert_eq!(
        a.acquires, 2,
        "the root at open, and segment 1 (not its own)"
    );
    // B pushes into segment 3: one acquire for it (the root's at open).
    qs[1].push(&it(1, 0)).unwrap();
    let b = qs[1].stats();
    assert_eq!((b.allocates, b.acquires), (0, 2), "{b:?}");
    // C pops everything: it acquires segments 1 to 3 once each, frees 1 and 2.
    for _ in 0..18 {
        assert!(qs[2].pop().unwrap().is_some());
    }
    let c = qs[2].stats();
    assert_eq!((c.allocates, c.acquires, c.frees), (0, 1 + 3, 2), "{c:?}");
    // In the common case a push and a pop take two batches each and no permission operation.
    let before = qs[1].stats();
    qs[1].push(&it(1, 1)).unwrap();
    let push = qs[1].stats().since(&before);
    assert_eq!(
        (push.batches, push.control_ops(), push.extends),
        (2, 0, 0),
        "{push:?}"
    );
    let before = qs[2].stats();
    assert!(qs[2].pop().unwrap().is_some());
    let pop = qs[2].stats().since(&before);
    assert_eq!(
        (pop.batches, pop.control_ops(), pop.extends),
        (2, 0, 0),
        "{pop:?}"
    );
    for (who, q) in ["A", "B", "C"].iter().zip(&qs) {
        eprintln!("{t:?} {who}: {:?}", q.stats());
    }
}

patronus_core::both_transports!(
    empty_queue_pops_none_and_items_come_back_in_order,
    interleaved_clients_get_every_item_once_in_order,
    threads_get_every_item_once,
    drained_segments_are_freed,
    destroy_frees_the_root_and_every_linked_segment,
    permission_operations_per_segment,
);
