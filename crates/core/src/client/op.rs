//! The data path's ops (one READ, WRITE, CAS or FAA through a permission's window) and a
//! batch's progress through its rounds (`batch_run` drives it): plain data, no I/O.

use super::core::RetryRounds;
use super::error::ClientError;
use crate::rpc::IdleWait;
use rnic::{MemoryKey, QpNumber, Timestamp, WcStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

impl Op {
    pub(super) fn rkey(&self) -> MemoryKey {
        let both = self.rkeys.load(Ordering::SeqCst);
        if self.lifetime {
            MemoryKey(both as u32)
        } else {
            MemoryKey((both >> 32) as u32)
        }
    }
}

/// What a successful op produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// READ data.
    Read(Vec<u8>),
    /// WRITE done.
    Written,
    /// CAS/FAA: the previous value.
    Atomic(u64),
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Read,
    Write,
    Cas {
        compare: u64,
        swap: u64,
    },
    Faa {
        add: u64,
    },
    /// A SEND_WITH_INV of the permission's key (no bytes): frees a one-sided chunk.
    Invalidate,
}

#[derive(Debug)]
pub(super) struct Op {
    pub(super) addr: u64,
    /// The permission's current rkeys, read when the op is posted (a QP switch under type-2
    /// isolation refreshes them between a flush and the retry).
    pub(super) rkeys: Arc<AtomicU64>,
    /// Use the lifetime window's rkey instead of the buffer's.
    pub(super) lifetime: bool,
    pub(super) len: u32,
    pub(super) kind: Kind,
    pub(super) payload: Vec<u8>,
    pub(super) staging: usize,
}

/// A batch on its way: its ops, their results so far, the ops still to run and the round on
/// the wire.
#[derive(Debug)]
pub(super) struct BatchRun {
    pub(super) results: Vec<Option<Result<OpResult, ClientError>>>,
    pub(super) ops: Vec<Option<Op>>,
    pub(super) todo: Vec<usize>,
    pub(super) rounds: RetryRounds,
    pub(super) round: Option<Round>,
}

/// One posting of the ops still to do, and what of it has completed.
#[derive(Debug)]
pub(super) struct Round {
    pub(super) epoch: u64,
    pub(super) qpn: QpNumber,
    pub(super) incarnation: u64,
    pub(super) indexes: Vec<usize>,
    pub(super) posted: usize,
    pub(super) out: Vec<(usize, WcStatus)>,
    pub(super) causes: Vec<Option<WcStatus>>,
    pub(super) got: usize,
    pub(super) deadline: Timestamp,
    pub(super) idle: IdleWait,
}

impl BatchRun {
    /// A run refused as a whole: every op fails with `e` (nothing is posted).
    pub(super) fn refused(n: usize, e: &ClientError) -> BatchRun {
        let why = match e {
            ClientError::InvalidArgument(w) => *w,
            _ => "refused",
        };
        BatchRun {
            results: (0..n)
                .map(|_| Some(Err(ClientError::InvalidArgument(why))))
                .collect(),
            ops: Vec::new(),
            todo: Vec::new(),
            rounds: RetryRounds::default(),
            round: None,
        }
    }

    /// Whether the run was refused before anything was posted (see [`BatchRun::refused`]).
    pub(super) fn is_refused(&self) -> bool {
        self.ops.is_empty() && self.todo.is_empty() && self.round.is_none()
    }

    /// Whether every op has its result.
    pub(super) fn is_done(&self) -> bool {
        self.todo.is_empty() && self.round.is_none()
    }

    /// The results, one per op in order (taken out: the run holds none after).
    pub(super) fn finish(&mut self) -> Vec<Result<OpResult, ClientError>> {
        std::mem::take(&mut self.results)
            .into_iter()
            .map(|r| {
                r.unwrap_or(Err(ClientError::Internal(
                    "an op of the batch without a result",
                )))
            })
            .collect()
    }
}

/// A posted batch dropped before it was taken, for its client to finish (its ops may still
/// be running, into the client's staging memory).
pub(super) type Abandoned = Arc<parking_lot::Mutex<Option<BatchRun>>>;
