//! A connection's share of its engine and its QP's responder rate limit, as the connection
//! applies them (the decisions are the sans-IO `sched` and `bucket` modules'), and the
//! per-QP counters of what was served.
//!
//! Invariant: a request frame is delivered only after the rate gate admitted it (taking its
//! tokens); one the gate refuses stays unparsed in the receive buffer, and the connection's
//! socket is not read until the gate's time comes (TCP's flow control pushes back on the
//! requester meanwhile).

use super::bucket::RateGate;
use super::sched::TurnBudget;
use crate::verbs::{QpService, Timestamp};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// What one connection was served (see [`TcpQpStats`](super::TcpQpStats)).
#[derive(Debug, Default)]
pub(super) struct Served {
    pub(super) ops: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) throttled: AtomicU64,
    /// The device's count of served requests when this connection's latest was served.
    pub(super) last_at: AtomicU64,
}

/// The service of one connection's QP.
#[derive(Debug)]
pub(super) struct ConnService {
    weight: AtomicU32,
    /// Whether `gate` limits anything (read without its lock on every request).
    limited: AtomicBool,
    gate: Mutex<RateGate>,
    /// The last request was refused by the gate and waits for its time.
    waiting: AtomicBool,
    pub(super) served: Served,
}

impl Default for ConnService {
    fn default() -> Self {
        ConnService {
            weight: AtomicU32::new(1),
            limited: AtomicBool::new(false),
            gate: Mutex::new(RateGate::default()),
            waiting: AtomicBool::new(false),
            served: Served::default(),
        }
    }
}

impl ConnService {
    /// Applies `service` from `now` (see [`RateGate::reconfigure`]: a limit set where there
    /// was none starts with full buckets, a changed one keeps its balance). Returns whether a
    /// request was waiting for the old gate (the engine should look at it again).
    pub(super) fn set(&self, service: &QpService, now: Timestamp) -> bool {
        {
            let mut gate = self.gate.lock();
            gate.reconfigure(service, now);
            self.limited.store(!gate.is_open(), Ordering::SeqCst);
        }
        self.weight.store(service.weight.max(1), Ordering::Relaxed);
        self.waiting.load(Ordering::SeqCst)
    }

    /// An engine turn of this connection.
    pub(super) fn turn(&self) -> TurnBudget {
        TurnBudget::for_weight(self.weight.load(Ordering::Relaxed))
    }

    /// Whether a request of `len` bytes may be served now (`now` is read only when a rate
    /// limit is set); `Err` says when to try again. Counts a refusal.
    pub(super) fn admit(
        &self,
        len: usize,
        now: impl FnOnce() -> Timestamp,
    ) -> Result<(), Timestamp> {
        if !self.limited.load(Ordering::SeqCst) {
            return Ok(());
        }
        let res = self.gate.lock().admit(now(), len as u64);
        let was_waiting = self.waiting.swap(res.is_err(), Ordering::SeqCst);
        if res.is_err() && !was_waiting {
            self.served.throttled.fetch_add(1, Ordering::Relaxed);
        }
        res
    }

    /// A request of `len` bytes was delivered, the `seq`-th the device served.
    pub(super) fn count(&self, len: usize, seq: u64) {
        self.served.ops.fetch_add(1, Ordering::Relaxed);
        self.served.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.served.last_at.store(seq, Ordering::Relaxed);
    }
}
