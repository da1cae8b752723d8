//! Rights over other clients' blocks acquired without blocking: a reader starts the acquire
//! ([`RemoteMemory::start_acquire`]) and its operation yields (`Pending`) until the answer is
//! here, so a thread driving many logical clients keeps their acquires in flight together
//! instead of waiting one round trip per lookup in turn. The acquires in flight are the table
//! client's (any operation of it needing the same block takes the answer); the granted right
//! goes into the block-right cache like one acquired blocking.

use super::client::TableClient;
use super::layout::Slot;
use crate::memory::{Acquiring, MemError, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::task::Poll;

impl<M: RemoteMemory> TableClient<M> {
    /// Gets a right over the block `entry` names (`access`, shared, `lease`) into the
    /// block-right cache, kept for that entry, without blocking: starts its acquire (counted)
    /// or polls the one in flight for that address. `Ready(Ok)` once an answer came (the
    /// caller looks in the cache again: an answer to an acquire with less access, or for
    /// another entry, does not do), `Pending` while in flight, `Ready(Err)` with the acquire's
    /// error.
    pub(crate) fn poll_block_right(
        &mut self,
        mem: &mut M,
        entry: Slot,
        access: Access,
        lease: std::time::Duration,
    ) -> Poll<Result<(), MemError>> {
        let (addr, len) = (entry.ptr(), entry.len());
        let (asked, a) = match self.acquiring.remove(&addr) {
            Some((asked, a)) => (asked, mem.poll_acquire(a)),
            None => {
                self.stats.acquires += 1;
                let a = mem.start_acquire(addr, len, lease, access, Mode::Shared);
                (access, mem.poll_acquire(a))
            }
        };
        self.awaiting = false;
        match a {
            Acquiring::Answered(Ok(r)) => {
                self.keep_block_right(mem, addr, r, asked, entry);
                Poll::Ready(Ok(()))
            }
            Acquiring::Answered(Err(e)) => Poll::Ready(Err(e)),
            in_flight @ Acquiring::InFlight(_) => {
                self.acquiring.insert(addr, (asked, in_flight));
                self.awaiting = true;
                Poll::Pending
            }
        }
    }

    /// Whether this client's last step waited for an acquire's answer — an operation's, or
    /// a split's classification acquires (nothing else to do until it comes: its driver may
    /// sleep on the memory's completion channel, see [`RemoteMemory::arm`]).
    pub fn awaiting_answer(&self) -> bool {
        (self.awaiting && !self.acquiring.is_empty()) || self.split_awaiting
    }
}
