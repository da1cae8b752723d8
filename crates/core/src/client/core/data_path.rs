//! The data path's decisions, sans-IO: what happens to a one-sided op caught in a data-QP
//! failure, and how a long-lived permission is kept (see [`LongLease`](crate::client::LongLease)).
//!
//! **Exactly once.** Every WRITE, CAS and FAA executes at most once at the memory node: an
//! op reported successful executed exactly once, one reported
//! [`ClientError::OutcomeUnknown`](super::super::ClientError::OutcomeUnknown) executed once or
//! not at all, and no unsafe op is ever run a second time. So after a QP failure:
//! - the op the NIC refused (remote access or invalid request) reports its refusal: the
//!   responder stopped there, so the ops flushed behind it never executed and are retried on
//!   the next QP;
//! - an op that was never handed to the QP is retried;
//! - a READ is idempotent and retried;
//! - a WRITE, CAS or FAA that failed or was flushed for a reason that does not say what ran
//!   (retry exceeded, a lost link, a local error) may already have executed: it reports
//!   `OutcomeUnknown` and is never run again.
//!
//! **Renewal without a gap.** An exclusive permission that must outlive its lease is
//! extended one-sidedly while the manager allows, and otherwise renewed through
//! `Request::Renew`, which replaces it by a new permission over the same object in one step.
//! Giving it back and acquiring again would let another client take the object in between.
//!
//! [`ClientCore::data_next_step`] and [`ClientCore::renewal`] are the decisions the client
//! (and the cluster simulation) take; under the `testing` feature a `ClientMutation` can
//! switch a hole fixed before back on inside them.

use super::ClientCore;
#[cfg(feature = "testing")]
use super::ClientMutation;
use rnic::{Timestamp, WcStatus};

/// Stands for "never handed to the QP" in a batch's outcome (post refused part of the list).
pub const NOT_POSTED: WcStatus = WcStatus::LocalQpOperationError;

/// What broke the QP in one batch, as far as the completions tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The NIC refused an access (remote access or invalid request): the responder stopped
    /// there, so everything flushed behind it never executed.
    Refused,
    /// Anything else (retry exceeded, lost link, a local error), or no error seen at all:
    /// flushed ops may or may not have executed.
    Unknown,
}

impl Fault {
    /// The fault behind one batch's completion statuses.
    pub fn of(statuses: impl Iterator<Item = WcStatus>) -> Fault {
        let mut fault = Fault::Unknown;
        for s in statuses {
            match s {
                WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError => {
                    fault = Fault::Refused;
                }
                WcStatus::Success | WcStatus::WrFlushError => {}
                s if s == NOT_POSTED => {}
                _ => return Fault::Unknown,
            }
        }
        fault
    }

    /// The fault behind one round's completions on a QP that others may share: its
    /// statuses, and the causes its flushes were filed with (the QP's last error). A round
    /// whose own failures are all flushes is `Refused` when a cause was a refusal: someone's
    /// access was refused ahead of it, so the responder stopped before it.
    pub fn of_shared(
        statuses: impl Iterator<Item = WcStatus>,
        causes: impl Iterator<Item = Option<WcStatus>>,
    ) -> Fault {
        let refused_ahead = causes
            .flatten()
            .any(|c| Fault::of(std::iter::once(c)) == Fault::Refused);
        let own: Vec<WcStatus> = statuses.collect();
        let only_flushes = own
            .iter()
            .all(|&s| matches!(s, WcStatus::Success | WcStatus::WrFlushError) || s == NOT_POSTED);
        match Fault::of(own.into_iter()) {
            Fault::Unknown if refused_ahead && only_flushes => Fault::Refused,
            f => f,
        }
    }
}

/// What happens to an op after its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run it again on the next QP: it did not execute, or it is a READ.
    Retry,
    /// The NIC refused it.
    Denied,
    /// It may have executed: report, never repeat.
    Unknown,
}

/// The exactly-once rule for one op (`status` is not `Success`; `fault` is its batch's).
pub fn next_step(status: WcStatus, fault: Fault, is_read: bool) -> Next {
    match status {
        WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError => Next::Denied,
        s if s == NOT_POSTED => Next::Retry,
        WcStatus::WrFlushError if fault == Fault::Refused => Next::Retry,
        _ if is_read => Next::Retry,
        _ => Next::Unknown,
    }
}

/// The retry budget of one batch across the QP failures it meets. A round broken by a
/// refusal costs nothing: the refused op leaves the list, so such rounds end (at most one
/// per op), and the ops flushed behind it never ran. A round broken for a reason that does
/// not say what ran leaves the ops [`next_step`] retries (READs, unposted ops) one more
/// round; after that they fail (`FailedAfterFailover`: the node or the path is failing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryRounds {
    blind: u32,
}

impl RetryRounds {
    /// Whether the ops [`next_step`] retries after a round with `fault` may run again.
    pub fn may_retry(&self, fault: Fault) -> bool {
        fault == Fault::Refused || self.blind == 0
    }

    /// Files a round that broke the QP with `fault`.
    pub fn broke(&mut self, fault: Fault) {
        if fault == Fault::Unknown {
            self.blind += 1;
        }
    }
}

/// How to keep a long-lived permission valid for the renewal margin more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// It is valid long enough.
    Keep,
    /// Extend it one-sidedly (a CAS on its lifetime word).
    Extend,
    /// Replace it in one step (`Request::Renew`).
    Renew,
    /// There is none (or it ended): acquire like anyone.
    Acquire,
    /// Give it back, then acquire again: the hole fixed before (another client can take the
    /// object in between). Only the `testing` mutation `ClientMutation::RenewWithGap`
    /// decides it.
    RevokeThenAcquire,
}

/// The renewal rule: `expiry` is the permission's local expiry (`None`: there is none), `now`
/// the lease clock, `margin_us` the validity to guarantee, `extension_failed` whether a
/// one-sided extension was tried (or cannot be: the lifetime is at its maximum) and did not
/// give enough.
pub fn renewal(
    expiry: Option<Timestamp>,
    now: Timestamp,
    margin_us: u64,
    extension_failed: bool,
) -> Renewal {
    match expiry {
        None => Renewal::Acquire,
        Some(e) if e.0 >= now.0.saturating_add(margin_us) => Renewal::Keep,
        Some(e) if e > now && !extension_failed => Renewal::Extend,
        Some(_) => Renewal::Renew,
    }
}

impl ClientCore {
    /// [`next_step`] as this client takes it (a `testing` mutation may change it).
    pub fn data_next_step(&self, status: WcStatus, fault: Fault, is_read: bool) -> Next {
        let next = next_step(status, fault, is_read);
        #[cfg(feature = "testing")]
        if next == Next::Unknown && self.mutated(ClientMutation::RetryFlushed) {
            return Next::Retry;
        }
        next
    }

    /// [`renewal`] as this client takes it (a `testing` mutation may change it).
    pub fn renewal(
        &self,
        expiry: Option<Timestamp>,
        now: Timestamp,
        margin_us: u64,
        extension_failed: bool,
    ) -> Renewal {
        let r = renewal(expiry, now, margin_us, extension_failed);
        #[cfg(feature = "testing")]
        if r == Renewal::Renew && self.mutated(ClientMutation::RenewWithGap) {
            return Renewal::RevokeThenAcquire;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_behind_a_refusal_is_retried() {
        let f = Fault::of(
            [
                WcStatus::Success,
                WcStatus::RemoteAccessError,
                WcStatus::WrFlushError,
            ]
            .into_iter(),
        );
        assert_eq!(f, Fault::Refused);
        assert_eq!(next_step(WcStatus::WrFlushError, f, false), Next::Retry);
        assert_eq!(
            next_step(WcStatus::RemoteAccessError, f, false),
            Next::Denied
        );
    }

    #[test]
    fn unknown_fault_retries_only_reads_and_unposted_ops() {
        for cause in [WcStatus::RetryExceeded, WcStatus::WrFlushError] {
            let f = Fault::of([cause, WcStatus::WrFlushError].into_iter());
            assert_eq!(f, Fault::Unknown, "{cause}");
            for s in [cause, WcStatus::WrFlushError] {
                assert_eq!(next_step(s, f, false), Next::Unknown, "{s} write/atomic");
                assert_eq!(next_step(s, f, true), Next::Retry, "{s} read");
            }
            assert_eq!(next_step(NOT_POSTED, f, false), Next::Retry);
        }
    }

    #[test]
    fn renewal_extends_then_renews_in_one_step() {
        let now = Timestamp(1_000);
        assert_eq!(renewal(None, now, 100, false), Renewal::Acquire);
        assert_eq!(
            renewal(Some(Timestamp(1_200)), now, 100, false),
            Renewal::Keep
        );
        assert_eq!(
            renewal(Some(Timestamp(1_050)), now, 100, false),
            Renewal::Extend
        );
        assert_eq!(
            renewal(Some(Timestamp(1_050)), now, 100, true),
            Renewal::Renew
        );
        // Expired locally: the manager may still hold it; renewal says.
        assert_eq!(renewal(Some(now), now, 100, false), Renewal::Renew);
    }
}
