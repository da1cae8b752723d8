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
//! Invariant: on a device that does not enforce QP service (`DeviceAttr::qp_rate_limit`),
//! nothing is set; a node configured with tenant rates refuses to start there (a rate that
//! is not enforced is never silently dropped).

use super::super::tenants::TenantId;
use super::config::{TenantRate, TenantWeight};
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
                .map(|r| {
                    let limit = RateLimit {
                        ops: r.ops_per_s.map(|n| TokenRate {
                            per_sec: n,
                            burst: burst(n, 16),
                        }),
                        bytes: r.bytes_per_s.map(|n| TokenRate {
                            per_sec: n,
                            burst: burst(n, 64 << 10),
                        }),
                    };
                    (r.tenant, limit)
                })
                .collect(),
        }
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
}
