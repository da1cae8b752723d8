//! The client library's error type: exactly what happened, grouped by cause.

use crate::proto::messages::{Reply, Status};
use crate::proto::refusal::{Refusal, SessionEnd};
use rnic::{VerbsError, WcStatus};

/// Errors of client calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    // ---- refused by the memory node ----
    /// No buffer of that size is free on the memory node.
    #[error("memory node has no free buffer of that size")]
    NoMemory,
    /// Headers or memory windows are exhausted on the memory node.
    #[error("memory node's header or window pool is exhausted")]
    PoolExhausted,
    /// A conflicting holder did not leave before the wait deadline.
    #[error("conflicting permission not released before the wait deadline")]
    ConflictTimeout,
    /// The permission no longer exists (revoked, expired, or the id is stale).
    #[error("permission not found (revoked, expired or stale)")]
    NotFound,
    /// The manager refuses further extension (maximum lifetime, or others are waiting).
    #[error("extension refused by the memory node")]
    ExtensionRefused,
    /// The memory node could not bind a window.
    #[error("memory node failed to bind a window")]
    BindFailed,
    /// The memory node does not know this client's tenant or secret (or the client has not
    /// authenticated).
    #[error("not authenticated as a tenant of the memory node")]
    Unauthorized,
    /// The object belongs to another tenant: only its owner may free or share it.
    #[error("the object belongs to another tenant")]
    NotOwner,
    /// The memory node stayed overloaded (admission control) through the client's back-offs.
    #[error("the memory node is overloaded")]
    Overloaded,
    /// The tenant holds as much as its quota at the memory node allows (memory, permissions,
    /// exclusive permissions or connections).
    #[error("the tenant's quota at the memory node is used up")]
    QuotaExceeded,
    /// Larger than the largest object the memory node allocates (its largest slab class).
    #[error("larger than the largest object the memory node allocates")]
    TooLarge,
    /// [`MAX_POSTED`](super::MAX_POSTED) extensions are posted and not yet polled.
    #[error("too many posted operations in flight")]
    TooManyPosted,
    // ---- local checks ----
    /// The lease has expired by the client's conservative clock; the op was not issued.
    #[error("lease expired locally")]
    LeaseExpired,
    /// An argument is out of range (e.g. access outside the permission's buffer).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    // ---- the NIC refused ----
    /// The NIC rejected the access: the permission was revoked, expired or never covered it.
    #[error("access denied by the NIC ({0})")]
    Denied(WcStatus),
    // ---- transport ----
    /// The QP broke in a way that does not tell whether this WRITE, CAS or FAA executed
    /// (retry exceeded, lost link): it was not run again. The caller must find out (e.g. read
    /// the word) before repeating it. READs, and ops known not to have run, are retried.
    #[error("outcome unknown: the QP failed ({0}) and the op may or may not have executed")]
    OutcomeUnknown(WcStatus),
    /// The control RPC got no reply in time.
    #[error("control RPC timed out")]
    RpcTimeout,
    /// Every control request slot is owed an answer: wait for replies (`poll_reply`) first.
    #[error("too many outstanding control requests")]
    ControlBusy,
    /// The control connection to the memory node failed while the request was in flight: it
    /// may or may not have been carried out (it is never sent again). The memory node ends
    /// the session; the client's next control operation opens a new one.
    #[error("control connection lost ({0}): the request's outcome is unknown")]
    ControlLost(WcStatus),
    /// The permission belongs to an earlier session with the memory node, which ended when
    /// the control connection was lost (the memory node ended the permission with it); the
    /// client has reconnected since. Acquire again.
    #[error("the permission ended with an earlier session with the memory node")]
    SessionLost,
    /// The memory node ended this client's current session, for the reason given: a
    /// connection of the session was refused because of it (a data QP reconnecting, a control
    /// connection joining a shard), or the session's control connection was lost. Its
    /// permissions ended with it. The op that reports this was not run (one whose outcome is
    /// unknown reports [`ClientError::OutcomeUnknown`] instead), and nothing is sent again:
    /// the next control operation opens a new session ([`SessionControl::reconnect`](super::SessionControl::reconnect)
    /// does it at once), and rights are acquired again there.
    #[error("the memory node ended this client's session ({0}); reconnect")]
    SessionEnded(SessionEnd),
    /// The memory node answered with a reply of the wrong kind (a protocol violation).
    #[error("unexpected reply from the memory node: {0}")]
    UnexpectedReply(&'static str),
    /// A data QP broke and no other could take its place (every spare failed to connect).
    #[error("no data QP could replace the broken one: {0}")]
    FailoverFailed(std::sync::Arc<ClientError>),
    /// An op that could be retried failed again on a fresh QP (`{0}` the second time): the
    /// memory node or the path to it is failing.
    #[error("failed again on a fresh QP ({0})")]
    FailedAfterFailover(WcStatus),
    /// A broken invariant of the client library itself (a bug): reported, never a panic.
    #[error("internal error of the client library: {0}")]
    Internal(&'static str),
    /// One-sided allocation: the memory node has no chunk queued for this client now (its
    /// budget is taken, or the node has not refilled its queue yet). Free chunks, try again
    /// shortly, or allocate by RPC.
    #[error("no one-sided chunk is queued for this client now")]
    NoChunk,
    /// The operation does not apply to a one-sided chunk ([`Perm::is_one_sided`]): it has no
    /// lease to extend, and is not freed by RPC.
    ///
    /// [`Perm::is_one_sided`]: super::Perm::is_one_sided
    #[error("not for a one-sided chunk: {0}")]
    OneSidedChunk(&'static str),
    /// The name is published already (by this client's tenant).
    #[error("the name is published already")]
    NameTaken,
    /// A verb call failed.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
}

impl ClientError {
    /// A failed connect of one of the session's QPs: [`ClientError::SessionEnded`] when the
    /// memory node refused it because the session ended (`proto/refusal.rs`); else the verbs
    /// error as it is (a wrong secret stays a refusal: the client library never presents one).
    pub(crate) fn from_connect(e: VerbsError) -> Self {
        match &e {
            VerbsError::ConnectionRefused(reason) => match Refusal::parse(reason) {
                Some(Refusal::SessionEnded(why)) => ClientError::SessionEnded(why),
                _ => ClientError::Verbs(e),
            },
            _ => ClientError::Verbs(e),
        }
    }

    /// Maps a manager status.
    pub fn from_status(s: Status) -> Self {
        match s {
            Status::Ok => ClientError::UnexpectedReply("Failed(Ok)"),
            Status::NoMemory => ClientError::NoMemory,
            Status::PoolExhausted => ClientError::PoolExhausted,
            Status::ConflictTimeout => ClientError::ConflictTimeout,
            Status::NotFound => ClientError::NotFound,
            Status::ExtensionRefused => ClientError::ExtensionRefused,
            Status::InvalidArgument => ClientError::InvalidArgument("rejected by the memory node"),
            Status::BindFailed => ClientError::BindFailed,
            Status::Unauthorized => ClientError::Unauthorized,
            Status::NotOwner => ClientError::NotOwner,
            Status::Overloaded => ClientError::Overloaded,
            Status::QuotaExceeded => ClientError::QuotaExceeded,
            Status::NameTaken => ClientError::NameTaken,
            Status::TooLarge => ClientError::TooLarge,
        }
    }
}

/// The error a reply that is not the one expected stands for: a refusal's status, or
/// [`ClientError::UnexpectedReply`].
pub(super) fn unexpected(reply: Reply) -> ClientError {
    match reply {
        Reply::Failed(s) => ClientError::from_status(s),
        other => ClientError::UnexpectedReply(other.kind_name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_an_ended_session_is_said_so_and_never_a_wrong_secret() {
        for why in SessionEnd::SENT {
            let refused = VerbsError::ConnectionRefused(Refusal::SessionEnded(why).text());
            let e = ClientError::from_connect(refused);
            assert!(
                matches!(e, ClientError::SessionEnded(w) if w == why),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(text.starts_with("the memory node ended this client's session ("));
            assert!(text.ends_with("); reconnect"), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }
        let wrong = VerbsError::ConnectionRefused(Refusal::WrongSecret.text());
        let e = ClientError::from_connect(wrong);
        assert!(matches!(e, ClientError::Verbs(_)), "{e:?}");
        assert!(e.to_string().contains("wrong secret"), "{e}");
        let throttled = VerbsError::ConnectionRefused("too many access faults".into());
        assert!(matches!(
            ClientError::from_connect(throttled),
            ClientError::Verbs(VerbsError::ConnectionRefused(_))
        ));
    }
}
