//! [`RemoteMemory`] over several memory nodes: a region is a [`NodePerm`], addresses are
//! global ([`GlobalAddr`](patronus_core::nodes::GlobalAddr): below 2^48 and never 0, so RACE's
//! 48-bit pointers and the queue's root-relative ones hold them unchanged), allocations go
//! round the nodes ([`NodeSet::allocate_many`]), a batch is one doorbell per node it touches,
//! and named roots live on node 0 (`docs/multi-node.md`).
//!
//! Errors keep their meaning ([`MemError::Rejected`] for an ended right, ...); a node that is
//! gone is [`MemError::Failed`] with the node named, never `Rejected` or `NotFound`, so a
//! structure does not take a lost node's objects for freed ones and retry forever.

use crate::memory::{Acquiring, MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use patronus_core::client::{ClientError, OpResult};
use patronus_core::nodes::{NodeOp, NodePerm, NodeSet, NodeSetError, NodeTicket};
use patronus_core::proto::messages::{Access, Mode};
use rnic::{Provider, Timestamp};
use std::time::Duration;

impl Region for NodePerm {
    fn addr(&self) -> u64 {
        NodePerm::addr(self)
    }

    fn len(&self) -> u64 {
        NodePerm::len(self)
    }
}

impl From<NodeSetError> for MemError {
    fn from(e: NodeSetError) -> Self {
        match e {
            NodeSetError::Node { source, node } => match MemError::from(source) {
                MemError::Failed(what) => MemError::Failed(format!("{node}: {what}")),
                other => other,
            },
            NodeSetError::NoNodeAvailable { last } => match *last {
                NodeSetError::Node {
                    source:
                        ClientError::NoMemory | ClientError::PoolExhausted | ClientError::QuotaExceeded,
                    ..
                } => MemError::Exhausted,
                other => MemError::Failed(format!("no memory node could allocate: {other}")),
            },
            NodeSetError::Address(_) => MemError::Invalid("not a global address of this node set"),
            other => MemError::Failed(other.to_string()),
        }
    }
}

/// A [`NodeSet`] as remote memory for the data structures.
#[derive(Debug)]
pub struct NodeSetMemory<P: Provider> {
    set: NodeSet<P>,
}

impl<P: Provider> NodeSetMemory<P> {
    /// Wraps a node set.
    pub fn new(set: NodeSet<P>) -> Self {
        NodeSetMemory { set }
    }

    /// The node set.
    pub fn set(&self) -> &NodeSet<P> {
        &self.set
    }

    /// The node set, mutably.
    pub fn set_mut(&mut self) -> &mut NodeSet<P> {
        &mut self.set
    }

    /// Gives the node set back.
    pub fn into_set(self) -> NodeSet<P> {
        self.set
    }
}

impl<P: Provider> RemoteMemory for NodeSetMemory<P> {
    type Region = NodePerm;

    fn allocate(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<NodePerm>, MemError> {
        Ok(self.set.allocate_many(sizes, lease, mode)?)
    }

    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<NodePerm, MemError> {
        Ok(self.set.acquire(addr, len, lease, access, mode)?)
    }

    fn try_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<NodePerm, MemError> {
        Ok(self.set.try_acquire(addr, len, lease, access, mode)?)
    }

    fn start_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Acquiring<NodePerm> {
        match self.set.start_acquire(addr, len, lease, access, mode) {
            Ok(t) => Acquiring::InFlight(t.id()),
            Err(e) => Acquiring::Answered(Err(e.into())),
        }
    }

    fn poll_acquire(&mut self, a: Acquiring<NodePerm>) -> Acquiring<NodePerm> {
        let id = match a {
            Acquiring::InFlight(id) => id,
            answered => return answered,
        };
        match self.set.poll(NodeTicket::from_id(id)) {
            Ok(None) => Acquiring::InFlight(id),
            Ok(Some(p)) => Acquiring::Answered(Ok(p)),
            Err(e) => Acquiring::Answered(Err(e.into())),
        }
    }

    fn abandon_acquire(&mut self, a: Acquiring<NodePerm>) {
        // An answered right is dropped (its lease runs out); one in flight is handed back.
        if let Acquiring::InFlight(id) = a {
            self.set.cancel(NodeTicket::from_id(id));
        }
    }

    fn wait(&mut self, max: Duration) {
        self.set.wait_any(max);
    }

    fn arm(&mut self) -> bool {
        self.set.arm()
    }

    fn extend(&mut self, region: &NodePerm, lease: Duration) -> Result<(), MemError> {
        Ok(self.set.extend(region, lease)?)
    }

    fn max_lease(&self) -> Option<Duration> {
        // The shortest of the nodes': a structure's rights may land on any of them.
        self.set
            .nodes()
            .filter_map(|n| self.set.client(n).map(|c| c.status().max_lease()))
            .min()
    }

    fn expires_within(&self, region: &NodePerm, margin: Duration) -> bool {
        let now = self
            .set
            .client(region.node())
            .map_or_else(|| self.set.now(), |c| c.status().clock().now());
        region.expiry().since(now) <= margin
    }

    fn now(&self) -> Timestamp {
        self.set.now()
    }

    fn release(&mut self, region: NodePerm) -> Result<(), MemError> {
        Ok(self.set.revoke(region)?)
    }

    fn release_many(&mut self, regions: Vec<NodePerm>) -> Result<(), MemError> {
        Ok(self.set.revoke_many(regions)?)
    }

    fn relinquish(&mut self, region: NodePerm) -> Result<(), MemError> {
        // The lease runs out at its memory node: no revoke RPC (§5.4).
        drop(region);
        Ok(())
    }

    fn free(&mut self, region: NodePerm) -> Result<(), MemError> {
        Ok(self.set.free(region)?)
    }

    fn execute(&mut self, ops: &[MemOp<'_, NodePerm>]) -> Vec<Result<MemOut, MemError>> {
        let ops: Vec<NodeOp<'_>> = ops
            .iter()
            .map(|op| match *op {
                MemOp::Read { on, offset, len } => NodeOp::Read { on, offset, len },
                MemOp::Write { on, offset, data } => NodeOp::Write { on, offset, data },
                MemOp::Cas {
                    on,
                    offset,
                    compare,
                    swap,
                } => NodeOp::Cas {
                    on,
                    offset,
                    compare,
                    swap,
                },
                MemOp::Faa { on, offset, add } => NodeOp::Faa { on, offset, add },
            })
            .collect();
        self.set
            .execute(&ops)
            .into_iter()
            .map(|r| {
                r.map(|out| match out {
                    OpResult::Read(bytes) => MemOut::Read(bytes),
                    OpResult::Written => MemOut::Written,
                    OpResult::Atomic(v) => MemOut::Atomic(v),
                })
                .map_err(MemError::from)
            })
            .collect()
    }
}

impl<P: Provider> NamedRoots for NodeSetMemory<P> {
    fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), MemError> {
        Ok(self.set.publish(name, addr, len)?)
    }

    fn lookup(&mut self, name: &str) -> Result<(u64, u64), MemError> {
        Ok(self.set.lookup(name)?)
    }

    fn unpublish(&mut self, name: &str) -> Result<(), MemError> {
        Ok(self.set.unpublish(name)?)
    }
}
