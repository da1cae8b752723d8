//! A token bucket on the node's clock. Sans-IO: the time is given.
//!
//! Invariant: `tokens` never exceeds the burst it is used with; a bucket starts full.

use rnic::Timestamp;

/// Tokens and when they were last counted.
#[derive(Clone, Copy, Debug)]
pub(super) struct TokenBucket {
    tokens: f64,
    at: Timestamp,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens at `now`.
    pub(super) fn full(burst: u32, now: Timestamp) -> Self {
        TokenBucket {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Refills at `per_s` a second up to `burst`, then takes one token if there is one.
    pub(super) fn take(&mut self, now: Timestamp, burst: u32, per_s: u32) -> bool {
        let elapsed_s = now.0.saturating_sub(self.at.0) as f64 / 1e6;
        self.tokens = (self.tokens + elapsed_s * f64::from(per_s)).min(f64::from(burst));
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t = Timestamp(5_000_000);
        let mut b = TokenBucket::full(3, t);
        assert!((0..3).all(|_| b.take(t, 3, 10)), "the burst");
        assert!(!b.take(t, 3, 10), "spent");
        assert!(!b.take(t.plus_us(99_999), 3, 10), "not yet a token");
        assert!(
            b.take(t.plus_us(100_000), 3, 10),
            "10 a second: one after 100 ms"
        );
        assert!(!b.take(t.plus_us(100_000), 3, 10));
        let much_later = t.plus_us(3_600_000_000);
        assert!(
            (0..3).all(|_| b.take(much_later, 3, 10)),
            "refilled to the burst"
        );
        assert!(!b.take(much_later, 3, 10), "and no more");
        assert!(!b.take(t, 3, 10), "time going back gives nothing");
    }
}
