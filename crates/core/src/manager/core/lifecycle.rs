//! Ending permissions, waking waiters, refusing extensions, pairing windows with binds (MW
//! handover), and finishing a batch once its chain completed.

use super::*;

impl ManagerCore {
    /// Ends a permission: its windows stop covering live memory in this batch (or, for freed
    /// memory under delayed unbinding, are left stale), its header returns, waiters may enter.
    pub(super) fn end_permission(&mut self, key: PermKey, freeing: bool, now: Timestamp) {
        let Some(p) = self.perms.remove(key) else {
            return;
        };
        self.counters.ended += 1;
        let delay_buffer = freeing
            && self.cfg.techniques.delayed_unbind
            && self.buffers.free_bytes() >= self.cfg.buffer_watermark;
        let delay_header = self.cfg.techniques.delayed_unbind;
        if let Some(obj) = self.objects.get_mut(&p.object) {
            obj.perms.retain(|&k| k != key);
            obj.release();
            if p.header == HeaderSlot::Embedded {
                obj.embedded_busy = false;
            }
        }
        // The buffer window (which, when contiguous, also covers the header's lifetime field).
        if let Some(mw) = p.buffer_mw {
            if delay_buffer {
                self.make_stale(mw, StaleOwner::Object(p.object));
            } else {
                self.releasing.push((mw, p.client));
            }
        }
        if let Some(mw) = p.header_mw {
            if delay_header {
                self.make_stale(mw, StaleOwner::Header(p.id.header_addr));
            } else {
                self.releasing.push((mw, p.client));
            }
        }
        if p.header == HeaderSlot::Pooled {
            self.headers.give(p.id.header_addr);
        }
        self.wake_waiters(p.object, now);
    }

    fn make_stale(&mut self, mw: MwId, owner: StaleOwner) {
        match owner {
            StaleOwner::Object(addr) => self.objects.entry(addr).or_default().stale_mws.push(mw),
            StaleOwner::Header(addr) => {
                self.stale_headers.insert(addr, mw);
            }
        }
        self.stale_owner.insert(mw, owner);
        self.mws.push_stale(mw);
    }

    /// Frees an object: every permission on it ends, then the memory returns to its slab.
    pub(super) fn free_object(&mut self, object: u64, now: Timestamp) {
        // Waiters for freed memory cannot be served. Answer them first: ending the
        // permissions below wakes waiters, which must not be granted memory being freed.
        if let Some(obj) = self.objects.get_mut(&object) {
            for w in std::mem::take(&mut obj.waiters) {
                self.replies.push(Outgoing {
                    client: w.client,
                    req_id: w.req_id,
                    reply: Reply::Failed(Status::NotFound),
                });
            }
        }
        let keys = self
            .objects
            .get(&object)
            .map(|o| o.perms.clone())
            .unwrap_or_default();
        for key in keys {
            // A grant of this very batch (windows not yet assigned): cancel it, or its binds
            // would still be posted over the freed memory and its reply would never leave.
            let granting = self
                .perms
                .get(key)
                .is_some_and(|p| p.phase == Phase::Granting);
            if granting {
                self.needs.retain(|n| n.0 != key);
                if let Some(i) = self.grants.iter().position(|g| g.key == key) {
                    let g = self.grants.remove(i);
                    self.fail(g.client, g.req_id, Status::NotFound);
                }
            }
            self.end_permission(key, true, now);
            if granting {
                self.counters.ended -= 1; // never granted
            }
        }
        self.buffers.free(object);
        if self.objects.get(&object).is_some_and(ObjectState::is_idle) {
            self.objects.remove(&object);
        }
    }

    /// Grants queued requests that have become compatible, in FIFO order.
    pub(super) fn wake_waiters(&mut self, object: u64, now: Timestamp) {
        loop {
            let Some(obj) = self.objects.get_mut(&object) else {
                return;
            };
            let Some(front) = obj.waiters.front() else {
                break;
            };
            let Request::Acquire {
                lease_us,
                access,
                mode,
                ..
            } = front.request
            else {
                obj.waiters.pop_front();
                continue;
            };
            if !obj.compatible(mode) {
                // Still blocked: make sure the holders cannot extend past their deadlines.
                self.refuse_holders(object);
                return;
            }
            let Some(w) = obj.waiters.pop_front() else {
                break;
            };
            let Some(o) = self.buffers.object_at(object) else {
                self.fail(w.client, w.req_id, Status::NotFound);
                continue;
            };
            self.grant(now, w.client, w.req_id, o, lease_us, access, mode);
        }
        if self.objects.get(&object).is_some_and(ObjectState::is_idle) {
            self.objects.remove(&object);
        }
    }

    /// Zeroes the lifetime field of every holder of `object`, so nobody extends past its
    /// current deadline while others wait.
    pub(super) fn refuse_holders(&mut self, object: u64) {
        let keys = self
            .objects
            .get(&object)
            .map(|o| o.perms.clone())
            .unwrap_or_default();
        for key in keys {
            let Some(p) = self.perms.get_mut(key) else {
                continue;
            };
            if p.phase != Phase::Active || p.refused || p.refuse_pending {
                continue;
            }
            p.refuse_pending = true;
            let (id, expected) = (p.id, p.lifetime_us);
            self.push_lifetime_cas(id, expected, 0, Cont::Refuse(key, id, expected));
        }
    }

    /// Queues a CAS of a permission's lifetime word through the NIC.
    pub(super) fn push_lifetime_cas(
        &mut self,
        id: PermissionId,
        compare: u64,
        swap: u64,
        cont: Cont,
    ) {
        self.counters.lifetime_cas += 1;
        self.ops.push((
            NicOp::LifetimeCas {
                addr: id.header_addr + LIFETIME_OFFSET as u64,
                compare,
                swap,
            },
            cont,
        ));
    }

    /// Queues an unbind of `mw` that the next op (a bind of the same window) depends on.
    fn push_unbind_before_rebind(&mut self, mw: MwId, client: ClientId) {
        self.counters.unbinds += 1;
        self.ops.push((
            NicOp::Bind {
                mw,
                client,
                target: None,
            },
            Cont::Unbind(u32::MAX),
        ));
    }

    /// Pairs the windows the grants need with windows: with handover, first those that must
    /// stop covering their memory in this batch (one rebind both revokes and grants), then
    /// delayed-unbound ones (rebinding them is their overdue unbind); then unbound ones.
    /// Windows still releasing afterwards are unbound.
    pub(super) fn assign_windows(&mut self) {
        let handover = self.cfg.techniques.handover;
        for (key, is_buffer, target, client) in std::mem::take(&mut self.needs) {
            let domain = self.mws.domain_of_client(client);
            let releasing_here = self
                .releasing
                .iter()
                .rposition(|(mw, _)| self.mws.domain_of(*mw) == domain);
            let (mw, rebind) = if handover {
                if let Some(i) = releasing_here {
                    (Some(self.releasing.swap_remove(i).0), true)
                } else if let Some(mw) = self.take_stale_window(domain) {
                    (Some(mw), true)
                } else {
                    (self.mws.take_free(domain), false)
                }
            } else if let Some(mw) = self.mws.take_free(domain) {
                (Some(mw), false)
            } else if let Some(mw) = self.take_stale_window(domain) {
                // No free window and no handover: unbind a stale one first (two operations).
                self.counters.deferred_unbinds += 1;
                self.push_unbind_before_rebind(mw, client);
                (Some(mw), false)
            } else if let Some(i) = releasing_here {
                // Likewise a window released in this batch: unbind it, then bind it.
                let mw = self.releasing.swap_remove(i).0;
                self.push_unbind_before_rebind(mw, client);
                (Some(mw), false)
            } else {
                (None, false)
            };
            let Some(mw) = mw else {
                // Capacity was checked at grant time; reaching here means a bug upstream.
                if let Some(g) = self.grants.iter_mut().find(|g| g.key == key) {
                    g.failed = true;
                }
                continue;
            };
            self.counters.binds += 1;
            if rebind {
                self.counters.handovers += 1;
            }
            if let Some(p) = self.perms.get_mut(key) {
                if is_buffer {
                    p.buffer_mw = Some(mw);
                } else {
                    p.header_mw = Some(mw);
                }
            }
            self.ops.push((
                NicOp::Bind {
                    mw,
                    client,
                    target: Some(target),
                },
                Cont::GrantBind(key, is_buffer),
            ));
        }
        for (mw, client) in std::mem::take(&mut self.releasing) {
            self.counters.unbinds += 1;
            self.ops.push((
                NicOp::Bind {
                    mw,
                    client,
                    target: None,
                },
                Cont::Unbind(mw),
            ));
        }
    }

    fn take_stale_window(&mut self, domain: u32) -> Option<MwId> {
        let mw = self.mws.take_stale(domain)?;
        match self.stale_owner.remove(&mw) {
            Some(StaleOwner::Object(addr)) => {
                if let Some(o) = self.objects.get_mut(&addr) {
                    o.stale_mws.retain(|&m| m != mw);
                    if o.is_idle() {
                        self.objects.remove(&addr);
                    }
                }
            }
            Some(StaleOwner::Header(addr)) => {
                self.stale_headers.remove(&addr);
            }
            None => {}
        }
        Some(mw)
    }

    // ------------------------------------------------------------------ phase 3

    /// Completes the batch with the results of the chain [`plan`](Self::plan) returned.
    pub fn finish(&mut self, now: Timestamp, results: &[NicResult]) -> Finished {
        let ops = std::mem::take(&mut self.ops);
        let mut retry_release = Vec::new();
        for (i, (_, cont)) in ops.iter().enumerate() {
            let result = results.get(i).copied().unwrap_or(NicResult::Failed);
            match *cont {
                Cont::GrantBind(key, is_buffer) => {
                    let Some(g) = self.grants.iter_mut().find(|g| g.key == key) else {
                        continue;
                    };
                    match result {
                        NicResult::Bound(rkey) if is_buffer => g.buffer_rkey = Some(rkey),
                        NicResult::Bound(rkey) => g.lifetime_rkey = Some(rkey),
                        _ => g.failed = true,
                    }
                }
                Cont::Unbind(mw) => {
                    if mw == u32::MAX {
                        continue; // the stale window is rebound by the next op
                    }
                    match result {
                        NicResult::Failed => retry_release.push(mw),
                        _ => self.mws.give_free(mw),
                    }
                }
                Cont::Extend(key, pid, expected, new, client, req_id) => {
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
                            // The client extended one-sidedly meanwhile; that value stands,
                            // and so does the deadline it implies (0: the client gave it up).
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
                    self.replies.push(Outgoing {
                        client,
                        req_id,
                        reply,
                    });
                }
                Cont::Refuse(key, pid, expected) => {
                    let Some(p) = self.perms.get_mut(key).filter(|p| p.id == pid) else {
                        continue;
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
                Cont::Expiry(..) => {}
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
        for mw in retry_release {
            self.releasing.push((mw, 0));
        }
        let mut header_writes = Vec::new();
        // A window whose bind or unbind failed may still be bound where it was (a handover
        // source, a stale window over reused memory), so no grant of this chain may go out: an
        // earlier owner's rkey could reach the new owner's buffer. (On a verbs QP a failure
        // flushes the rest of the chain anyway.) The grants fail; their clients may retry.
        let chain_failed = ops.iter().enumerate().any(|(i, (op, _))| {
            matches!(op, NicOp::Bind { .. })
                && results.get(i).is_none_or(|r| *r == NicResult::Failed)
        });
        for g in std::mem::take(&mut self.grants) {
            let Some(p) = self.perms.get(g.key) else {
                continue;
            };
            let contiguous = p.header == HeaderSlot::Embedded;
            let lifetime_rkey = if contiguous {
                g.buffer_rkey
            } else {
                g.lifetime_rkey
            };
            let (Some(buffer_rkey), Some(lifetime_rkey), false) =
                (g.buffer_rkey, lifetime_rkey, g.failed || chain_failed)
            else {
                let object = p.object;
                self.end_permission(g.key, false, now);
                if g.rebind {
                    // A granted permission that lost its windows: it ended.
                    self.replies.push(Outgoing {
                        client: g.client,
                        req_id: g.req_id,
                        reply: Reply::Failed(Status::BindFailed),
                    });
                    continue;
                }
                self.counters.ended -= 1; // never granted
                if g.allocated {
                    // Nobody learned the address of the new memory: it goes back.
                    self.buffers.free(object);
                    if self.objects.get(&object).is_some_and(ObjectState::is_idle) {
                        self.objects.remove(&object);
                    }
                }
                self.replies.push(Outgoing {
                    client: g.client,
                    req_id: g.req_id,
                    reply: Reply::Failed(Status::BindFailed),
                });
                continue;
            };
            let header = Header {
                buffer_addr: p.buffer.0,
                buffer_len: p.buffer.1,
                buffer_mw: p.buffer_mw.unwrap_or(u32::MAX),
                header_mw: p.header_mw.unwrap_or(u32::MAX),
                start_us: p.id.start_us,
                lifetime_us: p.lifetime_us,
            };
            // A rebind leaves the header alone: its lifetime word may hold the client's
            // one-sided extensions, which the manager has not seen yet.
            if !g.rebind
                && let Ok(words) = header.encode(self.cfg.len_scale)
            {
                header_writes.push((p.id.header_addr, words));
            }
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
            if g.rebind {
                self.replies.push(Outgoing {
                    client: g.client,
                    req_id: g.req_id,
                    reply: Reply::Granted(grant),
                });
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
            self.replies.push(Outgoing {
                client: g.client,
                req_id: g.req_id,
                reply: Reply::Granted(grant),
            });
        }
        Finished {
            header_writes,
            replies: std::mem::take(&mut self.replies),
        }
    }
}
