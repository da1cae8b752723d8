//! Why a memory node refuses a connection that names a client: the reason text of the
//! connection-management reject (`ConnectReject` on TCP, the refusal of an in-process or RDMA
//! connect), which the client library turns back into a typed cause.
//!
//! A data connection, or a control connection to another shard (or to shard 0 again), names
//! a client by its id and presents the secret its session's `Welcome` gave it
//! ([`super::connect::Intent`]). The node refuses it when:
//! - the id names a live session and the secret is not that session's: [`Refusal::WrongSecret`];
//! - the id names no live session: [`Refusal::SessionEnded`], saying why when the node still
//!   remembers the session and the connection presented that session's own secret
//!   ([`SessionEnd::Closed`], [`SessionEnd::Failed`], [`SessionEnd::Idle`]); else
//!   [`SessionEnd::Unknown`] (an id of this run of the node) or [`SessionEnd::NodeRestarted`]
//!   (an id this run never issued: the node restarted since the session was opened).
//!
//! Invariants: every refusal has one fixed text ([`Refusal::text`]) and
//! [`Refusal::parse`] gives the refusal back from exactly that text, so the text is the wire
//! contract between node and client library (the transports carry a reject's reason
//! verbatim); any other text parses to `None`. Texts fit in a `ConnectReject` (at most 256
//! bytes, `docs/wire-format.md`).

use std::fmt;

/// Why a client's session with the memory node ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionEnd {
    /// The node saw the client's control connection close (in order: the client closed it,
    /// or its process ended).
    Closed,
    /// The client's control connection failed at the node (a transport or protocol error, a
    /// reset, retries exhausted).
    Failed,
    /// The client was silent on the control path past the node's idle timeout.
    Idle,
    /// The node knows no open session of this client: it ended one that the node no longer
    /// remembers, or the connection did not present the session's own secret.
    Unknown,
    /// The node did not open this session: it restarted since (its memory is gone with every
    /// session of its earlier run), or the id is another node's.
    NodeRestarted,
    /// Seen by the client, never sent by the node: its own control connection was lost (the
    /// node ends a session whose control connection fails).
    ControlLost,
}

impl SessionEnd {
    /// The causes a node sends (every one but [`SessionEnd::ControlLost`]).
    pub const SENT: [SessionEnd; 5] = [
        SessionEnd::Closed,
        SessionEnd::Failed,
        SessionEnd::Idle,
        SessionEnd::Unknown,
        SessionEnd::NodeRestarted,
    ];
}

impl fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionEnd::Closed => "the node saw its control connection close",
            SessionEnd::Failed => "its control connection failed at the node",
            SessionEnd::Idle => "it was silent past the node's idle timeout",
            SessionEnd::Unknown => "the node knows no open session of this client",
            SessionEnd::NodeRestarted => "the node restarted since it opened the session",
            SessionEnd::ControlLost => "its control connection was lost",
        })
    }
}

/// Why a connection naming a client was refused (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No live session has this id.
    SessionEnded(SessionEnd),
    /// A live session has this id, and the secret presented is not its.
    WrongSecret,
}

impl Refusal {
    /// Every refusal a node sends.
    pub fn all() -> impl Iterator<Item = Refusal> {
        SessionEnd::SENT
            .into_iter()
            .map(Refusal::SessionEnded)
            .chain([Refusal::WrongSecret])
    }

    /// The reject reason on the wire.
    pub fn text(&self) -> String {
        match self {
            Refusal::SessionEnded(why) => format!("the client's session ended: {why}"),
            Refusal::WrongSecret => "wrong secret for the client's session".into(),
        }
    }

    /// The refusal whose text is exactly `reason`; `None` for any other text (another
    /// refusal of the node, a transport's).
    pub fn parse(reason: &str) -> Option<Refusal> {
        Refusal::all().find(|r| r.text() == reason)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_parses_back_and_nothing_else_does() {
        let mut texts = std::collections::HashSet::new();
        for r in Refusal::all() {
            let text = r.text();
            assert!(text.len() <= 256, "{text}");
            assert_eq!(Refusal::parse(&text), Some(r), "{text}");
            assert!(texts.insert(text), "two refusals share a text");
        }
        assert_eq!(texts.len(), 6);
        for other in [
            "",
            "unknown client or wrong secret",
            "too many access faults: the tenant is throttled",
            "the client's session ended",
        ] {
            assert_eq!(Refusal::parse(other), None, "{other}");
        }
        let ended = Refusal::SessionEnded(SessionEnd::ControlLost).text();
        assert_eq!(Refusal::parse(&ended), None, "never sent, never parsed");
    }

    #[test]
    fn no_session_end_reads_as_a_wrong_secret() {
        for why in SessionEnd::SENT {
            let text = Refusal::SessionEnded(why).text();
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
