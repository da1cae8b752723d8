//! The recovery worker: one thread per set of data QPs that resets and reconnects the QPs a
//! fault broke (a new handshake on both sides) off the users' path, and hands them back as
//! spares. It waits on its queue (a channel) and never polls.

use crate::proto::connect::Intent;
use crossbeam_channel::{Receiver, Sender, unbounded};
use parking_lot::{Condvar, Mutex};
use rnic::{Provider, QueuePair};
use std::thread::JoinHandle;
use std::time::Duration;

/// A physical data QP and its slot (the index the memory node knows its connection by).
pub(crate) type Slotted<P> = (u8, <P as Provider>::Qp);

/// Resets `qp` and connects it again to `address` as slot `slot` of `intent`'s client.
pub(crate) fn reconnect<P: Provider>(
    qp: &P::Qp,
    address: &P::Address,
    intent: Intent,
    slot: u8,
) -> Result<(), rnic::VerbsError> {
    qp.reset()?;
    qp.connect(address, &Intent { slot, ..intent }.encode())
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
    pub(crate) fn start(address: P::Address, intent: Intent) -> Option<Self> {
        let (to_worker, queue) = unbounded::<Slotted<P>>();
        let (give_back, recovered) = unbounded::<Slotted<P>>();
        let done = std::sync::Arc::new((Mutex::new(Done::default()), Condvar::new()));
        let tally = done.clone();
        #[allow(clippy::disallowed_methods)] // the recovery worker is a driver thread
        let thread = std::thread::Builder::new()
            .name("patronus-qp-recovery".into())
            .spawn(move || {
                for (slot, qp) in queue {
                    let ok = reconnect::<P>(&qp, &address, intent, slot).is_ok();
                    // Handed back before it is counted: a waiter that sees the count finds
                    // the spare.
                    let gone = ok && give_back.send((slot, qp)).is_err();
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
