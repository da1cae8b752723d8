//! The access-fault budget of each tenant. Sans-IO: the time is given.
//!
//! Every access fault costs the faulting client a QP, which it reconnects, and the node the
//! reconnection's work; a client that keeps faulting (a key sweep is 255 faults in a row)
//! would keep the node at it. So each data connection a client makes again on a slot it used
//! before counts as a fault against its tenant's token bucket: `burst` faults at once (enough
//! for deliberate-fault experiments such as Table 5), refilled at `per_s` a second. Past it,
//! the reconnection is refused until tokens come back (the tenant is throttled, its other
//! work goes on). The budget is the tenant's, not the session's, so opening new sessions does
//! not reset it.

use super::super::state::ClientId;
use super::super::tenants::TenantId;
use super::token_bucket::TokenBucket;
use rnic::Timestamp;
use std::collections::HashMap;

/// Data slots a client may use (an intent's slot is a byte).
const SLOTS: usize = 256;

/// The budgets, and the data slots each client has connected.
#[derive(Debug)]
pub(super) struct FaultBudget {
    burst: u32,
    per_s: u32,
    buckets: HashMap<TenantId, TokenBucket>,
    slots: HashMap<ClientId, [u64; SLOTS / 64]>,
    /// Reconnections counted, and refused.
    pub(super) reconnects: u64,
    pub(super) refused: u64,
}

impl FaultBudget {
    pub(super) fn new(burst: u32, per_s: u32) -> Self {
        FaultBudget {
            burst,
            per_s,
            buckets: HashMap::new(),
            slots: HashMap::new(),
            reconnects: 0,
            refused: 0,
        }
    }

    /// A data connection of `client` (of `tenant`) on `slot` at `now`: whether it is admitted.
    /// Its first connection on a slot is free; a later one is a fault and takes a token.
    pub(super) fn admit(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        slot: u8,
        now: Timestamp,
    ) -> bool {
        let seen = self.slots.entry(client).or_default();
        let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if seen[word] & bit == 0 {
            seen[word] |= bit;
            return true;
        }
        self.reconnects += 1;
        let (burst, per_s) = (self.burst, self.per_s);
        let b = self
            .buckets
            .entry(tenant)
            .or_insert_with(|| TokenBucket::full(burst, now));
        if b.take(now, burst, per_s) {
            true
        } else {
            self.refused += 1;
            false
        }
    }

    /// `client` is gone: its slots are forgotten (its tenant's bucket stays).
    pub(super) fn forget(&mut self, client: ClientId) {
        self.slots.remove(&client);
    }

    /// Clients whose slots are remembered.
    pub(super) fn clients(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_connections_are_free_reconnections_take_tokens_that_refill() {
        let mut f = FaultBudget::new(3, 10);
        let t = Timestamp(1_000_000);
        for slot in 0..=255u8 {
            assert!(f.admit(1, 7, slot, t), "a first connection on slot {slot}");
        }
        for _ in 0..3 {
            assert!(f.admit(1, 7, 4, t));
        }
        assert!(!f.admit(1, 7, 4, t), "the burst is spent");
        assert!(
            f.admit(2, 7, 4, t),
            "client 2's first use of slot 4 is free..."
        );
        assert!(
            !f.admit(2, 7, 4, t),
            "...but its reconnection draws on the tenant's bucket"
        );
        assert!(
            f.admit(3, 8, 4, t) && f.admit(3, 8, 4, t),
            "another tenant's bucket is full"
        );
        // 10 a second: one token after 100 ms.
        let later = t.plus_us(100_000);
        assert!(f.admit(1, 7, 4, later));
        assert!(!f.admit(1, 7, 4, later));
        assert_eq!((f.reconnects, f.refused), (8, 3), "counted");
        f.forget(1);
        assert!(
            f.admit(1, 7, 4, later),
            "a forgotten client's slots are new again"
        );
        assert_eq!(f.clients(), 3);
    }
}
