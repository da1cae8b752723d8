//! One-sided allocation at the node (`manager::onesided`, `docs/onesided.md`): the arena, each
//! client's allocation queues and their chains.
//!
//! - A client opens an allocation connection (role `Alloc`, its id and secret, and the slot
//!   of the data connection its chunks are for). The accept policy makes the node's end — a
//!   cross-channel QP in the client's PD — and, once it is connected and before the client
//!   learns so, fills the queue and posts a chain per slot: the client may allocate at once.
//! - Shard 0's manager thread tends the queues in the background ([`OneSided::tend`]): it
//!   reads how many binds completed (the head), and fills the slots taken again.
//! - A client frees a chunk with a SEND_WITH_INV of its key on its data connection: the
//!   node's NIC invalidates the window (only for the data QP it is bound for) as the SEND
//!   lands in one of the receives the node keeps posted on every data QP. `tend` then reads
//!   the completion (it names the key), zeroes the chunk and returns it.
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
use rnic::{
    CompletionQueue, Context, Provider, QpNumber, QpTiming, QueuePair, RecvWr, VerbsError,
    WcStatus, WorkCompletion,
};
use std::collections::HashMap;

/// Receives the node keeps posted on each data QP for frees.
pub(super) const FREE_RECEIVES: u32 = 16;
/// The free CQ's depth (frees are taken every manager turn).
const FREE_CQ_DEPTH: u32 = 4096;

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
    /// Frees (SEND_WITH_INV) that invalidated a client's chunk.
    pub freed: u64,
    /// SENDs on data QPs that freed nothing (no key, or no chunk of that client's).
    pub stray_sends: u64,
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
    /// The node's end of each client's data connections, by slot, and which they are.
    access: HashMap<(ClientId, u8), P::Qp>,
    access_of: HashMap<QpNumber, (ClientId, u8)>,
    stats: OneSidedStats,
}

/// The node's one-sided allocator (see the module docs).
pub(super) struct OneSided<P: Provider> {
    cfg: OneSidedConfig,
    ctx: P::Context,
    /// The receive CQ of every data QP: the completions of frees.
    free_cq: P::Cq,
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
            free_cq: ctx.create_cq(FREE_CQ_DEPTH)?,
            arena: Arena::new(ctx, cfg.chunks, cfg.chunk_bytes)?,
            timing,
            state: Mutex::new(State {
                chunks: OneSidedChunks::new(cfg.chunks, cfg.per_client),
                queues: HashMap::new(),
                pending: HashMap::new(),
                access: HashMap::new(),
                access_of: HashMap::new(),
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

    /// The receive CQ data QPs are created with (frees complete there).
    pub(super) fn free_cq(&self) -> &P::Cq {
        &self.free_cq
    }

    /// The node's end of `client`'s data connection `slot` is `qp` (chains bind for it): its
    /// receives for frees are posted.
    pub(super) fn data_qp(&self, client: ClientId, slot: u8, qp: &P::Qp) {
        for _ in 0..FREE_RECEIVES {
            if let Err(e) = qp.post_recv(&[RecvWr {
                wr_id: 0,
                sge: None,
            }]) {
                tracing::warn!(client, error = %e, "a receive for frees not posted");
                break;
            }
        }
        let mut s = self.state.lock();
        if let Some(old) = s.access.insert((client, slot), qp.clone()) {
            s.access_of.remove(&old.qp_num());
        }
        s.access_of.insert(qp.qp_num(), (client, slot));
    }

    /// An allocation connection is up: its queue is filled and a chain posted per slot,
    /// before its client learns it is connected.
    pub(super) fn established(&self, qpn: QpNumber) {
        let mut s = self.state.lock();
        let Some(mut queue) = s.pending.remove(&qpn) else {
            return;
        };
        s.chunks.open(qpn.0, self.cfg.per_client);
        // A client has one queue: one it opened before is replaced. What that one allocated
        // stays the client's (in this queue's budget); what it had only queued comes back.
        let older: Vec<QpNumber> = s
            .queues
            .iter()
            .filter(|(_, q)| q.client == queue.client)
            .map(|(n, _)| *n)
            .collect();
        for old in older {
            let Some(mut q) = s.queues.remove(&old) else {
                continue;
            };
            q.chains.qp().set_error();
            let (head, _) = q.chains.head();
            s.stats.allocated += head - q.head;
            s.chunks.observe_head(old.0, head);
            queue.chains.adopt_windows(&mut q.chains);
            let back = s.chunks.transfer(old.0, qpn.0);
            self.zero_and_return(&mut s, back);
            s.stats.queues -= 1;
        }
        s.stats.queues += 1;
        s.queues.insert(qpn, queue);
        self.refill(&mut s, qpn);
    }

    /// Background work (shard 0's manager thread): reads each queue's head and fills the
    /// slots taken again.
    pub(super) fn tend(&self) {
        let mut s = self.state.lock();
        // Heads first: a free's completion comes after its chunk's bind completed (the client
        // learned the key after the bind), so every freed chunk is known as allocated.
        let qpns: Vec<QpNumber> = s.queues.keys().copied().collect();
        let mut healthy = Vec::with_capacity(qpns.len());
        for qpn in qpns {
            let Some(q) = s.queues.get_mut(&qpn) else {
                continue;
            };
            let (head, failed) = q.chains.head();
            let before = std::mem::replace(&mut q.head, head);
            let seen = s.chunks.observe_head(qpn.0, head);
            s.stats.allocated += head - before;
            debug_assert_eq!(seen.overrun, 0, "a chain per filled slot never overruns");
            if failed.is_some() {
                // Its QP is in ERR: the chains after the failed one were flushed. The queue
                // stays until its client's session ends (or it reconnects).
                s.stats.failed += 1;
            } else {
                healthy.push(qpn);
            }
        }
        self.take_frees(&mut s);
        for qpn in healthy {
            self.refill(&mut s, qpn);
        }
    }

    /// Reads the frees that completed: each invalidated chunk is zeroed and free again, and
    /// its receive posted again.
    fn take_frees(&self, s: &mut State<P>) {
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            let n = self.free_cq.poll(&mut wcs);
            if n == 0 {
                return;
            }
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    continue; // flushed: its QP broke (its windows went with it)
                }
                let Some(&(client, slot)) = s.access_of.get(&wc.qp_num) else {
                    continue;
                };
                let freed = wc.invalidated_rkey.and_then(|key| {
                    s.queues
                        .iter()
                        .filter(|(_, q)| q.client == client)
                        .find_map(|(qpn, q)| q.chains.chunk_of(key).map(|c| (*qpn, c)))
                });
                match freed {
                    Some((qpn, chunk)) if s.chunks.freed(qpn.0, chunk).is_ok() => {
                        s.stats.freed += 1;
                        self.zero_and_return(s, vec![chunk]);
                    }
                    _ => s.stats.stray_sends += 1,
                }
                if let Some(qp) = s.access.get(&(client, slot)) {
                    let _ = qp.post_recv(&[RecvWr {
                        wr_id: 0,
                        sge: None,
                    }]);
                }
            }
        }
    }

    /// Fills `qpn`'s queue and posts a chain per slot filled.
    fn refill(&self, s: &mut State<P>, qpn: QpNumber) {
        let Some((client, slot)) = s.queues.get(&qpn).map(|q| (q.client, q.slot)) else {
            return;
        };
        let Some(access) = s.access.get(&(client, slot)).map(|qp| qp.qp_num()) else {
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
        s.access_of.retain(|_, (c, _)| *c != client);
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
        let back = s.chunks.close(qpn.0);
        self.zero_and_return(s, back);
    }

    /// Zeroes dirty `chunks` and makes them free (one that cannot be zeroed stays out of use).
    fn zero_and_return(&self, s: &mut State<P>, chunks: Vec<ChunkId>) {
        for chunk in chunks {
            match self.arena.zero(chunk) {
                Ok(()) => {
                    s.chunks.scrubbed(chunk);
                    s.stats.returned += 1;
                }
                Err(e) => tracing::error!(
                    chunk,
                    error = %e,
                    "a one-sided chunk not zeroed: kept out of use"
                ),
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
