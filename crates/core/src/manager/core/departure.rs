//! Clients that leave: what a closed or silent connection held is given back.
//!
//! Invariants: a departed client's permissions end like revoked ones (their windows are
//! unbound in the batch's chain, before any reply of that batch leaves, so memory it held
//! exclusively reaches its next holder only once its rkeys are dead); its waiting requests
//! are dropped unanswered (nobody is there to answer); its objects stay its tenant's until
//! freed. With a domain of its own, every window of the domain — including those left bound
//! over freed memory — is unbound before the domain retires, and a retired domain is reused
//! whole by a later client, so the window tables do not grow with clients coming and going.

use super::*;

impl ManagerCore {
    /// Stage 2, before the batch's requests: clears out the clients that left.
    pub(super) fn clear_departed(&mut self, now: Timestamp) {
        // Still listed while they are cleared out: a permission one of them ends wakes
        // waiters, and a waiter of another departing client must not be granted.
        let departing = self.departing.clone();
        for client in departing {
            self.drop_waiting_requests(client, now);
            for key in self.perms.of_client(client).to_vec() {
                self.end_permission(key, false, now);
            }
            if self.mws.has_domain(client) {
                let domain = self.mws.domain_of_client(client);
                while let Some(mw) = self.take_stale_window(domain) {
                    self.counters.unbinds += 1;
                    self.releasing.push((mw, client));
                }
                self.retiring.push(client);
            }
            self.tenants.forget_client(client);
        }
        self.departing.clear();
    }

    /// Drops `client`'s queued acquires; whoever waited behind them may enter now.
    fn drop_waiting_requests(&mut self, client: ClientId, now: Timestamp) {
        let mine: Vec<((ClientId, u64), u64)> = self
            .waiting
            .iter()
            .filter(|((c, _), _)| *c == client)
            .map(|(k, o)| (*k, *o))
            .collect();
        for (key, object) in mine {
            self.waiting.remove(&key);
            if let Some(obj) = self.objects.get_mut(&object) {
                obj.waiters.retain(|w| w.client != client);
            }
            self.wake_waiters(object, now);
        }
    }

    /// After a batch: domains of departed clients whose windows are all unbound retire.
    pub(super) fn retire_domains(&mut self) {
        if self.retiring.is_empty() {
            return;
        }
        let mut still = Vec::new();
        for client in std::mem::take(&mut self.retiring) {
            match self.mws.retire(client) {
                Some(ids) => self.retired.push((client, ids)),
                None => still.push(client),
            }
        }
        self.retiring = still;
    }
}
