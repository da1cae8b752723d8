//! Where `allocate` puts objects: round robin over the reachable nodes, and the next node
//! when one is full or gone.
//!
//! Why round robin (`docs/multi-node.md` has the longer argument): a client knows nothing of
//! the nodes' free memory without asking (a round trip per node per decision), and the
//! memory node is the authority on it — it answers `NoMemory` or `QuotaExceeded` when full,
//! and the set then tries the next node, so a full node costs one refused request, not a
//! failed allocation. Consistent hashing needs a key, which an allocation has not, and its
//! virtue — keys stay put when nodes come and go — buys nothing here: an object never moves,
//! its global address names its node for good. Round robin spreads one client's objects
//! evenly, needs no state beyond a cursor, and is predictable in tests.
//!
//! Invariants:
//! - `allocate_many` is all or nothing: on an error every object it got is freed.
//! - One request per node per round: the objects placed on a node are asked for with one
//!   its client's grouped allocation (one round trip for up to 16 objects); nodes are asked one
//!   after another.
//! - A node is tried at most once per call: one that refuses (full, gone) gets no more of
//!   this call's objects; they go round the nodes left.
//! - A node marked down is skipped until its retry time has passed.

use super::{NodeId, NodePerm, NodeSet, NodeSetError};
use crate::client::{ClientError, Perm};
use crate::proto::messages::Mode;
use rnic::Provider;
use std::time::Duration;

/// Whether the refusal `e` means: try the objects on another node.
fn elsewhere(e: &NodeSetError) -> bool {
    match e {
        NodeSetError::NodeDown { .. } => true,
        NodeSetError::Node { source, .. } => matches!(
            source,
            ClientError::NoMemory
                | ClientError::PoolExhausted
                | ClientError::QuotaExceeded
                | ClientError::Overloaded
        ),
        _ => false,
    }
}

impl<P: Provider> NodeSet<P> {
    /// `allocate(size, lease, mode)` on the next node in turn (see the module docs): new,
    /// zeroed memory with a read-write permission over it.
    pub fn allocate(
        &mut self,
        size: u64,
        lease: Duration,
        mode: Mode,
    ) -> Result<NodePerm, NodeSetError> {
        let mut perms = self.allocate_many(&[size], lease, mode)?;
        // allocate_many returns one permission per size, or an error.
        perms.pop().ok_or(NodeSetError::Node {
            node: NodeId(0),
            source: ClientError::Internal("an allocation returned no permission"),
        })
    }

    /// One object per entry of `sizes`, placed round robin over the reachable nodes, each
    /// with its own read-write permission for `lease` in `mode`; in the order of `sizes`. The
    /// objects of one node are asked for together (one round trip per node). All or nothing.
    pub fn allocate_many(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<NodePerm>, NodeSetError> {
        let n = self.members.len();
        let mut placed: Vec<Option<NodePerm>> = sizes.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..sizes.len()).collect();
        let mut refused = vec![false; n];
        let mut last = None;
        while !pending.is_empty() {
            let mut candidates = Vec::with_capacity(n);
            for node in self.nodes() {
                if refused[node.index()] {
                    continue;
                }
                match self.usable(node) {
                    Ok(()) => candidates.push(node),
                    Err(e) => last = Some(e),
                }
            }
            if candidates.is_empty() {
                self.give_back(placed);
                let last = last.unwrap_or(NodeSetError::NodeCount(0));
                return Err(NodeSetError::NoNodeAvailable {
                    last: Box::new(last),
                });
            }
            // Round robin from the cursor: the first candidate at or after it goes first.
            let first = candidates
                .iter()
                .position(|c| c.index() >= self.next % n)
                .unwrap_or(0);
            candidates.rotate_left(first);
            let mut groups: Vec<(NodeId, Vec<usize>)> = Vec::new();
            for (j, &i) in pending.iter().enumerate() {
                let node = candidates[j % candidates.len()];
                match groups.iter_mut().find(|(g, _)| *g == node) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((node, vec![i])),
                }
                self.next = node.index() + 1;
            }
            pending.clear();
            for (node, members) in groups {
                let group: Vec<u64> = members.iter().map(|&i| sizes[i]).collect();
                let r = self.members[node.index()]
                    .client
                    .allocate_many(&group, lease, mode);
                match self.outcome(node, r, true) {
                    Ok(perms) => {
                        for (i, perm) in members.into_iter().zip(perms) {
                            match self.wrap(node, perm, true) {
                                Ok(p) => placed[i] = Some(p),
                                Err(e) => {
                                    self.give_back(placed);
                                    return Err(e);
                                }
                            }
                        }
                    }
                    Err(e) if elsewhere(&e) => {
                        refused[node.index()] = true;
                        pending.extend(members);
                        last = Some(e);
                    }
                    Err(e) => {
                        self.give_back(placed);
                        return Err(e);
                    }
                }
            }
        }
        Ok(placed.into_iter().flatten().collect())
    }

    /// `perm`, granted by `node`, with its global address; or why it has none (a node whose
    /// pool is larger than a global address can name), having ended `perm` — and freed its
    /// object if `free` (a new allocation nobody will use).
    pub(super) fn wrap(
        &mut self,
        node: NodeId,
        perm: Perm,
        free: bool,
    ) -> Result<NodePerm, NodeSetError> {
        match self.global(node, perm.addr()) {
            Ok(addr) => Ok(NodePerm { node, addr, perm }),
            Err(e) => {
                let client = &mut self.members[node.index()].client;
                // Best effort: what cannot be ended now ends with its lease.
                let _ = if free {
                    client.free(perm)
                } else {
                    client.revoke(perm)
                };
                Err(e)
            }
        }
    }

    /// Frees what an allocation that failed got (best effort: what cannot be freed now ends
    /// with its lease and stays the tenant's memory, as after a crash).
    fn give_back(&mut self, placed: Vec<Option<NodePerm>>) {
        for p in placed.into_iter().flatten() {
            let _ = self.members[p.node.index()].client.free(p.perm);
        }
    }
}
