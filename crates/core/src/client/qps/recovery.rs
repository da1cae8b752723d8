//! The recovery worker: one thread per set of data QPs that resets and reconnects the QPs a
//! fault broke (a new handshake on both sides) off the users' path, and hands them back as
//! spares. It waits on its queue (a channel) and never polls.

use super::router::DataCq;
use crate::proto::connect::Intent;
use crossbeam_channel::{Receiver, Sender, unbounded};
use parking_lot::{Condvar, Mutex, RwLock};
use rnic::{Provider, QueuePair};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A physical data QP, its slot (the index the memory node knows its connection by), and
/// its generation, which moves when the QP is reset to be used again.
pub(crate) struct Slotted<P: Provider> {
    pub(crate) slot: u8,
    pub(crate) qp: P::Qp,
    /// The QP's generation: posts hold it for reading and check it against the one they
    /// looked up; a reset holds it for writing and moves it (see [`super::LaneView`]).
    pub(crate) generation: Arc<RwLock<u64>>,
}

impl<P: Provider> Slotted<P> {
    /// `qp`, connected as slot `slot`, in its first generation.
    pub(crate) fn new(slot: u8, qp: P::Qp) -> Self {
        Slotted {
            slot,
            qp,
            generation: Arc::new(RwLock::new(0)),
        }
    }
}

/// Resets `qp` and connects it again to `address` as slot `slot` of `intent`'s client,
/// once every request posted on it has completed into `cq` ([`DataCq::drain`]: a reset drops
/// what the QP has not completed, and other users may still have requests on it).
///
/// The reset starts a new generation of the QP, under its write lock: a user that looked the
/// QP up before (its lane may have moved on meanwhile) posts nothing on the reset QP, which
/// would otherwise run the user's requests on a spare, where type-2 windows are not bound.
pub(crate) fn reconnect<P: Provider>(
    s: &Slotted<P>,
    cq: &DataCq<P>,
    address: &P::Address,
    intent: Intent,
) -> Result<(), rnic::VerbsError> {
    {
        let mut generation = s.generation.write();
        cq.drain(&s.qp);
        *generation += 1;
        s.qp.reset()?;
    }
    s.qp.connect(
        address,
        &Intent {
            slot: s.slot,
            ..intent
        }
        .encode(),
    )
}

/// What the worker did so far; [`Recovery::wait_done`] blocks on it.
#[derive(Default)]
struct Done {
    recovered: u64,
    failed: u64,
}

/// The worker's handle: its queue in, the recovered QPs out, and its counts.
pub(crate) struct Recovery<P: Provider> {
    to_worker: Option<Sender<Slotted<P>>>,
    recovered: Receiver<Slotted<P>>,
    done: std::sync::Arc<(Mutex<Done>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl<P: Provider> Recovery<P> {
    /// Starts the worker for QPs of `intent`'s client at `address`. `None` if no thread could
    /// be started (recovery then happens on the users' path).
    pub(crate) fn start(
        address: P::Address,
        intent: Intent,
        cq: std::sync::Arc<DataCq<P>>,
    ) -> Option<Self> {
        let (to_worker, queue) = unbounded::<Slotted<P>>();
        let (give_back, recovered) = unbounded::<Slotted<P>>();
        let done = std::sync::Arc::new((Mutex::new(Done::default()), Condvar::new()));
        let tally = done.clone();
        #[allow(clippy::disallowed_methods)] // the recovery worker is a driver thread
        let thread = std::thread::Builder::new()
            .name("patronus-qp-recovery".into())
            .spawn(move || {
                for broken in queue {
                    let ok = reconnect::<P>(&broken, &cq, &address, intent).is_ok();
                    // Handed back before it is counted: a waiter that sees the count finds
                    // the spare.
                    let gone = ok && give_back.send(broken).is_err();
                    let (lock, cv) = &*tally;
                    let mut d = lock.lock();
                    if ok {
                        d.recovered += 1;
                    } else {
                        d.failed += 1;
                    }
                    cv.notify_all();
                    drop(d);
                    if gone {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Recovery {
            to_worker: Some(to_worker),
            recovered,
            done,
            thread: Some(thread),
        })
    }

    /// Queues a broken QP for recovery; gives it back if the worker is gone.
    pub(crate) fn send(&self, broken: Slotted<P>) -> Result<(), Slotted<P>> {
        match &self.to_worker {
            Some(tx) => tx.send(broken).map_err(|e| e.0),
            None => Err(broken),
        }
    }

    /// A QP the worker recovered, if one is ready.
    pub(crate) fn take(&self) -> Option<Slotted<P>> {
        self.recovered.try_recv().ok()
    }

    /// Recovered QPs not yet taken.
    pub(crate) fn ready(&self) -> usize {
        self.recovered.len()
    }

    /// (recovered, failed) so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let d = self.done.0.lock();
        (d.recovered, d.failed)
    }

    /// Blocks until the worker has finished `n` recoveries (successful or not) or `max`
    /// passes; returns (recovered, failed).
    pub(crate) fn wait_done(&self, n: u64, max: Duration) -> (u64, u64) {
        let (lock, cv) = &*self.done;
        let mut d = lock.lock();
        if d.recovered + d.failed < n {
            let _ = cv.wait_while_for(&mut d, |d| d.recovered + d.failed < n, max);
        }
        (d.recovered, d.failed)
    }
}

impl<P: Provider> Drop for Recovery<P> {
    fn drop(&mut self) {
        self.to_worker = None; // closes the queue: the worker exits
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
