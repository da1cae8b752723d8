//! How the node's NIC serves each connection (`QueuePair::set_service`): the engine weight and
//! responder rate limit of control and data QPs, by who is on the other end. Sans-IO: it
//! only computes the [`QpService`]s; `accept.rs` and `runner.rs` set them.
//!
//! - A control connection that has not authenticated gets a small rate: enough for its
//!   `Hello` (a burst of its credits), and `unauthenticated_ops_per_s` messages a second
//!   after that, so a flood from connections that never authenticate costs the NIC little.
//! - Once authenticated, its control QP gets its tenant's weight and no rate limit (the
//!   manager's fair queue shares the manager between tenants).
//! - A tenant's data QPs get its weight and, if configured, its one-sided rate
//!   (`NodeConfig::tenant_rates`): operations and bytes per second per data QP.
//!
//! - While the software priority policy throttles low priority (`priority.rs`), a
//!   low-priority tenant's data QPs get the policy's throttled rate, the stricter of it and
//!   the tenant's own rate in each dimension; lifted, they get the tenant's own rate again.
//!
//! Invariant: on a device that does not enforce QP service (`DeviceAttr::qp_rate_limit`),
//! nothing is set; a node configured with tenant rates refuses to start there (a rate that
//! is not enforced is never silently dropped).

use super::super::tenants::TenantId;
use super::config::{PriorityPolicy, TenantRate, TenantWeight};
use rnic::{MAX_WEIGHT, QpService, RateLimit, TokenRate};
use std::collections::HashMap;

/// A rate limit's burst: a tenth of a second's worth, at least `floor`.
fn burst(per_s: u64, floor: u64) -> u64 {
    (per_s / 10).max(floor)
}

/// The services the node sets, by role.
#[derive(Debug, Default)]
pub(super) struct Services {
    /// Whether the device enforces them (else none is set).
    pub(super) enforced: bool,
    unauthenticated: QpService,
    weights: HashMap<TenantId, u32>,
    rates: HashMap<TenantId, RateLimit>,
    /// The priority policy's throttled rate.
    throttled: RateLimit,
}

/// An operation rate and a byte rate as a [`RateLimit`] (bursts of a tenth of a second).
fn limit(ops_per_s: Option<u64>, bytes_per_s: Option<u64>) -> RateLimit {
    RateLimit {
        ops: ops_per_s.map(|n| TokenRate {
            per_sec: n,
            burst: burst(n, 16),
        }),
        bytes: bytes_per_s.map(|n| TokenRate {
            per_sec: n,
            burst: burst(n, 64 << 10),
        }),
    }
}

/// The stricter of two token rates (the lower rate, with its burst).
fn stricter(a: Option<TokenRate>, b: Option<TokenRate>) -> Option<TokenRate> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.per_sec < a.per_sec { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Services {
    pub(super) fn new(
        enforced: bool,
        credits: u32,
        unauthenticated_ops_per_s: u32,
        weights: &[TenantWeight],
        rates: &[TenantRate],
    ) -> Self {
        let ops = TokenRate {
            per_sec: u64::from(unauthenticated_ops_per_s.max(1)),
            burst: u64::from(credits.max(1)),
        };
        Services {
            enforced,
            unauthenticated: QpService {
                weight: 1,
                rate: Some(RateLimit {
                    ops: Some(ops),
                    bytes: None,
                }),
            },
            weights: weights
                .iter()
                .map(|w| (w.tenant, w.weight.clamp(1, MAX_WEIGHT)))
                .collect(),
            rates: rates
                .iter()
                .map(|r| (r.tenant, limit(r.ops_per_s, r.bytes_per_s)))
                .collect(),
            throttled: RateLimit::default(),
        }
    }

    /// With the priority policy's throttled rate.
    pub(super) fn with_priority(mut self, policy: &PriorityPolicy) -> Self {
        self.throttled = limit(policy.throttled_ops_per_s, policy.throttled_bytes_per_s);
        self
    }

    /// A control connection before its `Hello` (`None`: the device does not enforce).
    pub(super) fn unauthenticated(&self) -> Option<QpService> {
        self.enforced.then_some(self.unauthenticated)
    }

    /// `tenant`'s control connection once authenticated.
    pub(super) fn control(&self, tenant: TenantId) -> Option<QpService> {
        self.enforced.then(|| QpService {
            weight: self.weight(tenant),
            rate: None,
        })
    }

    /// `tenant`'s data connections.
    pub(super) fn data(&self, tenant: TenantId) -> Option<QpService> {
        self.enforced.then(|| QpService {
            weight: self.weight(tenant),
            rate: self.rates.get(&tenant).copied(),
        })
    }

    /// A low-priority `tenant`'s data connections, throttled by the priority policy or not.
    pub(super) fn low_priority_data(&self, tenant: TenantId, throttled: bool) -> Option<QpService> {
        if !throttled {
            return self.data(tenant);
        }
        let own = self.rates.get(&tenant).copied().unwrap_or_default();
        self.enforced.then(|| QpService {
            weight: self.weight(tenant),
            rate: Some(RateLimit {
                ops: stricter(own.ops, self.throttled.ops),
                bytes: stricter(own.bytes, self.throttled.bytes),
            }),
        })
    }

    fn weight(&self, tenant: TenantId) -> u32 {
        self.weights.get(&tenant).copied().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_by_role_and_none_where_not_enforced() {
        let weights = [TenantWeight {
            tenant: 1,
            weight: 1000,
        }];
        let rates = [TenantRate {
            tenant: 2,
            ops_per_s: Some(1000),
            bytes_per_s: None,
        }];
        let s = Services::new(true, 16, 100, &weights, &rates);
        let u = s.unauthenticated().unwrap();
        assert_eq!(
            u.rate.unwrap().ops,
            Some(TokenRate {
                per_sec: 100,
                burst: 16
            })
        );
        assert_eq!(s.control(1).unwrap().weight, MAX_WEIGHT, "clamped");
        assert_eq!(s.control(1).unwrap().rate, None);
        assert_eq!(s.data(2).unwrap().weight, 1);
        assert_eq!(
            s.data(2).unwrap().rate.unwrap().ops,
            Some(TokenRate {
                per_sec: 1000,
                burst: 100
            })
        );
        assert_eq!(s.data(3).unwrap().rate, None, "no rate configured");
        for q in [s.unauthenticated(), s.control(1), s.data(2)]
            .into_iter()
            .flatten()
        {
            assert!(q.validate().is_ok(), "{q:?}");
        }
        let off = Services::new(false, 16, 100, &weights, &rates);
        assert!(off.unauthenticated().is_none() && off.control(1).is_none());
        assert!(off.data(2).is_none());
    }

    #[test]
    fn throttled_low_priority_takes_the_stricter_rate_and_lifting_restores_its_own() {
        let rates = [TenantRate {
            tenant: 2,
            ops_per_s: Some(1000),
            bytes_per_s: None,
        }];
        let policy = PriorityPolicy {
            throttled_ops_per_s: Some(5000),
            throttled_bytes_per_s: Some(1 << 20),
            ..PriorityPolicy::default()
        };
        let s = Services::new(true, 16, 100, &[], &rates).with_priority(&policy);
        let t = s.low_priority_data(2, true).unwrap().rate.unwrap();
        assert_eq!(t.ops.unwrap().per_sec, 1000, "its own rate is stricter");
        assert_eq!(t.bytes.unwrap().per_sec, 1 << 20);
        assert_eq!(
            s.low_priority_data(2, false),
            s.data(2),
            "lifted: its own rate"
        );
        let other = s.low_priority_data(3, true).unwrap().rate.unwrap();
        assert_eq!(other.ops.unwrap().per_sec, 5000);
        assert_eq!(s.low_priority_data(3, false).unwrap().rate, None);
        assert!(s.low_priority_data(3, true).unwrap().validate().is_ok());
        let off = Services::new(false, 16, 100, &[], &rates).with_priority(&policy);
        assert!(off.low_priority_data(3, true).is_none());
    }
}
