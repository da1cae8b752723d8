//! A stopwatch a serving thread runs around its NIC calls (posting work requests, polling
//! completion queues), so that the CPU it spends inside the NIC can be told apart from its
//! own work.
//!
//! On a real RNIC those calls cost little (a doorbell, a look at a completion ring); on the
//! software RNIC they run the NIC's work inline (binds, atomics, delivering a SEND into the
//! peer's receive queue). The monotonic clock costs ~25 ns a read (vDSO), so a thread arms the
//! stopwatch for a sample of its turns, not for all of them; a disarmed stopwatch reads no
//! clock.
//!
//! Invariant: time is added only between `arm(true)` and the next `arm(false)` or `take`.

use std::time::{Duration, Instant};

/// Accumulates the wall time of the calls made through [`Stopwatch::time`] while armed.
#[derive(Debug, Default)]
pub(crate) struct Stopwatch {
    armed: bool,
    spent: Duration,
}

impl Stopwatch {
    /// Starts (`true`) or stops timing calls.
    pub(crate) fn arm(&mut self, on: bool) {
        self.armed = on;
    }

    /// Runs `call`, adding its wall time if armed.
    #[allow(clippy::disallowed_methods)] // a measurement, not a deadline: no injected clock
    pub(crate) fn time<R>(&mut self, call: impl FnOnce() -> R) -> R {
        if !self.armed {
            return call();
        }
        let start = Instant::now();
        let result = call();
        self.spent += start.elapsed();
        result
    }

    /// Starts timing a span of calls that does not fit one closure (`None`: not armed).
    #[allow(clippy::disallowed_methods)] // a measurement, not a deadline: no injected clock
    pub(crate) fn start(&self) -> Option<Instant> {
        self.armed.then(Instant::now)
    }

    /// Ends the span [`Stopwatch::start`] began, adding its wall time.
    pub(crate) fn stop(&mut self, started: Option<Instant>) {
        if let Some(start) = started {
            self.spent += start.elapsed();
        }
    }

    /// The time accumulated so far, resetting it (the stopwatch stays armed or not).
    pub(crate) fn take(&mut self) -> Duration {
        std::mem::take(&mut self.spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_only_while_armed() {
        let mut watch = Stopwatch::default();
        let spin = || (0..10_000u64).fold(0u64, |a, b| std::hint::black_box(a ^ b));
        watch.time(spin);
        assert_eq!(watch.take(), Duration::ZERO);
        watch.arm(true);
        assert_eq!(watch.time(|| 7), 7);
        watch.time(spin);
        let spent = watch.take();
        assert!(spent > Duration::ZERO);
        assert_eq!(watch.take(), Duration::ZERO, "take resets");
        let span = watch.start();
        spin();
        watch.stop(span);
        assert!(watch.take() > Duration::ZERO);
        watch.arm(false);
        watch.time(spin);
        let span = watch.start();
        assert!(span.is_none());
        watch.stop(span);
        assert_eq!(watch.take(), Duration::ZERO);
    }
}
