//! The retransmission-timeout estimator of RFC 6298, sans-IO: round-trip samples in, an RTO
//! out. Integer microseconds, so results are exact and tests can state them.
//!
//! ```text
//! first sample R:   SRTT = R              RTTVAR = R / 2
//! later sample R:   RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|      (RTTVAR first, with the old SRTT)
//!                   SRTT   = 7/8 SRTT   + 1/8 R
//! base RTO        = SRTT + max(G, 4 RTTVAR)        (initial_rto before any sample)
//! RTO             = min(clamp(base RTO, min_rto, max_rto) × 2^backoffs, max_rto)
//! ```
//!
//! Invariants:
//! - `min_rto ≤ rto() ≤ max(min_rto, max_rto)`, whatever the samples and backoffs.
//! - A timeout doubles the RTO (§5.5) — the floored one, as the RFC and Linux do, so a fast
//!   path's probes spread out at once instead of staying at the floor — up to the ceiling;
//!   the doubling is kept until a sample
//!   arrives (Karn's algorithm: the caller never feeds a sample from a retransmitted request,
//!   §3), and a sample clears it (§5.7's "the backed-off value is used until a valid sample").
//!
//! Where this departs from the RFC, it follows Linux: a 200 ms floor by default instead of 1 s
//! (§2.4 "SHOULD"), with a configurable ceiling (§2.5 allows one of at least 60 s; ours sits
//! below the QP's budget so that a silent peer is probed a few times before the budget ends).

use crate::soft::link::AdaptiveTimeouts;
use std::time::Duration;

/// Clock granularity `G`: the clock counts microseconds.
const GRANULARITY_US: u64 = 1;

/// Backoffs beyond this cannot change a clamped RTO (2^40 µs is 12 days).
const MAX_BACKOFFS: u32 = 40;

/// RTO state of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoEstimator {
    min_us: u64,
    max_us: u64,
    /// `(SRTT, RTTVAR)` once a sample arrived.
    smoothed: Option<(u64, u64)>,
    /// The RTO before backoff: from the samples, or the initial one.
    base_us: u64,
    backoffs: u32,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RtoEstimator {
    /// An estimator with no sample yet, bounded by `t` (its RTO is `t.initial_rto`, clamped).
    pub fn new(t: &AdaptiveTimeouts) -> Self {
        let min_us = micros(t.min_rto);
        let max_us = micros(t.max_rto).max(min_us);
        RtoEstimator {
            min_us,
            max_us,
            smoothed: None,
            base_us: micros(t.initial_rto),
            backoffs: 0,
        }
    }

    /// Adds a round trip measured on a request sent once (§2.2, §2.3), and ends any backoff.
    pub fn sample(&mut self, rtt: Duration) {
        let r = micros(rtt);
        let (srtt, rttvar) = match self.smoothed {
            None => (r, r / 2),
            Some((srtt, rttvar)) => {
                let rttvar = (3 * u128::from(rttvar) + u128::from(srtt.abs_diff(r))) / 4;
                let srtt = (7 * u128::from(srtt) + u128::from(r)) / 8;
                (saturate(srtt), saturate(rttvar))
            }
        };
        self.smoothed = Some((srtt, rttvar));
        self.base_us = srtt.saturating_add(GRANULARITY_US.max(rttvar.saturating_mul(4)));
        self.backoffs = 0;
    }

    /// A timeout fired: the RTO doubles, up to the ceiling (§5.5).
    pub fn back_off(&mut self) {
        self.backoffs = (self.backoffs + 1).min(MAX_BACKOFFS);
    }

    /// The current RTO.
    pub fn rto(&self) -> Duration {
        let floored = self.base_us.clamp(self.min_us, self.max_us);
        let backed_off = floored.saturating_mul(1u64 << self.backoffs);
        Duration::from_micros(backed_off.min(self.max_us))
    }

    /// The floor of the RTO (`min_rto`).
    pub fn floor(&self) -> Duration {
        Duration::from_micros(self.min_us)
    }

    /// The smoothed round trip, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.smoothed.map(|(s, _)| Duration::from_micros(s))
    }

    /// The round-trip variation, once measured.
    pub fn rttvar(&self) -> Option<Duration> {
        self.smoothed.map(|(_, v)| Duration::from_micros(v))
    }

    /// Timeouts since the last sample (each doubled the RTO).
    pub fn backoffs(&self) -> u32 {
        self.backoffs
    }
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn bounds(initial_ms: u32, min_ms: u32, max_ms: u32) -> AdaptiveTimeouts {
        AdaptiveTimeouts {
            initial_rto: initial_ms * MS,
            min_rto: min_ms * MS,
            max_rto: max_ms * MS,
            budget: Duration::from_secs(15),
        }
    }

    #[test]
    fn before_any_sample_the_rto_is_the_initial_one_clamped() {
        assert_eq!(RtoEstimator::new(&bounds(1000, 200, 5000)).rto(), 1000 * MS);
        assert_eq!(RtoEstimator::new(&bounds(50, 200, 5000)).rto(), 200 * MS);
        assert_eq!(RtoEstimator::new(&bounds(9000, 200, 5000)).rto(), 5000 * MS);
        let e = RtoEstimator::new(&bounds(1000, 200, 5000));
        assert_eq!((e.srtt(), e.rttvar(), e.backoffs()), (None, None, 0));
    }

    #[test]
    fn the_first_sample_sets_srtt_and_half_of_it_as_variation() {
        // RFC 6298 §2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR = 3R.
        let mut e = RtoEstimator::new(&bounds(1000, 1, 60_000));
        e.sample(100 * MS);
        assert_eq!(e.srtt(), Some(100 * MS));
        assert_eq!(e.rttvar(), Some(50 * MS));
        assert_eq!(e.rto(), 300 * MS);
    }

    #[test]
    fn later_samples_update_the_variation_with_the_old_average_first() {
        // §2.3 with R' = 200 ms after R = 100 ms:
        // RTTVAR = 3/4·50 + 1/4·|100 − 200| = 62.5 ms, SRTT = 7/8·100 + 1/8·200 = 112.5 ms,
        // RTO = 112.5 + 4·62.5 = 362.5 ms.
        let mut e = RtoEstimator::new(&bounds(1000, 1, 60_000));
        e.sample(100 * MS);
        e.sample(200 * MS);
        assert_eq!(e.rttvar(), Some(Duration::from_micros(62_500)));
        assert_eq!(e.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(e.rto(), Duration::from_micros(362_500));
    }

    #[test]
    fn steady_samples_converge_on_the_round_trip() {
        let mut e = RtoEstimator::new(&bounds(1000, 1, 60_000));
        e.sample(400 * MS); // a slow first sample...
        for _ in 0..200 {
            e.sample(10 * MS); // ...then a steady 10 ms path
        }
        let srtt = e.srtt().unwrap();
        assert!(
            srtt.abs_diff(10 * MS) < Duration::from_micros(10),
            "{srtt:?}"
        );
        let rttvar = e.rttvar().unwrap();
        assert!(rttvar < Duration::from_micros(10), "{rttvar:?}");
        // The RTO converges on SRTT (plus the clock granularity at least).
        assert!(
            e.rto().abs_diff(10 * MS) < Duration::from_micros(50),
            "{:?}",
            e.rto()
        );
    }

    #[test]
    fn a_fast_path_sits_on_the_floor() {
        let mut e = RtoEstimator::new(&bounds(1000, 200, 5000));
        for _ in 0..10 {
            e.sample(Duration::from_micros(40)); // loopback TCP
        }
        assert_eq!(e.rto(), 200 * MS);
        // A zero sample (a virtual clock that did not move) too.
        e.sample(Duration::ZERO);
        assert_eq!(e.rto(), 200 * MS);
    }

    #[test]
    fn a_slow_path_is_capped_at_the_ceiling() {
        let mut e = RtoEstimator::new(&bounds(1000, 200, 5000));
        e.sample(Duration::from_secs(4)); // 3 × 4 s = 12 s
        assert_eq!(e.rto(), 5000 * MS);
    }

    #[test]
    fn timeouts_double_the_rto_up_to_the_ceiling_and_a_sample_ends_the_backoff() {
        let mut e = RtoEstimator::new(&bounds(1000, 200, 5000));
        e.sample(Duration::from_micros(40));
        let mut seen = vec![e.rto()];
        for _ in 0..8 {
            e.back_off();
            seen.push(e.rto());
        }
        let ms: Vec<u128> = seen.iter().map(Duration::as_millis).collect();
        // The base (40 µs + 4·20 µs = 120 µs) is floored to 200 ms, then doubled.
        assert_eq!(ms, [200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]);
        assert_eq!(e.backoffs(), 8);
        e.sample(Duration::from_micros(40));
        assert_eq!((e.rto(), e.backoffs()), (200 * MS, 0));
    }

    #[test]
    fn backing_off_from_the_initial_rto_doubles_each_time() {
        let mut e = RtoEstimator::new(&bounds(1000, 200, 5000));
        let mut ms = vec![e.rto().as_millis()];
        for _ in 0..5 {
            e.back_off();
            ms.push(e.rto().as_millis());
        }
        assert_eq!(ms, [1000, 2000, 4000, 5000, 5000, 5000]);
        // Saturates rather than overflowing, however long the peer stays silent.
        for _ in 0..1000 {
            e.back_off();
        }
        assert_eq!(e.rto(), 5000 * MS);
    }

    #[test]
    fn the_rto_stays_within_the_bounds_whatever_the_samples() {
        let b = bounds(1000, 200, 5000);
        let mut e = RtoEstimator::new(&b);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 3 == 0 {
                e.back_off();
            } else {
                e.sample(Duration::from_micros(x % 30_000_000));
            }
            assert!((b.min_rto..=b.max_rto).contains(&e.rto()), "{e:?}");
        }
    }
}
