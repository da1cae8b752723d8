//! Several allocations in one round trip: pre-allocation (§6.1: RACE hashing takes its KV
//! blocks four at a time), each object still with its own permission.

use super::*;

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
