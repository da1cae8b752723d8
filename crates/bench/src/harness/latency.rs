//! Latency distributions: an HDR histogram of nanoseconds, read out in microseconds.
//!
//! Recording never panics: the histogram grows as needed (auto-resize), and a value it cannot
//! grow to saturates. An empty distribution reads as `0.0` everywhere, so a row
//! for a mechanism that completed no operation still prints.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Significant decimal digits kept: 0.1 % relative error, enough for p99 comparisons.
const SIGFIG: u8 = 3;

/// A latency distribution in nanoseconds (3 significant digits, auto-resizing).
#[derive(Clone, Debug)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Latency {
    /// An empty distribution.
    pub fn new() -> Self {
        // Invariant: `Histogram::new` fails only for sigfig > 5; `SIGFIG` is 3.
        let hist = Histogram::new(SIGFIG).expect("3 significant digits is a valid precision");
        Latency { hist }
    }

    /// Records one operation's latency (saturating at `u64::MAX` ns).
    pub fn record(&mut self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one latency in nanoseconds; values beyond the trackable range saturate.
    pub fn record_ns(&mut self, ns: u64) {
        // `saturating_record` alone would clamp instead of growing the histogram; grow first
        // and clamp only if growing is impossible.
        if self.hist.record(ns).is_err() {
            self.hist.saturating_record(ns);
        }
    }

    /// Adds every sample of `other` (e.g. per-client histograms into one).
    pub fn merge(&mut self, other: &Latency) {
        if self.hist.add(&other.hist).is_err() {
            // Only reachable if resizing failed; fall back to saturating per-bucket copies.
            for v in other.hist.iter_recorded() {
                let value = other.hist.highest_equivalent(v.value_iterated_to());
                if self.hist.record_n(value, v.count_at_value()).is_err() {
                    self.hist.saturating_record_n(value, v.count_at_value());
                }
            }
        }
    }

    /// Number of recorded samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Median, µs.
    pub fn p50_us(&self) -> f64 {
        self.quantile_us(0.5)
    }

    /// 99th percentile, µs.
    pub fn p99_us(&self) -> f64 {
        self.quantile_us(0.99)
    }

    /// The `q` quantile (clamped to `0.0..=1.0`; NaN reads as the median), µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        ns_to_us(self.hist.value_at_quantile(q) as f64)
    }

    /// Mean, µs.
    pub fn mean_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        ns_to_us(self.hist.mean())
    }

    /// Largest recorded sample (to histogram precision), µs.
    pub fn max_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        ns_to_us(self.hist.max() as f64)
    }

    /// The underlying histogram, for readouts this type does not offer.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

fn ns_to_us(ns: f64) -> f64 {
    ns / 1_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        // Histogram precision is 3 significant digits: allow 0.1 % plus rounding.
        (a - b).abs() <= b.abs() * 2e-3 + 1e-9
    }

    /// 1, 2, ..., 100 µs.
    fn one_to_hundred_us() -> Latency {
        let mut l = Latency::new();
        for us in 1..=100u64 {
            l.record(Duration::from_micros(us));
        }
        l
    }

    #[test]
    fn empty_reads_zero() {
        let l = Latency::default();
        assert_eq!(l.count(), 0);
        assert_eq!(l.p50_us(), 0.0);
        assert_eq!(l.p99_us(), 0.0);
        assert_eq!(l.quantile_us(0.9), 0.0);
        assert_eq!(l.mean_us(), 0.0);
        assert_eq!(l.max_us(), 0.0);
    }

    #[test]
    fn quantiles_of_known_data() {
        let l = one_to_hundred_us();
        assert_eq!(l.count(), 100);
        assert!(close(l.p50_us(), 50.0), "p50 {}", l.p50_us());
        assert!(close(l.p99_us(), 99.0), "p99 {}", l.p99_us());
        assert!(close(l.quantile_us(0.0), 1.0), "p0 {}", l.quantile_us(0.0));
        assert!(close(l.quantile_us(1.0), 100.0));
        assert!(close(l.quantile_us(7.0), 100.0), "q > 1 clamps");
        assert!(close(l.mean_us(), 50.5), "mean {}", l.mean_us());
        assert!(close(l.max_us(), 100.0), "max {}", l.max_us());
    }

    #[test]
    fn merge_adds_samples() {
        let mut a = Latency::new();
        for _ in 0..99 {
            a.record_ns(1_000);
        }
        let mut b = Latency::new();
        b.record_ns(1_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 100);
        assert!(close(a.p50_us(), 1.0));
        assert!(close(a.max_us(), 1_000.0));
        assert!(close(a.quantile_us(0.995), 1_000.0));
    }

    #[test]
    fn huge_values_saturate() {
        let mut l = Latency::new();
        l.record_ns(u64::MAX);
        l.record(Duration::MAX);
        l.record_ns(0);
        assert_eq!(l.count(), 3);
        assert!(l.max_us() > 0.0);
        let mut m = Latency::new();
        m.merge(&l);
        assert_eq!(m.count(), 3);
    }
}
