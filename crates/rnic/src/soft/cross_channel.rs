//! The device's cross-channel fabric: CQ and QP numbers resolved to the objects a WAIT, an
//! ENABLE or a bind for another QP names, and the chain engine that runs held requests.
//!
//! Below the queues and the QPs, which it knows only through the small traits here. A CQ
//! whose count reaches what a WAIT waits for, or an ENABLE of a managed queue, never runs the
//! released requests itself: it may hold the locks of the QP whose completion it queued (a
//! QP waiting on its own send CQ would deadlock). It hands the waiting QP to the engine, a
//! thread of the device started with its first cross-channel QP, which runs each QP's
//! released requests with no other lock held — the NIC's own execution unit, so no CPU of the
//! node that posted the chain takes part.
//!
//! Invariants: the maps hold `Weak` references only (an entry never keeps an object alive);
//! an object removes its entry when it drops; the engine holds no reference to the device, so
//! it ends when the device's last handle goes (its channel's sender is dropped with it).

use crate::verbs::{CqNumber, PdId, QpNumber, QpState, VerbsError, VerbsResult, WorkQueue};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Weak};

/// CQ numbers are unique in the process, so a WAIT naming another device's CQ names nothing
/// here (24 bits, as on the wire of a real NIC's WAIT segment; 0 is never used).
static NEXT_CQN: AtomicU32 = AtomicU32::new(1);

/// A CQ as a WAIT sees it: a count of completions and a way to be told when it grows.
pub(crate) trait CountedCq: Send + Sync {
    /// Whether `count` completions were produced; if not, `waiter` is scheduled on the
    /// engine once they are.
    fn reached_or_notify(&self, count: u64, waiter: Weak<dyn ChainStep>) -> bool;
}

/// A QP with requests to run: the engine calls [`step`](Self::step) with no lock held.
pub(crate) trait ChainStep: Send + Sync {
    /// Runs the released requests at the head of the send queue, in order.
    fn step(&self);
}

/// A QP as an ENABLE or a bind for another QP sees it.
pub(crate) trait NamedQp: Send + Sync {
    /// Its protection domain.
    fn pd(&self) -> PdId;
    /// Its state.
    fn qp_state(&self) -> QpState;
    /// How often it was reset (counted before its type-2 windows are invalidated).
    fn resets(&self) -> u64;
    /// Whether `queue` is managed (only then may an ENABLE name it).
    fn is_managed(&self, queue: WorkQueue) -> bool;
    /// Raises `queue`'s enable limit to `index` (never lowers it) and runs what it released.
    fn enable(&self, queue: WorkQueue, index: u64);
}

type StepQueue = Sender<Weak<dyn ChainStep>>;

/// Per-device registry of CQs and QPs by number, and the chain engine's queue.
#[derive(Default)]
pub(crate) struct CrossChannelHub {
    cqs: RwLock<HashMap<CqNumber, Weak<dyn CountedCq>>>,
    qps: RwLock<HashMap<QpNumber, Weak<dyn NamedQp>>>,
    engine: Mutex<Option<StepQueue>>,
}

impl CrossChannelHub {
    /// A fresh CQ number: process-wide unique until the 24-bit counter wraps, never 0, and
    /// never one a live CQ of this device has.
    pub(crate) fn unused_cqn(&self) -> CqNumber {
        loop {
            let n = NEXT_CQN.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
            if n != 0 && !self.cqs.read().contains_key(&CqNumber(n)) {
                return CqNumber(n);
            }
        }
    }

    pub(crate) fn register_cq(&self, cqn: CqNumber, cq: Weak<dyn CountedCq>) {
        self.cqs.write().insert(cqn, cq);
    }

    pub(crate) fn unregister_cq(&self, cqn: CqNumber) {
        self.cqs.write().remove(&cqn);
    }

    /// The live CQ numbered `cqn` on this device.
    pub(crate) fn cq(&self, cqn: CqNumber) -> Option<Arc<dyn CountedCq>> {
        self.cqs.read().get(&cqn).and_then(Weak::upgrade)
    }

    pub(crate) fn register_qp(&self, qpn: QpNumber, qp: Weak<dyn NamedQp>) {
        self.qps.write().insert(qpn, qp);
    }

    pub(crate) fn unregister_qp(&self, qpn: QpNumber) {
        self.qps.write().remove(&qpn);
    }

    /// The live QP numbered `qpn` on this device.
    pub(crate) fn qp(&self, qpn: QpNumber) -> Option<Arc<dyn NamedQp>> {
        self.qps.read().get(&qpn).and_then(Weak::upgrade)
    }

    /// Starts the chain engine if it is not running (with the device's first cross-channel QP).
    pub(crate) fn start_engine(&self) -> VerbsResult<()> {
        let mut engine = self.engine.lock();
        if engine.is_some() {
            return Ok(());
        }
        let (tx, rx) = channel::<Weak<dyn ChainStep>>();
        std::thread::Builder::new()
            .name("soft-nic-chains".into())
            .spawn(move || {
                // Ends when the device (the only sender) is gone.
                while let Ok(qp) = rx.recv() {
                    if let Some(qp) = qp.upgrade() {
                        qp.step();
                    }
                }
            })
            .map_err(VerbsError::Io)?;
        *engine = Some(tx);
        Ok(())
    }

    /// Hands `qp` to the engine, which runs its released requests soon, on its own thread.
    pub(crate) fn schedule(&self, qp: Weak<dyn ChainStep>) {
        if let Some(tx) = self.engine.lock().as_ref() {
            let _ = tx.send(qp);
        }
    }
}

/// What a CQ keeps for WAITs: its completion count and the QPs waiting for counts.
///
/// The count is raised under the CQ's queue lock (a load and a store: completions of one CQ
/// are serialized there, so the hot path has no extra read-modify-write), and a waiter reads
/// it under that lock too. A waiter raises `has_waiters` before it reads the count; a
/// completion reads `has_waiters` after it released the queue lock. If the waiter's read came
/// first, the completion's lock acquisition follows it and sees the flag; otherwise the waiter
/// sees the new count. Either way no wake-up is missed.
#[derive(Default)]
pub(crate) struct CompletionCounter {
    produced: std::sync::atomic::AtomicU64,
    has_waiters: std::sync::atomic::AtomicBool,
    waiters: Mutex<Vec<(u64, Weak<dyn ChainStep>)>>,
}

impl CompletionCounter {
    /// Completions counted so far (exact under the CQ's queue lock).
    pub(crate) fn produced(&self) -> u64 {
        self.produced.load(Ordering::Relaxed)
    }

    /// Counts one completion. The caller holds the CQ's queue lock.
    pub(crate) fn count_locked(&self) {
        let n = self.produced.load(Ordering::Relaxed);
        self.produced.store(n + 1, Ordering::Relaxed);
    }

    /// After a completion was counted and the queue lock released: hands the waiters whose
    /// count is reached to `hub`'s engine. One load when nobody waits.
    pub(crate) fn wake_due(&self, hub: &CrossChannelHub) {
        if !self.has_waiters.load(Ordering::SeqCst) {
            return;
        }
        let mut waiters = self.waiters.lock();
        // At least the count this thread stored (coherence); a later one is fine too.
        let now = self.produced();
        let mut due = Vec::new();
        waiters.retain(|(count, qp)| {
            if *count <= now {
                due.push(qp.clone());
                false
            } else {
                true
            }
        });
        if waiters.is_empty() {
            self.has_waiters.store(false, Ordering::SeqCst);
        }
        drop(waiters);
        for qp in due {
            hub.schedule(qp);
        }
    }

    /// Whether `count` was reached; if not, `waiter` is scheduled when it is. `locked_count`
    /// reads the count under the CQ's queue lock.
    pub(crate) fn reached_or_notify(
        &self,
        count: u64,
        waiter: Weak<dyn ChainStep>,
        locked_count: impl Fn() -> u64,
    ) -> bool {
        if locked_count() >= count {
            return true;
        }
        let mut waiters = self.waiters.lock();
        self.has_waiters.store(true, Ordering::SeqCst);
        if locked_count() >= count {
            return true;
        }
        if !waiters
            .iter()
            .any(|(c, w)| *c == count && w.ptr_eq(&waiter))
        {
            waiters.push((count, waiter));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Step;
    impl ChainStep for Step {
        fn step(&self) {}
    }

    #[test]
    fn a_waiter_is_told_once_its_count_is_reached() {
        let hub = CrossChannelHub::default();
        let (tx, rx) = channel();
        *hub.engine.lock() = Some(tx);
        let counter = CompletionCounter::default();
        let count = || counter.produced();
        let step: Arc<dyn ChainStep> = Arc::new(Step);
        let complete = || {
            counter.count_locked();
            counter.wake_due(&hub);
        };
        assert!(counter.reached_or_notify(0, Arc::downgrade(&step), count));
        assert!(!counter.reached_or_notify(2, Arc::downgrade(&step), count));
        assert!(
            !counter.reached_or_notify(2, Arc::downgrade(&step), count),
            "registered once"
        );
        complete();
        assert!(rx.try_recv().is_err(), "one completion of two");
        complete();
        assert!(rx.try_recv().is_ok(), "scheduled at the count");
        assert!(rx.try_recv().is_err(), "and only once");
        complete();
        assert!(rx.try_recv().is_err(), "nobody waits any more");
        assert!(counter.reached_or_notify(3, Arc::downgrade(&step), count));
    }
}
