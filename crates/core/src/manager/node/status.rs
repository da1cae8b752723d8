//! What an operator may see of a running node ([`MemoryNode::status`]): its live permissions
//! (the soonest to end first), its client sessions with their QPs' states, and the manager's
//! service-time histogram.
//!
//! Invariant: nothing here is a credential. Permissions are shown without their rkeys, and
//! sessions without their secrets; an address and a length name memory, they do not open it.
//!
//! [`MemoryNode::status`]: super::MemoryNode::status

use super::super::core::LivePermission;
use super::super::state::ClientId;
use super::super::tenants::TenantId;
use rnic::QpState;
use std::net::IpAddr;
use std::time::Duration;

/// Most permissions a status lists (the soonest to end first); the count is always whole.
pub const STATUS_PERMISSIONS: usize = 1000;

/// A live permission (no rkey), with the shard holding it and its holder's tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionStatus {
    /// The shard holding it.
    pub shard: usize,
    /// The holder's tenant (`None`: not known to this node any more).
    pub tenant: Option<TenantId>,
    /// The permission: holder, memory, access, mode, time left.
    pub permission: LivePermission,
}

/// A client's session on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionStatus {
    /// The shard.
    pub shard: usize,
    /// The client.
    pub client: ClientId,
    /// Its tenant (`None`: not authenticated yet).
    pub tenant: Option<TenantId>,
    /// Where it connected from (network transports).
    pub from: Option<IpAddr>,
    /// How long it has been connected.
    pub connected: Duration,
    /// Its control QP's state.
    pub control_qp: QpState,
    /// Its data QPs (by slot: the active one and its spares) and their states.
    pub data_qps: Vec<(u8, QpState)>,
}

/// A node's status: its live permissions and sessions, over every shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStatus {
    /// Live permissions, the soonest to end first, at most [`STATUS_PERMISSIONS`].
    pub permissions: Vec<PermissionStatus>,
    /// Live permissions in all (also those not listed).
    pub permissions_total: usize,
    /// Client sessions.
    pub sessions: Vec<SessionStatus>,
}

/// How long the manager took to answer requests (from the turn that took them up to their
/// replies being posted), in power-of-two buckets of microseconds. Requests that wait for a
/// conflicting holder are counted by the turn that took them up, not by their wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceTimes {
    /// `buckets[i]`: requests answered within 2^i µs (and above 2^(i-1) µs); the last
    /// bucket holds everything longer.
    pub buckets: [u64; SERVICE_BUCKETS],
    /// Sum of the times, µs.
    pub sum_us: u64,
}

/// Buckets of [`ServiceTimes`]: up to 2^23 µs (8.4 s) and beyond.
pub const SERVICE_BUCKETS: usize = 25;

impl ServiceTimes {
    /// Counts `n` requests answered in `us` µs.
    pub fn record(&mut self, us: u64, n: u64) {
        let i = (u64::BITS - us.saturating_sub(1).leading_zeros()) as usize;
        self.buckets[i.min(SERVICE_BUCKETS - 1)] += n;
        self.sum_us = self.sum_us.saturating_add(us.saturating_mul(n));
    }

    /// Requests counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound of bucket `i`, µs (`None` for the last: unbounded).
    pub fn bound_us(i: usize) -> Option<u64> {
        (i + 1 < SERVICE_BUCKETS).then(|| 1u64 << i)
    }

    /// Both added.
    pub fn plus(&self, o: &ServiceTimes) -> ServiceTimes {
        let mut out = *self;
        for (a, b) in out.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
        out.sum_us = out.sum_us.saturating_add(o.sum_us);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_land_in_their_power_of_two_bucket() {
        let mut t = ServiceTimes::default();
        for (us, bucket) in [(0, 0), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (1024, 10)] {
            let before = t.buckets[bucket];
            t.record(us, 1);
            assert_eq!(t.buckets[bucket], before + 1, "{us} µs in bucket {bucket}");
            if let Some(bound) = ServiceTimes::bound_us(bucket) {
                assert!(us <= bound);
            }
        }
        t.record(u64::MAX / 2, 3);
        assert_eq!(t.buckets[SERVICE_BUCKETS - 1], 3, "beyond the last bound");
        assert_eq!(t.count(), 10);
        assert_eq!(t.plus(&t).count(), 20);
    }
}
