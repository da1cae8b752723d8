//! The NIC's side of one-sided allocation: the arena's windows, and each client's allocation
//! QP with the chains the manager posts on it in advance.
//!
//! One chain per filled slot of the client's queue ([`Refill`]), on the node's end of the
//! client's allocation connection (a cross-channel QP):
//!
//! 1. a receive (the client's request: a SEND of no bytes);
//! 2. a WAIT on the allocation QP's receive CQ until that receive completed;
//! 3. a signaled BIND of the chunk's type-2 window *for the client's access QP* (another QP
//!    of the same PD: the node's end of the client's data connection), with the slot's key;
//! 4. a WAIT on the allocation QP's send CQ until that bind completed;
//! 5. a signaled SEND to the client of the chunk's [`ChunkGrant`] (address, key, length),
//!    written by the manager when it filled the slot.
//!
//! Nothing the client sends reaches a work request: the chain binds the chunk the manager
//! chose, for the QP the manager named. The client learns the key only after the bind
//! completed. The manager counts the binds that completed (the queue's head) from the send
//! CQ, in the background.
//!
//! Invariants: slot `k`'s chain waits for receive `k + 1` and for the send CQ's completion
//! `2k + 1`, its bind's (counts since the QP's CQs were created: one receive per chain, and
//! two completions — the bind's and the SEND's; the WAITs are unsignaled), so chains run in
//! slot order, each once.

use super::chunks::{ChunkId, Refill};
use rnic::{
    AccessFlags, BindInfo, CompletionQueue, Context, CrossChannel, MemoryBuffer, MemoryKey,
    MemoryRegion, MemoryWindow, MwType, ProtectionDomain, Provider, QpInit, QpNumber, QpTiming,
    QueuePair, RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

/// Bytes of a [`ChunkGrant`] on the wire.
pub const GRANT_BYTES: usize = 16;

/// What an allocation gives the client: where the chunk is, its window's key, its length
/// (little-endian `u64`, `u32`, `u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkGrant {
    /// The chunk's first byte on the node.
    pub addr: u64,
    /// Its window's key (works on the client's access QP only).
    pub rkey: MemoryKey,
    /// Its length.
    pub len: u32,
}

impl ChunkGrant {
    /// The grant's bytes.
    pub fn encode(&self) -> [u8; GRANT_BYTES] {
        let mut b = [0u8; GRANT_BYTES];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.0.to_le_bytes());
        b[12..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// A grant from its bytes (`None`: too short).
    pub fn decode(b: &[u8]) -> Option<ChunkGrant> {
        Some(ChunkGrant {
            addr: u64::from_le_bytes(b.get(..8)?.try_into().ok()?),
            rkey: MemoryKey(u32::from_le_bytes(b.get(8..12)?.try_into().ok()?)),
            len: u32::from_le_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }
}

/// The arena: `chunks` chunks of `chunk_bytes`, and the grants the chains send (one per chunk:
/// a chunk is in at most one client's queue at a time). Each client's [`AllocChains`]
/// registers it in the client's PD and has windows of its own over it.
pub struct Arena<P: Provider> {
    buffer: P::Buffer,
    grants: P::Buffer,
    chunks: u32,
    chunk_bytes: u64,
}

impl<P: Provider> std::fmt::Debug for Arena<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("chunks", &self.chunks)
            .field("chunk_bytes", &self.chunk_bytes)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Arena<P> {
    /// Allocates the arena.
    pub fn new(ctx: &P::Context, chunks: u32, chunk_bytes: u64) -> Result<Self, VerbsError> {
        let bytes = usize::try_from(u64::from(chunks) * chunk_bytes)
            .map_err(|_| VerbsError::InvalidArgument("one-sided arena too large"))?;
        Ok(Arena {
            buffer: ctx.alloc_buffer(bytes)?,
            grants: ctx.alloc_buffer(chunks as usize * GRANT_BYTES)?,
            chunks,
            chunk_bytes,
        })
    }

    /// Chunks.
    pub fn chunks(&self) -> u32 {
        self.chunks
    }

    /// Chunk `chunk`'s first byte.
    pub fn chunk_addr(&self, chunk: ChunkId) -> u64 {
        self.buffer.addr() + u64::from(chunk) * self.chunk_bytes
    }

    /// Zeroes chunk `chunk` (before it is queued again).
    pub fn zero(&self, chunk: ChunkId) -> Result<(), VerbsError> {
        if chunk >= self.chunks {
            return Err(VerbsError::InvalidArgument("no such chunk"));
        }
        let off = (u64::from(chunk) * self.chunk_bytes) as usize;
        self.buffer
            .write(off, &vec![0u8; self.chunk_bytes as usize])
    }

    /// Reads `dst.len()` bytes of chunk memory at `addr` (for checks).
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), VerbsError> {
        let off = addr
            .checked_sub(self.buffer.addr())
            .ok_or(VerbsError::InvalidArgument("not in the arena"))?;
        self.buffer.read(off as usize, dst)
    }
}

/// The node's end of one client's allocation connection: a cross-channel QP whose receive
/// and send CQs its chains wait on, the arena registered in the client's PD, and the
/// client's windows over it (one per chunk it was given, made when first needed).
pub struct AllocChains<P: Provider> {
    pd: P::Pd,
    qp: P::Qp,
    recv_cq: P::Cq,
    send_cq: P::Cq,
    mr: P::Mr,
    grants_mr: P::Mr,
    windows: std::collections::HashMap<ChunkId, P::Mw>,
    /// The chunk of each window, by the window's key index.
    chunk_by_index: std::collections::HashMap<u32, ChunkId>,
    /// Binds that completed (the queue's head), counted from the send CQ.
    bound: u64,
}

impl<P: Provider> std::fmt::Debug for AllocChains<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocChains")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// Work requests one chain posts on the send queue.
const CHAIN_SENDS: u32 = 4;

impl<P: Provider> AllocChains<P> {
    /// A cross-channel QP in `pd` (the client's: that of its access QPs) for `slots` chains at
    /// a time, with CQs of its own (to be connected to the client's allocation QP), and the
    /// arena registered in `pd`.
    pub fn new(
        ctx: &P::Context,
        pd: &P::Pd,
        arena: &Arena<P>,
        slots: u32,
        timing: QpTiming,
    ) -> Result<Self, VerbsError> {
        let recv_cq = ctx.create_cq(slots.max(1))?;
        // Two completions a chain: its bind's and its SEND's.
        let send_cq = ctx.create_cq(2 * slots.max(1))?;
        let qp = pd.create_cross_channel_qp(
            QpInit {
                send_cq: &send_cq,
                recv_cq: &recv_cq,
                srq: None,
                max_send_wr: CHAIN_SENDS * slots.max(1),
                max_recv_wr: slots.max(1),
                access: AccessFlags::empty(),
                timing,
            },
            CrossChannel::default(),
        )?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
        let mr = pd.reg_mr(&arena.buffer, 0, arena.buffer.len(), access)?;
        let grants_mr = pd.reg_mr(
            &arena.grants,
            0,
            arena.grants.len(),
            AccessFlags::LOCAL_WRITE,
        )?;
        Ok(AllocChains {
            pd: pd.clone(),
            qp,
            recv_cq,
            send_cq,
            mr,
            grants_mr,
            windows: std::collections::HashMap::new(),
            chunk_by_index: std::collections::HashMap::new(),
            bound: 0,
        })
    }

    /// What chunk `chunk` is granted as to this client, bound with key byte `key` (its
    /// window is made if it has none yet).
    pub fn grant(
        &mut self,
        arena: &Arena<P>,
        chunk: ChunkId,
        key: u8,
    ) -> Result<ChunkGrant, VerbsError> {
        if chunk >= arena.chunks {
            return Err(VerbsError::InvalidArgument("no such chunk"));
        }
        let window = match self.windows.entry(chunk) {
            std::collections::hash_map::Entry::Occupied(w) => w.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mw = self.pd.alloc_mw(MwType::Type2)?;
                self.chunk_by_index.insert(mw.rkey().index(), chunk);
                v.insert(mw)
            }
        };
        Ok(ChunkGrant {
            addr: arena.chunk_addr(chunk),
            rkey: MemoryKey::new(window.rkey().index(), key),
            len: u32::try_from(arena.chunk_bytes).unwrap_or(u32::MAX),
        })
    }

    /// Takes over `old`'s windows (the client's allocation connection was opened again: the
    /// chunks they are bound for stay the client's, and their frees name these windows).
    pub fn adopt_windows(&mut self, old: &mut AllocChains<P>) {
        self.windows.extend(old.windows.drain());
        self.chunk_by_index.extend(old.chunk_by_index.drain());
    }

    /// The chunk whose window this client was given under `rkey` (any key byte).
    pub fn chunk_of(&self, rkey: MemoryKey) -> Option<ChunkId> {
        self.chunk_by_index.get(&rkey.index()).copied()
    }

    /// The QP (to connect).
    pub fn qp(&self) -> &P::Qp {
        &self.qp
    }

    /// Posts the chain of slot `refill.index`: it binds `refill.chunk` with `refill.key` for
    /// `access` when the client's next request arrives, then sends the grant.
    pub fn post(
        &mut self,
        arena: &Arena<P>,
        refill: &Refill,
        access: QpNumber,
    ) -> Result<(), VerbsError> {
        let grant = self.grant(arena, refill.chunk, refill.key)?;
        let window = &self.windows[&refill.chunk];
        let at = refill.chunk as usize * GRANT_BYTES;
        arena.grants.write(at, &grant.encode())?;
        self.qp.post_recv(&[RecvWr {
            wr_id: refill.index,
            sge: None,
        }])?;
        let n = refill.index + 1;
        let wrs = [
            SendWr {
                wr_id: refill.index,
                signaled: false,
                op: SendOp::Wait {
                    cq: self.recv_cq.cq_num(),
                    count: n,
                },
            },
            SendWr {
                wr_id: refill.index,
                signaled: true,
                op: SendOp::BindMw {
                    mw: window,
                    bind: BindInfo {
                        mr: Some(&self.mr),
                        addr: grant.addr,
                        length: arena.chunk_bytes,
                        access: AccessFlags::REMOTE_READ
                            | AccessFlags::REMOTE_WRITE
                            | AccessFlags::REMOTE_ATOMIC,
                        key: Some(refill.key),
                        target_qp: Some(access),
                    },
                },
            },
            SendWr {
                wr_id: refill.index,
                signaled: false,
                op: SendOp::Wait {
                    cq: self.send_cq.cq_num(),
                    // Chain k's bind is the send CQ's (2k + 1)-th completion: every chain
                    // before it completed its bind and its SEND.
                    count: 2 * refill.index + 1,
                },
            },
            // Signaled: an RC SEND that asks for no acknowledgement is acknowledged only by
            // a later request's, and the next chain's bind (a local request) completes in
            // order behind it.
            SendWr {
                wr_id: refill.index,
                signaled: true,
                op: SendOp::Send {
                    local: Some(Sge {
                        addr: arena.grants.addr() + at as u64,
                        length: GRANT_BYTES as u32,
                        lkey: self.grants_mr.lkey(),
                    }),
                },
            },
        ];
        self.qp.post_send(&wrs).map_err(|(_, e)| e)
    }

    /// Takes both CQs' completions (the manager calls it every turn: between two calls at
    /// most the queue's slots of chains run, which both CQs hold): returns the binds
    /// completed so far (the head) and
    /// the first failure, if any (a failed bind breaks the QP: the chains after it are
    /// flushed).
    pub fn head(&mut self) -> (u64, Option<WcStatus>) {
        let mut wcs = [WorkCompletion::default(); 16];
        // The receive CQ is only waited on, never read for its contents: drained here, or
        // it would overrun after as many requests as it holds, and an overrun completion is
        // not counted (the next chain's WAIT would never be satisfied).
        while self.recv_cq.poll(&mut wcs) > 0 {}
        let mut failed = None;
        loop {
            let n = self.send_cq.poll(&mut wcs);
            if n == 0 {
                return (self.bound, failed);
            }
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    failed.get_or_insert(wc.status);
                } else if wc.opcode == WcOpcode::BindMw {
                    self.bound += 1;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "chains_tests.rs"]
mod tests;
