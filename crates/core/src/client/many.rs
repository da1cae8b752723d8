//! Several allocations in one round trip: pre-allocation (§6.1: RACE hashing takes its KV
//! blocks four at a time), each object still with its own permission.

use super::core::Owner;
use super::driver::Client;
use super::error::{ClientError, unexpected};
use super::lease::micros;
use super::perm::Perm;
use crate::proto::messages::{Access, MAX_OUTSTANDING_RPCS, Mode, Reply, Request, Status};
use rnic::Provider;
use std::time::Duration;

impl<P: Provider> Client<P> {
    /// Allocates one object per entry of `sizes`, each with its own read-write permission for
    /// `lease` in `mode`. Every request of a group of up to [`MAX_OUTSTANDING_RPCS`] is sent
    /// before any answer is awaited, so the group costs one round trip. An allocation a shard
    /// cannot serve (no memory, quota, overloaded) is tried again as [`Client::allocate`]
    /// does (every shard, with back-off).
    ///
    /// All or nothing: on an error, the objects granted are freed, the requests still
    /// unanswered are given up (a late grant is ended and its memory freed at the next control
    /// operation, as for a blocking call), and the error is returned.
    pub(crate) fn allocate_many(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<Perm>, ClientError> {
        let mut perms = Vec::with_capacity(sizes.len());
        for group in sizes.chunks(MAX_OUTSTANDING_RPCS as usize) {
            if let Err(e) = self.allocate_group(group, lease, mode, &mut perms) {
                for p in perms.drain(..) {
                    // Best effort: what cannot be freed now ends with its lease, and stays
                    // the tenant's memory (as after a crash).
                    let _ = self.free(p);
                }
                return Err(e);
            }
        }
        Ok(perms)
    }

    fn allocate_group(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
        perms: &mut Vec<Perm>,
    ) -> Result<(), ClientError> {
        self.ensure_session()?;
        let lease_us = micros(lease);
        let sent = self.clocks.lease.now();
        let reqs = sizes.iter().map(|&size| Request::Allocate {
            size,
            lease_us,
            mode,
        });
        let outcomes = self.call_all(reqs)?;
        let mut failed = None;
        for outcome in outcomes {
            match outcome {
                Ok(Reply::Granted(g)) => {
                    perms.push(self.take_grant(g, Access::ReadWrite, mode, sent))
                }
                Ok(other) => {
                    failed.get_or_insert(unexpected(other));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Starts every request of `reqs` before waiting for any (one round trip for the group;
    /// those a full channel cannot take wait for a slot) and drives them all to their ends.
    /// The outcomes, in order.
    fn call_all(
        &mut self,
        reqs: impl Iterator<Item = Request>,
    ) -> Result<Vec<Result<Reply, ClientError>>, ClientError> {
        let now = self.clocks.now();
        let user = self.user;
        let mut g = self.node.lock();
        let mut ids = Vec::new();
        for req in reqs {
            match g.core.start_for(user, req, Owner::Reply, now) {
                Ok(id) => ids.push(Ok(id)),
                Err(e) => ids.push(Err(e)),
            }
        }
        let waiting: Vec<u64> = ids
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        self.node.drive(
            &mut g,
            |core| waiting.iter().all(|&id| core.is_done(id)),
            None,
        )?;
        Ok(ids
            .into_iter()
            .map(|r| {
                let id = r?;
                g.core
                    .take_outcome(id)
                    .unwrap_or(Err(ClientError::ControlLost(rnic::WcStatus::WrFlushError)))
            })
            .collect())
    }
}

impl<P: Provider> Client<P> {
    /// `revoke` for every permission of `perms`, in one round trip per group of up to
    /// [`MAX_OUTSTANDING_RPCS`]: every request of a group is sent before any answer is
    /// awaited (a function's exit revokes what it held at once, §6.2).
    ///
    /// Every permission is ended or reported: a failure of one (it belongs to an earlier
    /// session, it had ended already) does not keep the others from being revoked; the first
    /// failure is returned once all were tried. A request whose answer does not come is
    /// reported as its error (the lease still ends the permission).
    pub(crate) fn revoke_many(&mut self, perms: Vec<Perm>) -> Result<(), ClientError> {
        let mut first_error = None;
        let mut current = Vec::with_capacity(perms.len());
        for p in perms {
            match self.current(&p) {
                Ok(()) => current.push(p),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for group in current.chunks(MAX_OUTSTANDING_RPCS as usize) {
            if let Err(e) = self.revoke_group(group) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn revoke_group(&mut self, perms: &[Perm]) -> Result<(), ClientError> {
        if self.ensure_session()? {
            // A new session: the permissions ended with the old one.
            return Err(ClientError::SessionLost);
        }
        let reqs = perms.iter().map(|p| Request::Revoke {
            id: p.id(),
            free: false,
        });
        let mut failed = None;
        for outcome in self.call_all(reqs)? {
            match outcome {
                Ok(Reply::Revoked) => {}
                Ok(other) => {
                    failed.get_or_insert(unexpected(other));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

impl<P: Provider> Client<P> {
    /// [`Client::free`] for every permission of `perms`, in one round trip per group of up to
    /// [`MAX_OUTSTANDING_RPCS`] (every request of a group sent before any answer is awaited):
    /// a data structure that retires objects in batches returns them at the cost of one.
    ///
    /// One outcome per permission, in order: a failure of one does not keep the others from
    /// being freed. A permission of an earlier session is freed through the current one (as
    /// [`Client::free`] does, one round trip more); one whose free the node refuses is ended
    /// all the same, and the refusal reported.
    pub(crate) fn free_many(&mut self, perms: Vec<Perm>) -> Vec<Result<(), ClientError>> {
        let mut outcomes: Vec<Option<Result<(), ClientError>>> = Vec::with_capacity(perms.len());
        let mut current = Vec::with_capacity(perms.len());
        for p in perms {
            if self.current(&p).is_ok() {
                current.push((outcomes.len(), p.id()));
                outcomes.push(None);
            } else {
                outcomes.push(Some(self.free(p)));
            }
        }
        for group in current.chunks(MAX_OUTSTANDING_RPCS as usize) {
            let reqs = group
                .iter()
                .map(|&(_, id)| Request::Revoke { id, free: true });
            match self.call_all(reqs) {
                Ok(replies) => {
                    for (&(at, id), reply) in group.iter().zip(replies) {
                        outcomes[at] = Some(match reply {
                            Ok(Reply::Revoked) => Ok(()),
                            // The node refused to free it: end the permission all the same.
                            Ok(Reply::Failed(s @ (Status::NotOwner | Status::InvalidArgument))) => {
                                match self.rpc(Request::Revoke { id, free: false }) {
                                    Ok(Reply::Revoked | Reply::Failed(Status::NotFound)) => {
                                        Err(ClientError::from_status(s))
                                    }
                                    Ok(other) => Err(unexpected(other)),
                                    Err(e) => Err(e),
                                }
                            }
                            Ok(other) => Err(unexpected(other)),
                            Err(e) => Err(e),
                        });
                    }
                }
                Err(e) => {
                    // The group was started: whether each free ran is unknown.
                    let mut e = Some(e);
                    for &(at, _) in group {
                        let lost = ClientError::ControlLost(rnic::WcStatus::WrFlushError);
                        outcomes[at] = Some(Err(e.take().unwrap_or(lost)));
                    }
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Err(ClientError::InvalidArgument("no outcome"))))
            .collect()
    }
}
