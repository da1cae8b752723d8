//! One-sided allocation at the node (`manager::onesided`, `docs/onesided.md`): the arena, each
//! client's allocation queues and their chains.
//!
//! - A client opens an allocation connection (role `Alloc`, its id and secret, and the slot
//!   of the data connection its chunks are for). The accept policy makes the node's end — a
//!   cross-channel QP in the client's PD — and, once it is connected and before the client
//!   learns so, fills the queue and posts a chain per slot: the client may allocate at once.
//! - Shard 0's manager thread tends the queues in the background ([`OneSided::tend`]): it
//!   reads how many binds completed (the head), and fills the slots taken again.
//! - When a client's session ends, its queues close: their QPs go, every chunk it had queued
//!   or allocated is zeroed and free again ([`OneSided::close`]).
//!
//! Invariants: nothing here runs between a client's request and its grant (a held manager
//! leaves every posted chain runnable); a chain binds only the chunk the manager chose, for
//! the data QP the manager recorded for the client; a chunk is zeroed before any queue gets
//! it again.

use super::super::onesided::{AllocChains, Arena, ChunkId, OneSidedChunks};
use super::super::state::ClientId;
use super::OneSidedConfig;
use parking_lot::Mutex;
use rnic::{Provider, QpNumber, QpTiming, QueuePair, VerbsError};
use std::collections::HashMap;

/// What one-sided allocation did, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OneSidedStats {
    /// Allocation connections open.
    pub queues: u64,
    /// Chains posted (one per slot filled).
    pub chains_posted: u64,
    /// Allocations the chains made (binds completed).
    pub allocated: u64,
    /// Chains that failed (their queue's QP broke).
    pub failed: u64,
    /// Chunks zeroed and returned.
    pub returned: u64,
    /// Chunks free now.
    pub free_chunks: u64,
}

/// One client's allocation queue.
struct Queue<P: Provider> {
    client: ClientId,
    slot: u8,
    chains: AllocChains<P>,
    /// The head as last read.
    head: u64,
}

struct State<P: Provider> {
    chunks: OneSidedChunks,
    /// Open queues, by the number of their node-side QP.
    queues: HashMap<QpNumber, Queue<P>>,
    /// Queues whose QP is not connected yet.
    pending: HashMap<QpNumber, Queue<P>>,
    /// The node's end of each client's data connections, by slot.
    access: HashMap<(ClientId, u8), QpNumber>,
    stats: OneSidedStats,
}

/// The node's one-sided allocator (see the module docs).
pub(super) struct OneSided<P: Provider> {
    cfg: OneSidedConfig,
    ctx: P::Context,
    arena: Arena<P>,
    timing: QpTiming,
    state: Mutex<State<P>>,
}

impl<P: Provider> OneSided<P> {
    /// The arena, on `ctx`.
    pub(super) fn new(
        ctx: &P::Context,
        cfg: OneSidedConfig,
        timing: QpTiming,
    ) -> Result<Self, VerbsError> {
        Ok(OneSided {
            cfg,
            ctx: ctx.clone(),
            arena: Arena::new(ctx, cfg.chunks, cfg.chunk_bytes)?,
            timing,
            state: Mutex::new(State {
                chunks: OneSidedChunks::new(cfg.chunks, cfg.per_client),
                queues: HashMap::new(),
                pending: HashMap::new(),
                access: HashMap::new(),
                stats: OneSidedStats::default(),
            }),
        })
    }

    /// The node's end of an allocation connection of `client` for its data slot `slot`, in
    /// `pd` (the client's).
    pub(super) fn create_qp(
        &self,
        client: ClientId,
        slot: u8,
        pd: &P::Pd,
    ) -> Result<P::Qp, String> {
        let chains = AllocChains::new(&self.ctx, pd, &self.arena, self.cfg.per_client, self.timing)
            .map_err(|e| format!("one-sided allocation: {e}"))?;
        let qp = chains.qp().clone();
        self.state.lock().pending.insert(
            qp.qp_num(),
            Queue {
                client,
                slot,
                chains,
                head: 0,
            },
        );
        Ok(qp)
    }

    /// The node's end of `client`'s data connection `slot` is `qpn` (chains bind for it).
    pub(super) fn data_qp(&self, client: ClientId, slot: u8, qpn: QpNumber) {
        self.state.lock().access.insert((client, slot), qpn);
    }

    /// An allocation connection is up: its queue is filled and a chain posted per slot,
    /// before its client learns it is connected.
    pub(super) fn established(&self, qpn: QpNumber) {
        let mut s = self.state.lock();
        let Some(queue) = s.pending.remove(&qpn) else {
            return;
        };
        s.chunks.open(qpn.0, self.cfg.per_client);
        s.stats.queues += 1;
        s.queues.insert(qpn, queue);
        self.refill(&mut s, qpn);
    }

    /// Background work (shard 0's manager thread): reads each queue's head and fills the
    /// slots taken again.
    pub(super) fn tend(&self) {
        let mut s = self.state.lock();
        if s.queues.is_empty() {
            return;
        }
        let qpns: Vec<QpNumber> = s.queues.keys().copied().collect();
        for qpn in qpns {
            let Some(q) = s.queues.get_mut(&qpn) else {
                continue;
            };
            let (head, failed) = q.chains.head();
            let before = std::mem::replace(&mut q.head, head);
            let broken = failed.is_some();
            let seen = s.chunks.observe_head(qpn.0, head);
            s.stats.allocated += head - before;
            if broken {
                // Its QP is in ERR: the chains after the failed one were flushed. The queue
                // stays until its client's session ends (or it reconnects).
                s.stats.failed += 1;
                continue;
            }
            debug_assert_eq!(seen.overrun, 0, "a chain per filled slot never overruns");
            self.refill(&mut s, qpn);
        }
    }

    /// Fills `qpn`'s queue and posts a chain per slot filled.
    fn refill(&self, s: &mut State<P>, qpn: QpNumber) {
        let Some((client, slot)) = s.queues.get(&qpn).map(|q| (q.client, q.slot)) else {
            return;
        };
        let Some(&access) = s.access.get(&(client, slot)) else {
            return; // no data connection yet: nothing to bind for
        };
        let refills = s.chunks.refill(qpn.0, u32::MAX);
        let mut posted = 0;
        let mut unposted: Vec<ChunkId> = Vec::new();
        if let Some(q) = s.queues.get_mut(&qpn) {
            for r in &refills {
                match q.chains.post(&self.arena, r, access) {
                    Ok(()) => posted += 1,
                    Err(e) => {
                        tracing::warn!(client, error = %e, "one-sided chain not posted");
                        unposted.push(r.chunk);
                    }
                }
            }
        }
        s.stats.chains_posted += posted;
        if !unposted.is_empty() {
            // Their queue is unusable (its QP broke): closed, its chunks returned.
            self.close_queue(s, qpn);
        }
    }

    /// `client`'s session ended: its queues close and every chunk it had queued or allocated
    /// is zeroed and free again.
    pub(super) fn close(&self, client: ClientId) {
        let mut s = self.state.lock();
        s.access.retain(|(c, _), _| *c != client);
        s.pending.retain(|_, q| q.client != client);
        let qpns: Vec<QpNumber> = s
            .queues
            .iter()
            .filter(|(_, q)| q.client == client)
            .map(|(n, _)| *n)
            .collect();
        for qpn in qpns {
            self.close_queue(&mut s, qpn);
        }
    }

    fn close_queue(&self, s: &mut State<P>, qpn: QpNumber) {
        if let Some(q) = s.queues.remove(&qpn) {
            q.chains.qp().set_error();
            s.stats.queues -= 1;
        }
        for chunk in s.chunks.close(qpn.0) {
            match self.arena.zero(chunk) {
                Ok(()) => {
                    s.chunks.scrubbed(chunk);
                    s.stats.returned += 1;
                }
                Err(e) => {
                    tracing::error!(chunk, error = %e, "a one-sided chunk not zeroed: kept out of use")
                }
            }
        }
    }

    /// What it did so far.
    pub(super) fn stats(&self) -> OneSidedStats {
        let s = self.state.lock();
        OneSidedStats {
            free_chunks: s.chunks.free_chunks() as u64,
            ..s.stats
        }
    }
}
