//! [`RemoteMemory`] on the Patronus client library, over one memory node or several: a region
//! is a [`NodePerm`] (a [`Perm`](patronus_core::client::Perm) and its node), addresses are
//! global ([`GlobalAddr`](patronus_core::nodes::GlobalAddr): below 2^48 and never 0, so RACE's
//! 48-bit pointers and the queue's root-relative ones hold them unchanged), allocations go
//! several per round trip and round the nodes ([`NodeSet::allocate_many`]), a batch is one
//! doorbell per node it touches, extension is the one-sided CAS on the permission's lifetime
//! word, and named roots live on node 0 (`docs/multi-node.md`). One memory node is a set of
//! one ([`PatronusMemory::new`]).
//!
//! Acquires can be pipelined: a started acquire's [`Acquiring::InFlight`] id is the node set's
//! own [`NodeTicket`] id (the client's ticket tagged with its node), so nothing is kept here.
//!
//! Errors keep their meaning ([`MemError::Rejected`] for an ended right, ...); a node that is
//! gone is [`MemError::Failed`] with the node named, never `Rejected` or `NotFound`, so a
//! structure does not take a lost node's objects for freed ones and retry forever.

use crate::memory::{
    Acquiring, Executing, MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory,
};
use patronus_core::client::{Client, ClientError, OpResult};
use patronus_core::nodes::{
    NodeId, NodeOp, NodePerm, NodeSet, NodeSetConfig, NodeSetError, NodeTicket, PostedNodeBatch,
};
use patronus_core::proto::messages::{Access, Mode};
use rnic::{Provider, Timestamp};
use std::collections::HashMap;
use std::time::Duration;

impl Region for NodePerm {
    fn addr(&self) -> u64 {
        NodePerm::addr(self)
    }

    fn len(&self) -> u64 {
        NodePerm::len(self)
    }
}

/// The Patronus client library as remote memory for the data structures: the clients of a
/// [`NodeSet`], one per memory node.
#[derive(Debug)]
pub struct PatronusMemory<P: Provider> {
    set: NodeSet<P>,
    /// Batches started and not yet answered, by ticket.
    posted: HashMap<u64, PostedNodeBatch>,
    next_posted: u64,
}

impl<P: Provider> PatronusMemory<P> {
    /// Remote memory on the one memory node `client` is connected to. A node found gone is
    /// tried again at the next call (`retry_after` 0: there is no other node to go to).
    pub fn new(client: Client<P>) -> Self {
        let cfg = NodeSetConfig {
            retry_after: Duration::ZERO,
        };
        let set = NodeSet::from_clients(vec![client], cfg)
            .expect("a set of one node is within the node count");
        PatronusMemory {
            set,
            posted: HashMap::new(),
            next_posted: 0,
        }
    }

    /// Remote memory over every node of `set`.
    pub fn over(set: NodeSet<P>) -> Self {
        PatronusMemory {
            set,
            posted: HashMap::new(),
            next_posted: 0,
        }
    }

    /// The client of the first node (the only one of [`PatronusMemory::new`]): its
    /// statistics, its own API.
    pub fn client(&self) -> &Client<P> {
        self.set.client(NodeId(0)).expect("a node set has a node 0")
    }

    /// The client of the first node, mutably.
    pub fn client_mut(&mut self) -> &mut Client<P> {
        self.set
            .client_mut(NodeId(0))
            .expect("a node set has a node 0")
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

impl From<ClientError> for MemError {
    fn from(e: ClientError) -> Self {
        match e {
            // The NIC refused the access, or the permission is known to have ended.
            ClientError::Denied(_) | ClientError::ExtensionRefused | ClientError::SessionLost => {
                MemError::Rejected
            }
            ClientError::LeaseExpired => MemError::Expired,
            ClientError::OutcomeUnknown(_) => MemError::OutcomeUnknown,
            ClientError::NotFound => MemError::NotFound,
            ClientError::ConflictTimeout => MemError::Conflict,
            ClientError::NoMemory | ClientError::PoolExhausted | ClientError::QuotaExceeded => {
                MemError::Exhausted
            }
            ClientError::InvalidArgument(what) => MemError::Invalid(what),
            ClientError::TooLarge => {
                MemError::Invalid("larger than the largest object the memory node allocates")
            }
            ClientError::NameTaken => MemError::NameTaken,
            other => MemError::Failed(other.to_string()),
        }
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

impl<P: Provider> RemoteMemory for PatronusMemory<P> {
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
        // The data CQs are armed with the control CQs: a started batch's completion wakes too.
        let acquires = self.set.arm();
        acquires || !self.posted.is_empty()
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

    fn free_many(&mut self, regions: Vec<NodePerm>) -> Vec<Result<(), MemError>> {
        self.set
            .free_many(regions)
            .into_iter()
            .map(|r| r.map_err(MemError::from))
            .collect()
    }

    fn start_execute(&mut self, ops: &[MemOp<'_, NodePerm>]) -> Executing {
        // At most one started batch is not yet answered: one still here was given up on by
        // its caller, and dropping it has its client finish it before the next.
        self.posted.clear();
        let posted = self.set.start_execute(&node_ops(ops));
        self.next_posted += 1;
        let id = self.next_posted;
        self.posted.insert(id, posted);
        self.poll_execute(Executing::InFlight(id))
    }

    fn poll_execute(&mut self, e: Executing) -> Executing {
        let Executing::InFlight(id) = e else {
            return e;
        };
        let Some(mut posted) = self.posted.remove(&id) else {
            return Executing::Answered(Vec::new());
        };
        match self.set.poll_execute(&mut posted) {
            Some(out) => Executing::Answered(mem_results(out)),
            None => {
                self.posted.insert(id, posted);
                Executing::InFlight(id)
            }
        }
    }

    fn execute(&mut self, ops: &[MemOp<'_, NodePerm>]) -> Vec<Result<MemOut, MemError>> {
        mem_results(self.set.execute(&node_ops(ops)))
    }
}

/// The node set's ops for `ops`.
fn node_ops<'a>(ops: &[MemOp<'a, NodePerm>]) -> Vec<NodeOp<'a>> {
    ops.iter()
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
        .collect()
}

/// The node set's results as remote memory's.
fn mem_results(out: Vec<Result<OpResult, NodeSetError>>) -> Vec<Result<MemOut, MemError>> {
    out.into_iter()
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

impl<P: Provider> NamedRoots for PatronusMemory<P> {
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
