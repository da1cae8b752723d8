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

/// Width of a slot of the deadline wheel, µs.
const WHEEL_SLOT_US: u64 = 64;
/// Slots of the deadline wheel: deadlines up to 64 µs × 4,096 ≈ 262 ms ahead go into it.
const WHEEL_SLOTS: usize = 4096;

/// Index of deadlines (timeouts are data, not tasks): a timing wheel for the near future and a
/// binary heap for the rest.
///
/// A deadline within [`WHEEL_SLOTS`] slots of [`WHEEL_SLOT_US`] from the last turn goes into
/// its slot in O(1), however many deadlines are scheduled (a heap of every live lease made a
/// grant's cost grow with the population: `docs/evaluation.md`, "The manager alone"). Later
/// ones wait in the heap and move into the wheel as their slot comes within reach. A turn
/// visits the slots its clock passed and takes what is due; finding nothing due costs a look at
/// one slot. Due entries come out earliest first (each slot's entries are sorted as they are
/// taken), an entry scheduled twice for the same instant once, as from a set; an entry
/// scheduled in the past is due at the next turn.
#[derive(Debug)]
pub struct Deadlines {
    /// `slots[s % WHEEL_SLOTS]` holds the deadlines of absolute slot `s`, for `s` in
    /// `cursor..cursor + WHEEL_SLOTS` (and, in the cursor's slot, any scheduled in the past).
    slots: Vec<Vec<(Timestamp, Timer)>>,
    /// One bit per slot: it holds entries.
    occupied: Vec<u64>,
    /// The absolute slot of the last turn's instant: every earlier slot is empty.
    cursor: u64,
    /// Entries in the wheel.
    in_wheel: usize,
    /// Deadlines beyond the wheel's reach.
    later: BinaryHeap<Reverse<(Timestamp, Timer)>>,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            slots: (0..WHEEL_SLOTS).map(|_| Vec::new()).collect(),
            occupied: vec![0; WHEEL_SLOTS / 64],
            cursor: 0,
            in_wheel: 0,
            later: BinaryHeap::new(),
        }
    }
}

impl Deadlines {
    /// Schedules `timer` at `at`.
    pub fn insert(&mut self, at: Timestamp, timer: Timer) {
        let slot = (at.0 / WHEEL_SLOT_US).max(self.cursor);
        if slot >= self.cursor + WHEEL_SLOTS as u64 {
            self.later.push(Reverse((at, timer)));
        } else {
            self.put(slot, (at, timer));
        }
    }

    fn put(&mut self, slot: u64, entry: (Timestamp, Timer)) {
        let i = (slot % WHEEL_SLOTS as u64) as usize;
        self.slots[i].push(entry);
        self.occupied[i / 64] |= 1 << (i % 64);
        self.in_wheel += 1;
    }

    /// Appends to `due` every entry due at `now`, earliest first, each once, and removes them.
    pub fn pop_due_into(&mut self, now: Timestamp, due: &mut Vec<(Timestamp, Timer)>) {
        let start = due.len();
        let end = now.0 / WHEEL_SLOT_US;
        if end >= self.cursor && self.in_wheel > 0 {
            // Each slot once, even after a long pause.
            let last = end.min(self.cursor + WHEEL_SLOTS as u64 - 1);
            for slot in self.cursor..=last {
                let i = (slot % WHEEL_SLOTS as u64) as usize;
                if self.occupied[i / 64] & (1 << (i % 64)) == 0 {
                    continue;
                }
                let entries = &mut self.slots[i];
                let before = entries.len();
                // Only the slot of `now` (or, after a long pause, one that wrapped) can hold
                // entries that are not due yet.
                entries.retain(|&e| {
                    if e.0 <= now {
                        due.push(e);
                        false
                    } else {
                        true
                    }
                });
                self.in_wheel -= before - entries.len();
                if entries.is_empty() {
                    self.occupied[i / 64] &= !(1 << (i % 64));
                }
            }
        }
        if end > self.cursor {
            self.cursor = end;
        }
        // Later deadlines now due, or now within the wheel's reach.
        while let Some(&Reverse(first)) = self.later.peek() {
            if first.0 <= now {
                due.push(first);
            } else if first.0.0 / WHEEL_SLOT_US < self.cursor + WHEEL_SLOTS as u64 {
                let slot = (first.0.0 / WHEEL_SLOT_US).max(self.cursor);
                self.put(slot, first);
            } else {
                break;
            }
            self.later.pop();
        }
        let taken = &mut due[start..];
        taken.sort_unstable();
        let mut kept = start;
        for k in start..due.len() {
            if kept == start || due[kept - 1] != due[k] {
                due[kept] = due[k];
                kept += 1;
            }
        }
        due.truncate(kept);
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Timestamp> {
        let wheel = (self.in_wheel > 0)
            .then(|| self.first_occupied())
            .flatten()
            .and_then(|i| self.slots[i].iter().map(|e| e.0).min());
        let later = self.later.peek().map(|Reverse((t, _))| *t);
        match (wheel, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The first occupied slot from the cursor's, in wheel order.
    fn first_occupied(&self) -> Option<usize> {
        let words = self.occupied.len();
        let from = (self.cursor % WHEEL_SLOTS as u64) as usize;
        let (w0, b0) = (from / 64, from % 64);
        // The cursor's word from its bit, the other words in order, then the cursor's word
        // below its bit (slots that wrapped around).
        let head = self.occupied[w0] & (!0u64 << b0);
        if head != 0 {
            return Some(w0 * 64 + head.trailing_zeros() as usize);
        }
        for k in 1..words {
            let w = (w0 + k) % words;
            if self.occupied[w] != 0 {
                return Some(w * 64 + self.occupied[w].trailing_zeros() as usize);
            }
        }
        let tail = self.occupied[w0] & !(!0u64 << b0);
        (tail != 0).then(|| w0 * 64 + tail.trailing_zeros() as usize)
    }

    /// Entries scheduled (including stale ones, which are skipped when due).
    pub fn len(&self) -> usize {
        self.in_wheel + self.later.len()
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

    /// The wheel against a sorted set, on a seeded mix of near, far and past deadlines, turns
    /// of every length (longer than the wheel's reach too) and repeated entries.
    #[test]
    fn deadlines_agree_with_a_sorted_set() {
        use std::collections::BTreeSet;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut wheel = Deadlines::default();
        let mut model: BTreeSet<(Timestamp, Timer)> = BTreeSet::new();
        let mut now = 1_000u64;
        let mut due = Vec::new();
        for round in 0..20_000 {
            for _ in 0..next(4) {
                let at = match next(10) {
                    0 => now.saturating_sub(next(500)),         // in the past
                    1..=6 => now + next(2_000),                 // near
                    7 | 8 => now + next(WHEEL_SLOT_US * 5_000), // around the reach
                    _ => now + next(1 << 30),                   // far
                };
                let timer = if next(2) == 0 {
                    Timer::Lease(next(64) as PermKey)
                } else {
                    Timer::Waiter(next(64))
                };
                wheel.insert(Timestamp(at), timer);
                model.insert((Timestamp(at), timer));
            }
            assert_eq!(wheel.next(), model.first().map(|e| e.0), "round {round}");
            now += match next(20) {
                0 => WHEEL_SLOT_US * WHEEL_SLOTS as u64 * 2, // a long pause
                1..=3 => 0,
                _ => next(300),
            };
            due.clear();
            wheel.pop_due_into(Timestamp(now), &mut due);
            let mut want = Vec::new();
            while let Some(&first) = model.first() {
                if first.0.0 > now {
                    break;
                }
                model.pop_first();
                want.push(first);
            }
            assert_eq!(due, want, "round {round} at {now}");
        }
        // The model counts each entry once; the wheel may hold repeats not yet due.
        assert!(wheel.len() >= model.len());
    }
}
