//! The manager's bookkeeping: permissions, objects (holders, waiters, stale windows), the
//! deadline index, and the per-permission operation counters.

use super::fast_hash::FastMap;
use super::pool::MwId;
use crate::proto::messages::{Access, Mode, PermissionId, Request};
use rnic::Timestamp;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Identifies a client (one control connection).
pub type ClientId = u32;
/// Index of a permission record.
pub type PermKey = u32;

/// Which of the §5.4 techniques are on (each switchable for the Table-4 breakdown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Techniques {
    /// #2: leave windows over freed memory bound until the memory is reused.
    pub delayed_unbind: bool,
    /// #3: header right before an allocated buffer, one window over lifetime field + buffer.
    pub contiguity: bool,
    /// #1: rebind windows released in a batch to the grants of the same batch.
    pub handover: bool,
}

impl Techniques {
    /// Every technique on (the default).
    pub const ALL: Techniques = Techniques {
        delayed_unbind: true,
        contiguity: true,
        handover: true,
    };
    /// Every technique off (Table 4 "Baseline").
    pub const NONE: Techniques = Techniques {
        delayed_unbind: false,
        contiguity: false,
        handover: false,
    };
}

impl Default for Techniques {
    fn default() -> Self {
        Self::ALL
    }
}

/// Where a permission's header lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderSlot {
    /// The 32-byte slot in front of the object's buffer (contiguity).
    Embedded,
    /// A header from the header pool.
    Pooled,
}

/// Lifecycle of a permission record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Windows are being bound; the reply waits for the bind completions.
    Granting,
    /// Granted and usable.
    Active,
}

/// One permission.
#[derive(Clone, Debug)]
pub struct Permission {
    /// Cluster-wide id.
    pub id: PermissionId,
    /// Holder.
    pub client: ClientId,
    /// Object (header-slot address) the permission covers.
    pub object: u64,
    /// Buffer start and length.
    pub buffer: (u64, u64),
    /// Rights.
    pub access: Access,
    /// Ownership.
    pub mode: Mode,
    /// Header placement.
    pub header: HeaderSlot,
    /// Window over the buffer (and lifetime field when contiguous).
    pub buffer_mw: Option<MwId>,
    /// Window over the lifetime field (`None` when contiguous).
    pub header_mw: Option<MwId>,
    /// The lifetime value the manager last saw or wrote in the header.
    pub lifetime_us: u64,
    /// Lease end (start + lifetime), capped by `hard_deadline`.
    pub deadline: Timestamp,
    /// Start + maximum lifetime: forced invalidation.
    pub hard_deadline: Timestamp,
    /// The lifetime field was zeroed: no further extension.
    pub refused: bool,
    /// Zeroing is wanted but has not succeeded yet (the client extended concurrently).
    pub refuse_pending: bool,
    /// Phase.
    pub phase: Phase,
}

/// A request waiting for a conflicting holder to leave.
#[derive(Clone, Debug)]
pub struct Waiter {
    /// Who.
    pub client: ClientId,
    /// Their request id.
    pub req_id: u64,
    /// The acquire.
    pub request: Request,
    /// When it fails with `ConflictTimeout`.
    pub deadline: Timestamp,
    /// Copies of the request received (retries join the original).
    pub copies: u32,
}

/// Per-object state (the per-slab table of active permissions, keyed by object address).
#[derive(Debug, Default)]
pub struct ObjectState {
    /// Active permissions on the object.
    pub perms: Vec<PermKey>,
    /// Holders: an exclusive one, or a number of shared ones.
    pub exclusive: bool,
    /// Number of holders (granted or being granted).
    pub holders: u32,
    /// FIFO of conflicting requests.
    pub waiters: VecDeque<Waiter>,
    /// The embedded header slot is in use by a permission.
    pub embedded_busy: bool,
    /// Windows left bound over this object's freed memory (delayed unbinding).
    pub stale_mws: Vec<MwId>,
}

impl ObjectState {
    /// Whether a new request in `mode` can be granted now (FIFO: nobody waits before it).
    pub fn admits(&self, mode: Mode) -> bool {
        self.waiters.is_empty() && self.compatible(mode)
    }
    /// Whether `mode` is compatible with the current holders.
    pub fn compatible(&self, mode: Mode) -> bool {
        self.holders == 0 || (mode == Mode::Shared && !self.exclusive)
    }
    /// Records a holder.
    pub fn hold(&mut self, mode: Mode) {
        self.holders += 1;
        self.exclusive = mode == Mode::Exclusive;
    }
    /// Drops a holder.
    pub fn release(&mut self) {
        self.holders = self.holders.saturating_sub(1);
        if self.holders == 0 {
            self.exclusive = false;
        }
    }
    /// Nothing references the object's state any more.
    pub fn is_idle(&self) -> bool {
        self.perms.is_empty()
            && self.holders == 0
            && self.waiters.is_empty()
            && !self.embedded_busy
            && self.stale_mws.is_empty()
    }
}

/// What a deadline-index entry is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// A lease ends (checked against the record's current deadline).
    Lease(PermKey),
    /// A waiter on this object may have passed its deadline.
    Waiter(u64),
}

/// Index of deadlines (timeouts are data, not tasks): a binary min-heap, so scheduling is
/// O(log n) without rebalancing and finding nothing due costs one comparison. An entry
/// scheduled twice for the same instant comes out once, as from a set.
#[derive(Debug, Default)]
pub struct Deadlines {
    heap: BinaryHeap<Reverse<(Timestamp, Timer)>>,
}

impl Deadlines {
    /// Schedules `timer` at `at`.
    pub fn insert(&mut self, at: Timestamp, timer: Timer) {
        self.heap.push(Reverse((at, timer)));
    }
    /// Appends to `due` every entry due at `now`, earliest first, each once, and removes them.
    pub fn pop_due_into(&mut self, now: Timestamp, due: &mut Vec<(Timestamp, Timer)>) {
        let start = due.len();
        while let Some(&Reverse(first)) = self.heap.peek() {
            if first.0 > now {
                break;
            }
            self.heap.pop();
            // Equal entries come out one after the other.
            if due.len() == start || due.last() != Some(&first) {
                due.push(first);
            }
        }
    }
    /// The earliest deadline.
    pub fn next(&self) -> Option<Timestamp> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
    /// Entries scheduled (including stale ones, which are skipped when due).
    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Operation counters (Table 4's "# of MW / # of RPC").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Permissions granted.
    pub granted: u64,
    /// Permissions ended (revoked, expired, forced).
    pub ended: u64,
    /// Bind work requests that granted a window, on the grant's critical path.
    pub binds: u64,
    /// Of those, rebinds that also revoked an earlier binding (handover).
    pub handovers: u64,
    /// Bind work requests that only unbound a window.
    pub unbinds: u64,
    /// Of those, unbinds of delayed-unbound windows done when their memory was reused.
    pub deferred_unbinds: u64,
    /// Control RPCs received.
    pub rpcs: u64,
    /// Lifetime-word CAS operations issued by the manager (expiry commits, refusals).
    pub lifetime_cas: u64,
    /// Permissions ended by lease expiry.
    pub expired: u64,
    /// Permissions ended at the maximum lifetime (forced invalidation).
    pub forced: u64,
    /// Expiry checks that found the lease extended by the client.
    pub extended_by_client: u64,
    /// Permissions whose windows were bound again after their client switched QPs (type 2).
    pub rebinds_for_qp_switch: u64,
    /// Grants whose lease was raised to the manager's floor (it would have ended before the
    /// reply could arrive).
    pub leases_floored: u64,
    /// Requests refused as overloaded (admission control).
    pub overloaded: u64,
    /// Lease extensions asked for by RPC (the fallback of the one-sided CAS).
    pub extend_rpcs: u64,
    /// Requests the manager refused (not found, quota, conflict timed out, overloaded, ...;
    /// the few answered with a failure elsewhere — an unauthenticated client, a refused
    /// extension found by its CAS, a failed bind — are not counted).
    pub refused: u64,
}

impl Counters {
    /// The sum of two sets of counters (e.g. of two shards).
    pub fn plus(&self, o: &Counters) -> Counters {
        Counters {
            granted: self.granted + o.granted,
            ended: self.ended + o.ended,
            binds: self.binds + o.binds,
            handovers: self.handovers + o.handovers,
            unbinds: self.unbinds + o.unbinds,
            deferred_unbinds: self.deferred_unbinds + o.deferred_unbinds,
            rpcs: self.rpcs + o.rpcs,
            lifetime_cas: self.lifetime_cas + o.lifetime_cas,
            expired: self.expired + o.expired,
            forced: self.forced + o.forced,
            extended_by_client: self.extended_by_client + o.extended_by_client,
            rebinds_for_qp_switch: self.rebinds_for_qp_switch + o.rebinds_for_qp_switch,
            leases_floored: self.leases_floored + o.leases_floored,
            overloaded: self.overloaded + o.overloaded,
            extend_rpcs: self.extend_rpcs + o.extend_rpcs,
            refused: self.refused + o.refused,
        }
    }

    /// What was counted since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            granted: self.granted - earlier.granted,
            ended: self.ended - earlier.ended,
            binds: self.binds - earlier.binds,
            handovers: self.handovers - earlier.handovers,
            unbinds: self.unbinds - earlier.unbinds,
            deferred_unbinds: self.deferred_unbinds - earlier.deferred_unbinds,
            rpcs: self.rpcs - earlier.rpcs,
            lifetime_cas: self.lifetime_cas - earlier.lifetime_cas,
            expired: self.expired - earlier.expired,
            forced: self.forced - earlier.forced,
            extended_by_client: self.extended_by_client - earlier.extended_by_client,
            rebinds_for_qp_switch: self.rebinds_for_qp_switch - earlier.rebinds_for_qp_switch,
            leases_floored: self.leases_floored - earlier.leases_floored,
            overloaded: self.overloaded - earlier.overloaded,
            extend_rpcs: self.extend_rpcs - earlier.extend_rpcs,
            refused: self.refused - earlier.refused,
        }
    }
}

/// Dense storage of permission records with reusable keys.
#[derive(Debug, Default)]
pub struct PermTable {
    slots: Vec<Option<Permission>>,
    free: Vec<PermKey>,
    /// Active permission by header address (for revoke / extend lookups).
    pub by_header: FastMap<u64, PermKey>,
    /// Each client's permissions (for ending them all when the client leaves).
    by_client: FastMap<ClientId, Vec<PermKey>>,
    /// Where each record's key sits in its client's list (by key): removal is O(1) however
    /// many permissions the client holds.
    client_pos: Vec<u32>,
}

impl PermTable {
    /// Inserts a record.
    pub fn insert(&mut self, p: Permission) -> PermKey {
        let (header, client) = (p.id.header_addr, p.client);
        let key = match self.free.pop() {
            Some(k) => {
                self.slots[k as usize] = Some(p);
                k
            }
            None => {
                self.slots.push(Some(p));
                self.client_pos.push(0);
                (self.slots.len() - 1) as PermKey
            }
        };
        self.by_header.insert(header, key);
        let keys = self.by_client.entry(client).or_default();
        self.client_pos[key as usize] = keys.len() as u32;
        keys.push(key);
        key
    }
    /// Removes a record.
    pub fn remove(&mut self, key: PermKey) -> Option<Permission> {
        let p = self.slots.get_mut(key as usize)?.take()?;
        self.by_header.remove(&p.id.header_addr);
        if let Some(keys) = self.by_client.get_mut(&p.client) {
            let i = self.client_pos[key as usize] as usize;
            if keys.get(i) == Some(&key) {
                keys.swap_remove(i);
                // The key that took its place moved.
                if let Some(&moved) = keys.get(i) {
                    self.client_pos[moved as usize] = i as u32;
                }
            }
            if keys.is_empty() {
                self.by_client.remove(&p.client);
            }
        }
        self.free.push(key);
        Some(p)
    }
    /// The permissions `client` holds.
    pub fn of_client(&self, client: ClientId) -> &[PermKey] {
        self.by_client.get(&client).map_or(&[], Vec::as_slice)
    }
    /// A record.
    pub fn get(&self, key: PermKey) -> Option<&Permission> {
        self.slots.get(key as usize)?.as_ref()
    }
    /// A record, mutably.
    pub fn get_mut(&mut self, key: PermKey) -> Option<&mut Permission> {
        self.slots.get_mut(key as usize)?.as_mut()
    }
    /// Live records.
    pub fn len(&self) -> usize {
        self.by_header.len()
    }
    /// Every record.
    pub fn iter(&self) -> impl Iterator<Item = &Permission> {
        self.slots.iter().flatten()
    }
    /// Bytes of the table (by capacity).
    pub fn metadata_bytes(&self) -> u64 {
        (self.slots.capacity() * std::mem::size_of::<Option<Permission>>()
            + self.free.capacity() * 4
            + self.client_pos.capacity() * 4
            + self.by_header.capacity() * 13
            + self.by_client.capacity() * 29
            + self.by_header.len() * 4) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_come_out_due_in_order_and_once() {
        let mut d = Deadlines::default();
        let key = |i: u32| -> PermKey { i };
        d.insert(Timestamp(30), Timer::Lease(key(3)));
        d.insert(Timestamp(10), Timer::Waiter(7));
        d.insert(Timestamp(20), Timer::Lease(key(2)));
        d.insert(Timestamp(10), Timer::Waiter(7)); // the same entry again
        d.insert(Timestamp(10), Timer::Lease(key(1)));
        assert_eq!(d.next(), Some(Timestamp(10)));
        let mut due = Vec::new();
        d.pop_due_into(Timestamp(5), &mut due);
        assert!(due.is_empty(), "nothing is due before the first deadline");
        d.pop_due_into(Timestamp(20), &mut due);
        assert_eq!(
            due,
            [
                (Timestamp(10), Timer::Lease(key(1))),
                (Timestamp(10), Timer::Waiter(7)),
                (Timestamp(20), Timer::Lease(key(2))),
            ]
        );
        assert_eq!(d.next(), Some(Timestamp(30)));
        assert_eq!(d.len(), 1);
    }
}
