//! A client's recent control requests, by request id, with the reply each got. Sans-IO.
//!
//! Request ids make retries idempotent: a copy of a request (same id, same body) that was
//! answered gets the same reply without running again; one still in progress is the same
//! request; the same id with another body is refused, never run. Bounded: the oldest entries
//! are forgotten first, after which a replay is a new request (and meets the ABA filter).

use super::super::fast_hash::FastMap;
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

/// One client's recent requests: a FIFO of at most [`RECENT_REQUESTS`], and an index from
/// request id to its place. Looked up twice per request (when it arrives, when it is
/// answered); a scan of the FIFO touched 16 KiB each time and was the manager's largest cost
/// of its own in Figure 6 (`docs/evaluation.md`).
///
/// Invariant: `by_id` holds exactly the ids in `entries`, each with its sequence number; the
/// entry of sequence number `n` is `entries[n - first]`.
#[derive(Debug, Default)]
pub(super) struct RecentRequests {
    entries: VecDeque<(u64, Request, Option<Reply>)>,
    by_id: FastMap<u64, u64>,
    /// Sequence number of `entries[0]`.
    first: u64,
}

impl RecentRequests {
    /// Where request `req_id` is in `entries`, if remembered.
    fn position(&self, req_id: u64) -> Option<usize> {
        self.by_id
            .get(&req_id)
            .map(|&seq| (seq - self.first) as usize)
    }

    /// Classifies a received request, recording it if it is new.
    pub(super) fn observe(&mut self, req_id: u64, req: &Request) -> Seen {
        match self.position(req_id).map(|i| &self.entries[i]) {
            Some((_, earlier, _)) if earlier != req => Seen::Conflicting,
            Some((_, _, Some(reply))) => Seen::Answered(*reply),
            Some((_, _, None)) => Seen::InProgress,
            None => {
                if self.entries.len() == RECENT_REQUESTS
                    && let Some((oldest, _, _)) = self.entries.pop_front()
                {
                    self.by_id.remove(&oldest);
                    self.first += 1;
                }
                if self.by_id.capacity() == 0 {
                    // Once, so that the session's steady state allocates nothing.
                    self.by_id.reserve(RECENT_REQUESTS);
                    self.entries.reserve_exact(RECENT_REQUESTS);
                }
                let seq = self.first + self.entries.len() as u64;
                self.entries.push_back((req_id, *req, None));
                self.by_id.insert(req_id, seq);
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
        if let Some(i) = self.position(req_id) {
            self.entries[i].2.get_or_insert(*reply);
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
        assert_eq!(r.len(), RECENT_REQUESTS);
        // The 127 newer ones are still remembered, in order, with their replies.
        r.answer(3, &Reply::Shared);
        assert_eq!(r.observe(3, &revoke), Seen::Answered(Reply::Shared));
        assert_eq!(r.observe(2, &revoke), Seen::New, "the oldest went first");
        assert_eq!(r.observe(4, &revoke), Seen::InProgress);
    }

    /// The index agrees with a scan of the FIFO over a long, seeded run of ids that repeat.
    #[test]
    fn index_matches_a_scan() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let mut r = RecentRequests::default();
        let mut model: VecDeque<(u64, Option<Reply>)> = VecDeque::new();
        let req = Request::Hello {
            tenant: 0,
            secret: 0,
        };
        for _ in 0..20_000 {
            let id = rng.random_range(0..400u64);
            if rng.random_bool(0.5) {
                let want = match model.iter().find(|(i, _)| *i == id) {
                    Some((_, Some(reply))) => Seen::Answered(*reply),
                    Some((_, None)) => Seen::InProgress,
                    None => {
                        if model.len() == RECENT_REQUESTS {
                            model.pop_front();
                        }
                        model.push_back((id, None));
                        Seen::New
                    }
                };
                assert_eq!(r.observe(id, &req), want, "id {id}");
            } else {
                if let Some(e) = model.iter_mut().find(|(i, _)| *i == id) {
                    e.1.get_or_insert(Reply::Revoked);
                }
                r.answer(id, &Reply::Revoked);
            }
            assert_eq!(r.len(), model.len());
        }
    }
}
