//! The client's lease policy under load: how long a lease to ask for so that a grant is still
//! usable when it arrives, and what the client counts about it (sans-IO: times come in as
//! values from the client's injected clock).
//!
//! A lease counts from the manager's grant, but the client can only count it from when it
//! *sent* the request (its clocks and the manager's are not synchronised), so the round trip
//! is eaten out of every lease: a grant that takes longer to arrive than its lease is dead on
//! arrival, and a client that retries at once asks the manager for more grants nobody will
//! use. The policy measures the control round trip as the application sees it (from sending
//! a request to taking its reply, queueing in the client's own thread included) with the
//! estimator TCP uses for its retransmission timer (RFC 6298: smoothed RTT and its mean
//! deviation), and asks for
//!
//! ```text
//! wire lease = requested + slack_rtts × (srtt + 4·rttvar)      (at most the maximum lifetime)
//! ```
//!
//! so the requested lease is what remains, with high probability, once the grant is in the
//! application's hands. Invariants: the wire lease never exceeds the memory node's maximum
//! lifetime (the client learns it when it connects: a longer lease would only be capped by
//! the node, and extensions planned from it would be refused); below that, it is never below
//! the requested one, and without samples (or with `slack_rtts = 0`) it is the requested one.
//! The maximum lifetime and forced invalidation are the manager's and are untouched.

use hdrhistogram::Histogram;
use rnic::Timestamp;
use std::time::Duration;

/// Round-trip estimator of RFC 6298 (§2), in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttEstimator {
    srtt_us: f64,
    rttvar_us: f64,
    samples: u64,
}

impl RttEstimator {
    /// Adds one round-trip sample.
    pub fn observe(&mut self, rtt_us: u64) {
        let r = rtt_us as f64;
        if self.samples == 0 {
            self.srtt_us = r;
            self.rttvar_us = r / 2.0;
        } else {
            self.rttvar_us = 0.75 * self.rttvar_us + 0.25 * (self.srtt_us - r).abs();
            self.srtt_us = 0.875 * self.srtt_us + 0.125 * r;
        }
        self.samples += 1;
    }

    /// Smoothed round trip, µs.
    pub fn srtt_us(&self) -> u64 {
        self.srtt_us.round() as u64
    }

    /// A round trip few samples exceed: srtt + 4·rttvar, µs (0 before the first sample).
    pub fn bound_us(&self) -> u64 {
        (self.srtt_us + 4.0 * self.rttvar_us).round() as u64
    }

    /// Samples so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// What a client counted about its permissions and its control path.
#[derive(Clone, Debug)]
pub struct ClientStats {
    /// Grants received (allocations, acquisitions, renewals).
    pub grants: u64,
    /// Grants whose local expiry had passed when the client took them.
    pub dead_on_arrival: u64,
    /// Grants that ended before their first access: dead on arrival, or found expired by the
    /// first access (the manager's work on them bought nothing).
    pub wasted: u64,
    /// Data operations refused locally because the lease had run out.
    pub local_expiries: u64,
    /// One-sided (CAS) extensions that succeeded.
    pub cas_extensions: u64,
    /// RPC extensions that succeeded.
    pub rpc_extensions: u64,
    /// Extensions refused (the manager ended the permission, or the maximum lifetime).
    pub extension_refusals: u64,
    /// Control requests sent again after half their timeout.
    pub rpc_retries: u64,
    /// Requests the memory node refused as overloaded.
    pub overloaded: u64,
    /// Control replies dropped because nobody was owed them: unknown request ids (forged, or
    /// long forgotten), duplicates (a retry's second answer), undecodable slots.
    pub stray_replies: u64,
    /// New sessions opened after the control connection was lost.
    pub reconnects: u64,
    /// Control round trips (sending to taking the reply), µs.
    pub rtt_us: Histogram<u64>,
    /// The slack the client last added to a lease, µs.
    pub slack_us: u64,
}

impl Default for ClientStats {
    fn default() -> Self {
        ClientStats {
            grants: 0,
            dead_on_arrival: 0,
            wasted: 0,
            local_expiries: 0,
            cas_extensions: 0,
            rpc_extensions: 0,
            extension_refusals: 0,
            rpc_retries: 0,
            overloaded: 0,
            stray_replies: 0,
            reconnects: 0,
            rtt_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("constant, valid histogram bounds"),
            slack_us: 0,
        }
    }
}

impl ClientStats {
    /// Adds `o`'s counts to these (e.g. over the clients of a run); `slack_us` keeps the larger.
    pub fn merge(&mut self, o: &ClientStats) {
        self.grants += o.grants;
        self.dead_on_arrival += o.dead_on_arrival;
        self.wasted += o.wasted;
        self.local_expiries += o.local_expiries;
        self.cas_extensions += o.cas_extensions;
        self.rpc_extensions += o.rpc_extensions;
        self.extension_refusals += o.extension_refusals;
        self.rpc_retries += o.rpc_retries;
        self.overloaded += o.overloaded;
        self.stray_replies += o.stray_replies;
        self.reconnects += o.reconnects;
        // Same bounds on both sides: cannot fail.
        let _ = self.rtt_us.add(&o.rtt_us);
        self.slack_us = self.slack_us.max(o.slack_us);
    }

    /// Wasted grants as a fraction of grants (0 without grants).
    pub fn wasted_fraction(&self) -> f64 {
        self.wasted as f64 / self.grants.max(1) as f64
    }
}

/// The lease policy of one client (see the module docs).
#[derive(Clone, Debug)]
pub struct LeasePolicy {
    rtt: RttEstimator,
    slack_rtts: u32,
    max_lifetime_us: Option<u64>,
}

impl LeasePolicy {
    /// A policy adding `slack_rtts` round-trip bounds to every lease (0: none).
    pub fn new(slack_rtts: u32) -> Self {
        LeasePolicy {
            rtt: RttEstimator::default(),
            slack_rtts,
            max_lifetime_us: None,
        }
    }

    /// A control round trip from `sent` to `taken`.
    pub fn observe(&mut self, sent: Timestamp, taken: Timestamp, stats: &mut ClientStats) {
        let rtt = taken.0.saturating_sub(sent.0);
        self.rtt.observe(rtt);
        // Out-of-range samples are clamped by the histogram's bounds.
        let _ = stats.rtt_us.record(rtt.clamp(1, stats.rtt_us.high()));
    }

    /// The memory node's maximum lifetime, as its `Welcome` or a grant states it.
    pub fn learn_max_lifetime(&mut self, max_lifetime_us: u64) {
        self.max_lifetime_us = Some(max_lifetime_us);
    }

    /// The slack added to a lease now, µs: the round-trip bounds, rounded up to a power of two
    /// so that leases do not jitter with every sample. Clients whose round trips are alike then
    /// ask for the same lease, and permissions expire in the order and batches they were
    /// granted in, which is what lets the manager hand an expiring permission's windows over to
    /// a new grant in one batch (§5.4) instead of unbinding them.
    pub fn slack_us(&self) -> u64 {
        let slack = u64::from(self.slack_rtts).saturating_mul(self.rtt.bound_us());
        if slack == 0 {
            0
        } else {
            slack.checked_next_power_of_two().unwrap_or(u64::MAX)
        }
    }

    /// The lease to ask the memory node for when the application wants `requested_us`.
    pub fn wire_lease_us(&self, requested_us: u64) -> u64 {
        let wanted = requested_us.saturating_add(self.slack_us());
        match self.max_lifetime_us {
            Some(max) => wanted.min(max),
            None => wanted,
        }
    }

    /// The round-trip estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
}

/// A duration in whole microseconds, as leases travel (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimator_follows_rfc_6298() {
        let mut e = RttEstimator::default();
        assert_eq!(e.bound_us(), 0);
        e.observe(100);
        assert_eq!((e.srtt_us(), e.bound_us()), (100, 300));
        e.observe(200);
        // rttvar = 0.75·50 + 0.25·100 = 62.5; srtt = 0.875·100 + 0.125·200 = 112.5
        assert_eq!((e.srtt_us(), e.bound_us()), (113, 363));
        for _ in 0..200 {
            e.observe(1000);
        }
        assert_eq!(e.srtt_us(), 1000);
        assert!(e.bound_us() >= 1000 && e.bound_us() < 1010, "{e:?}");
    }

    #[test]
    fn the_wire_lease_adds_round_trips_up_to_the_maximum_lifetime() {
        let mut stats = ClientStats::default();
        let mut p = LeasePolicy::new(2);
        assert_eq!(p.wire_lease_us(1000), 1000, "no sample: the lease as asked");
        for i in 0..100 {
            p.observe(
                Timestamp(i * 10_000),
                Timestamp(i * 10_000 + 500),
                &mut stats,
            );
        }
        assert_eq!(
            p.slack_us(),
            1024,
            "2 × 500 µs, rounded up to a power of two"
        );
        assert_eq!(p.wire_lease_us(1000), 2024);
        p.learn_max_lifetime(1500);
        assert_eq!(
            p.wire_lease_us(1000),
            1500,
            "capped at the maximum lifetime"
        );
        assert_eq!(
            p.wire_lease_us(4000),
            1500,
            "never more than the node grants, even when asked for more"
        );
        assert_eq!(LeasePolicy::new(0).wire_lease_us(1000), 1000);
        assert_eq!(stats.rtt_us.len(), 100);
        assert_eq!(stats.rtt_us.value_at_quantile(0.5), 500);
    }

    #[test]
    fn stats_merge_and_count_waste() {
        let mut a = ClientStats {
            grants: 10,
            wasted: 1,
            ..ClientStats::default()
        };
        let b = ClientStats {
            grants: 30,
            wasted: 3,
            slack_us: 7,
            ..ClientStats::default()
        };
        a.merge(&b);
        assert_eq!((a.grants, a.wasted, a.slack_us), (40, 4, 7));
        assert!((a.wasted_fraction() - 0.1).abs() < 1e-12);
        assert_eq!(ClientStats::default().wasted_fraction(), 0.0);
    }
}
