//! Shared test helpers: a seeded PRNG, generators of histories that are linearizable by
//! construction, and brute-force reference checkers written independently of the crate's
//! search (they enumerate every order).
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a part; helpers panic on failures

use std::collections::{BTreeMap, VecDeque};

use lincheck::{Entry, Status, kv, queue};

/// SplitMix64: small, seeded, deterministic.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn per_mille(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }
}

/// The shape of a generated history.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub ops: usize,
    pub clients: usize,
    pub keys: usize,
    /// Per mille of operations applied but recorded with an unknown outcome.
    pub unknown_applied: u64,
    /// Per mille of operations not applied and recorded unknown.
    pub unknown_dropped: u64,
    /// Per mille of operations not applied and recorded failed.
    pub failed: u64,
}

impl Shape {
    pub fn new(ops: usize, clients: usize, keys: usize) -> Self {
        Shape {
            ops,
            clients,
            keys,
            unknown_applied: 0,
            unknown_dropped: 0,
            failed: 0,
        }
    }

    pub fn faults(self, unknown_applied: u64, unknown_dropped: u64, failed: u64) -> Self {
        Shape {
            unknown_applied,
            unknown_dropped,
            failed,
            ..self
        }
    }
}

/// How one generated operation ends.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Normal,
    UnknownApplied,
    UnknownDropped,
    Failed,
}

/// Hands out intervals around strictly increasing linearization points, each to a client
/// that is idle then, so the sequential order of the points is a valid linearization.
struct Scheduler {
    free_at: Vec<u64>,
    t: u64,
    spread: u64,
}

impl Scheduler {
    fn new(clients: usize) -> Self {
        Scheduler {
            free_at: vec![0; clients],
            t: 0,
            spread: 8 * clients as u64 + 8,
        }
    }

    /// (client, invoke, complete) of the next operation.
    fn next(&mut self, rng: &mut Rng) -> (u64, u64, u64) {
        self.t += 1 + rng.below(10);
        let idle: Vec<usize> = loop {
            let idle: Vec<usize> = (0..self.free_at.len())
                .filter(|&c| self.free_at[c] < self.t)
                .collect();
            if !idle.is_empty() {
                break idle;
            }
            self.t = self.free_at.iter().copied().min().unwrap_or(0) + 1;
        };
        let c = idle[rng.below(idle.len() as u64) as usize];
        let lo = (self.free_at[c] + 1).max(self.t.saturating_sub(self.spread));
        let invoke = lo + rng.below(self.t - lo + 1);
        let complete = self.t + rng.below(self.spread);
        self.free_at[c] = complete;
        (c as u64, invoke, complete)
    }
}

fn fate(rng: &mut Rng, shape: &Shape) -> Fate {
    let roll = rng.below(1000);
    if roll < shape.unknown_applied {
        Fate::UnknownApplied
    } else if roll < shape.unknown_applied + shape.unknown_dropped {
        Fate::UnknownDropped
    } else if roll < shape.unknown_applied + shape.unknown_dropped + shape.failed {
        Fate::Failed
    } else {
        Fate::Normal
    }
}

fn entry<O, R>(
    client: u64,
    invoke: u64,
    complete: u64,
    op: O,
    fate: Fate,
    outcome: Option<R>,
) -> Entry<O, R> {
    let (complete, status) = match (fate, outcome) {
        (Fate::Normal, Some(r)) => (Some(complete), Status::Done(r)),
        (Fate::Failed, _) => (Some(complete), Status::Failed),
        _ => (None, Status::Unknown),
    };
    Entry {
        client,
        invoke,
        complete,
        op,
        status,
    }
}

/// The reference key-value semantics (independent of the crate's).
pub fn kv_apply(state: &mut BTreeMap<String, String>, op: &kv::Op) -> kv::Outcome {
    use kv::{Op, Outcome};
    let present = state.contains_key(op.key());
    match op {
        Op::Put { key, value } => {
            state.insert(key.clone(), value.clone());
            if present {
                Outcome::Updated
            } else {
                Outcome::Inserted
            }
        }
        Op::Insert { key, value } if !present => {
            state.insert(key.clone(), value.clone());
            Outcome::Inserted
        }
        Op::Insert { .. } => Outcome::Exists,
        Op::Update { key, value } if present => {
            state.insert(key.clone(), value.clone());
            Outcome::Updated
        }
        Op::Delete { key } if present => {
            state.remove(key);
            Outcome::Deleted
        }
        Op::Update { .. } | Op::Delete { .. } => Outcome::Absent,
        Op::Get { key } => state
            .get(key)
            .map_or(Outcome::Absent, |v| Outcome::value(v.clone())),
    }
}

/// A random key-value operation; values are unique (`v<i>`).
pub fn kv_op(rng: &mut Rng, i: usize, keys: usize) -> kv::Op {
    let key = format!("k{}", rng.below(keys as u64));
    let value = format!("v{i}");
    match rng.below(100) {
        0..30 => kv::Op::put(key, value),
        30..40 => kv::Op::insert(key, value),
        40..50 => kv::Op::update(key, value),
        50..60 => kv::Op::delete(key),
        _ => kv::Op::get(key),
    }
}

/// A key-value history linearizable by construction.
pub fn gen_kv(rng: &mut Rng, shape: Shape) -> kv::History {
    let mut sched = Scheduler::new(shape.clients);
    let mut state = BTreeMap::new();
    let mut history = kv::History::new();
    for i in 0..shape.ops {
        let (client, invoke, complete) = sched.next(rng);
        let op = kv_op(rng, i, shape.keys);
        let fate = fate(rng, &shape);
        let outcome =
            matches!(fate, Fate::Normal | Fate::UnknownApplied).then(|| kv_apply(&mut state, &op));
        history
            .push(entry(client, invoke, complete, op, fate, outcome))
            .unwrap();
    }
    history
}

/// The reference queue semantics.
pub fn queue_apply(state: &mut VecDeque<String>, op: &queue::Op) -> queue::Outcome {
    match op {
        queue::Op::Push { item } => {
            state.push_back(item.clone());
            queue::Outcome::Ok
        }
        queue::Op::Pop => state
            .pop_front()
            .map_or(queue::Outcome::Empty, queue::Outcome::item),
    }
}

/// A queue history linearizable by construction; items are unique (`i<n>`).
pub fn gen_queue(rng: &mut Rng, shape: Shape) -> queue::History {
    let mut sched = Scheduler::new(shape.clients);
    let mut state = VecDeque::new();
    let mut history = queue::History::new();
    for i in 0..shape.ops {
        let (client, invoke, complete) = sched.next(rng);
        let op = if rng.below(100) < 52 {
            queue::Op::push(format!("i{i}"))
        } else {
            queue::Op::Pop
        };
        let fate = fate(rng, &shape);
        let outcome = matches!(fate, Fate::Normal | Fate::UnknownApplied)
            .then(|| queue_apply(&mut state, &op));
        history
            .push(entry(client, invoke, complete, op, fate, outcome))
            .unwrap();
    }
    history
}

/// A sequential step: the next state, or `None` if the entry's result is impossible.
type Step<'a, O, R, S> = &'a dyn Fn(&S, &Entry<O, R>) -> Option<S>;

/// Tries every order (exponential; for a handful of operations).
fn brute<O, R, S: Clone>(entries: &[Entry<O, R>], state: S, step: Step<'_, O, R, S>) -> bool {
    fn go<O, R, S: Clone>(
        entries: &[Entry<O, R>],
        done: &mut Vec<bool>,
        state: S,
        step: Step<'_, O, R, S>,
    ) -> bool {
        let pending_known =
            |done: &[bool], j: usize| !done[j] && matches!(entries[j].status, Status::Done(_));
        if !(0..entries.len()).any(|j| pending_known(done, j)) {
            return true;
        }
        for i in 0..entries.len() {
            if done[i] || matches!(entries[i].status, Status::Failed) {
                continue;
            }
            let blocked = (0..entries.len()).any(|j| {
                j != i
                    && pending_known(done, j)
                    && entries[j].complete.is_some_and(|c| c < entries[i].invoke)
            });
            if blocked {
                continue;
            }
            if let Some(next) = step(&state, &entries[i]) {
                done[i] = true;
                if go(entries, done, next, step) {
                    return true;
                }
                done[i] = false;
            }
        }
        false
    }
    go(entries, &mut vec![false; entries.len()], state, step)
}

/// Reference verdict for a key-value history.
pub fn brute_kv(history: &kv::History) -> bool {
    brute(history.entries(), history.initial().clone(), &|s, e| {
        let mut next = s.clone();
        let got = kv_apply(&mut next, &e.op);
        match &e.status {
            Status::Done(r) if *r != got => None,
            _ => Some(next),
        }
    })
}

/// Reference verdict for a queue history.
pub fn brute_queue(history: &queue::History) -> bool {
    let initial: VecDeque<String> = history.initial().iter().cloned().collect();
    brute(history.entries(), initial, &|s, e| {
        let mut next = s.clone();
        let got = queue_apply(&mut next, &e.op);
        match &e.status {
            Status::Done(r) if *r != got => None,
            _ => Some(next),
        }
    })
}
