//! Several allocations in one round trip: pre-allocation (§6.1: RACE hashing takes its KV
//! blocks four at a time), each object still with its own permission.

use super::*;
use crate::rpc::RpcError;

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
    pub fn allocate_many(
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
        let mut sent_ids = Vec::with_capacity(sizes.len());
        let mut failed = None;
        for &size in sizes {
            let req = self.with_slack(Request::Allocate {
                size,
                lease_us,
                mode,
            });
            let k = self.channel_for(&req);
            let sent = self.clock.now();
            match self.session.ctrl[k].submit(req) {
                Ok(id) => sent_ids.push((k, id, sent, size)),
                Err(e) => {
                    failed = Some(self.note(e));
                    break;
                }
            }
        }
        let deadline = self.clock.now().plus(self.cfg.rpc_timeout);
        let mut pending = sent_ids.into_iter();
        for (k, id, sent, size) in pending.by_ref() {
            if failed.is_some() {
                self.session.ctrl[k].abandon(id);
                continue;
            }
            let left = self.cfg.rpc_timeout.min(deadline.since(self.clock.now()));
            match self.session.ctrl[k].wait(id, left, true) {
                Ok(Reply::Granted(g)) => {
                    self.lease.observe(sent, self.clock.now(), &mut self.stats);
                    perms.push(self.take_grant(g, Access::ReadWrite, mode, sent));
                }
                Ok(Reply::Failed(
                    Status::NoMemory
                    | Status::PoolExhausted
                    | Status::QuotaExceeded
                    | Status::Overloaded,
                )) => match self.allocate(size, lease, mode) {
                    Ok(p) => perms.push(p),
                    Err(e) => failed = Some(e),
                },
                Ok(other) => failed = Some(unexpected(other)),
                Err(e) => failed = Some(self.note(e)),
            }
        }
        self.hand_back_orphans();
        failed.map_or(Ok(()), Err)
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
    pub fn revoke_many(&mut self, perms: Vec<Perm>) -> Result<(), ClientError> {
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
        let mut sent_ids = Vec::with_capacity(perms.len());
        let mut failed = None;
        // Those a full channel (acquires of the caller's in flight) cannot take now: revoked
        // one at a time once the others are answered.
        let mut later = Vec::new();
        for (i, p) in perms.iter().enumerate() {
            let req = Request::Revoke {
                id: p.id(),
                free: false,
            };
            let k = self.channel_for(&req);
            match self.session.ctrl[k].submit(req) {
                Ok(id) => sent_ids.push((k, id)),
                Err(RpcError::Busy) => later.push(p.id()),
                Err(e) => {
                    failed = Some(self.note(e));
                    later.extend(perms[i + 1..].iter().map(Perm::id));
                    break;
                }
            }
        }
        let deadline = self.clock.now().plus(self.cfg.rpc_timeout);
        for (k, id) in sent_ids {
            let left = self.cfg.rpc_timeout.min(deadline.since(self.clock.now()));
            match self.session.ctrl[k].wait(id, left, true) {
                Ok(Reply::Revoked) => {}
                Ok(other) => {
                    failed.get_or_insert(unexpected(other));
                }
                Err(e) => {
                    let e = self.note(e);
                    failed.get_or_insert(e);
                }
            }
        }
        self.hand_back_orphans();
        for id in later {
            if let Err(e) = self.end_id(id, false) {
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }
}
