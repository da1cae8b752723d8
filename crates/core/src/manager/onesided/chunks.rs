//! The arena's chunks and each client's queue of them, as the manager's CPU keeps them
//! (sans-IO; see the module docs of `onesided`).

use super::super::state::ClientId;
use std::collections::{HashMap, VecDeque};

/// A chunk of the one-sided arena, by index.
pub type ChunkId = u32;

/// Where a chunk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    /// In no client's queue; zeroed.
    Free,
    /// In `client`'s queue, not taken yet.
    Reserved {
        /// The client.
        client: ClientId,
    },
    /// Taken by `client`'s chain: its window is bound for the client's access QP.
    Allocated {
        /// The client.
        client: ClientId,
    },
    /// Given back (freed, or its client left); to be zeroed before reuse.
    Dirty,
}

/// A slot the manager fills: write `chunk`'s table entry (with key byte `key`) into slot
/// `index % depth` of the client's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refill {
    /// The slot's number since the queue began (the ring slot is `index % depth`).
    pub index: u64,
    /// The chunk queued there.
    pub chunk: ChunkId,
    /// The key byte its window is bound with this time.
    pub key: u8,
}

/// What a look at a client's head found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadSeen {
    /// Chunks allocated since the last look, in order.
    pub allocated: Vec<ChunkId>,
    /// Allocations that ran past the tail (each met the empty-queue fault).
    pub overrun: u64,
}

/// Why a free is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreeError {
    /// No such chunk.
    #[error("no chunk {0}")]
    NoSuchChunk(ChunkId),
    /// The chunk is not allocated to this client.
    #[error("chunk {0} is not allocated to this client")]
    NotTheOwner(ChunkId),
}

/// One client's queue, as the manager knows it.
#[derive(Debug)]
struct ClientQueue {
    /// The chunks of slots `head..tail`, in order.
    queued: VecDeque<ChunkId>,
    /// Slots taken, as last read from node memory.
    head: u64,
    /// Slots filled.
    tail: u64,
    /// Chunks allocated to the client now.
    allocated: u32,
    /// Most chunks it may have reserved and allocated together.
    budget: u32,
}

/// The arena's chunks and the clients' queues (see the module docs).
#[derive(Debug)]
pub struct OneSidedChunks {
    state: Vec<ChunkState>,
    key: Vec<u8>,
    free: VecDeque<ChunkId>,
    clients: HashMap<ClientId, ClientQueue>,
    /// Slots per client ring.
    depth: u32,
}

impl OneSidedChunks {
    /// `chunks` free chunks; each client's ring has `depth` slots.
    pub fn new(chunks: u32, depth: u32) -> Self {
        OneSidedChunks {
            state: vec![ChunkState::Free; chunks as usize],
            key: vec![0; chunks as usize],
            free: (0..chunks).collect(),
            clients: HashMap::new(),
            depth: depth.max(1),
        }
    }

    /// Where `chunk` is.
    pub fn state(&self, chunk: ChunkId) -> Option<ChunkState> {
        self.state.get(chunk as usize).copied()
    }

    /// Free chunks (in no queue, zeroed).
    pub fn free_chunks(&self) -> usize {
        self.free.len()
    }

    /// Starts `client`'s queue: it may have at most `budget` chunks reserved and allocated.
    pub fn open(&mut self, client: ClientId, budget: u32) {
        self.clients.entry(client).or_insert(ClientQueue {
            queued: VecDeque::new(),
            head: 0,
            tail: 0,
            allocated: 0,
            budget,
        });
    }

    /// Fills `client`'s ring up to its budget and its depth, at most `allowed` more chunks (what
    /// its tenant's quota still allows), from the free chunks; returns what to write, in
    /// order. Each queued chunk's key byte moves on.
    pub fn refill(&mut self, client: ClientId, allowed: u32) -> Vec<Refill> {
        let Some(q) = self.clients.get_mut(&client) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut allowed = allowed;
        while allowed > 0
            && q.queued.len() < self.depth as usize
            && (q.queued.len() as u32 + q.allocated) < q.budget
        {
            let Some(chunk) = self.free.pop_front() else {
                break;
            };
            let key = &mut self.key[chunk as usize];
            *key = key.wrapping_add(1);
            self.state[chunk as usize] = ChunkState::Reserved { client };
            q.queued.push_back(chunk);
            out.push(Refill {
                index: q.tail,
                chunk,
                key: *key,
            });
            q.tail += 1;
            allowed -= 1;
        }
        out
    }

    /// `client`'s head read `head` from node memory: the chunks its chains took since the last
    /// look are allocated; slots past the tail were overruns (the caller sets the head back to
    /// the tail when it repairs the chain: [`OneSidedChunks::repaired`]).
    pub fn observe_head(&mut self, client: ClientId, head: u64) -> HeadSeen {
        let mut seen = HeadSeen::default();
        let Some(q) = self.clients.get_mut(&client) else {
            return seen;
        };
        while q.head < head.min(q.tail) {
            let Some(chunk) = q.queued.pop_front() else {
                break;
            };
            self.state[chunk as usize] = ChunkState::Allocated { client };
            q.allocated += 1;
            q.head += 1;
            seen.allocated.push(chunk);
        }
        seen.overrun = head.saturating_sub(q.tail);
        seen
    }

    /// The caller set `client`'s head back to its tail after an overrun.
    pub fn repaired(&mut self, client: ClientId) {
        if let Some(q) = self.clients.get_mut(&client) {
            q.head = q.tail;
        }
    }

    /// `client` freed `chunk` (its key arrived with a SEND_WITH_INV on the client's access
    /// QP, which the NIC accepts only for a window bound to that QP): the chunk is dirty.
    pub fn freed(&mut self, client: ClientId, chunk: ChunkId) -> Result<(), FreeError> {
        let state = self
            .state
            .get_mut(chunk as usize)
            .ok_or(FreeError::NoSuchChunk(chunk))?;
        if *state != (ChunkState::Allocated { client }) {
            return Err(FreeError::NotTheOwner(chunk));
        }
        *state = ChunkState::Dirty;
        if let Some(q) = self.clients.get_mut(&client) {
            q.allocated -= 1;
        }
        Ok(())
    }

    /// `chunk` was zeroed: free for any queue.
    pub fn scrubbed(&mut self, chunk: ChunkId) {
        if let Some(state @ ChunkState::Dirty) = self.state.get_mut(chunk as usize) {
            *state = ChunkState::Free;
            self.free.push_back(chunk);
        }
    }

    /// Queue `from` is replaced by queue `to` of the same client (its allocation connection
    /// was opened again): what `from` allocated is `to`'s now (still bound for the client,
    /// and counted in `to`'s budget); what it had only queued is dirty (its chains can no
    /// longer run: the caller read `from`'s head last, after its QP failed). Returns those.
    pub fn transfer(&mut self, from: ClientId, to: ClientId) -> Vec<ChunkId> {
        let Some(old) = self.clients.remove(&from) else {
            return Vec::new();
        };
        let mut moved = 0;
        let mut back = Vec::new();
        for (i, state) in self.state.iter_mut().enumerate() {
            match *state {
                ChunkState::Allocated { client } if client == from => {
                    *state = ChunkState::Allocated { client: to };
                    moved += 1;
                }
                ChunkState::Reserved { client } if client == from => {
                    *state = ChunkState::Dirty;
                    back.push(i as ChunkId);
                }
                _ => {}
            }
        }
        debug_assert_eq!(moved, old.allocated);
        if let Some(q) = self.clients.get_mut(&to) {
            q.allocated += moved;
        }
        back
    }

    /// `client` left: everything it had queued or allocated is dirty (returned, to zero; a
    /// chunk still queued may have been taken since the head was last read).
    pub fn close(&mut self, client: ClientId) -> Vec<ChunkId> {
        if self.clients.remove(&client).is_none() {
            return Vec::new();
        }
        let mut back = Vec::new();
        for (i, state) in self.state.iter_mut().enumerate() {
            if matches!(*state, ChunkState::Reserved { client: c } | ChunkState::Allocated { client: c } if c == client)
            {
                *state = ChunkState::Dirty;
                back.push(i as ChunkId);
            }
        }
        back
    }
}

#[cfg(test)]
#[path = "chunks_tests.rs"]
mod tests;
