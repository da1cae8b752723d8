//! The run's one clock, and a stop flag whose waits end early when it is raised.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Nanoseconds since the run started, on the monotonic clock: every recorded time (invoke,
/// complete, a fault, a node's start and end) is read from one `Clock`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock reading 0 now.
    #[allow(
        clippy::disallowed_methods,
        reason = "the scenario is a driver: it times real processes"
    )]
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `t` nanoseconds after the start.
    pub fn instant(&self, t: u64) -> Instant {
        self.start + Duration::from_nanos(t)
    }
}

/// Milliseconds, for reports: `t` ns as `12.345 s`.
pub fn secs(t: u64) -> String {
    format!("{:.3} s", t as f64 / 1e9)
}

/// A flag raised once; waits on it end when it is raised or when their time comes.
#[derive(Debug, Default)]
pub struct Stop {
    raised: Mutex<bool>,
    cond: Condvar,
}

impl Stop {
    /// Raises the flag and wakes every waiter.
    pub fn raise(&self) {
        *self.raised.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cond.notify_all();
    }

    /// Whether it was raised.
    pub fn is_raised(&self) -> bool {
        *self.raised.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `t` on `clock` (a scheduled time, not a condition) or until the flag is
    /// raised; whether it was raised.
    pub fn wait_until(&self, clock: &Clock, t: u64) -> bool {
        let deadline = clock.instant(t);
        let mut raised = self.raised.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if *raised {
                return true;
            }
            let now = clock.instant(clock.now());
            if now >= deadline {
                return false;
            }
            raised = self
                .cond
                .wait_timeout(raised, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_stop_ends_waits_at_once() {
        let clock = Clock::start();
        let stop = Stop::default();
        assert!(!stop.wait_until(&clock, clock.now() + 1_000_000));
        stop.raise();
        let t = clock.now();
        assert!(stop.wait_until(&clock, t + 60_000_000_000));
        assert!(clock.now() - t < 1_000_000_000);
        assert_eq!(secs(1_500_000_000), "1.500 s");
    }
}
