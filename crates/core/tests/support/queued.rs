//! Devices on a queued in-process network timed by a virtual clock, for tests that put
//! delays or faults on the wire; the test runs the network's delivery (a pump thread) itself.

use rnic::soft::link::queued::QueuedNetwork;
use rnic::soft::{SoftConfig, SoftContext, SoftFabric};
use rnic::{Clock, VirtualClock};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A queued network, its fabric and the virtual clock of every device on it.
pub struct QueuedBed {
    /// The clock the network and the devices read.
    pub clock: Arc<VirtualClock>,
    /// The network (faults, stepping).
    pub net: Arc<QueuedNetwork>,
    fabric: SoftFabric,
}

impl QueuedBed {
    /// A network whose faults draw from `seed`.
    pub fn new(seed: u64) -> Self {
        let clock = VirtualClock::new();
        let net = QueuedNetwork::new(clock.clone(), seed);
        let fabric = SoftFabric::queued(net.clone());
        QueuedBed { clock, net, fabric }
    }

    /// The network's delivery, run on a thread of its own until `stop`: the clock moves to
    /// the next due packet, which is delivered; while `hold` is set, time stands still and
    /// nothing with a delay is delivered.
    pub fn pump(&self, stop: &AtomicBool, hold: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            if !hold.load(Ordering::SeqCst)
                && let Some(due) = self.net.next_due()
            {
                self.clock.set(due);
            }
            self.net.step(self.clock.now());
            std::thread::yield_now();
        }
    }

    /// A device on the network, seeded with `seed`.
    pub fn device(&self, seed: u64) -> SoftContext {
        self.fabric.open_device(SoftConfig {
            clock: self.clock.clone(),
            seed: Some(seed),
            ..SoftConfig::default()
        })
    }
}

/// Sets the flag when dropped, also when an assertion fails (a pump thread that stops on it
/// then lets the test's thread scope end).
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
