//! [`Faulty`]: remote memory that reports the next CAS's outcome as unknown (a link failure
//! under it), after running it or without running it — what `MemError::OutcomeUnknown`
//! means. It also logs every CAS, so a test can check none was repeated blindly, and can
//! answer the next batches `Expired` without running them (a right whose lease ran out
//! between its grant and its use, as on a loaded machine), or refuse the block READs of the
//! next batches as the NIC does when a right's lease ran out while the batch was on its way
//! (`Rejected`; the rest of the batch runs, as the client library's spare QP makes it).
//! It can also keep the answers to acquires started without blocking until they are polled a
//! second time (a memory node a round trip away), counting how many are in flight at once,
//! and answer a chosen one of them `NotFound` (the node saying the block was freed). It
//! counts exclusive acquires that may wait and those that only try.

use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::{Acquiring, MemError, MemOp, MemOut, RemoteMemory};
use std::collections::HashMap;
use std::time::Duration;

/// The fault to inject into the next batch with a CAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasFault {
    /// The CAS ran; its result is lost.
    RanThenLost,
    /// The CAS never ran; nobody can tell.
    Lost,
}

/// Remote memory with one scripted fault.
#[derive(Debug)]
pub struct Faulty<M: RemoteMemory> {
    pub inner: M,
    pub next_cas: Option<CasFault>,
    /// Every CAS sent: (address, compare, swap).
    pub cas_log: Vec<(u64, u64, u64)>,
    /// How many of the next batches are answered `Expired` for every op, none of them run.
    pub expire_batches: usize,
    /// How many of the next batches that READ a region of at most `block_len` bytes (a KV
    /// block, not a subtable) have those READs refused (`Rejected`, not run).
    pub refuse_block_reads: usize,
    /// The largest region `refuse_block_reads` counts as a block.
    pub block_len: u64,
    /// Block READs refused so far.
    pub refused: usize,
    /// Acquires started without blocking are answered on their second poll (run at once,
    /// their answers held back), not at once.
    pub defer_acquires: bool,
    /// The acquire started without blocking with this index (counted from 0 by
    /// `started_acquires`) is answered `NotFound` instead of being run.
    pub not_found_at: Option<usize>,
    /// Acquires started without blocking so far.
    pub started_acquires: usize,
    /// Deferred acquires in flight, by ticket: polls so far and the answer.
    in_flight: HashMap<u64, (u32, Result<M::Region, MemError>)>,
    next_ticket: u64,
    /// The most deferred acquires in flight at once.
    pub max_in_flight: usize,
    /// Blocking exclusive acquires (they may wait at the node, holding off its holders).
    pub exclusive_acquires: usize,
    /// Exclusive `try_acquire`s (they never wait).
    pub exclusive_tries: usize,
}

impl<M: RemoteMemory> Faulty<M> {
    pub fn new(inner: M) -> Self {
        Faulty {
            inner,
            next_cas: None,
            cas_log: Vec::new(),
            expire_batches: 0,
            refuse_block_reads: 0,
            block_len: 0,
            refused: 0,
            defer_acquires: false,
            not_found_at: None,
            started_acquires: 0,
            in_flight: HashMap::new(),
            next_ticket: 1,
            max_in_flight: 0,
            exclusive_acquires: 0,
            exclusive_tries: 0,
        }
    }
}

impl<M: RemoteMemory> RemoteMemory for Faulty<M> {
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
        self.exclusive_acquires += usize::from(mode == Mode::Exclusive);
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
        self.exclusive_tries += usize::from(mode == Mode::Exclusive);
        self.inner.try_acquire(addr, len, lease, access, mode)
    }
    fn start_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Acquiring<M::Region> {
        let n = self.started_acquires;
        self.started_acquires += 1;
        let answer = if self.not_found_at == Some(n) {
            Err(MemError::NotFound)
        } else {
            self.inner.acquire(addr, len, lease, access, mode)
        };
        if !self.defer_acquires {
            return Acquiring::Answered(answer);
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.in_flight.insert(ticket, (0, answer));
        self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
        Acquiring::InFlight(ticket)
    }
    fn poll_acquire(&mut self, a: Acquiring<M::Region>) -> Acquiring<M::Region> {
        let Acquiring::InFlight(ticket) = a else {
            return a;
        };
        match self.in_flight.get_mut(&ticket) {
            Some((polls, _)) if *polls == 0 => {
                *polls += 1;
                Acquiring::InFlight(ticket)
            }
            Some(_) => match self.in_flight.remove(&ticket) {
                Some((_, answer)) => Acquiring::Answered(answer),
                None => Acquiring::InFlight(ticket),
            },
            None => Acquiring::Answered(Err(MemError::Invalid("no such acquire in flight"))),
        }
    }
    fn abandon_acquire(&mut self, a: Acquiring<M::Region>) {
        let answer = match a {
            Acquiring::Answered(r) => r,
            Acquiring::InFlight(ticket) => match self.in_flight.remove(&ticket) {
                Some((_, r)) => r,
                None => return,
            },
        };
        if let Ok(r) = answer {
            let _ = self.inner.relinquish(r);
        }
    }
    fn arm(&mut self) -> bool {
        !self.in_flight.is_empty()
    }
    fn extend(&mut self, region: &M::Region, lease: Duration) -> Result<(), MemError> {
        self.inner.extend(region, lease)
    }
    fn expires_within(&self, region: &M::Region, margin: Duration) -> bool {
        self.inner.expires_within(region, margin)
    }
    fn now(&self) -> rnic::Timestamp {
        self.inner.now()
    }
    fn release(&mut self, region: M::Region) -> Result<(), MemError> {
        self.inner.release(region)
    }
    fn release_many(&mut self, regions: Vec<M::Region>) -> Result<(), MemError> {
        self.inner.release_many(regions)
    }
    fn relinquish(&mut self, region: M::Region) -> Result<(), MemError> {
        self.inner.relinquish(region)
    }
    fn free(&mut self, region: M::Region) -> Result<(), MemError> {
        self.inner.free(region)
    }
    fn execute(&mut self, ops: &[MemOp<'_, M::Region>]) -> Vec<Result<MemOut, MemError>> {
        use patronus_ods::Region;
        if self.expire_batches > 0 {
            self.expire_batches -= 1;
            return vec![Err(MemError::Expired); ops.len()];
        }
        for op in ops {
            if let MemOp::Cas {
                on,
                offset,
                compare,
                swap,
            } = op
            {
                self.cas_log.push((on.addr() + offset, *compare, *swap));
            }
        }
        if self.refuse_block_reads > 0 {
            let refused: Vec<bool> = ops
                .iter()
                .map(|o| matches!(o, MemOp::Read { on, .. } if on.len() <= self.block_len))
                .collect();
            if refused.iter().any(|&r| r) {
                self.refuse_block_reads -= 1;
                let run: Vec<_> = ops
                    .iter()
                    .zip(&refused)
                    .filter(|(_, r)| !**r)
                    .map(|(o, _)| copy(o))
                    .collect();
                let mut out = self.inner.execute(&run).into_iter();
                return refused
                    .iter()
                    .map(|&r| {
                        if r {
                            self.refused += 1;
                            Err(MemError::Rejected)
                        } else {
                            out.next().unwrap_or(Err(MemError::Rejected))
                        }
                    })
                    .collect();
            }
        }
        let first_cas = ops.iter().position(|o| matches!(o, MemOp::Cas { .. }));
        let (Some(i), Some(fault)) = (first_cas, self.next_cas) else {
            return self.inner.execute(ops);
        };
        self.next_cas = None;
        match fault {
            CasFault::RanThenLost => {
                let mut out = self.inner.execute(ops);
                out[i] = Err(MemError::OutcomeUnknown);
                out
            }
            CasFault::Lost => {
                let rest: Vec<_> = ops
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, o)| copy(o))
                    .collect();
                let mut out = self.inner.execute(&rest);
                out.insert(i, Err(MemError::OutcomeUnknown));
                out
            }
        }
    }
}

fn copy<'a, R>(op: &MemOp<'a, R>) -> MemOp<'a, R> {
    match *op {
        MemOp::Read { on, offset, len } => MemOp::Read { on, offset, len },
        MemOp::Write { on, offset, data } => MemOp::Write { on, offset, data },
        MemOp::Cas {
            on,
            offset,
            compare,
            swap,
        } => MemOp::Cas {
            on,
            offset,
            compare,
            swap,
        },
        MemOp::Faa { on, offset, add } => MemOp::Faa { on, offset, add },
    }
}
