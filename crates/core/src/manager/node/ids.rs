//! Client ids of this run of the node, and the sessions it ended lately: what lets the accept
//! policy tell a connection that names a client why it is refused (`proto/refusal.rs`).
//! Sans-IO.
//!
//! - Ids are issued consecutively from a start drawn at random when the node starts (never 0,
//!   which a client's first connection presents). An id this run never issued is one of an
//!   earlier run: the node restarted since the session was opened ([`SessionEnd::NodeRestarted`]).
//!   An earlier run's id falls in this run's range with odds (ids issued) / 2^32, and then
//!   reads as an ended session (or, if live, as a wrong secret).
//! - The last [`REMEMBERED`] ended sessions are kept with their secret and why they ended; the
//!   reason is told only to a connection that presents the session's own secret. Older ones
//!   read as [`SessionEnd::Unknown`]: the node knows no open session of the client.
//!
//! Ids are not secrets (a client knows its own, and they are consecutive); the secret is, and
//! it still decides alone whether a connection joins a live session. `docs/threat-model.md`
//! has the reasoning.
//!
//! Invariants: the record of ended sessions never holds more than [`REMEMBERED`] entries, so
//! churn cannot grow it; an ended session is recorded before its secret is forgotten (the
//! caller's order), so a connection refused after that finds why.

use super::super::state::ClientId;
use crate::proto::refusal::{Refusal, SessionEnd};
use std::collections::{HashMap, VecDeque};

/// Ended sessions remembered (about 20 bytes each).
pub(super) const REMEMBERED: usize = 1024;

/// The ids issued by this run, and the sessions ended lately.
#[derive(Debug)]
pub(super) struct ClientIds {
    /// The first id of this run.
    first: ClientId,
    /// Ids issued so far (0 skipped included).
    issued: u64,
    /// Ended sessions: their secret and why they ended, by id.
    ended: HashMap<ClientId, (u64, SessionEnd)>,
    /// The same ids, oldest first (the next one forgotten).
    order: VecDeque<ClientId>,
}

impl ClientIds {
    /// Ids from `first` on (0 is skipped wherever it falls).
    pub(super) fn new(first: ClientId) -> Self {
        ClientIds {
            first,
            issued: 0,
            ended: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The next id.
    pub(super) fn issue(&mut self) -> ClientId {
        loop {
            let id = self.first.wrapping_add(self.issued as u32);
            self.issued += 1;
            if id != 0 {
                return id;
            }
        }
    }

    /// Whether this run issued `id`.
    fn issued(&self, id: ClientId) -> bool {
        id != 0 && u64::from(id.wrapping_sub(self.first)) < self.issued
    }

    /// Records that `id`'s session, whose secret was `secret`, ended for `why`.
    pub(super) fn ended(&mut self, id: ClientId, secret: u64, why: SessionEnd) {
        if self.ended.insert(id, (secret, why)).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// Whether a connection naming `id` with `secret` joins the live session whose secret is
    /// `live` (`None`: no live session has the id), and why not (see the module docs).
    pub(super) fn judge(
        &self,
        id: ClientId,
        secret: u64,
        live: Option<u64>,
    ) -> Result<(), Refusal> {
        match live {
            Some(s) if s == secret && secret != 0 => Ok(()),
            Some(_) => Err(Refusal::WrongSecret),
            None => Err(Refusal::SessionEnded(match self.ended.get(&id) {
                Some(&(s, why)) if s == secret => why,
                _ if self.issued(id) => SessionEnd::Unknown,
                _ => SessionEnd::NodeRestarted,
            })),
        }
    }

    /// Ended sessions remembered now.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.ended.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_session_takes_its_own_secret_only() {
        let mut ids = ClientIds::new(40);
        let id = ids.issue();
        assert_eq!(id, 40);
        assert_eq!(ids.judge(id, 7, Some(7)), Ok(()));
        assert_eq!(ids.judge(id, 8, Some(7)), Err(Refusal::WrongSecret));
        // A secret of 0 is never one (the node issues odd secrets).
        assert_eq!(ids.judge(id, 0, Some(0)), Err(Refusal::WrongSecret));
    }

    #[test]
    fn an_ended_session_is_told_why_only_with_its_secret() {
        let mut ids = ClientIds::new(u32::MAX - 1);
        let (a, b, c) = (ids.issue(), ids.issue(), ids.issue());
        assert_eq!((a, b, c), (u32::MAX - 1, u32::MAX, 1), "0 is skipped");
        ids.ended(a, 11, SessionEnd::Idle);
        ids.ended(b, 12, SessionEnd::Failed);
        let ended = |why| Err(Refusal::SessionEnded(why));
        assert_eq!(ids.judge(a, 11, None), ended(SessionEnd::Idle));
        assert_eq!(ids.judge(b, 12, None), ended(SessionEnd::Failed));
        assert_eq!(ids.judge(a, 12, None), ended(SessionEnd::Unknown));
        // Issued, not ended on record (a session without a `Hello`, say).
        assert_eq!(ids.judge(c, 13, None), ended(SessionEnd::Unknown));
        // Never issued by this run.
        for never in [0, 2, u32::MAX - 2, 1 << 31] {
            assert_eq!(ids.judge(never, 1, None), ended(SessionEnd::NodeRestarted));
        }
    }

    #[test]
    fn the_record_of_ended_sessions_is_bounded() {
        let mut ids = ClientIds::new(1);
        for _ in 0..3 * REMEMBERED {
            let id = ids.issue();
            ids.ended(id, u64::from(id), SessionEnd::Closed);
            ids.ended(id, u64::from(id), SessionEnd::Closed); // twice: counted once
        }
        assert_eq!(ids.remembered(), REMEMBERED);
        let last = 3 * REMEMBERED as u32;
        let ended = |why| Err(Refusal::SessionEnded(why));
        assert_eq!(
            ids.judge(last, u64::from(last), None),
            ended(SessionEnd::Closed)
        );
        // The oldest are forgotten: still this run's, why unknown.
        assert_eq!(ids.judge(1, 1, None), ended(SessionEnd::Unknown));
    }
}
