//! The tickets of acquires in flight ([`Acquiring::InFlight`]): what an implementation of
//! [`RemoteMemory::start_acquire`](crate::RemoteMemory::start_acquire) keeps for each, and the
//! polling and abandoning every such implementation does the same way.
//!
//! Invariant: a ticket names one pending acquire until its answer is handed out or it is
//! abandoned; then it is gone (polling it again is an error, never a second answer).

use crate::memory::{Acquiring, MemError};
use std::collections::HashMap;

/// Pending acquires `P` by ticket.
#[derive(Debug)]
pub(crate) struct Tickets<P> {
    pending: HashMap<u64, P>,
    next: u64,
}

impl<P> Default for Tickets<P> {
    fn default() -> Self {
        Tickets {
            pending: HashMap::new(),
            next: 0,
        }
    }
}

impl<P> Tickets<P> {
    /// Keeps `p`; its ticket.
    pub(crate) fn start<R>(&mut self, p: P) -> Acquiring<R> {
        self.next += 1;
        self.pending.insert(self.next, p);
        Acquiring::InFlight(self.next)
    }

    /// Polls `a` with `poll` (`Ok(None)`: not answered yet): an answer ends the ticket.
    pub(crate) fn poll<R, E: Into<MemError>>(
        &mut self,
        a: Acquiring<R>,
        poll: impl FnOnce(&mut P) -> Result<Option<R>, E>,
    ) -> Acquiring<R> {
        let ticket = match a {
            Acquiring::InFlight(t) => t,
            answered => return answered,
        };
        let Some(p) = self.pending.get_mut(&ticket) else {
            return Acquiring::Answered(Err(MemError::Invalid("no such acquire in flight")));
        };
        let answer = match poll(p) {
            Ok(None) => return Acquiring::InFlight(ticket),
            Ok(Some(r)) => Ok(r),
            Err(e) => Err(e.into()),
        };
        self.pending.remove(&ticket);
        Acquiring::Answered(answer)
    }

    /// Gives up `a`: a pending one is handed to `abandon`; an answered right is dropped (its
    /// lease runs out).
    pub(crate) fn abandon<R>(&mut self, a: Acquiring<R>, abandon: impl FnOnce(P)) {
        if let Acquiring::InFlight(t) = a
            && let Some(p) = self.pending.remove(&t)
        {
            abandon(p);
        }
    }

    /// Whether any acquire is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The pending acquires.
    pub(crate) fn values(&self) -> impl Iterator<Item = &P> {
        self.pending.values()
    }
}
