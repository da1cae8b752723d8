//! The invariants, checked against models the simulation keeps beside the system:
//! - **memory contents**: which 8-byte granules of the buffer pool hold a client's bytes
//!   (every write the NIC lets through dirties them; the node's scrubs, on the grant path and
//!   idle, zero them; a node restart maps a zeroed pool). Memory an `allocate` hands out must
//!   be all zero when the grant leaves.
//! - **objects and tenants**: the live objects (allocated, not yet freed) and their tenants;
//!   an `acquire` grant must be of an object of the client's own tenant (the simulation does
//!   not share objects), an `allocate` grant of memory no live object holds.
//! - **permissions**: the manager's live permissions (`ManagerCore::live_permissions`, every
//!   shard) after each batch: an exclusive one never overlaps another.
//! - **data accesses**: an access the fake NIC lets through must lie in a live permission of
//!   that client with the right rights, or in memory no live object holds (delayed unbinding
//!   keeps a freed object's window bound: paper §5.4; such a write dirties freed memory, which
//!   must be scrubbed before it is handed out again). A key byte that wrapped (256 rebinds of
//!   one type-1 window, the limitation the design accepts) is counted, not failed.
//! - **exactly once** (`cluster_sim/data.rs`): every WRITE, CAS and FAA carries a unique tag,
//!   and the node's executions of it are counted: it executes at most once; one reported
//!   done executed exactly once, one reported unknown (`OutcomeUnknown`) once or not at all,
//!   one reported refused or failed not at all (a READ reported done executed at least once).
//! - **renewal without a gap**: when a client renews an exclusive permission, no other
//!   client was granted any of its memory between the old permission's grant and the
//!   renewal's (grants are numbered as they leave the node).

use patronus_core::manager::{ClientId, LivePermission, TenantId};
use patronus_core::proto::messages::{Access, Grant, Mode, PermissionId, Reply, Request};
use rnic::Timestamp;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::data::{DataOp, Outcome};
use super::node::{Node, Sent};

/// Granule of the contents model, bytes.
pub const GRANULE: u64 = 8;

/// What the checks counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub grants: u64,
    pub allocations: u64,
    pub accesses_allowed: u64,
    pub accesses_denied: u64,
    /// Accesses that landed in freed memory through a delayed-unbound window.
    pub stale_into_freed: u64,
    /// Accesses through a key byte that wrapped.
    pub key_wraps: u64,
    pub scrubbed: u64,
    pub acquire_refusals: u64,
    /// Data ops by outcome: done, refused, unknown, failed after the retry.
    pub ops_done: u64,
    pub ops_denied: u64,
    pub ops_unknown: u64,
    pub ops_failed: u64,
    /// Data links that died before an op executed, and after (its completion lost).
    pub link_lost_before: u64,
    pub link_lost_after: u64,
    /// Exclusive permissions renewed (checked for a gap).
    pub renewals: u64,
}

/// Grants remembered for the renewal check.
const GRANT_LOG: usize = 1 << 14;

#[derive(Default)]
pub struct Oracle {
    /// Granules holding non-zero bytes.
    dirty: BTreeSet<u64>,
    /// Live objects by buffer start: (buffer end, tenant).
    objects: BTreeMap<u64, (u64, TenantId)>,
    /// Buffer of every permission granted (to find what a `free` frees).
    buffer_of: HashMap<PermissionId, u64>,
    /// The manager's live permissions, by client (refreshed after every batch).
    live: HashMap<ClientId, Vec<LivePermission>>,
    /// Executions of the data ops in flight, by tag.
    executions: HashMap<u64, u32>,
    /// Grants as they left the node: (number, client, buffer start, length), the latest last.
    grant_log: VecDeque<(u64, ClientId, u64, u64)>,
    /// The number of every permission's grant.
    grant_seq: HashMap<PermissionId, u64>,
    next_grant: u64,
    pub counts: Counts,
}

fn granules(addr: u64, len: u64) -> std::ops::Range<u64> {
    addr / GRANULE..(addr + len).div_ceil(GRANULE)
}

impl Oracle {
    /// The node restarted: its pool is mapped zeroed, and nothing is allocated.
    pub fn node_restarted(&mut self) {
        self.dirty.clear();
        self.objects.clear();
        self.buffer_of.clear();
        self.live.clear();
        self.grant_log.clear();
        self.grant_seq.clear();
    }

    /// Live objects (buffer start, length, tenant), for the workload to pick from.
    pub fn objects(&self) -> impl Iterator<Item = (u64, u64, TenantId)> + '_ {
        self.objects.iter().map(|(&a, &(e, t))| (a, e - a, t))
    }

    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// The live object overlapping `[addr, addr + len)`, as (start, end, tenant).
    fn object_at(&self, addr: u64, len: u64) -> Option<(u64, u64, TenantId)> {
        let (&start, &(end, tenant)) = self.objects.range(..addr + len).next_back()?;
        (end > addr).then_some((start, end, tenant))
    }

    /// Buffers the node zeroed.
    pub fn scrubbed(&mut self, scrubs: &[(u64, u64)]) {
        for &(addr, len) in scrubs {
            self.counts.scrubbed += 1;
            let hit: Vec<u64> = self.dirty.range(granules(addr, len)).copied().collect();
            for g in hit {
                self.dirty.remove(&g);
            }
        }
    }

    /// A reply as it leaves the node (after its batch's scrubs were applied).
    pub fn on_reply(&mut self, node: &Node, s: &Sent) -> Result<(), String> {
        let tenant = node.sessions.get(&s.client).and_then(|x| x.tenant);
        match (s.request, s.reply) {
            (req, Reply::Granted(g)) => {
                self.counts.grants += 1;
                self.buffer_of.insert(g.id, g.buffer_addr);
                if s.fresh {
                    self.next_grant += 1;
                    if self.grant_log.len() == GRANT_LOG {
                        self.grant_log.pop_front();
                    }
                    self.grant_log.push_back((
                        self.next_grant,
                        s.client,
                        g.buffer_addr,
                        g.buffer_len,
                    ));
                    self.grant_seq.insert(g.id, self.next_grant);
                }
                let tenant = tenant.ok_or("a grant to a client with no tenant")?;
                match req {
                    Request::Allocate { .. } if s.fresh => self.allocated(&g, tenant)?,
                    // (A copy of a reply, from the record of recent requests, was checked
                    // when it first left; the object may be gone since.)
                    Request::Acquire { .. } if s.fresh => {
                        match self.object_at(g.buffer_addr, g.buffer_len) {
                            Some((_, _, owner)) if owner == tenant => {}
                            Some((start, _, owner)) => {
                                return Err(format!(
                                    "client {} of tenant {tenant} was granted object {start:#x} \
                                 of tenant {owner}: {g:?}",
                                    s.client
                                ));
                            }
                            None => return Err(format!("a grant of no live object: {g:?}")),
                        }
                    }
                    _ => {}
                }
            }
            (Request::Revoke { id, free: true }, Reply::Revoked) if s.fresh => {
                let addr = self.buffer_of.get(&id).copied();
                let Some(addr) = addr else {
                    return Err(format!("freed {id:?}, which was never granted"));
                };
                if self.objects.remove(&addr).is_none() {
                    return Err(format!("freed {addr:#x}, which is not live"));
                }
            }
            (Request::Acquire { .. }, Reply::Failed(_)) => self.counts.acquire_refusals += 1,
            _ => {}
        }
        Ok(())
    }

    fn allocated(&mut self, g: &Grant, tenant: TenantId) -> Result<(), String> {
        self.counts.allocations += 1;
        if let Some(&d) = self
            .dirty
            .range(granules(g.buffer_addr, g.buffer_len))
            .next()
        {
            return Err(format!(
                "allocate handed out {:#x}+{} unscrubbed: byte {:#x} holds an earlier \
                 owner's data",
                g.buffer_addr,
                g.buffer_len,
                d * GRANULE
            ));
        }
        if let Some((start, _, _)) = self.object_at(g.buffer_addr, g.buffer_len) {
            return Err(format!(
                "allocate handed out {:#x}, inside live object {start:#x}",
                g.buffer_addr
            ));
        }
        self.objects
            .insert(g.buffer_addr, (g.buffer_addr + g.buffer_len, tenant));
        Ok(())
    }

    /// Refreshes the manager's live permissions (after a batch) and checks that no exclusive
    /// permission overlaps another.
    pub fn refresh(&mut self, node: &Node, now: u64) -> Result<(), String> {
        self.live.clear();
        let mut all: Vec<LivePermission> = Vec::new();
        for core in &node.sim.cores {
            all.extend(core.live_permissions(Timestamp(now), usize::MAX));
        }
        all.sort_by_key(|p| p.addr);
        let mut group_end = 0;
        let mut group: Vec<&LivePermission> = Vec::new();
        for p in &all {
            if p.addr >= group_end {
                check_group(&group)?;
                group.clear();
            }
            group_end = group_end.max(p.addr + p.len);
            if group.is_empty() {
                group_end = p.addr + p.len;
            }
            group.push(p);
        }
        check_group(&group)?;
        for p in all {
            self.live.entry(p.client).or_default().push(p);
        }
        Ok(())
    }

    /// A one-sided access by `client` of `tenant` that the NIC let through (`allowed`) or not.
    /// `wrapped`: the window was rebound 256 times or more since the grant.
    #[allow(clippy::too_many_arguments)]
    pub fn access(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        addr: u64,
        len: u64,
        write: bool,
        allowed: bool,
        wrapped: bool,
    ) -> Result<(), String> {
        if !allowed {
            self.counts.accesses_denied += 1;
            return Ok(());
        }
        self.counts.accesses_allowed += 1;
        let covered = self.live.get(&client).is_some_and(|ps| {
            ps.iter().any(|p| {
                p.addr <= addr
                    && addr + len <= p.addr + p.len
                    && (!write || p.access == Access::ReadWrite)
            })
        });
        if !covered {
            match self.object_at(addr, len) {
                None => self.counts.stale_into_freed += 1,
                Some(_) if wrapped => self.counts.key_wraps += 1,
                Some((start, _, owner)) => {
                    return Err(format!(
                        "the NIC let client {client} (tenant {tenant}) {} {addr:#x}+{len} of \
                         object {start:#x} (tenant {owner}) outside any live permission of it",
                        if write { "write" } else { "read" }
                    ));
                }
            }
        }
        if write {
            self.dirty.extend(granules(addr, len));
        }
        Ok(())
    }
}

impl Oracle {
    /// The node executed data op `op`.
    pub fn executed(&mut self, op: &DataOp) -> Result<(), String> {
        let n = self.executions.entry(op.tag).or_insert(0);
        *n += 1;
        if *n > 1 && !op.is_read() {
            return Err(format!(
                "not exactly once: {:?} {:#x} at {:#x} executed {} times",
                op.kind, op.tag, op.addr, n
            ));
        }
        Ok(())
    }

    /// Data op `op` ended with `outcome`, as its client reports it.
    pub fn op_ended(&mut self, op: &DataOp, outcome: Outcome) -> Result<(), String> {
        let n = self.executions.remove(&op.tag).unwrap_or(0);
        let c = &mut self.counts;
        let ok = match outcome {
            Outcome::Done => {
                c.ops_done += 1;
                if op.is_read() { n >= 1 } else { n == 1 }
            }
            Outcome::Unknown => {
                c.ops_unknown += 1;
                n <= 1
            }
            Outcome::Denied | Outcome::Failed => {
                if outcome == Outcome::Denied {
                    c.ops_denied += 1;
                } else {
                    c.ops_failed += 1;
                }
                op.is_read() || n == 0
            }
        };
        if !ok {
            return Err(format!(
                "not exactly once: {:?} {:#x} at {:#x} reported {outcome:?} but executed {n} \
                 times",
                op.kind, op.tag, op.addr
            ));
        }
        Ok(())
    }

    /// `client` renewed its exclusive permission `old` as `new`: nobody else was granted any
    /// of its memory in between.
    pub fn renewed(
        &mut self,
        client: ClientId,
        old: PermissionId,
        new: PermissionId,
    ) -> Result<(), String> {
        let (Some(&from), Some(&to)) = (self.grant_seq.get(&old), self.grant_seq.get(&new)) else {
            return Ok(()); // granted before a node restart: that session is gone
        };
        self.counts.renewals += 1;
        let Some(&(_, _, addr, len)) = self.grant_log.iter().rev().find(|g| g.0 == to) else {
            return Ok(());
        };
        for &(seq, other, a, l) in self.grant_log.iter().rev() {
            if seq <= from {
                break;
            }
            if seq < to && other != client && a < addr + len && addr < a + l {
                return Err(format!(
                    "renewal with a gap: client {client} renewed exclusive permission {old:?} \
                     as {new:?}, but client {other} was granted {a:#x}+{l} in between"
                ));
            }
        }
        Ok(())
    }
}

/// Permissions over overlapping memory: none is exclusive, or there is only one.
fn check_group(group: &[&LivePermission]) -> Result<(), String> {
    if group.len() > 1 && group.iter().any(|p| p.mode == Mode::Exclusive) {
        return Err(format!(
            "an exclusive permission coexists with another: {group:?}"
        ));
    }
    Ok(())
}
