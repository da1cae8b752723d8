//! Phase 3 of a batch: with the chain's results, replies (rkeys go out only after their bind
//! completed), header writes and scrubs for the driver, and the bookkeeping of failures.

use super::*;

impl ManagerCore {
    /// Stage 3: completes the batch with the results of the [`Chain`] that
    /// [`plan`](Self::plan) returned (one per op, in order; a missing one counts as failed).
    pub fn finish(&mut self, chain: Chain, results: &[NicResult]) -> Finished {
        let mut out = Finished::default();
        self.finish_into(chain, results, &mut out);
        out
    }

    /// [`finish`](Self::finish) into `out`, cleared first (its vectors keep their capacity
    /// from turn to turn).
    pub fn finish_into(&mut self, chain: Chain, results: &[NicResult], out: &mut Finished) {
        let now = chain.now;
        out.header_writes.clear();
        out.scrubs.clear();
        out.replies.clear();
        let mut retry_release = std::mem::take(&mut self.spare_release);
        retry_release.clear();
        for (i, cont) in chain.conts.iter().enumerate() {
            let result = results.get(i).copied().unwrap_or(NicResult::Failed);
            match *cont {
                Cont::GrantBind { perm, window } => self.settle_grant_bind(perm, window, result),
                Cont::Release { mw } => match result {
                    NicResult::Failed => retry_release.push(mw),
                    _ => self.mws.give_free(mw),
                },
                Cont::UnbindBeforeRebind => {}
                Cont::Extend {
                    perm,
                    id,
                    expected,
                    lifetime_us,
                    asker,
                } => self.settle_extend(perm, id, expected, lifetime_us, asker, result),
                Cont::Refuse { perm, id, expected } => {
                    self.settle_refuse(now, perm, id, expected, result)
                }
            }
        }
        // Unbinds that failed are retried in the next batch (the window stays out of the pool),
        // and revokes answered in this batch wait until that retry succeeded.
        if retry_release.is_empty() {
            self.replies.append(&mut self.deferred_revokes);
        } else {
            let (revokes, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.replies)
                .into_iter()
                .partition(|o| o.reply == Reply::Revoked);
            self.replies = rest;
            self.deferred_revokes.extend(revokes);
        }
        for mw in retry_release.drain(..) {
            self.releasing.push((mw, 0));
        }
        self.spare_release = retry_release;
        // A window whose bind or unbind failed may still be bound where it was (a handover
        // source, a stale window over reused memory), so no grant whose windows come from the
        // same protection domain may go out: an earlier owner's rkey could reach the new
        // owner's buffer. (On a verbs QP a failure flushes the rest of its chain anyway.)
        // Windows never leave their domain, so grants of other domains (other clients, with a
        // PD per client) are unaffected: a failure stays with the client that caused it.
        // (Few, and none at all unless a bind failed: a vector, searched.)
        let mut failed_domains = std::mem::take(&mut self.spare_domains);
        failed_domains.clear();
        for (i, op) in chain.ops.iter().enumerate() {
            if let NicOp::Bind { mw, .. } = op
                && results.get(i).is_none_or(|r| *r == NicResult::Failed)
            {
                let domain = self.mws.domain_of(*mw);
                if !failed_domains.contains(&domain) {
                    failed_domains.push(domain);
                }
            }
        }
        let mut grants = std::mem::take(&mut self.grants);
        for g in grants.drain(..) {
            let Some(p) = self.perms.get(g.key) else {
                continue;
            };
            let domain_failed = failed_domains.contains(&self.mws.domain_of_client(g.client));
            let header = Header {
                buffer_addr: p.buffer.0,
                buffer_len: p.buffer.1,
                buffer_mw: p.buffer_mw.unwrap_or(u32::MAX),
                header_mw: p.header_mw.unwrap_or(u32::MAX),
                start_us: p.id.start_us,
                lifetime_us: p.lifetime_us,
            };
            // A header that cannot be encoded would leave the lease without a lifetime word:
            // such a grant fails (the allocator refuses these lengths before this point).
            let words = header.encode();
            let contiguous = p.header == HeaderSlot::Embedded;
            let lifetime_rkey = if contiguous {
                g.buffer_rkey
            } else {
                g.lifetime_rkey
            };
            let (Some(buffer_rkey), Some(lifetime_rkey), false, Ok(words)) = (
                g.buffer_rkey,
                lifetime_rkey,
                g.failed || domain_failed,
                words,
            ) else {
                let object = p.object;
                self.end_permission(g.key, false, now);
                let failed = Outgoing {
                    copies: g.copies,
                    ..Outgoing::new(g.client, g.req_id, Reply::Failed(Status::BindFailed))
                };
                if g.rebind {
                    // A granted permission that lost its windows: it ended.
                    self.replies.push(failed);
                    continue;
                }
                self.counters.ended -= 1; // never granted
                if g.allocated {
                    // Nobody learned the address of the new memory: it goes back.
                    self.buffers.free(object);
                    self.tenants.disown(object);
                    self.remove_idle_object(object);
                }
                self.replies.push(failed);
                continue;
            };
            // A rebind leaves the header alone: its lifetime word may hold the client's
            // one-sided extensions, which the manager has not seen yet.
            if !g.rebind {
                out.header_writes.push((p.id.header_addr, words));
            }
            // Every window of earlier owners over this memory was unbound in this chain.
            out.scrubs.extend(g.scrub);
            let grant = Grant {
                id: p.id,
                buffer_addr: p.buffer.0,
                buffer_len: p.buffer.1,
                buffer_rkey,
                lifetime_rkey,
                lifetime_us: p.lifetime_us,
                contiguous,
                max_lifetime_us: self.cfg.max_lifetime_us.min(u32::MAX as u64) as u32,
            };
            let deadline = p.deadline;
            let grant_object = p.object;
            let reply = Outgoing {
                copies: g.copies,
                ..Outgoing::new(g.client, g.req_id, Reply::Granted(grant))
            };
            if g.rebind {
                self.replies.push(reply);
                continue;
            }
            if let Some(p) = self.perms.get_mut(g.key) {
                p.phase = Phase::Active;
            }
            // Granted while others wait (they queued in this batch, before it was active):
            // refuse its extensions in the next batch, as for the holders they found.
            if self
                .objects
                .get(&grant_object)
                .is_some_and(|o| !o.waiters.is_empty())
            {
                self.deadlines.insert(now, Timer::Waiter(grant_object));
            }
            self.deadlines.insert(deadline, Timer::Lease(g.key));
            self.counters.granted += 1;
            self.replies.push(reply);
        }
        // The emptied vectors go back for the next turn (unless the loop queued grants of
        // its own, which stay for the next batch).
        if self.grants.is_empty() {
            self.grants = grants;
        }
        self.spare_domains = failed_domains;
        self.spare_chain = (chain.ops, chain.conts);
        self.retire_domains();
        out.replies.append(&mut self.replies);
    }

    fn settle_grant_bind(&mut self, perm: PermKey, window: GrantWindow, result: NicResult) {
        let Some(g) = self.grants.iter_mut().find(|g| g.key == perm) else {
            return;
        };
        match (result, window) {
            (NicResult::Bound(rkey), GrantWindow::Buffer) => g.buffer_rkey = Some(rkey),
            (NicResult::Bound(rkey), GrantWindow::Lifetime) => g.lifetime_rkey = Some(rkey),
            _ => g.failed = true,
        }
    }

    fn settle_extend(
        &mut self,
        key: PermKey,
        pid: PermissionId,
        expected: u64,
        new: u64,
        (client, req_id): (ClientId, u64),
        result: NicResult,
    ) {
        let max = self.cfg.max_lifetime_us;
        let perm = self.perms.get_mut(key).filter(|p| p.id == pid);
        let reply = match (result, perm) {
            (NicResult::CasOld(old), Some(p)) if old == expected => {
                p.lifetime_us = new;
                p.deadline = Timestamp(p.id.start_us).plus_us(new).min(p.hard_deadline);
                let at = p.deadline;
                self.deadlines.insert(at, Timer::Lease(key));
                Reply::Extended { lifetime_us: new }
            }
            (NicResult::CasOld(old), Some(p)) => {
                // The client extended one-sidedly meanwhile; that value stands, and so does
                // the deadline it implies (0: the client gave it up).
                p.lifetime_us = old;
                p.deadline = Timestamp(p.id.start_us).plus_us(old).min(p.hard_deadline);
                let at = p.deadline;
                self.deadlines.insert(at, Timer::Lease(key));
                if old == 0 {
                    Reply::Failed(Status::ExtensionRefused)
                } else {
                    Reply::Extended {
                        lifetime_us: old.min(max),
                    }
                }
            }
            _ => Reply::Failed(Status::ExtensionRefused),
        };
        self.replies.push(Outgoing::new(client, req_id, reply));
    }

    fn settle_refuse(
        &mut self,
        now: Timestamp,
        key: PermKey,
        pid: PermissionId,
        expected: u64,
        result: NicResult,
    ) {
        let Some(p) = self.perms.get_mut(key).filter(|p| p.id == pid) else {
            return;
        };
        match result {
            NicResult::CasOld(old) if old == expected => {
                p.refused = true;
                p.refuse_pending = false;
            }
            NicResult::CasOld(old) => {
                // Extended concurrently: adopt it (capped) and refuse again later.
                p.lifetime_us = old;
                p.deadline = Timestamp(p.id.start_us).plus_us(old).min(p.hard_deadline);
                p.refuse_pending = false;
                let at = p.deadline;
                self.deadlines.insert(at, Timer::Lease(key));
                // Retry in the next batch (its waiter check re-refuses holders).
                self.deadlines.insert(now, Timer::Waiter(p.object));
            }
            _ => p.refuse_pending = false,
        }
    }
}
