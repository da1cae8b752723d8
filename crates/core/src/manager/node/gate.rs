//! A testing hook: holds a manager thread at the top of its loop, and lets it run one turn
//! at a time (`MemoryNode::hold_managers`, with the `testing` feature).
//!
//! With a thread held, what clients send waits in the NIC's receive queues; each step then
//! runs exactly one iteration of the manager's loop (a poll, a batch drawn from the fair
//! queue, its replies). Tests use it to look at the order the manager serves a backlog in,
//! and to show that a path works with the manager's CPU out of it.
//!
//! Invariants:
//! - An unheld gate costs the manager one atomic load a turn, nothing else.
//! - A held thread publishes its statistics before it parks, so the snapshot a test reads
//!   after a step is that step's.
//! - Stopping the node releases every gate (a held thread never blocks shutdown).

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(any(test, feature = "testing"))]
use std::time::Duration;

/// One manager thread's gate.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// Read by the manager every turn (the fast path); written under `state`.
    held: AtomicBool,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    held: bool,
    /// Turns the holder allowed and the thread has not begun.
    grants: u64,
    /// Whether the thread waits at the gate now.
    parked: bool,
    /// Times the thread arrived at the held gate.
    arrivals: u64,
}

/// How long a test waits for a manager thread to reach its gate before it says it did not
/// (a thread that died never will).
#[cfg(any(test, feature = "testing"))]
const ARRIVAL_BOUND: Duration = Duration::from_secs(30);

impl Gate {
    /// The manager's side, at the top of every turn: returns at once unless held; held, runs
    /// `before_park` and waits for a step, a release or `stop`.
    pub(super) fn pass(&self, stop: &AtomicBool, before_park: impl FnOnce()) {
        if !self.held.load(Ordering::Acquire) {
            return;
        }
        before_park();
        let mut s = self.state.lock();
        s.arrivals += 1;
        s.parked = true;
        self.changed.notify_all();
        while s.held && s.grants == 0 && !stop.load(Ordering::SeqCst) {
            self.changed.wait(&mut s);
        }
        s.parked = false;
        s.grants = s.grants.saturating_sub(1);
    }

    #[cfg(any(test, feature = "testing"))]
    /// Holds the thread at its next turn; returns once it waits there (false: it did not
    /// arrive within the bound).
    pub(super) fn hold(&self) -> bool {
        let mut s = self.state.lock();
        s.held = true;
        self.held.store(true, Ordering::Release);
        self.wait(&mut s, |s| s.parked)
    }

    #[cfg(any(test, feature = "testing"))]
    /// Lets the held thread run one turn; returns once it is back at the gate (false: it did
    /// not come back within the bound).
    pub(super) fn step(&self) -> bool {
        let mut s = self.state.lock();
        let arrived = s.arrivals;
        s.grants += 1;
        self.changed.notify_all();
        self.wait(&mut s, |s| {
            s.parked && s.arrivals > arrived && s.grants == 0
        })
    }

    /// Lets the thread run freely again.
    pub(super) fn release(&self) {
        let mut s = self.state.lock();
        s.held = false;
        s.grants = 0;
        self.held.store(false, Ordering::Release);
        self.changed.notify_all();
    }

    #[cfg(any(test, feature = "testing"))]
    fn wait(
        &self,
        s: &mut parking_lot::MutexGuard<'_, GateState>,
        done: impl Fn(&GateState) -> bool,
    ) -> bool {
        while !done(s) {
            if self.changed.wait_for(s, ARRIVAL_BOUND).timed_out() {
                return done(s);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// A loop that counts its turns behind a gate.
    fn looping(
        gate: &Arc<Gate>,
        stop: &Arc<AtomicBool>,
        turns: &Arc<AtomicU64>,
    ) -> impl Fn() + use<> {
        let (gate, stop, turns) = (gate.clone(), stop.clone(), turns.clone());
        move || {
            while !stop.load(Ordering::SeqCst) {
                gate.pass(&stop, || {});
                turns.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn a_held_loop_runs_one_turn_per_step_and_stops_when_told() {
        let (gate, stop, turns) = (
            Arc::new(Gate::default()),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let worker = std::thread::Builder::new()
            .name("gated".into())
            .spawn(looping(&gate, &stop, &turns))
            .unwrap();
        assert!(gate.hold());
        let at_hold = turns.load(Ordering::SeqCst);
        for i in 1..=5 {
            assert!(gate.step());
            assert_eq!(
                turns.load(Ordering::SeqCst),
                at_hold + i,
                "one turn per step"
            );
        }
        gate.release();
        assert!(gate.hold(), "held again after running freely");
        stop.store(true, Ordering::SeqCst);
        gate.release();
        worker.join().unwrap();
    }
}
