//! Fair shares of the manager thread: deficit round robin over the senders' classes. Sans-IO:
//! the time is given.
//!
//! Every control message a shard receives is queued by its class — the tenant its session
//! acts for, or [`Class::Unauthenticated`] for sessions that have not said `Hello` — and each
//! turn's batch is drawn from the queues in deficit round robin (Shreedhar and Varghese): in a
//! round every backlogged class earns its quantum of cost units (its weight times
//! [`QUANTUM_UNITS`]; unauthenticated sessions share [`NodeLimits::unauthenticated_quantum`]
//! units) and sends messages while their cost fits in what it has earned. So a class that
//! keeps its queue full gets its weighted share of the manager and no more, however many
//! sessions and credits it uses, and every message is charged when it is taken, whatever it
//! turns out to do (a failed lookup costs its tenant as a grant does).
//!
//! Within a class, its sessions take turns message by message (round robin over the sessions
//! with something queued, sharing the class's deficit): a client of the default tenant that
//! keeps all its credits full waits its turn beside a client of the same tenant that sends one
//! request at a time, rather than being served ahead of it a batch at a time.
//!
//! Invariants:
//! - While one class alone is backlogged, a batch takes up to the batch size from it
//!   (batching as before); while several are, a batch is one round, so a class that sends one
//!   request at a time waits for one round of the others', not for a full batch of theirs.
//! - A class's deficit is zero whenever its queue is empty (no credit is hoarded while idle).
//! - A session has at most `per_session` messages queued: a client that sends more than its
//!   credits (only possible with the shared receive queue, or from a hostile client) has the
//!   rest dropped and counted as refused, so the queues are bounded by sessions × credits.
//!
//! [`NodeLimits::unauthenticated_quantum`]: super::NodeLimits::unauthenticated_quantum

use super::super::fast_hash::FastMap;
use super::super::state::ClientId;
use super::super::tenants::TenantId;
use crate::proto::messages::Request;
use crate::rpc::SlotError;
use rnic::Timestamp;
use std::collections::VecDeque;

/// Cost units a class of weight 1 earns per round: one permission change or four other
/// requests (see [`cost_of`]).
pub(super) const QUANTUM_UNITS: u32 = 4;

/// What a message costs its class, in units: a request that binds or unbinds windows or
/// frees memory (allocate, acquire, revoke, rebind, share) costs [`QUANTUM_UNITS`], as it
/// costs the manager about eight times a bare request's instructions and the NIC's chain
/// besides (`docs/evaluation.md`, "The manager alone"); anything else — an extension, a
/// `Hello`, a lookup, a message that does not decode — one unit. The cost is the request's,
/// whatever its outcome: a refused or failed one costs its class the same.
pub(super) fn cost_of(message: &Result<(u64, Request), SlotError>) -> u32 {
    match message {
        Ok((
            _,
            Request::Allocate { .. }
            | Request::Acquire { .. }
            | Request::Revoke { .. }
            | Request::Rebind { .. }
            | Request::Share { .. },
        )) => QUANTUM_UNITS,
        _ => 1,
    }
}

/// Who a queued message is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Sessions that have not authenticated: one small shared budget.
    Unauthenticated,
    /// A tenant's sessions.
    Tenant(TenantId),
}

/// What one class was given, for `/metrics` and `/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounters {
    /// Messages taken from the queue into a batch.
    pub served: u64,
    /// Cost units charged for them.
    pub cost_units: u64,
    /// Messages dropped because their session had too many queued.
    pub refused: u64,
    /// Sum of the served messages' time in the queue, µs.
    pub queue_delay_us: u64,
    /// Longest time a served message waited in the queue, µs.
    pub max_queue_delay_us: u64,
}

impl ClassCounters {
    /// The sum of two (e.g. of two shards'); the maximum of maxima.
    pub fn plus(&self, o: &ClassCounters) -> ClassCounters {
        ClassCounters {
            served: self.served + o.served,
            cost_units: self.cost_units + o.cost_units,
            refused: self.refused + o.refused,
            queue_delay_us: self.queue_delay_us + o.queue_delay_us,
            max_queue_delay_us: self.max_queue_delay_us.max(o.max_queue_delay_us),
        }
    }
}

/// A queued message.
#[derive(Debug)]
struct Queued<T> {
    item: T,
    client: ClientId,
    cost: u32,
    at: Timestamp,
}

/// One class's queue: a queue per session, and the round-robin order of the sessions with
/// something queued.
#[derive(Debug)]
struct ClassQueue<T> {
    sessions: FastMap<ClientId, VecDeque<Queued<T>>>,
    /// Sessions with messages queued, in the order their next message comes.
    ring: VecDeque<ClientId>,
    deficit: u32,
    quantum: u32,
    counters: ClassCounters,
}

/// The classes' queues and the round-robin order of the backlogged ones.
#[derive(Debug)]
pub(super) struct FairQueue<T> {
    classes: FastMap<Class, ClassQueue<T>>,
    /// Backlogged classes, in the order their next turn comes.
    active: VecDeque<Class>,
    /// Messages queued per session.
    queued_by_client: FastMap<ClientId, u32>,
    per_session: u32,
    unauthenticated_quantum: u32,
    weights: FastMap<TenantId, u32>,
    len: usize,
}

impl<T> FairQueue<T> {
    /// Queues of at most `per_session` messages per session; tenants weigh as `weights` says
    /// (1 if not named), unauthenticated sessions share `unauthenticated_quantum` units a
    /// round.
    pub(super) fn new(
        per_session: u32,
        unauthenticated_quantum: u32,
        weights: impl IntoIterator<Item = (TenantId, u32)>,
    ) -> Self {
        FairQueue {
            classes: FastMap::default(),
            active: VecDeque::new(),
            queued_by_client: FastMap::default(),
            per_session: per_session.max(1),
            unauthenticated_quantum: unauthenticated_quantum.max(1),
            weights: weights.into_iter().collect(),
            len: 0,
        }
    }

    fn quantum_of(&self, class: Class) -> u32 {
        match class {
            Class::Unauthenticated => self.unauthenticated_quantum,
            Class::Tenant(t) => self
                .weights
                .get(&t)
                .copied()
                .unwrap_or(1)
                .max(1)
                .saturating_mul(QUANTUM_UNITS),
        }
    }

    /// Queues `item` of `client` (of `class`) costing `cost` units, received at `now`. False:
    /// the session has its share queued already; the item is dropped (and counted).
    pub(super) fn push(
        &mut self,
        class: Class,
        client: ClientId,
        item: T,
        cost: u32,
        now: Timestamp,
    ) -> bool {
        let quantum = self.quantum_of(class);
        let queue = self.classes.entry(class).or_insert_with(|| ClassQueue {
            sessions: FastMap::default(),
            ring: VecDeque::new(),
            deficit: 0,
            quantum,
            counters: ClassCounters::default(),
        });
        let queued = self.queued_by_client.entry(client).or_default();
        if *queued >= self.per_session {
            queue.counters.refused += 1;
            return false;
        }
        *queued += 1;
        if queue.ring.is_empty() {
            self.active.push_back(class);
        }
        let session = queue.sessions.entry(client).or_default();
        if session.is_empty() {
            queue.ring.push_back(client);
        }
        session.push_back(Queued {
            item,
            client,
            cost: cost.max(1),
            at: now,
        });
        self.len += 1;
        true
    }

    /// Messages queued.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the next batch, at most `max` messages, to `out` (see the module docs), at
    /// `now`.
    pub(super) fn next_batch(&mut self, max: usize, now: Timestamp, out: &mut Vec<T>) {
        let (max, start) = (max.max(1), out.len());
        loop {
            // One round: each class backlogged at its start has one turn.
            let (turns, contended) = (self.active.len(), self.active.len() > 1);
            for _ in 0..turns {
                if out.len() - start >= max {
                    return;
                }
                let Some(class) = self.active.pop_front() else {
                    return;
                };
                self.turn(class, max - (out.len() - start), now, out);
            }
            // Contended: one round is the batch (unless every deficit was still short of its
            // front message's cost). Alone: rounds until the batch is full or the queue empty.
            let taken = out.len() - start;
            if self.active.is_empty() || taken >= max || (contended && taken > 0) {
                return;
            }
        }
    }

    /// `class`'s turn of a round (it was taken off the front of the active list): it earns its
    /// quantum and sends what fits, at most `room` messages, its sessions taking turns; it goes
    /// to the back of the list if it still has messages queued.
    fn turn(&mut self, class: Class, room: usize, now: Timestamp, out: &mut Vec<T>) {
        let Some(queue) = self.classes.get_mut(&class) else {
            return;
        };
        queue.deficit = queue.deficit.saturating_add(queue.quantum);
        let mut taken = 0;
        while taken < room {
            let Some(&client) = queue.ring.front() else {
                break;
            };
            let Some(session) = queue.sessions.get_mut(&client) else {
                queue.ring.pop_front();
                continue;
            };
            match session.front() {
                Some(front) if front.cost <= queue.deficit => {}
                Some(_) => break,
                None => {
                    queue.ring.pop_front();
                    queue.sessions.remove(&client);
                    continue;
                }
            }
            let Some(q) = session.pop_front() else {
                break;
            };
            // The session's next message waits for the others' turns.
            queue.ring.pop_front();
            if session.is_empty() {
                queue.sessions.remove(&client);
            } else {
                queue.ring.push_back(client);
            }
            queue.deficit -= q.cost;
            let waited = now.0.saturating_sub(q.at.0);
            let c = &mut queue.counters;
            c.served += 1;
            c.cost_units += u64::from(q.cost);
            c.queue_delay_us += waited;
            c.max_queue_delay_us = c.max_queue_delay_us.max(waited);
            if let Some(n) = self.queued_by_client.get_mut(&q.client) {
                *n -= 1;
                if *n == 0 {
                    self.queued_by_client.remove(&q.client);
                }
            }
            self.len -= 1;
            taken += 1;
            out.push(q.item);
        }
        if queue.ring.is_empty() {
            queue.deficit = 0;
        } else {
            self.active.push_back(class);
        }
    }

    /// `client` is gone: what it had queued is dropped (its QP is broken off; nothing it asked
    /// is answered).
    pub(super) fn forget(&mut self, client: ClientId) {
        if self.queued_by_client.remove(&client).is_none() {
            return;
        }
        for (class, queue) in self.classes.iter_mut() {
            let Some(dropped) = queue.sessions.remove(&client) else {
                continue;
            };
            self.len -= dropped.len();
            queue.ring.retain(|c| *c != client);
            if queue.ring.is_empty() {
                queue.deficit = 0;
                self.active.retain(|c| c != class);
            }
        }
    }

    /// Each class's counters so far.
    pub(super) fn counters(&self) -> impl Iterator<Item = (Class, ClassCounters)> + '_ {
        self.classes.iter().map(|(c, q)| (*c, q.counters))
    }
}

#[cfg(test)]
#[path = "fair_tests.rs"]
mod tests;
