//! Token buckets for a QP's responder rate limit, sans-IO: time comes in as a [`Timestamp`].
//!
//! Invariants: the balance never exceeds the burst; tokens accrue at `per_sec` from the last
//! refill; a request is served when the balance covers it or the bucket is full (so one
//! larger than the burst still passes, once the bucket is full), and then its whole cost is
//! taken, possibly into debt. Hence over any interval of length `T` starting with a full
//! bucket, what is served is at most `burst + per_sec × T` plus the overshoot of the last
//! request served.
//!
//! Balances are kept in micro-tokens (tokens × 10⁶), so that a refill after `d` µs adds exactly
//! `per_sec × d` of them: no rounding is lost however often the bucket is consulted.

use crate::verbs::{QpService, Timestamp, TokenRate};

/// Micro-tokens per token.
const MICRO: i128 = 1_000_000;

/// One token bucket.
#[derive(Clone, Debug)]
pub(super) struct TokenBucket {
    per_sec: i128,
    /// Capacity in micro-tokens.
    cap: i128,
    /// Balance in micro-tokens (negative: debt).
    balance: i128,
    last: Timestamp,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub(super) fn new(rate: TokenRate, now: Timestamp) -> Self {
        let cap = i128::from(rate.burst) * MICRO;
        TokenBucket {
            per_sec: i128::from(rate.per_sec),
            cap,
            balance: cap,
            last: now,
        }
    }

    fn refill(&mut self, now: Timestamp) {
        if now > self.last {
            let us = i128::from(now.0 - self.last.0);
            self.balance = (self.balance + self.per_sec * us).min(self.cap);
            self.last = now;
        }
    }

    /// Whether a request costing `cost` tokens may be served at `now`; `Err` says from when
    /// it may be.
    fn ready(&mut self, now: Timestamp, cost: u64) -> Result<(), Timestamp> {
        self.refill(now);
        let need = (i128::from(cost) * MICRO).min(self.cap);
        if self.balance >= need {
            return Ok(());
        }
        let missing = need - self.balance;
        // Round up: at the returned time the balance covers the request.
        let us = (missing + self.per_sec - 1) / self.per_sec.max(1);
        Err(now.plus_us(u64::try_from(us).unwrap_or(u64::MAX)))
    }

    fn take(&mut self, cost: u64) {
        self.balance -= i128::from(cost) * MICRO;
    }

    /// `rate` from `now`, keeping this bucket's balance (or debt) within the new burst.
    fn reconfigured(mut self, rate: TokenRate, now: Timestamp) -> Self {
        self.refill(now);
        let mut next = TokenBucket::new(rate, now);
        next.balance = self.balance.min(next.cap);
        next
    }
}

/// The buckets of one QP's rate limit: operations and bytes.
#[derive(Clone, Debug, Default)]
pub(super) struct RateGate {
    ops: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
}

impl RateGate {
    /// Changes the limits at `now`. A bucket that stays keeps its balance (or debt), within
    /// its new burst: changing a QP's limit grants no new burst; only a limit set where there
    /// was none starts full.
    pub(super) fn reconfigure(&mut self, service: &QpService, now: Timestamp) {
        let rate = service.rate.unwrap_or_default();
        let carry = |old: Option<TokenBucket>, new: Option<TokenRate>| {
            new.map(|r| match old {
                Some(b) => b.reconfigured(r, now),
                None => TokenBucket::new(r, now),
            })
        };
        self.ops = carry(self.ops.take(), rate.ops);
        self.bytes = carry(self.bytes.take(), rate.bytes);
    }

    /// Whether the gate limits anything.
    pub(super) fn is_open(&self) -> bool {
        self.ops.is_none() && self.bytes.is_none()
    }

    /// Serves one request of `bytes` bytes at `now` if both buckets allow it (taking its
    /// tokens); otherwise takes nothing and says when to try again.
    pub(super) fn admit(&mut self, now: Timestamp, bytes: u64) -> Result<(), Timestamp> {
        let ops = self.ops.as_mut().map_or(Ok(()), |b| b.ready(now, 1));
        let by = self.bytes.as_mut().map_or(Ok(()), |b| b.ready(now, bytes));
        match (ops, by) {
            (Ok(()), Ok(())) => {
                if let Some(b) = &mut self.ops {
                    b.take(1);
                }
                if let Some(b) = &mut self.bytes {
                    b.take(bytes);
                }
                Ok(())
            }
            (Err(a), Err(b)) => Err(a.max(b)),
            (Err(t), _) | (_, Err(t)) => Err(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::RateLimit;

    fn gate(ops: Option<(u64, u64)>, bytes: Option<(u64, u64)>) -> RateGate {
        let rate = |(per_sec, burst)| TokenRate { per_sec, burst };
        let mut g = RateGate::default();
        g.reconfigure(
            &QpService {
                weight: 1,
                rate: Some(RateLimit {
                    ops: ops.map(rate),
                    bytes: bytes.map(rate),
                }),
            },
            Timestamp::ZERO,
        );
        g
    }

    #[test]
    fn a_burst_then_the_rate() {
        // 1000 ops/s, burst 10: ten at once, then one per millisecond.
        let mut g = gate(Some((1000, 10)), None);
        for _ in 0..10 {
            assert_eq!(g.admit(Timestamp::ZERO, 8), Ok(()));
        }
        assert_eq!(g.admit(Timestamp::ZERO, 8), Err(Timestamp(1000)));
        assert_eq!(g.admit(Timestamp(999), 8), Err(Timestamp(1000)));
        assert_eq!(g.admit(Timestamp(1000), 8), Ok(()));
        assert!(g.admit(Timestamp(1000), 8).is_err());
    }

    #[test]
    fn served_never_exceeds_burst_plus_rate_times_time() {
        // Polled at odd instants for one second: at most burst + rate × T are served.
        let mut g = gate(Some((700, 5)), None);
        let mut served = 0u64;
        for t in (0..1_000_000u64).step_by(37) {
            while g.admit(Timestamp(t), 1).is_ok() {
                served += 1;
            }
            assert!(served <= 5 + 700 * t / 1_000_000 + 1, "{served} at {t}us");
        }
        assert!(served >= 5 + 699, "{served}");
    }

    #[test]
    fn bytes_allow_one_request_over_the_burst_into_debt() {
        // 1 MB/s, burst 1000 bytes: a 5000-byte request passes on a full bucket (leaving a
        // debt of 4000), and the next waits until the debt is paid and its 100 are back.
        let mut g = gate(None, Some((1_000_000, 1000)));
        assert_eq!(g.admit(Timestamp::ZERO, 5000), Ok(()));
        assert_eq!(g.admit(Timestamp::ZERO, 100), Err(Timestamp(4100)));
        assert_eq!(g.admit(Timestamp(4099), 100), Err(Timestamp(4100)));
        assert_eq!(g.admit(Timestamp(4100), 100), Ok(()));
    }

    #[test]
    fn both_buckets_must_allow_and_neither_is_charged_on_refusal() {
        let mut g = gate(Some((1, 1)), Some((1000, 100)));
        assert_eq!(g.admit(Timestamp::ZERO, 100), Ok(()));
        // The op bucket is empty for a second; the byte bucket refills in 0.1 s.
        assert_eq!(g.admit(Timestamp(100_000), 100), Err(Timestamp(1_000_000)));
        assert_eq!(g.admit(Timestamp(1_000_000), 100), Ok(()));
        assert!(gate(None, None).is_open());
    }

    #[test]
    fn a_new_limit_keeps_the_balance_and_grants_no_burst() {
        let mut g = gate(Some((1, 1)), None);
        assert_eq!(g.admit(Timestamp::ZERO, 1), Ok(()));
        let fast = |burst| QpService {
            weight: 1,
            rate: Some(RateLimit {
                ops: Some(TokenRate {
                    per_sec: 1_000_000,
                    burst,
                }),
                bytes: None,
            }),
        };
        // Empty before, empty after: the new rate refills it from now on.
        g.reconfigure(&fast(100), Timestamp(10));
        assert_eq!(g.admit(Timestamp(10), 1), Err(Timestamp(11)));
        assert_eq!(g.admit(Timestamp(11), 1), Ok(()));
        // Lifted, then set again: a fresh, full bucket.
        g.reconfigure(&QpService::default(), Timestamp(20));
        assert!(g.is_open());
        g.reconfigure(&fast(3), Timestamp(20));
        for _ in 0..3 {
            assert_eq!(g.admit(Timestamp(20), 1), Ok(()));
        }
        assert!(g.admit(Timestamp(20), 1).is_err());
    }
}
