//! Freeing replaced blocks, one at a time or in batches.
//!
//! An update or delete frees the block it unlinked through a read-write right of its own
//! (the delayed-client property of §6.1: freeing ends every right over the block, so a
//! reader that validated it before cannot read it once it is reused). With
//! [`ClientOptions::free_batch`](super::ClientOptions::free_batch) above 1 the client keeps
//! the rights of the blocks it unlinked and frees them together once that many are waiting
//! (one round trip for the batch: [`RemoteMemory::free_many`]), or sooner when the lease of
//! one of them is about to run out, and at [`TableClient::close`]. A retired block is
//! unlinked: nobody finds it any more; until it is freed, readers that validated it earlier
//! may still read its (old, consistent) bytes, as they could between an unlink and its free.
//!
//! A free refused because the right ended (its lease ran out) is done again through a new
//! right, and only if the block still holds the write unlinked (its nonce): never a block
//! reused since.

use super::block::nonce_of;
use super::client::TableClient;
use super::layout::BLOCK_HEADER;
use super::stats::{bytes, exec};
use crate::memory::{MemError, MemOp, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};

impl<M: RemoteMemory> TableClient<M> {
    /// Frees the unlinked block `right` covers (it held the write with `nonce`) now, or with
    /// the next batch (see the module docs).
    pub(crate) fn retire(&mut self, mem: &mut M, right: M::Region, nonce: u64) {
        if self.opts.free_batch <= 1 {
            self.free_block(mem, right, nonce);
            return;
        }
        self.retired.push((right, nonce));
        self.flush_retired(mem, false);
    }

    /// Frees the retired blocks if `all`, if a batch is full, or if a retired right's lease
    /// ends within twice the margin (it would be refused by the time the batch is full).
    pub(crate) fn flush_retired(&mut self, mem: &mut M, all: bool) {
        let margin = self.opts.margin * 2;
        let due = all
            || self.retired.len() >= self.opts.free_batch
            || self
                .retired
                .iter()
                .any(|(r, _)| mem.expires_within(r, margin));
        if !due || self.retired.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.retired);
        let mut blocks = Vec::with_capacity(batch.len());
        let mut rights = Vec::with_capacity(batch.len());
        for (r, nonce) in batch {
            blocks.push((r.addr(), r.len(), nonce));
            rights.push(r);
        }
        self.stats.frees += rights.len() as u64;
        for ((addr, len, nonce), out) in blocks.into_iter().zip(mem.free_many(rights)) {
            if let Err(MemError::NotFound | MemError::Rejected | MemError::Expired) = out {
                self.free_again(mem, addr, len, nonce);
            }
        }
    }

    /// Frees a block through `right`; if the right ended, acquires the block again and frees
    /// it only if it still holds the write with `nonce` (not reused since). Best effort: a
    /// block that cannot be freed is left to its lease (and counted as not freed).
    pub(crate) fn free_block(&mut self, mem: &mut M, right: M::Region, nonce: u64) -> bool {
        let (addr, len) = (right.addr(), right.len());
        self.stats.frees += 1;
        match mem.free(right) {
            Ok(()) => true,
            Err(MemError::NotFound | MemError::Rejected | MemError::Expired) => {
                self.free_again(mem, addr, len, nonce)
            }
            Err(_) => false,
        }
    }

    /// The free of the block at `addr` was refused: frees it through a new right if it still
    /// holds the write with `nonce`.
    fn free_again(&mut self, mem: &mut M, addr: u64, len: u64, nonce: u64) -> bool {
        self.stats.acquires += 1;
        let lease = self.opts.read_lease;
        let Ok(again) = mem.acquire(addr, len, lease, Access::ReadWrite, Mode::Shared) else {
            return false; // freed already
        };
        let ops = [MemOp::Read {
            on: &again,
            offset: 0,
            len: BLOCK_HEADER as u32,
        }];
        let out = exec(&mut self.stats, mem, &ops).pop();
        match bytes(out) {
            Ok(h) if nonce_of(&h) == nonce => {
                self.stats.frees += 1;
                mem.free(again).is_ok()
            }
            _ => {
                self.give_up(mem, again);
                false
            }
        }
    }
}
