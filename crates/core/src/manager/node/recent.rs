//! A client's recent control requests, by request id, with the reply each got. Sans-IO.
//!
//! Request ids make retries idempotent: a copy of a request (same id, same body) that was
//! answered gets the same reply without running again; one still in progress is the same
//! request; the same id with another body is refused, never run. Bounded: the oldest entries
//! are forgotten first, after which a replay is a new request (and meets the ABA filter).

use crate::proto::messages::{Reply, Request};
use std::collections::VecDeque;

/// Requests remembered per client.
pub(super) const RECENT_REQUESTS: usize = 128;

/// What a received request is, against the client's recent ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Not seen before (now recorded).
    New,
    /// A copy of a request not answered yet.
    InProgress,
    /// A copy of a request answered with this reply.
    Answered(Reply),
    /// The id was used for another request.
    Conflicting,
}

/// One client's recent requests.
#[derive(Debug, Default)]
pub(super) struct RecentRequests {
    entries: VecDeque<(u64, Request, Option<Reply>)>,
}

impl RecentRequests {
    /// Classifies a received request, recording it if it is new.
    pub(super) fn observe(&mut self, req_id: u64, req: &Request) -> Seen {
        match self.entries.iter().find(|(id, _, _)| *id == req_id) {
            Some((_, earlier, _)) if earlier != req => Seen::Conflicting,
            Some((_, _, Some(reply))) => Seen::Answered(*reply),
            Some((_, _, None)) => Seen::InProgress,
            None => {
                if self.entries.len() == RECENT_REQUESTS {
                    self.entries.pop_front();
                }
                self.entries.push_back((req_id, *req, None));
                Seen::New
            }
        }
    }

    /// Requests remembered.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records the reply a recorded request got (the first one counts).
    pub(super) fn answer(&mut self, req_id: u64, reply: &Reply) {
        if let Some(entry) = self.entries.iter_mut().find(|(id, _, _)| *id == req_id) {
            entry.2.get_or_insert(*reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::messages::PermissionId;

    #[test]
    fn copies_conflicts_and_forgetting() {
        let id = PermissionId {
            header_addr: 64,
            start_us: 1,
        };
        let revoke = Request::Revoke { id, free: false };
        let free = Request::Revoke { id, free: true };
        let mut r = RecentRequests::default();
        assert_eq!(r.observe(1, &revoke), Seen::New);
        assert_eq!(r.observe(1, &revoke), Seen::InProgress);
        r.answer(1, &Reply::Revoked);
        r.answer(1, &Reply::Shared); // only the first reply counts
        assert_eq!(r.observe(1, &revoke), Seen::Answered(Reply::Revoked));
        assert_eq!(r.observe(1, &free), Seen::Conflicting);
        r.answer(2, &Reply::Revoked); // never received: nothing to record
        for i in 2..=RECENT_REQUESTS as u64 + 1 {
            assert_eq!(r.observe(i, &revoke), Seen::New);
        }
        assert_eq!(
            r.observe(1, &free),
            Seen::New,
            "forgotten after 128 newer ones"
        );
    }
}
