//! Calls that name an object or a permission go to its node: acquire (blocking and
//! pipelined), extend, revoke, free, share, the single data-path ops, and named roots.
//!
//! Invariants:
//! - A global address is decoded once, at the call; the node's client only ever sees
//!   node-local addresses, and the set hands out only global ones.
//! - A call on a permission of a node marked down, granted in the session that was lost (or
//!   earlier), fails at once with [`NodeSetError::NodeDown`] and sends nothing.
//! - Named roots live on node 0 ([`NAMES_NODE`]) and hold global addresses, so a name can lead
//!   to an object on any node; node 0 stays the names' home as nodes are added at the end.

use super::{GlobalAddr, NodeId, NodePerm, NodeSet, NodeSetError};
use crate::client::{Client, ClientError, Done, Op, Perm, Ticket};
use crate::manager::TenantId;
use crate::proto::messages::{Access, Mode};
use rnic::Provider;
use std::time::Duration;

/// How long one look at a node waits when operations are in flight at several nodes
/// ([`NodeSet::wait_any`]).
pub const WAIT_SLICE: Duration = Duration::from_micros(200);

/// The node that keeps the set's named roots.
pub const NAMES_NODE: NodeId = NodeId(0);

/// An operation started on a node ([`NodeSet::start_acquire`]): the node's client's
/// [`Ticket`], tagged with the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a started operation is polled to its end or cancelled"]
pub struct NodeTicket {
    node: NodeId,
    ticket: Ticket,
}

/// Bits of a [`NodeTicket`]'s id below the node's index.
const NODE_SHIFT: u32 = 48;

impl NodeTicket {
    /// The node asked.
    pub fn node(self) -> NodeId {
        self.node
    }

    /// The ticket's id: the node's index in the top 16 bits, the client's ticket below (a
    /// client's ticket ids stay below 2^48).
    pub fn id(self) -> u64 {
        (u64::from(self.node.0) << NODE_SHIFT) | self.ticket.id()
    }

    /// The ticket with id `id`.
    pub fn from_id(id: u64) -> NodeTicket {
        NodeTicket {
            node: NodeId((id >> NODE_SHIFT) as u16),
            ticket: Ticket::from_id(id & ((1 << NODE_SHIFT) - 1)),
        }
    }
}

impl<P: Provider> NodeSet<P> {
    /// `acquire(addr, size, lease, access, mode)` over the object at global address `addr`, on
    /// its node.
    pub fn acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<NodePerm, NodeSetError> {
        self.acquire_on_node(addr, |client, local| {
            client.acquire(local, size, lease, access, mode)
        })
    }

    /// An acquire that does not wait ([`Op::Acquire`] without `wait`) on the node of `addr`:
    /// fails at once with `ConflictTimeout` if a holder conflicts, leaving the holders alone.
    pub fn try_acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<NodePerm, NodeSetError> {
        self.acquire_on_node(addr, |client, local| {
            client.try_acquire(local, size, lease, access, mode)
        })
    }

    /// Runs `acquire` (a blocking acquire of the node-local address it is given) on the
    /// client of `addr`'s node and wraps the permission it grants.
    fn acquire_on_node(
        &mut self,
        addr: u64,
        acquire: impl FnOnce(&mut Client<P>, u64) -> Result<Perm, ClientError>,
    ) -> Result<NodePerm, NodeSetError> {
        let (node, local) = self.locate(addr)?;
        self.usable(node)?;
        let r = acquire(&mut self.members[node.index()].client, local);
        let perm = self.outcome(node, r, true)?;
        self.wrap(node, perm, false)
    }

    /// Starts an acquire ([`Op::Acquire`], waiting for conflicting holders) on the node of
    /// `addr` without waiting for its answer ([`NodeSet::poll`] takes it).
    pub fn start_acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<NodeTicket, NodeSetError> {
        let (node, local) = self.locate(addr)?;
        self.usable(node)?;
        let r = self.members[node.index()].client.start(Op::Acquire {
            addr: local,
            size,
            lease,
            access,
            mode,
            wait: true,
        });
        let ticket = self.outcome(node, r, true)?;
        Ok(NodeTicket { node, ticket })
    }

    /// The permission `t` asked for, once its answer is here (`Ok(None)` while in flight).
    /// Never blocks; the ticket is spent once it answers.
    pub fn poll(&mut self, t: NodeTicket) -> Result<Option<NodePerm>, NodeSetError> {
        let node = t.node;
        self.member(node, u64::MAX)?;
        let r = self.members[node.index()].client.poll(t.ticket);
        match self.outcome(node, r, true)? {
            Some(Done::Perm(perm)) => self.wrap(node, perm, false).map(Some),
            Some(_) => Err(NodeSetError::Node {
                node,
                source: ClientError::InvalidArgument("not an acquire's ticket"),
            }),
            None => Ok(None),
        }
    }

    /// Gives up a started operation: a grant it brings is handed back.
    pub fn cancel(&mut self, t: NodeTicket) {
        if let Some(m) = self.members.get_mut(t.node.index()) {
            m.client.cancel(t.ticket);
        }
    }

    /// Operations started on the set's nodes whose outcome was not taken yet.
    pub fn in_flight(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.client.status().in_flight())
            .sum()
    }

    /// Waits up to `max` (sleeping) until an operation started on some node has ended; whether
    /// one has. With operations in flight at several nodes, it looks at each in turn a slice at
    /// a time (`WAIT_SLICE`), so one node's answer is not slept through waiting for another's.
    /// A node that fails shows at the next poll of its tickets.
    pub fn wait_any(&mut self, max: Duration) -> bool {
        let busy: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].client.status().in_flight() > 0)
            .collect();
        match busy.as_slice() {
            [] => false,
            [one] => matches!(self.members[*one].client.wait_any(max), Ok(true)),
            several => {
                let rounds = (max.as_micros() / WAIT_SLICE.as_micros()).max(1);
                (0..rounds).any(|r| {
                    let i = several[r as usize % several.len()];
                    matches!(
                        self.members[i].client.wait_any(WAIT_SLICE.min(max)),
                        Ok(true)
                    )
                })
            }
        }
    }

    /// Arms every node's control CQs (see [`SessionControl::arm`]); whether an operation is in
    /// flight at any.
    ///
    /// [`SessionControl::arm`]: crate::client::SessionControl::arm
    pub fn arm(&mut self) -> bool {
        for m in &mut self.members {
            m.client.control().arm();
        }
        self.in_flight() > 0
    }

    /// CN-collaborated extension (one-sided CAS on the lifetime word, on the permission's
    /// node).
    pub fn extend(&mut self, p: &NodePerm, lease: Duration) -> Result<(), NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()].client.extend(&p.perm, lease);
        self.outcome(p.node, r, false)
    }

    /// RPC-based extension, on the permission's node.
    pub fn extend_rpc(&mut self, p: &NodePerm, lease: Duration) -> Result<(), NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()]
            .client
            .extend_rpc(&p.perm, lease);
        self.outcome(p.node, r, true)
    }

    /// `revoke(perm)` on its node: its rkeys fail once this returns.
    pub fn revoke(&mut self, p: NodePerm) -> Result<(), NodeSetError> {
        self.alive(&p)?;
        let r = self.members[p.node.index()].client.revoke(p.perm);
        self.outcome(p.node, r, true)
    }

    /// `revoke` of every permission of `perms`: per node, every revoke sent before any answer
    /// is awaited (one round trip per node and group of 16). Every permission is ended or
    /// reported; the first failure is returned once all were tried.
    pub fn revoke_many(&mut self, perms: Vec<NodePerm>) -> Result<(), NodeSetError> {
        let mut first = None;
        let mut groups: Vec<(NodeId, Vec<crate::client::Perm>)> = Vec::new();
        for p in perms {
            if let Err(e) = self.alive(&p) {
                first.get_or_insert(e);
                continue;
            }
            match groups.iter_mut().find(|(n, _)| *n == p.node) {
                Some((_, g)) => g.push(p.perm),
                None => groups.push((p.node, vec![p.perm])),
            }
        }
        for (node, group) in groups {
            let r = self.members[node.index()].client.revoke_many(group);
            if let Err(e) = self.outcome(node, r, true) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Ends the permission and frees the object, on its node (see [`Client::free`]: a
    /// permission of an earlier session of a node that is back is freed through a new one).
    ///
    /// [`Client::free`]: crate::client::Client::free
    pub fn free(&mut self, p: NodePerm) -> Result<(), NodeSetError> {
        self.usable(p.node)?;
        let r = self.members[p.node.index()].client.free(p.perm);
        self.outcome(p.node, r, true)
    }

    /// [`NodeSet::free`] of every permission of `perms`: per node, one round trip per group
    /// of 16 (every free sent before any answer is awaited). One outcome per permission, in
    /// order; a failure of one does not keep the others from being freed.
    pub fn free_many(&mut self, perms: Vec<NodePerm>) -> Vec<Result<(), NodeSetError>> {
        let mut outcomes: Vec<Option<Result<(), NodeSetError>>> =
            (0..perms.len()).map(|_| None).collect();
        let mut groups: Vec<(NodeId, Vec<(usize, Perm)>)> = Vec::new();
        for (at, p) in perms.into_iter().enumerate() {
            if let Err(e) = self.usable(p.node) {
                outcomes[at] = Some(Err(e));
                continue;
            }
            match groups.iter_mut().find(|(n, _)| *n == p.node) {
                Some((_, g)) => g.push((at, p.perm)),
                None => groups.push((p.node, vec![(at, p.perm)])),
            }
        }
        for (node, group) in groups {
            let (ats, group): (Vec<usize>, Vec<_>) = group.into_iter().unzip();
            let rs = self.members[node.index()].client.free_many(group);
            for (at, r) in ats.into_iter().zip(rs) {
                outcomes[at] = Some(self.outcome(node, r, true));
            }
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or(Err(NodeSetError::Node {
                    node: NodeId(0),
                    source: ClientError::InvalidArgument("no outcome"),
                }))
            })
            .collect()
    }

    /// Lets clients of `tenant` acquire the object at global address `addr` (see
    /// [`SessionControl::share`](crate::client::SessionControl::share)).
    pub fn share(
        &mut self,
        addr: u64,
        tenant: TenantId,
        access: Option<Access>,
    ) -> Result<(), NodeSetError> {
        let (node, local) = self.locate(addr)?;
        self.usable(node)?;
        let r = self.members[node.index()]
            .client
            .control()
            .share(local, tenant, access);
        self.outcome(node, r, true)
    }

    /// Reads `dst.len()` bytes at `offset` of the permission's buffer.
    pub fn read(&mut self, p: &NodePerm, offset: u64, dst: &mut [u8]) -> Result<(), NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()]
            .client
            .read(&p.perm, offset, dst);
        self.outcome(p.node, r, false)
    }

    /// Writes `src` at `offset` of the permission's buffer.
    pub fn write(&mut self, p: &NodePerm, offset: u64, src: &[u8]) -> Result<(), NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()]
            .client
            .write(&p.perm, offset, src);
        self.outcome(p.node, r, false)
    }

    /// Compare-and-swap on the aligned word at `offset`; the previous value.
    pub fn cas(
        &mut self,
        p: &NodePerm,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()]
            .client
            .cas(&p.perm, offset, compare, swap);
        self.outcome(p.node, r, false)
    }

    /// Fetch-and-add on the aligned word at `offset`; the previous value.
    pub fn faa(&mut self, p: &NodePerm, offset: u64, add: u64) -> Result<u64, NodeSetError> {
        self.alive(p)?;
        let r = self.members[p.node.index()]
            .client
            .faa(&p.perm, offset, add);
        self.outcome(p.node, r, false)
    }

    /// Publishes the object at global address `addr` under `name`, on [`NAMES_NODE`].
    pub fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), NodeSetError> {
        self.locate(addr)?;
        self.usable(NAMES_NODE)?;
        let r = self.members[NAMES_NODE.index()]
            .client
            .control()
            .publish(name, addr, len);
        self.outcome(NAMES_NODE, r, true)
    }

    /// The object published under `name`: (global address, length).
    pub fn lookup(&mut self, name: &str) -> Result<(u64, u64), NodeSetError> {
        self.usable(NAMES_NODE)?;
        let r = self.members[NAMES_NODE.index()]
            .client
            .control()
            .lookup(name);
        let (addr, len) = self.outcome(NAMES_NODE, r, true)?;
        // A name published by a client of one node holds a node-local address: refused.
        let g = GlobalAddr::try_from(addr)?;
        self.locate(g.into())?;
        Ok((addr, len))
    }

    /// Withdraws `name`.
    pub fn unpublish(&mut self, name: &str) -> Result<(), NodeSetError> {
        self.usable(NAMES_NODE)?;
        let r = self.members[NAMES_NODE.index()]
            .client
            .control()
            .unpublish(name);
        self.outcome(NAMES_NODE, r, true)
    }
}
