//! One-sided verbs of a [`BaselineClient`]: READ, WRITE, CAS and FAA under an rkey, posted in
//! batches with one doorbell (one `post_send` of all the batch's work requests) and waited for
//! together.
//!
//! Invariants:
//! - A batch holds at most [`MAX_BATCH`] ops whose bytes, each at an 8-byte-aligned offset,
//!   fit the [`STAGING_BYTES`] staging buffer; a larger batch is refused whole
//!   ([`BaselineError::InvalidUse`]) with nothing posted.
//! - Every op of a batch gets one outcome, in order: its result; the status of its failed
//!   completion ([`BaselineError::Remote`]: a refusal by the NIC is `RemoteAccessError` or
//!   `RemoteInvalidRequestError`, the ops behind it are flushed, `WrFlushError`); the
//!   post's error for an op the QP did not take ([`BaselineError::Verbs`]); or
//!   [`BaselineError::Timeout`] if no completion came by the deadline.
//! - Completions of a batch given up on (timed out) are known by their batch number and
//!   dropped when they come late; replies that arrive meanwhile are filed for the RPC channel.

use super::{BaselineClient, BaselineError};
use patronus_core::rpc::IdleWait;
use rnic::{
    CompletionQueue, MemoryBuffer, MemoryKey, MemoryRegion, Provider, QueuePair, SendOp, SendWr,
    Sge, VerbsError, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

/// Most ops of one batch.
pub const MAX_BATCH: usize = 128;
/// Bytes of registered staging memory for one batch's ops (larger single READs and WRITEs go
/// in chunks).
pub const STAGING_BYTES: usize = 64 << 10;
/// Work requests the client's QP holds (a full batch and the control channel's sends).
pub(super) const SEND_QUEUE: u32 = 256;
/// Work-request ids of one-sided ops carry this tag (the control channel's carry another),
/// then the batch number, then the op's index.
const ONE_SIDED: u64 = 1 << 63;
const BATCH_BITS: u64 = (1 << 40) - 1;
const INDEX_BITS: u64 = 0xffff;

/// One one-sided operation of a batch.
#[derive(Clone, Copy, Debug)]
pub enum OneSided<'a> {
    /// RDMA READ of `len` bytes at `addr`.
    Read {
        /// The region's key.
        rkey: MemoryKey,
        /// Remote address.
        addr: u64,
        /// Bytes.
        len: u32,
    },
    /// RDMA WRITE of `data` at `addr`.
    Write {
        /// The region's key.
        rkey: MemoryKey,
        /// Remote address.
        addr: u64,
        /// Bytes.
        data: &'a [u8],
    },
    /// Compare-and-swap of the aligned word at `addr`.
    Cas {
        /// The region's key.
        rkey: MemoryKey,
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Fetch-and-add on the aligned word at `addr`.
    Faa {
        /// The region's key.
        rkey: MemoryKey,
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Added (wrapping).
        add: u64,
    },
}

impl OneSided<'_> {
    /// Staging bytes the op uses.
    pub fn len(&self) -> usize {
        match self {
            OneSided::Read { len, .. } => *len as usize,
            OneSided::Write { data, .. } => data.len(),
            OneSided::Cas { .. } | OneSided::Faa { .. } => 8,
        }
    }

    /// Whether the op moves no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a one-sided op returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OneSidedOut {
    /// A READ's bytes.
    Read(Vec<u8>),
    /// A WRITE is done.
    Written,
    /// A CAS's or FAA's previous value.
    Atomic(u64),
}

/// Per-op outcomes of a batch, in order.
pub type Outcomes = Vec<Result<OneSidedOut, BaselineError>>;

impl<P: Provider> BaselineClient<P> {
    /// One-sided RDMA READ of `dst.len()` bytes at `addr` under `rkey`.
    pub fn read(
        &mut self,
        rkey: MemoryKey,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), BaselineError> {
        for (i, chunk) in dst.chunks_mut(STAGING_BYTES).enumerate() {
            let at = addr.wrapping_add((i * STAGING_BYTES) as u64);
            let len = chunk.len() as u32;
            match self.single(OneSided::Read {
                rkey,
                addr: at,
                len,
            })? {
                OneSidedOut::Read(bytes) if bytes.len() == chunk.len() => {
                    chunk.copy_from_slice(&bytes)
                }
                _ => return Err(BaselineError::InvalidUse("a READ without its bytes")),
            }
        }
        Ok(())
    }

    /// One-sided RDMA WRITE of `src` to `addr` under `rkey`.
    pub fn write(&mut self, rkey: MemoryKey, addr: u64, src: &[u8]) -> Result<(), BaselineError> {
        for (i, chunk) in src.chunks(STAGING_BYTES).enumerate() {
            let at = addr.wrapping_add((i * STAGING_BYTES) as u64);
            self.single(OneSided::Write {
                rkey,
                addr: at,
                data: chunk,
            })?;
        }
        Ok(())
    }

    fn single(&mut self, op: OneSided<'_>) -> Result<OneSidedOut, BaselineError> {
        self.execute(&[op])?
            .pop()
            .unwrap_or(Err(BaselineError::InvalidUse("an op without an outcome")))
    }

    /// Posts `ops` with one doorbell and waits for all of them; one outcome per op, in order
    /// (see the module docs). `Err` only for a batch refused whole (nothing posted).
    pub fn execute(&mut self, ops: &[OneSided<'_>]) -> Result<Outcomes, BaselineError> {
        if ops.len() > MAX_BATCH {
            return Err(BaselineError::InvalidUse("more ops than a batch holds"));
        }
        let mut at = Vec::with_capacity(ops.len());
        let mut cursor = 0usize;
        for op in ops {
            let start = cursor.next_multiple_of(8);
            cursor = start + op.len();
            if cursor > self.staging.len() {
                return Err(BaselineError::InvalidUse(
                    "batch larger than the staging buffer",
                ));
            }
            at.push(start);
        }
        self.next_op += 1;
        let batch = self.next_op & BATCH_BITS;
        let lkey = self.staging_mr.lkey();
        let base = self.staging.addr();
        let mut wrs = Vec::with_capacity(ops.len());
        for (i, (op, &start)) in ops.iter().zip(&at).enumerate() {
            let local = Sge {
                addr: base + start as u64,
                length: op.len() as u32,
                lkey,
            };
            let op = match *op {
                OneSided::Read { rkey, addr, .. } => SendOp::Read {
                    local,
                    remote_addr: addr,
                    rkey,
                },
                OneSided::Write { rkey, addr, data } => {
                    self.staging.write(start, data)?;
                    SendOp::Write {
                        local,
                        remote_addr: addr,
                        rkey,
                    }
                }
                OneSided::Cas {
                    rkey,
                    addr,
                    compare,
                    swap,
                } => SendOp::CompareSwap {
                    local,
                    remote_addr: addr,
                    rkey,
                    compare,
                    swap,
                },
                OneSided::Faa { rkey, addr, add } => SendOp::FetchAdd {
                    local,
                    remote_addr: addr,
                    rkey,
                    add,
                },
            };
            wrs.push(SendWr {
                wr_id: ONE_SIDED | batch << 16 | i as u64,
                signaled: true,
                op,
            });
        }
        let (posted, mut refused) = match self.rpc.qp().post_send(&wrs) {
            Ok(()) => (wrs.len(), None),
            Err((k, e)) => (k, Some(e)),
        };
        drop(wrs);
        let statuses = self.collect(batch, posted, ops.len());
        Ok(ops
            .iter()
            .zip(&at)
            .zip(statuses)
            .enumerate()
            .map(|(i, ((op, &start), status))| match status {
                Some(WcStatus::Success) => self.output(op, start),
                Some(s) => Err(BaselineError::Remote(s)),
                // The first op not taken gets the post's error, those behind it a note.
                None if i >= posted => Err(BaselineError::Verbs(
                    refused
                        .take()
                        .unwrap_or(VerbsError::InvalidArgument("not posted")),
                )),
                None => Err(BaselineError::Timeout),
            })
            .collect())
    }

    fn output(&self, op: &OneSided<'_>, start: usize) -> Result<OneSidedOut, BaselineError> {
        Ok(match op {
            OneSided::Read { len, .. } => {
                let mut bytes = vec![0u8; *len as usize];
                self.staging.read(start, &mut bytes)?;
                OneSidedOut::Read(bytes)
            }
            OneSided::Write { .. } => OneSidedOut::Written,
            OneSided::Cas { .. } | OneSided::Faa { .. } => {
                OneSidedOut::Atomic(self.staging.load_u64(start)?)
            }
        })
    }

    /// Waits for the completions of the first `posted` ops of batch `batch` (of `n`), filing
    /// replies that arrive meanwhile. Spins briefly, then sleeps on the CQ; bounded by the
    /// configured timeout (wall time).
    #[allow(clippy::disallowed_methods)] // a timeout is wall time
    fn collect(&mut self, batch: u64, posted: usize, n: usize) -> Vec<Option<WcStatus>> {
        let mut statuses = vec![None; n];
        let deadline = Instant::now() + self.cfg.timeout;
        let mut idle = IdleWait::default();
        let mut wcs = [WorkCompletion::default(); 16];
        let mut got = 0;
        while got < posted {
            let k = self.cq.poll(&mut wcs);
            for wc in &wcs[..k] {
                if wc.wr_id & ONE_SIDED == 0 {
                    // Flushed receives of the same broken QP are reported by the ops' own
                    // statuses.
                    let _ = self.rpc.on_completion(wc);
                    continue;
                }
                if (wc.wr_id >> 16) & BATCH_BITS != batch {
                    continue; // a batch given up on
                }
                let i = (wc.wr_id & INDEX_BITS) as usize;
                if let Some(slot) = statuses.get_mut(i).filter(|s| s.is_none()) {
                    *slot = Some(wc.status);
                    got += 1;
                }
            }
            if k > 0 {
                idle.busy();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            idle.idle(&self.cq, (deadline - now).min(Duration::from_millis(1)));
        }
        statuses
    }
}
