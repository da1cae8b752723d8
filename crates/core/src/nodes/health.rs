//! Whether a node is reachable, as the node set last saw it, and which client errors mean it
//! is gone.
//!
//! Invariants:
//! - A node is marked down only by an error of its own client that says the connection to
//!   it failed ([`means_gone`]); a refusal by a live node (not found, no memory, denied)
//!   never marks it down.
//! - A node marked down at session `s` of its client: every permission granted in session
//!   `s` or earlier has ended (the memory node ends a session's permissions with it), so
//!   calls on them fail at once, with no I/O.
//! - Down is not forever: after `retry_after` on the client's clock a call that needs the
//!   node tries it again (its client opens a new session on its own), and a control call
//!   that succeeds marks it up.

use crate::client::ClientError;
use rnic::Timestamp;

/// What the node set knows of a node's reachability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Health {
    /// Nothing says it is gone.
    Up,
    /// Its connection failed.
    Down {
        /// When it was found gone (its client's clock).
        since: Timestamp,
        /// Its client's session then: permissions of that session or earlier have ended.
        session: u64,
        /// What its client reported.
        cause: String,
    },
}

impl Health {
    /// Whether the node is marked down.
    pub(super) fn is_down(&self) -> bool {
        matches!(self, Health::Down { .. })
    }

    /// The cause, while down, if `now` is before the retry time: the node is not to be
    /// tried.
    pub(super) fn resting(&self, now: Timestamp, retry_after: std::time::Duration) -> Option<&str> {
        match self {
            Health::Down { since, cause, .. } if now < since.plus(retry_after) => Some(cause),
            _ => None,
        }
    }

    /// The cause, while down, if a permission of `session` ended with the node.
    pub(super) fn ended(&self, perm_session: u64) -> Option<&str> {
        match self {
            Health::Down { session, cause, .. } if perm_session <= *session => Some(cause),
            _ => None,
        }
    }
}

/// Whether `e` says the connection to the node failed (rather than the node refusing).
pub(super) fn means_gone(e: &ClientError) -> bool {
    match e {
        // The node ended the session (or restarted): the connection to it went with it.
        ClientError::SessionEnded(_)
        | ClientError::ControlLost(_)
        | ClientError::RpcTimeout
        | ClientError::FailoverFailed(_)
        | ClientError::FailedAfterFailover(_) => true,
        // Opening a connection or a new session failed.
        ClientError::Verbs(v) => matches!(
            v,
            rnic::VerbsError::ConnectionRefused(_)
                | rnic::VerbsError::Io(_)
                | rnic::VerbsError::Protocol(_)
        ),
        _ => false,
    }
}
