//! The software priority policy (LITE's SW-Pri, §4.1): tenants are high, normal or low
//! priority ([`NodeConfig::tenant_priorities`](super::NodeConfig)); every period of the
//! node's clock, shard 0 reads what the NIC served the high-priority tenants' data QPs
//! (`QueuePair::served`) and decides whether the low-priority tenants' data QPs are
//! rate-limited:
//!
//! - the high-priority one-sided load reached `high_load_ops_per_s`: low priority is
//!   throttled (LITE's policy 1);
//! - it stayed below `release_ops_per_s` for `release_periods` periods in a row: the limit
//!   is lifted (policy 2: low priority runs unlimited when high priority is idle or light);
//!   in between, the decision stands (hysteresis).
//!
//! LITE's policy 3 (throttle when high-priority round trips grow) needs the requesters'
//! round-trip times, which the memory node does not see; it is not implemented.
//!
//! Sans-IO: [`SwPri`] takes the counters and the time and answers which QPs need their
//! service set; `runner.rs` reads the counters and sets the services.
//!
//! Invariants: the first decision only takes a baseline (nothing is throttled before a whole
//! period was measured); a QP's count that went down is a new connection (counted from zero);
//! a low-priority QP is reported until a set of its service to the current decision
//! succeeded, so a QP accepted after a decision (with the tenant's unthrottled service) is
//! throttled within one period.

use super::super::tenants::TenantId;
use super::config::{Priority, PriorityPolicy, PriorityStats, TenantPriority};
use rnic::{QpNumber, QpServed, Timestamp};
use std::collections::{HashMap, HashSet};

/// The policy's state (shard 0's).
#[derive(Debug)]
pub(super) struct SwPri {
    policy: PriorityPolicy,
    priorities: HashMap<TenantId, Priority>,
    /// Start of the period being measured (`None` before the baseline).
    period_start: Option<Timestamp>,
    /// Each high-priority QP's counters at the start of the period.
    last: HashMap<QpNumber, QpServed>,
    /// Periods in a row below the release rate while throttled.
    calm: u32,
    /// The decision each low-priority QP's service was last set to.
    applied: HashMap<QpNumber, bool>,
    stats: PriorityStats,
}

impl SwPri {
    /// The policy for `priorities` (`None` when none is configured: nothing to do).
    pub(super) fn new(policy: PriorityPolicy, priorities: &[TenantPriority]) -> Option<Self> {
        if priorities.is_empty() {
            return None;
        }
        Some(SwPri {
            policy,
            priorities: priorities.iter().map(|p| (p.tenant, p.priority)).collect(),
            period_start: None,
            last: HashMap::new(),
            calm: 0,
            applied: HashMap::new(),
            stats: PriorityStats::default(),
        })
    }

    /// A tenant's priority (a session not yet authenticated, or a tenant not named, is
    /// normal).
    pub(super) fn priority(&self, tenant: Option<TenantId>) -> Priority {
        tenant
            .and_then(|t| self.priorities.get(&t).copied())
            .unwrap_or_default()
    }

    /// Whether a period ended at `now` (or the baseline is still to be taken).
    pub(super) fn is_due(&self, now: Timestamp) -> bool {
        self.period_start
            .is_none_or(|s| now >= s.plus_us(self.policy.period_us))
    }

    /// What the policy decided so far.
    pub(super) fn stats(&self) -> PriorityStats {
        self.stats
    }

    /// A period ended at `now`; `high` are the counters of every high-priority data QP now.
    /// Returns whether low priority is throttled from now on.
    pub(super) fn decide(
        &mut self,
        now: Timestamp,
        high: impl IntoIterator<Item = (QpNumber, QpServed)>,
    ) -> bool {
        let mut ops = 0u64;
        let mut last = HashMap::with_capacity(self.last.len());
        for (qpn, served) in high {
            let before = self.last.get(&qpn).copied().unwrap_or_default();
            ops = ops.saturating_add(served.since(&before).ops);
            last.insert(qpn, served);
        }
        self.last = last;
        let Some(start) = self.period_start.replace(now) else {
            return self.stats.throttled; // the baseline
        };
        let elapsed_us = now.0.saturating_sub(start.0).max(1);
        let rate =
            u64::try_from(u128::from(ops) * 1_000_000 / u128::from(elapsed_us)).unwrap_or(u64::MAX);
        self.stats.periods += 1;
        self.stats.high_ops_per_s = rate;
        let p = &self.policy;
        if !self.stats.throttled {
            if rate >= p.high_load_ops_per_s {
                self.stats.throttled = true;
                self.stats.engaged += 1;
                self.calm = 0;
            }
        } else if rate < p.release_ops_per_s {
            self.calm += 1;
            if self.calm >= p.release_periods {
                self.stats.throttled = false;
                self.stats.lifted += 1;
                self.calm = 0;
            }
        } else {
            self.calm = 0;
        }
        self.stats.throttled
    }

    /// Of the low-priority data QPs `low` (all of them, now), those whose service is not set
    /// to the current decision yet; QPs no longer listed are forgotten.
    pub(super) fn pending(&mut self, low: &[QpNumber]) -> Vec<QpNumber> {
        let live: HashSet<QpNumber> = low.iter().copied().collect();
        self.applied.retain(|q, _| live.contains(q));
        let want = self.stats.throttled;
        low.iter()
            .copied()
            .filter(|q| self.applied.get(q) != Some(&want))
            .collect()
    }

    /// `qpn`'s service was set to the current decision (`ok`), or the NIC refused it (it is
    /// reported again next period).
    pub(super) fn applied(&mut self, qpn: QpNumber, ok: bool) {
        self.stats.services_set += 1;
        if ok {
            self.applied.insert(qpn, self.stats.throttled);
        } else {
            self.stats.services_failed += 1;
            self.applied.remove(&qpn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HIGH: TenantId = 1;
    const LOW: TenantId = 2;

    fn policy() -> SwPri {
        SwPri::new(
            PriorityPolicy {
                period_us: 100_000,
                high_load_ops_per_s: 1_000,
                release_ops_per_s: 500,
                release_periods: 2,
                throttled_ops_per_s: Some(100),
                throttled_bytes_per_s: None,
            },
            &[
                TenantPriority {
                    tenant: HIGH,
                    priority: Priority::High,
                },
                TenantPriority {
                    tenant: LOW,
                    priority: Priority::Low,
                },
            ],
        )
        .unwrap()
    }

    fn at_ms(ms: u64) -> Timestamp {
        Timestamp(ms * 1_000)
    }

    fn ops(n: u64) -> QpServed {
        QpServed {
            ops: n,
            bytes: n * 4_096,
        }
    }

    #[test]
    fn none_without_priorities_and_priorities_by_tenant() {
        assert!(SwPri::new(PriorityPolicy::default(), &[]).is_none());
        let p = policy();
        assert_eq!(p.priority(Some(HIGH)), Priority::High);
        assert_eq!(p.priority(Some(LOW)), Priority::Low);
        assert_eq!(p.priority(Some(9)), Priority::Normal);
        assert_eq!(p.priority(None), Priority::Normal, "not authenticated");
    }

    #[test]
    fn throttles_on_high_load_and_lifts_after_calm_periods() {
        let mut p = policy();
        let q = QpNumber(7);
        assert!(p.is_due(at_ms(0)));
        assert!(!p.decide(at_ms(0), [(q, ops(50_000))]), "a baseline only");
        assert!(!p.is_due(at_ms(99)) && p.is_due(at_ms(100)));
        // 99 ops in 100 ms: 990 a second, under the threshold.
        assert!(!p.decide(at_ms(100), [(q, ops(50_099))]));
        assert_eq!(p.stats().high_ops_per_s, 990);
        // 100 ops in 100 ms: 1000 a second, at the threshold (policy 1).
        assert!(p.decide(at_ms(200), [(q, ops(50_199))]));
        assert_eq!(p.stats().engaged, 1);
        // Between release and threshold: the decision stands (hysteresis).
        assert!(p.decide(at_ms(300), [(q, ops(50_269))]));
        // One calm period is not enough; a busy one restarts the count.
        assert!(p.decide(at_ms(400), [(q, ops(50_270))]));
        assert!(p.decide(at_ms(500), [(q, ops(50_370))]));
        assert!(p.decide(at_ms(600), [(q, ops(50_370))]));
        // Two calm periods in a row: lifted (policy 2).
        assert!(!p.decide(at_ms(700), [(q, ops(50_370))]));
        let s = p.stats();
        assert_eq!((s.engaged, s.lifted, s.periods), (1, 1, 7));
        // No high-priority QP at all is no load.
        assert!(!p.decide(at_ms(800), []));
    }

    #[test]
    fn load_is_summed_over_qps_and_new_connections_count_from_zero() {
        let mut p = policy();
        let (a, b) = (QpNumber(1), QpNumber(2));
        p.decide(at_ms(0), [(a, ops(1_000))]);
        // `a` reconnected (its count went down: 60 since), `b` is new (50 since): 110 ops in
        // 100 ms.
        assert!(p.decide(at_ms(100), [(a, ops(60)), (b, ops(50))]));
        assert_eq!(p.stats().high_ops_per_s, 1_100);
        // A longer period than configured (the manager looked late): the rate is per second
        // of the time that passed.
        assert!(p.decide(at_ms(300), [(a, ops(110)), (b, ops(100))]));
        assert_eq!(p.stats().high_ops_per_s, 500);
    }

    #[test]
    fn low_qps_are_set_until_a_set_succeeds() {
        let mut p = policy();
        let (x, y) = (QpNumber(10), QpNumber(11));
        p.decide(at_ms(0), []);
        // Not throttled: QPs are set to their unthrottled service once (a no-op for a QP just
        // accepted with it, needed for one accepted while throttled).
        assert_eq!(p.pending(&[x]), vec![x]);
        p.applied(x, true);
        assert!(p.pending(&[x]).is_empty());
        let q = QpNumber(1);
        p.decide(at_ms(100), [(q, ops(0))]);
        assert!(p.decide(at_ms(200), [(q, ops(1_000))]));
        assert_eq!(p.pending(&[x, y]), vec![x, y]);
        p.applied(x, true);
        p.applied(y, false);
        assert_eq!(p.pending(&[x, y]), vec![y], "a refused set is tried again");
        p.applied(y, true);
        assert!(p.pending(&[x, y]).is_empty());
        // `x` is gone: forgotten, and set again if its number comes back.
        assert!(p.pending(&[y]).is_empty());
        assert_eq!(p.pending(&[x, y]), vec![x]);
        assert_eq!(p.stats().services_failed, 1);
    }
}
