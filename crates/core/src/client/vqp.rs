//! Virtual QPs with spares (paper §5.5): the client talks through one active physical QP; when
//! an illegal access breaks it, a prepared spare is promoted at once and the broken QP is reset
//! and reconnected (a new handshake on both sides) by a background worker, then becomes a spare
//! again. Type-1 windows belong to the PD, so permissions stay valid across the switch.

use crate::proto::connect::Intent;
use crossbeam_channel::{Receiver, Sender, unbounded};
use rnic::{Provider, QueuePair};
use std::collections::VecDeque;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Reconnects broken QPs off the application's path.
/// A physical QP and its slot (the index the memory node knows its connection by).
type Slotted<P> = (u8, <P as Provider>::Qp);

struct RecoveryWorker<P: Provider> {
    to_worker: Option<Sender<Slotted<P>>>,
    from_worker: Receiver<Slotted<P>>,
    thread: Option<JoinHandle<()>>,
}

impl<P: Provider> Drop for RecoveryWorker<P> {
    fn drop(&mut self) {
        self.to_worker = None; // closes the channel: the worker exits
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A virtual QP: one active physical QP plus spares.
pub(crate) struct VirtualQp<P: Provider> {
    active: Slotted<P>,
    spares: VecDeque<Slotted<P>>,
    worker: Option<RecoveryWorker<P>>,
    address: P::Address,
    intent: Intent,
    /// Completed switches.
    pub(crate) switches: u64,
    /// Time spent switching on the application's path (promotion or synchronous recovery).
    pub(crate) last_switch: Duration,
}

/// What a switch cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchKind {
    /// A spare was promoted.
    Promoted,
    /// No spare was ready: the broken QP was reset and reconnected synchronously.
    Recovered,
}

impl<P: Provider> VirtualQp<P> {
    pub(crate) fn new(
        active: Slotted<P>,
        spares: Vec<Slotted<P>>,
        address: P::Address,
        intent: Intent,
        background: bool,
    ) -> Self {
        let worker = background.then(|| {
            let (to_worker, rx) = unbounded::<Slotted<P>>();
            let (tx, from_worker) = unbounded::<Slotted<P>>();
            let addr = address.clone();
            #[allow(clippy::disallowed_methods)] // the recovery worker is a driver thread
            let thread = std::thread::Builder::new()
                .name("patronus-qp-recovery".into())
                .spawn(move || {
                    for (slot, qp) in rx {
                        if reconnect::<P>(&qp, &addr, intent, slot).is_ok()
                            && tx.send((slot, qp)).is_err()
                        {
                            return;
                        }
                    }
                })
                .ok();
            RecoveryWorker {
                to_worker: Some(to_worker),
                from_worker,
                thread,
            }
        });
        VirtualQp {
            active,
            spares: spares.into(),
            worker,
            address,
            intent,
            switches: 0,
            last_switch: Duration::ZERO,
        }
    }

    pub(crate) fn active(&self) -> &P::Qp {
        &self.active.1
    }

    /// What its QPs present when they connect (the slot aside).
    #[cfg(feature = "testing")]
    pub(crate) fn intent(&self) -> Intent {
        self.intent
    }

    /// The slot of the active QP.
    pub(crate) fn active_slot(&self) -> u8 {
        self.active.0
    }

    /// Spares ready now.
    pub(crate) fn spares_ready(&self) -> usize {
        let recovered = self.worker.as_ref().map_or(0, |w| w.from_worker.len());
        self.spares.len() + recovered
    }

    fn collect(&mut self) {
        if let Some(w) = &self.worker {
            while let Ok(qp) = w.from_worker.try_recv() {
                self.spares.push_back(qp);
            }
        }
    }

    /// Moves every QP held here to ERR: their session ended (the ones the recovery worker
    /// holds are dropped with it).
    pub(crate) fn set_error(&self) {
        self.active.1.set_error();
        for (_, qp) in &self.spares {
            qp.set_error();
        }
    }

    /// Replaces the broken active QP.
    #[allow(clippy::disallowed_methods)] // measures the interruption the application sees
    pub(crate) fn fail_over(&mut self) -> Result<SwitchKind, rnic::VerbsError> {
        let started = Instant::now();
        self.collect();
        let kind = match self.spares.pop_front() {
            Some(spare) => {
                let broken = std::mem::replace(&mut self.active, spare);
                match self.worker.as_ref().and_then(|w| w.to_worker.as_ref()) {
                    Some(tx) => {
                        let _ = tx.send(broken);
                    }
                    None => {
                        // No worker: recover now, off the critical op but on this thread.
                        if reconnect::<P>(&broken.1, &self.address, self.intent, broken.0).is_ok() {
                            self.spares.push_back(broken);
                        }
                    }
                }
                SwitchKind::Promoted
            }
            None => {
                reconnect::<P>(&self.active.1, &self.address, self.intent, self.active.0)?;
                SwitchKind::Recovered
            }
        };
        self.switches += 1;
        self.last_switch = started.elapsed();
        Ok(kind)
    }
}

fn reconnect<P: Provider>(
    qp: &P::Qp,
    address: &P::Address,
    intent: Intent,
    slot: u8,
) -> Result<(), rnic::VerbsError> {
    qp.reset()?;
    qp.connect(address, &Intent { slot, ..intent }.encode())
}
