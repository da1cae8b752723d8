//! Which of a manager thread's busy iterations time their NIC calls, and the estimate of the
//! NIC time over all of them.
//!
//! Timing a call reads the monotonic clock twice (~50 ns), a tenth of a permission's target
//! cost, so only one busy iteration in [`NIC_SAMPLE_EVERY`] is timed and the total is scaled
//! up by the iterations run. The sample is deterministic (every N-th iteration of the busy
//! streaks), so a steady load is sampled evenly.
//!
//! Invariant: `sampled <= iterations`, and the estimate is zero until an iteration was
//! sampled.

use std::time::Duration;

/// One busy iteration in this many has its NIC calls timed.
pub const NIC_SAMPLE_EVERY: u64 = 8;

/// The sampled NIC time of a manager thread's busy iterations.
#[derive(Debug, Default)]
pub(super) struct NicSample {
    /// Busy iterations begun.
    iterations: u64,
    /// Of them, those timed.
    sampled: u64,
    /// NIC time of the timed iterations.
    timed: Duration,
    /// An iteration is being timed (its time not added yet).
    open: bool,
}

impl NicSample {
    /// Whether the next busy iteration is to be timed (an iteration learns whether it is busy
    /// only from its first NIC call, so the timing starts before it counts).
    pub(super) fn next_is_timed(&self) -> bool {
        self.iterations % NIC_SAMPLE_EVERY == 0
    }

    /// A busy iteration is under way; returns whether it is timed.
    pub(super) fn begin(&mut self) -> bool {
        let timed = self.next_is_timed();
        self.iterations += 1;
        self.sampled += u64::from(timed);
        self.open = timed;
        timed
    }

    /// Whether an iteration is being timed.
    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// The timed iteration ended having spent `nic` in NIC calls.
    pub(super) fn end(&mut self, nic: Duration) {
        if std::mem::take(&mut self.open) {
            self.timed += nic;
        }
    }

    /// The NIC time of every busy iteration, estimated from the timed ones.
    pub(super) fn estimate(&self) -> Duration {
        if self.sampled == 0 {
            return Duration::ZERO;
        }
        let nanos = self.timed.as_nanos() * u128::from(self.iterations) / u128::from(self.sampled);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_one_iteration_in_n_and_scales_up() {
        let mut s = NicSample::default();
        assert_eq!(s.estimate(), Duration::ZERO);
        let mut timed = 0;
        for _ in 0..4 * NIC_SAMPLE_EVERY {
            let next = s.next_is_timed();
            assert_eq!(s.begin(), next);
            if next {
                timed += 1;
                assert!(s.is_open());
                s.end(Duration::from_micros(1));
            } else {
                assert!(!s.is_open());
                // An untimed iteration adds nothing, whatever it is given.
                s.end(Duration::from_secs(1));
            }
        }
        assert_eq!(timed, 4);
        // 4 timed µs stand for 4 × N iterations of 1 µs each.
        assert_eq!(s.estimate(), Duration::from_micros(4 * NIC_SAMPLE_EVERY));
    }

    #[test]
    fn the_first_iteration_is_timed() {
        let mut s = NicSample::default();
        assert!(s.begin());
        s.end(Duration::from_nanos(300));
        assert_eq!(s.estimate(), Duration::from_nanos(300));
    }
}
