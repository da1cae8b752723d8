//! Batches over several nodes: each node's share of a batch goes with one doorbell on its
//! node's data QP.
//!
//! Invariants:
//! - One result per op, in the order given.
//! - Ops on one node keep their order (they are one batch on one QP, so ops on one object —
//!   which lives on one node — take effect in the order given). Nodes' shares run one after
//!   another, in the order of each node's first op; an op on one node is not ordered with
//!   ops on another node that precede it in the batch but follow another op of its node.
//! - A node's failure fails that node's ops only.
//! - A posted batch ([`NodeSet::start_execute`]) posts every node's share at once, each with
//!   one doorbell, and is taken whole ([`NodeSet::poll_execute`]); a node's client has at
//!   most one posted batch not yet taken (`client::PostedBatch`).

use super::{NodeId, NodePerm, NodeSet, NodeSetError};
use crate::client::{Batch, OpResult, PostedBatch};
use rnic::Provider;

/// One data-path op of a batch over the set, at `offset` within its permission's buffer.
#[derive(Clone, Copy, Debug)]
pub enum NodeOp<'a> {
    /// READ `len` bytes.
    Read {
        /// The permission.
        on: &'a NodePerm,
        /// Offset in its buffer.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// WRITE `data`.
    Write {
        /// The permission.
        on: &'a NodePerm,
        /// Offset in its buffer.
        offset: u64,
        /// Bytes.
        data: &'a [u8],
    },
    /// Compare-and-swap of the aligned word.
    Cas {
        /// The permission.
        on: &'a NodePerm,
        /// Offset in its buffer (a multiple of 8).
        offset: u64,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Fetch-and-add on the aligned word.
    Faa {
        /// The permission.
        on: &'a NodePerm,
        /// Offset in its buffer (a multiple of 8).
        offset: u64,
        /// Added (wrapping).
        add: u64,
    },
}

impl NodeOp<'_> {
    fn on(&self) -> &NodePerm {
        match self {
            NodeOp::Read { on, .. }
            | NodeOp::Write { on, .. }
            | NodeOp::Cas { on, .. }
            | NodeOp::Faa { on, .. } => on,
        }
    }
}

/// Ops collected for [`NodeSet::execute`]; see [`NodeSet::batch`].
#[derive(Debug)]
pub struct NodeBatch<'a, P: Provider> {
    set: &'a mut NodeSet<P>,
    ops: Vec<NodeOp<'a>>,
}

impl<'a, P: Provider> NodeBatch<'a, P> {
    /// Adds a READ of `len` bytes at `offset`.
    pub fn read(&mut self, on: &'a NodePerm, offset: u64, len: u32) -> &mut Self {
        self.ops.push(NodeOp::Read { on, offset, len });
        self
    }

    /// Adds a WRITE of `data` at `offset`.
    pub fn write(&mut self, on: &'a NodePerm, offset: u64, data: &'a [u8]) -> &mut Self {
        self.ops.push(NodeOp::Write { on, offset, data });
        self
    }

    /// Adds a compare-and-swap at `offset`.
    pub fn cas(&mut self, on: &'a NodePerm, offset: u64, compare: u64, swap: u64) -> &mut Self {
        self.ops.push(NodeOp::Cas {
            on,
            offset,
            compare,
            swap,
        });
        self
    }

    /// Adds a fetch-and-add at `offset`.
    pub fn faa(&mut self, on: &'a NodePerm, offset: u64, add: u64) -> &mut Self {
        self.ops.push(NodeOp::Faa { on, offset, add });
        self
    }

    /// Runs the ops (see the module docs); one result per op, in order.
    pub fn execute(self) -> Vec<Result<OpResult, NodeSetError>> {
        self.set.execute(&self.ops)
    }
}

impl<P: Provider> NodeSet<P> {
    /// Starts a batch of data-path ops over the set.
    pub fn batch<'a>(&'a mut self) -> NodeBatch<'a, P> {
        NodeBatch {
            set: self,
            ops: Vec::new(),
        }
    }

    /// Runs `ops`: each node's share with one doorbell, the shares one after another (see
    /// the module docs); one result per op, in order.
    pub fn execute(&mut self, ops: &[NodeOp<'_>]) -> Vec<Result<OpResult, NodeSetError>> {
        let (mut results, groups) = self.group(ops);
        for (node, members) in groups {
            let out = {
                let mut b = self.members[node.index()].client.batch();
                add_ops(&mut b, ops, &members);
                b.execute()
            };
            for (i, r) in members.into_iter().zip(out) {
                results[i] = Some(self.outcome(node, r, false));
            }
        }
        all_results(results)
    }

    /// Posts `ops` without waiting: every node's share at once, each with one doorbell (see
    /// the module docs). [`NodeSet::poll_execute`] takes the results.
    pub fn start_execute(&mut self, ops: &[NodeOp<'_>]) -> PostedNodeBatch {
        let (results, groups) = self.group(ops);
        let parts = groups
            .into_iter()
            .map(|(node, members)| {
                let mut b = self.members[node.index()].client.batch();
                add_ops(&mut b, ops, &members);
                (node, b.start(), members)
            })
            .collect();
        PostedNodeBatch { parts, results }
    }

    /// The results of a posted batch (one per op, in order) once every op has its own;
    /// `None` while some are in flight. Never blocks.
    pub fn poll_execute(
        &mut self,
        b: &mut PostedNodeBatch,
    ) -> Option<Vec<Result<OpResult, NodeSetError>>> {
        let mut k = 0;
        while k < b.parts.len() {
            let (node, posted, _) = &mut b.parts[k];
            let node = *node;
            match posted.poll(&mut self.members[node.index()].client) {
                Some(out) => {
                    let (_, _, members) = b.parts.swap_remove(k);
                    for (i, r) in members.into_iter().zip(out) {
                        b.results[i] = Some(self.outcome(node, r, false));
                    }
                }
                None => k += 1,
            }
        }
        b.parts
            .is_empty()
            .then(|| all_results(std::mem::take(&mut b.results)))
    }

    /// Each op's node, its ops in order, and the results of ops refused at once (their node
    /// is down).
    #[allow(clippy::type_complexity)]
    fn group(
        &self,
        ops: &[NodeOp<'_>],
    ) -> (
        Vec<Option<Result<OpResult, NodeSetError>>>,
        Vec<(NodeId, Vec<usize>)>,
    ) {
        let mut results: Vec<Option<Result<OpResult, NodeSetError>>> =
            ops.iter().map(|_| None).collect();
        let mut groups: Vec<(NodeId, Vec<usize>)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let on = op.on();
            if let Err(e) = self.alive(on) {
                results[i] = Some(Err(e));
                continue;
            }
            match groups.iter_mut().find(|(n, _)| *n == on.node) {
                Some((_, g)) => g.push(i),
                None => groups.push((on.node, vec![i])),
            }
        }
        (results, groups)
    }
}

/// A batch over the set posted with [`NodeSet::start_execute`], not yet taken.
#[derive(Debug)]
#[must_use = "a posted batch's results are taken with `NodeSet::poll_execute`"]
pub struct PostedNodeBatch {
    /// Each node's share in flight, with the indexes of its ops.
    parts: Vec<(NodeId, PostedBatch, Vec<usize>)>,
    results: Vec<Option<Result<OpResult, NodeSetError>>>,
}

/// Adds the ops at `members` of `ops` to one node's batch.
fn add_ops<P: Provider>(b: &mut Batch<'_, P>, ops: &[NodeOp<'_>], members: &[usize]) {
    for &i in members {
        match ops[i] {
            NodeOp::Read { on, offset, len } => b.read(&on.perm, offset, len),
            NodeOp::Write { on, offset, data } => b.write(&on.perm, offset, data),
            NodeOp::Cas {
                on,
                offset,
                compare,
                swap,
            } => b.cas(&on.perm, offset, compare, swap),
            NodeOp::Faa { on, offset, add } => b.faa(&on.perm, offset, add),
        };
    }
}

fn all_results(
    results: Vec<Option<Result<OpResult, NodeSetError>>>,
) -> Vec<Result<OpResult, NodeSetError>> {
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or(Err(NodeSetError::Node {
                node: NodeId(0),
                source: crate::client::ClientError::Internal("an op got no result"),
            }))
        })
        .collect()
}
