//! Helpers of the queue's tests: items that say who pushed them, a seeded RNG, a remote memory
//! that loses outcomes, and a driver that interleaves many clients' operations on one thread.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // helpers, not #[test] fns

pub mod sim;

use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::queue::{PopOp, PushOp, Queue, QueueError};
use patronus_ods::{MemError, MemOp, MemOut, RemoteMemory};
use rnic::Timestamp;
use std::collections::{HashMap, HashSet};
use std::task::Poll;
use std::time::Duration;

/// SplitMix64: small, seeded, good enough to shuffle a test.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Who pushed an item, and its number among that producer's items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Item {
    pub producer: u32,
    pub seq: u32,
}

impl Item {
    /// `size` bytes: producer, seq, then a pattern derived from both (to catch torn items).
    pub fn bytes(self, size: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(size);
        b.extend_from_slice(&self.producer.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        let mix = (self.producer as u8).wrapping_mul(31) ^ self.seq as u8;
        b.extend((8..size).map(|i| mix.wrapping_add(i as u8)));
        b.truncate(size);
        b
    }
    /// The item `bytes` encode; panics on a torn or foreign item.
    pub fn parse(bytes: &[u8]) -> Item {
        let it = Item {
            producer: u32::from_le_bytes(bytes[0..4].try_into().unwrap()),
            seq: u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
        };
        assert_eq!(bytes, it.bytes(bytes.len()), "a torn or foreign item");
        it
    }
}

/// Remote memory that loses the outcome of some batches, as a link failure under them would:
/// from a random operation on, the rest of the batch reports [`MemError::OutcomeUnknown`],
/// having either taken effect (`landed`) or not been sent at all.
#[derive(Debug)]
pub struct Flaky<M> {
    pub inner: M,
    rng: Rng,
    /// Chance that a batch with an atomic in it loses outcomes.
    pub p: f64,
    /// Batches that lost outcomes, and how many of them landed anyway.
    pub lost: u64,
    pub landed: u64,
}

impl<M> Flaky<M> {
    pub fn new(inner: M, seed: u64, p: f64) -> Flaky<M> {
        Flaky {
            inner,
            rng: Rng::new(seed),
            p,
            lost: 0,
            landed: 0,
        }
    }
}

impl<M: RemoteMemory> RemoteMemory for Flaky<M> {
    type Region = M::Region;

    fn allocate(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<M::Region>, MemError> {
        self.inner.allocate(sizes, lease, mode)
    }
    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<M::Region, MemError> {
        self.inner.acquire(addr, len, lease, access, mode)
    }
    fn try_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<M::Region, MemError> {
        self.inner.try_acquire(addr, len, lease, access, mode)
    }
    fn extend(&mut self, region: &M::Region, lease: Duration) -> Result<(), MemError> {
        self.inner.extend(region, lease)
    }
    fn expires_within(&self, region: &M::Region, margin: Duration) -> bool {
        self.inner.expires_within(region, margin)
    }
    fn now(&self) -> Timestamp {
        self.inner.now()
    }
    fn release(&mut self, region: M::Region) -> Result<(), MemError> {
        self.inner.release(region)
    }
    fn free(&mut self, region: M::Region) -> Result<(), MemError> {
        self.inner.free(region)
    }
    fn execute(&mut self, ops: &[MemOp<'_, M::Region>]) -> Vec<Result<MemOut, MemError>> {
        let atomic = ops
            .iter()
            .any(|op| matches!(op, MemOp::Cas { .. } | MemOp::Faa { .. }));
        if !atomic || !self.rng.chance(self.p) {
            return self.inner.execute(ops);
        }
        self.lost += 1;
        let cut = self.rng.below(ops.len());
        let landed = self.rng.chance(0.5);
        let sent = if landed { ops.len() } else { cut };
        self.landed += u64::from(landed);
        let mut out = self.inner.execute(&ops[..sent]);
        out.truncate(cut);
        out.resize(ops.len(), Err(MemError::OutcomeUnknown));
        out
    }
}

/// What a client does in [`interleave`].
#[derive(Debug)]
pub enum Role {
    /// Pushes items `0..count` as producer `id`, one at a time.
    Producer { id: u32, next: u32, count: u32 },
    /// Pops until the queue is drained.
    Consumer,
}

/// A logical client: a role on one of the handles (several may share one).
#[derive(Debug)]
pub struct Actor {
    pub handle: usize,
    pub role: Role,
    push: Option<PushOp>,
    pop: Option<PopOp>,
    /// The step its current pop began at.
    began: u64,
    /// Its operation in flight, in the recorded history.
    ticket: Option<lincheck::Ticket>,
    /// Crashes (its op is dropped, never stepped again) once it holds a claim, at this chance.
    pub crash: f64,
    pub crashed: bool,
}

impl Actor {
    pub fn producer(handle: usize, id: u32, count: u32) -> Actor {
        Actor::new(handle, Role::Producer { id, next: 0, count })
    }
    pub fn consumer(handle: usize) -> Actor {
        Actor::new(handle, Role::Consumer)
    }
    fn new(handle: usize, role: Role) -> Actor {
        Actor {
            handle,
            role,
            push: None,
            pop: None,
            began: 0,
            ticket: None,
            crash: 0.0,
            crashed: false,
        }
    }
    fn producing(&self) -> bool {
        !self.crashed
            && match self.role {
                Role::Producer { next, count, .. } => next < count || self.push.is_some(),
                Role::Consumer => false,
            }
    }
}

/// What came out of [`interleave`].
#[derive(Debug, Default)]
pub struct Outcome {
    /// Items whose push returned `Ok`.
    pub pushed: Vec<Item>,
    /// Items whose push ended with an outcome-unknown error, or whose producer crashed.
    pub maybe_pushed: Vec<Item>,
    /// Items popped, in the order the pops returned them.
    pub popped: Vec<Item>,
    /// For each popped item, the steps its pop began and ended at.
    pub spans: Vec<(Item, u64, u64)>,
    /// Items of pops that ended with an outcome-unknown error.
    pub maybe_popped: Vec<Item>,
    /// Steps taken.
    pub steps: u64,
    /// Every push and pop, timed in steps, for the linearizability checker.
    pub history: lincheck::queue::Recorder,
}

impl Item {
    /// The item's name in the recorded history.
    pub fn name(self) -> String {
        format!("p{}.{}", self.producer, self.seq)
    }
}

/// Steps the actors' operations in a seeded random order, one step at a time, calling `tick`
/// after each, until every producer is done and a pop begun after that found the queue empty;
/// then steps the pops still under way to their end (one may be freeing a segment).
pub fn interleave<M: RemoteMemory>(
    queues: &mut [Queue<M>],
    actors: &mut [Actor],
    rng: &mut Rng,
    max_steps: u64,
    mut tick: impl FnMut(),
) -> Outcome {
    let size = queues[0].shape().item_size as usize;
    let mut out = Outcome::default();
    // Consumers whose current pop began after the last producer finished.
    let mut late: HashSet<usize> = HashSet::new();
    let mut draining = false;
    while out.steps < max_steps {
        out.steps += 1;
        let producing = actors.iter().any(Actor::producing);
        let live: Vec<usize> = (0..actors.len())
            .filter(|&i| {
                let a = &actors[i];
                if draining {
                    a.pop.is_some()
                } else {
                    a.producing() || matches!(a.role, Role::Consumer)
                }
            })
            .collect();
        if live.is_empty() {
            return out;
        }
        let i = live[rng.below(live.len())];
        let a = &mut actors[i];
        let q = &mut queues[a.handle];
        match &mut a.role {
            Role::Producer { id, next, .. } => {
                let item = Item {
                    producer: *id,
                    seq: *next,
                };
                let op = match &mut a.push {
                    Some(op) => op,
                    None => {
                        let op = lincheck::queue::Op::push(item.name());
                        a.ticket = Some(out.history.invoke_at(i as u64, op, out.steps));
                        a.push.insert(PushOp::new(q, &item.bytes(size)).unwrap())
                    }
                };
                match op.step(q) {
                    Ok(Poll::Pending) => {
                        // A step that waits for an acquire's answer is not progress: wait
                        // for the answer (real time) before the virtual clock moves on.
                        q.wait_for_answer(Duration::from_secs(1));
                        if op.phase() == patronus_ods::queue::PushPhase::Filling
                            && rng.chance(a.crash)
                        {
                            a.crashed = true;
                            a.push = None;
                            out.maybe_pushed.push(item);
                            if let Some(t) = a.ticket.take() {
                                out.history.unknown(t);
                            }
                        }
                        tick();
                        continue;
                    }
                    Ok(Poll::Ready(())) => {
                        out.pushed.push(item);
                        if let Some(t) = a.ticket.take() {
                            let ok = lincheck::queue::Outcome::Ok;
                            out.history.complete_at(t, ok, out.steps);
                        }
                    }
                    Err(QueueError::PushOutcomeUnknown) => {
                        out.maybe_pushed.push(item);
                        if let Some(t) = a.ticket.take() {
                            out.history.unknown(t);
                        }
                    }
                    Err(e) => panic!("push of {item:?}: {e}"),
                }
                a.push = None;
                *next += 1;
            }
            Role::Consumer => {
                let op = match &mut a.pop {
                    Some(op) => op,
                    None => {
                        if !producing {
                            late.insert(i);
                        }
                        a.began = out.steps;
                        let op = lincheck::queue::Op::Pop;
                        a.ticket = Some(out.history.invoke_at(i as u64, op, out.steps));
                        a.pop.insert(PopOp::new(q))
                    }
                };
                match op.step(q) {
                    Ok(Poll::Pending) => {
                        q.wait_for_answer(Duration::from_secs(1));
                        tick();
                        continue;
                    }
                    Ok(Poll::Ready(Some(b))) => {
                        let it = Item::parse(&b);
                        out.popped.push(it);
                        out.spans.push((it, a.began, out.steps));
                        if let Some(t) = a.ticket.take() {
                            let got = lincheck::queue::Outcome::item(it.name());
                            out.history.complete_at(t, got, out.steps);
                        }
                    }
                    Ok(Poll::Ready(None)) => {
                        draining |= late.contains(&i);
                        if let Some(t) = a.ticket.take() {
                            let empty = lincheck::queue::Outcome::Empty;
                            out.history.complete_at(t, empty, out.steps);
                        }
                    }
                    Err(QueueError::PopOutcomeUnknown { item }) => {
                        out.maybe_popped.push(Item::parse(&item));
                        if let Some(t) = a.ticket.take() {
                            out.history.unknown(t);
                        }
                    }
                    Err(e) => panic!("pop: {e}"),
                }
                a.pop = None;
            }
        }
        tick();
    }
    panic!("not drained after {max_steps} steps: {out:?}");
}

/// Every item pushed came out exactly once (allowing for outcome-unknown errors, and for
/// items of crashed producers), and each producer's items came out in the order pushed; and
/// the whole history of pushes and pops is linearizable for a FIFO queue (`lincheck`; on
/// failure the history and a minimal witness are written to files the panic names).
pub fn check_exactly_once_in_order(out: &Outcome) {
    let history = out.history.history();
    let dump = std::env::temp_dir().join("patronus-lincheck");
    let stats = lincheck::assert_linearizable(&history, lincheck::Budget::states(50_000_000), dump);
    eprintln!(
        "queue history: {} pushes and pops linearizable ({} states searched)",
        history.len(),
        stats.states
    );
    let mut seen: HashMap<Item, usize> = HashMap::new();
    for it in &out.popped {
        *seen.entry(*it).or_default() += 1;
    }
    let dup: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dup.is_empty(), "popped more than once: {dup:?}");
    let maybe_popped: HashSet<Item> = out.maybe_popped.iter().copied().collect();
    let lost: Vec<_> = out
        .pushed
        .iter()
        .filter(|it| !seen.contains_key(it) && !maybe_popped.contains(it))
        .collect();
    assert!(lost.is_empty(), "pushed but never popped: {lost:?}");
    let pushed: HashSet<Item> = out
        .pushed
        .iter()
        .chain(&out.maybe_pushed)
        .copied()
        .collect();
    let foreign: Vec<_> = out
        .popped
        .iter()
        .filter(|it| !pushed.contains(it))
        .collect();
    assert!(foreign.is_empty(), "popped but never pushed: {foreign:?}");
    // Per-producer FIFO, as a linearizable queue promises it: a later item's pop never ends
    // before an earlier item's pop begins (overlapping pops may return in either order: a
    // claim takes effect before its pop returns, later still if its outcome was lost).
    let mut by_producer: HashMap<u32, Vec<(u32, u64, u64)>> = HashMap::new();
    for &(it, began, ended) in &out.spans {
        by_producer
            .entry(it.producer)
            .or_default()
            .push((it.seq, began, ended));
    }
    for (producer, mut pops) in by_producer {
        pops.sort_unstable();
        let mut earliest_end_after = u64::MAX;
        for &(seq, began, ended) in pops.iter().rev() {
            assert!(
                began <= earliest_end_after,
                "producer {producer}: an item after {seq} was popped before {seq}'s pop began"
            );
            earliest_end_after = earliest_end_after.min(ended);
        }
    }
}
