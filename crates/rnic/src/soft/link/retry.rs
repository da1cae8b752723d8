//! What a link tells the QP that uses it about silence from the peer: when a request counts as
//! lost and when the peer counts as gone. A property of the path, so the link reports it
//! ([`Link::retry_policy`](super::Link::retry_policy)) and the QP's requester applies it
//! (`soft::qp::ack_timer`); the design is in `docs/tcp-transport.md`, "Timeouts".
//!
//! - [`RetryPolicy::Verbs`]: the verbs contract's RC timers, as on an RNIC (IB spec): the
//!   QP's own [`QpTiming`](crate::verbs::QpTiming) — retransmit after `ack_timeout_us`, fail
//!   with `RetryExceeded` after `retry_count` retransmissions without a response. The
//!   in-process links use it (the queued network and the fault wrapper lose packets on
//!   purpose), and so does a TCP device's loopback link.
//! - [`RetryPolicy::Stream`]: the link is a connection with delivery of its own (TCP): it never
//!   loses a packet while it is up, and it reports when it goes down. Silence from the peer is
//!   then a slow peer or a vanished one, never a lost packet, so the QP probes (retransmits its
//!   oldest request) on an adaptive timeout ([`AdaptiveTimeouts`], RFC 6298) and fails only
//!   after [`AdaptiveTimeouts::budget`] without a response. The connection belongs to the
//!   QP: a QP that enters ERR closes it, so its peer learns at once instead of waiting out
//!   its budget.
//!
//! Invariant: a link's policy never changes while a QP uses it.

use std::time::Duration;

/// How a QP's requester treats silence on its link (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RetryPolicy {
    /// The QP's `QpTiming` (ack timeout, retry count), as the IB spec defines them.
    #[default]
    Verbs,
    /// A connection that delivers by itself: adaptive probes, a time budget, and a QP in ERR
    /// closes it.
    Stream(AdaptiveTimeouts),
}

impl RetryPolicy {
    /// Whether a QP that enters ERR closes the link (so that its peer learns at once).
    pub fn closes_on_error(&self) -> bool {
        matches!(self, RetryPolicy::Stream(_))
    }
}

/// The timeouts of [`RetryPolicy::Stream`]: a retransmission timeout (RTO) estimated from the
/// round trips measured as in RFC 6298 and kept in `[min_rto, max_rto]`, and the time without
/// any response after which the peer counts as gone. A plain struct with defaults; see
/// `docs/tcp-transport.md` for why these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveTimeouts {
    /// RTO before the first round trip is measured (RFC 6298 §2.1: 1 s).
    pub initial_rto: Duration,
    /// Floor of the RTO (Linux's `TCP_RTO_MIN`, 200 ms): probes never come faster, so a
    /// scheduling hiccup of the peer costs it no duplicate work.
    pub min_rto: Duration,
    /// Ceiling of the RTO, backed off or not: a silent peer is probed at least this often.
    pub max_rto: Duration,
    /// Time an outstanding request may go without any response from the peer (to it or to an
    /// earlier request) before the QP gives up with `RetryExceeded`: how long a vanished peer
    /// takes to be detected, and how long a stalled one is waited for.
    pub budget: Duration,
}

impl Default for AdaptiveTimeouts {
    fn default() -> Self {
        AdaptiveTimeouts {
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(5),
            budget: Duration::from_secs(15),
        }
    }
}

/// Timeouts a [`RetryPolicy::Stream`] cannot work with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("{}", self.reason())]
pub enum TimeoutsError {
    /// `min_rto` is zero: the QP would probe on every poll.
    ZeroFloor,
    /// `min_rto` is above `max_rto`.
    FloorAboveCeiling,
    /// `budget` is zero: every request would fail at once.
    ZeroBudget,
}

impl TimeoutsError {
    /// What is wrong, for an error message.
    pub fn reason(self) -> &'static str {
        match self {
            TimeoutsError::ZeroFloor => "timeouts: min_rto must be positive",
            TimeoutsError::FloorAboveCeiling => "timeouts: min_rto must not exceed max_rto",
            TimeoutsError::ZeroBudget => "timeouts: budget must be positive",
        }
    }
}

impl AdaptiveTimeouts {
    /// Checks that the bounds make sense (the initial RTO is clamped into them, not refused).
    pub fn validate(&self) -> Result<(), TimeoutsError> {
        if self.min_rto.is_zero() {
            return Err(TimeoutsError::ZeroFloor);
        }
        if self.min_rto > self.max_rto {
            return Err(TimeoutsError::FloorAboveCeiling);
        }
        if self.budget.is_zero() {
            return Err(TimeoutsError::ZeroBudget);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_only_streams_close_on_error() {
        assert_eq!(AdaptiveTimeouts::default().validate(), Ok(()));
        assert!(!RetryPolicy::Verbs.closes_on_error());
        assert!(RetryPolicy::Stream(AdaptiveTimeouts::default()).closes_on_error());
    }

    #[test]
    fn nonsense_bounds_are_refused() {
        let d = AdaptiveTimeouts::default();
        let zero_floor = AdaptiveTimeouts {
            min_rto: Duration::ZERO,
            ..d
        };
        assert_eq!(zero_floor.validate(), Err(TimeoutsError::ZeroFloor));
        let inverted = AdaptiveTimeouts {
            min_rto: Duration::from_secs(2),
            max_rto: Duration::from_secs(1),
            ..d
        };
        assert_eq!(inverted.validate(), Err(TimeoutsError::FloorAboveCeiling));
        let no_budget = AdaptiveTimeouts {
            budget: Duration::ZERO,
            ..d
        };
        assert_eq!(no_budget.validate(), Err(TimeoutsError::ZeroBudget));
    }
}
