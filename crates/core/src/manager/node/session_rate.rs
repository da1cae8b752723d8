//! How fast new sessions may open: one token bucket for the node, one per tenant. Sans-IO:
//! the time is given.
//!
//! Opening a session costs the node a connection, a `Hello` and (with a PD per client) a
//! protection domain, a registration of the pool and windows, and closing it as much again;
//! the concurrent-session limits bound how many are open, not how fast they come and go. So a
//! client's first control connection takes a token from the node's bucket (refused at the
//! handshake without one), and its first `Hello` one from its tenant's (refused with
//! `Overloaded` without one): a tenant that churns sessions spends its own rate, and the
//! node's bucket bounds what all connections, authenticated or not, can cost together.
//!
//! Invariant: a refused attempt takes no token and is counted once.

use super::super::fast_hash::FastMap;
use super::super::tenants::TenantId;
use super::token_bucket::TokenBucket;
use rnic::Timestamp;

/// A rate: a burst, and tokens regained per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rate {
    pub(super) burst: u32,
    pub(super) per_s: u32,
}

/// The node's and the tenants' buckets.
#[derive(Debug)]
pub(super) struct SessionRate {
    node: Rate,
    tenant: Rate,
    node_bucket: Option<TokenBucket>,
    tenants: FastMap<TenantId, TokenBucket>,
    /// New connections refused for the node's rate, and `Hello`s for a tenant's.
    pub(super) refused_node: u64,
    pub(super) refused_tenant: u64,
}

impl SessionRate {
    pub(super) fn new(node: Rate, tenant: Rate) -> Self {
        SessionRate {
            node,
            tenant,
            node_bucket: None,
            tenants: FastMap::default(),
            refused_node: 0,
            refused_tenant: 0,
        }
    }

    /// A client's first control connection at `now`: whether the node's rate admits it.
    pub(super) fn admit_connection(&mut self, now: Timestamp) -> bool {
        let Rate { burst, per_s } = self.node;
        let admitted = self
            .node_bucket
            .get_or_insert_with(|| TokenBucket::full(burst, now))
            .take(now, burst, per_s);
        self.refused_node += u64::from(!admitted);
        admitted
    }

    /// A session's first `Hello` for `tenant` at `now`: whether the tenant's rate admits it.
    pub(super) fn admit_hello(&mut self, tenant: TenantId, now: Timestamp) -> bool {
        let Rate { burst, per_s } = self.tenant;
        let admitted = self
            .tenants
            .entry(tenant)
            .or_insert_with(|| TokenBucket::full(burst, now))
            .take(now, burst, per_s);
        self.refused_tenant += u64::from(!admitted);
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_and_each_tenant_have_their_own_rate() {
        let t = Timestamp(1_000_000);
        let mut r = SessionRate::new(
            Rate {
                burst: 4,
                per_s: 100,
            },
            Rate {
                burst: 2,
                per_s: 10,
            },
        );
        assert!((0..4).all(|_| r.admit_connection(t)));
        assert!(!r.admit_connection(t), "the node's burst is spent");
        assert!(r.admit_connection(t.plus_us(10_000)), "100 a second");
        assert!(r.admit_hello(1, t) && r.admit_hello(1, t));
        assert!(!r.admit_hello(1, t), "tenant 1's burst is spent");
        assert!(r.admit_hello(2, t), "tenant 2 has its own");
        assert!(r.admit_hello(1, t.plus_us(100_000)), "10 a second");
        assert_eq!((r.refused_node, r.refused_tenant), (1, 1));
    }
}
