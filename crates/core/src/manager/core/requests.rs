//! Requests: allocate, acquire (with conflicts), RPC extend, revoke and free, rebind; the
//! windows each grant needs.

use super::*;

impl ManagerCore {
    /// The quotas a grant is checked against: the tenant's and the client's own.
    fn quotas(&self) -> (&TenantQuota, &TenantQuota) {
        (&self.cfg.quota, &self.cfg.client_quota)
    }

    pub(super) fn handle_request(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        req: Request,
    ) {
        let new_permission = matches!(req, Request::Allocate { .. } | Request::Acquire { .. });
        // A retry of an acquire already waiting joins it: it costs nothing more.
        if new_permission && self.overloaded() && !self.waiting.contains_key(&(client, req_id)) {
            self.counters.overloaded += 1;
            return self.fail(client, req_id, Status::Overloaded);
        }
        match req {
            Request::Allocate {
                size,
                lease_us,
                mode,
            } => self.allocate(now, client, req_id, size, lease_us, mode),
            Request::Acquire { .. } => self.acquire(now, client, req_id, req),
            Request::Extend { id, lease_us } => self.rpc_extend(now, client, req_id, id, lease_us),
            Request::Renew { id, lease_us } => self.renew(now, client, req_id, id, lease_us),
            Request::Share {
                addr,
                tenant,
                access,
            } => {
                let status = match self.buffers.object_with_buffer(addr) {
                    Some(obj) if self.tenants.owns(client, obj.addr) => {
                        self.tenants.share(obj.addr, tenant, access);
                        None
                    }
                    // Not the owner: the same answer as for no object at all.
                    _ => Some(Status::NotFound),
                };
                let reply = status.map_or(Reply::Shared, Reply::Failed);
                self.replies.push(Outgoing::new(client, req_id, reply));
            }
            Request::Publish { name, addr, len } => {
                let tenant = self.tenants.tenant_of(client);
                let reply = match self.names.publish(tenant, name, addr, len) {
                    Ok(()) => Reply::Named,
                    Err(s) => Reply::Failed(s),
                };
                self.replies.push(Outgoing::new(client, req_id, reply));
            }
            Request::Lookup { name } => {
                let reply = match self.names.lookup(self.tenants.tenant_of(client), name) {
                    Some((addr, len)) => Reply::Found { addr, len },
                    None => Reply::Failed(Status::NotFound),
                };
                self.replies.push(Outgoing::new(client, req_id, reply));
            }
            Request::Unpublish { name } => {
                let reply = if self.names.unpublish(self.tenants.tenant_of(client), name) {
                    Reply::Named
                } else {
                    Reply::Failed(Status::NotFound)
                };
                self.replies.push(Outgoing::new(client, req_id, reply));
            }
            // Identity is the driver's business; a Hello reaching the core is answered blandly.
            Request::Hello { .. } | Request::UseQp { .. } => {
                self.fail(client, req_id, Status::InvalidArgument)
            }
            Request::Rebind { id } => self.rebind(client, req_id, id),
            Request::Revoke { id, free } => {
                let Some(key) = self.lookup(client, id) else {
                    return self.fail(client, req_id, Status::NotFound);
                };
                if free {
                    let Some((object, access)) = self.perms.get(key).map(|p| (p.object, p.access))
                    else {
                        return self.fail(client, req_id, Status::NotFound);
                    };
                    if !self.tenants.owns(client, object) {
                        // Shared with this tenant, not owned by it: freeing is the owner's.
                        return self.fail(client, req_id, Status::NotOwner);
                    }
                    if access != Access::ReadWrite {
                        // Freeing ends everyone's permissions: only a writer may do it.
                        return self.fail(client, req_id, Status::InvalidArgument);
                    }
                    self.free_object(object, now);
                } else {
                    self.end_permission(key, false, now);
                }
                self.replies
                    .push(Outgoing::new(client, req_id, Reply::Revoked));
            }
        }
    }

    /// `acquire`: granted now, queued behind conflicting holders (bounded wait), or refused.
    /// A copy of a request that is already waiting (the client's retry) joins it.
    fn acquire(&mut self, now: Timestamp, client: ClientId, req_id: u64, req: Request) {
        let Request::Acquire {
            addr,
            size,
            lease_us,
            access,
            mode,
            wait_us,
        } = req
        else {
            return;
        };
        let retry = self.waiting.get(&(client, req_id)).copied();
        #[cfg(feature = "testing")]
        let retry = retry.filter(|_| !self.mutated(super::Mutation::RetryIsNewRequest));
        if let Some(object) = retry {
            let waiter = self.objects.get_mut(&object).and_then(|o| {
                o.waiters
                    .iter_mut()
                    .find(|w| w.client == client && w.req_id == req_id)
            });
            if let Some(w) = waiter {
                w.copies += 1;
                return;
            }
            self.waiting.remove(&(client, req_id));
        }
        // No object and another tenant's object (not shared with this one) look the same.
        let Some(obj) = self
            .buffers
            .object_with_buffer(addr)
            .filter(|o| self.may_acquire(client, o.addr, access))
        else {
            return self.fail(client, req_id, Status::NotFound);
        };
        if size == 0 || size > obj.buffer().1 || lease_us == 0 {
            return self.fail(client, req_id, Status::InvalidArgument);
        }
        let state = self.objects.entry(obj.addr).or_default();
        if !state.admits(mode) {
            let wait_us = wait_us.min(self.cfg.max_wait_us);
            if wait_us == 0 {
                return self.fail(client, req_id, Status::ConflictTimeout);
            }
            let deadline = now.plus_us(wait_us);
            state.waiters.push_back(Waiter {
                client,
                req_id,
                request: req,
                deadline,
                copies: 1,
            });
            self.waiting.insert((client, req_id), obj.addr);
            self.deadlines.insert(deadline, Timer::Waiter(obj.addr));
            self.refuse_holders(obj.addr);
            return;
        }
        self.grant(
            now,
            Asker::one(client, req_id),
            obj,
            lease_us,
            (access, mode),
            false,
        );
    }

    /// Replaces a permission by a new one over the same object in one step: the new grant
    /// holds the object before the old permission ends, so nobody gets in between (the old
    /// windows are handed over to the new grant). Refused while others wait: renewal must not
    /// keep an object from them past the maximum lifetime.
    fn renew(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        id: PermissionId,
        lease_us: u64,
    ) {
        self.counters.extend_rpcs += 1;
        let Some(key) = self.lookup(client, id) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        let Some((object, access, mode)) =
            self.perms.get(key).map(|p| (p.object, p.access, p.mode))
        else {
            return self.fail(client, req_id, Status::NotFound);
        };
        if lease_us == 0 {
            return self.fail(client, req_id, Status::InvalidArgument);
        }
        if self
            .objects
            .get(&object)
            .is_some_and(|o| !o.waiters.is_empty())
        {
            return self.fail(client, req_id, Status::ExtensionRefused);
        }
        let Some(obj) = self.buffers.object_at(object) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        if self.grant(
            now,
            Asker::one(client, req_id),
            obj,
            lease_us,
            (access, mode),
            true,
        ) {
            self.end_permission(key, false, now);
        }
    }

    /// Whether `client`'s tenant may acquire `object` with `access` (see `tenants.rs`).
    fn may_acquire(&self, client: ClientId, object: u64, access: Access) -> bool {
        #[cfg(feature = "testing")]
        if self.mutated(super::Mutation::SkipTenantCheck) {
            return true;
        }
        self.tenants.may_acquire(client, object, access)
    }

    pub(super) fn lookup(&self, client: ClientId, id: PermissionId) -> Option<PermKey> {
        let key = *self.perms.by_header.get(&id.header_addr)?;
        let p = self.perms.get(key)?;
        // The ABA filter: a reused header has a later start time.
        (p.id == id && p.client == client && p.phase == Phase::Active).then_some(key)
    }

    pub(super) fn fail(&mut self, client: ClientId, req_id: u64, status: Status) {
        self.refuse(Asker::one(client, req_id), status);
    }

    /// Refuses every copy of a request.
    pub(super) fn refuse(&mut self, asker: Asker, status: Status) {
        self.counters.refused += 1;
        self.replies.push(Outgoing {
            copies: asker.copies,
            ..Outgoing::new(asker.client, asker.req_id, Reply::Failed(status))
        });
    }

    pub(super) fn allocate(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        size: u64,
        lease_us: u64,
        mode: Mode,
    ) {
        if size == 0 || lease_us == 0 {
            return self.fail(client, req_id, Status::InvalidArgument);
        }
        if !self
            .buffers
            .class_for(size)
            .is_some_and(crate::proto::header::encodable_len)
        {
            // Larger than the largest class (or, with a custom slab configuration, a length
            // the header cannot describe): refused, never granted without a lifetime word.
            return self.fail(client, req_id, Status::TooLarge);
        }
        let bytes = self.buffers.footprint_for(size).unwrap_or(u64::MAX);
        if !self
            .tenants
            .within(client, self.quotas(), bytes, Some(mode))
        {
            return self.fail(client, req_id, Status::QuotaExceeded);
        }
        let Some((obj, dirty)) = self.buffers.alloc(size) else {
            return self.fail(client, req_id, Status::NoMemory);
        };
        // Reused memory: windows of earlier owners still bound over it die in this chain.
        let state = self.objects.entry(obj.addr).or_default();
        for mw in state.stale_mws.drain(..) {
            self.stale_owner.remove(&mw);
            self.mws.remove_stale(mw);
            self.releasing.push((mw, client));
        }
        let asker = Asker::one(client, req_id);
        let granted = self.grant(now, asker, obj, lease_us, (Access::ReadWrite, mode), false);
        let scrub = (dirty && self.cfg.scrub != Scrub::Off).then(|| obj.buffer());
        #[cfg(feature = "testing")]
        let scrub = scrub.filter(|_| !self.mutated(super::Mutation::SkipScrub));
        match self.grants.last_mut() {
            Some(g) if granted => {
                g.allocated = true;
                g.scrub = scrub;
                self.tenants.own(obj.addr, client, obj.footprint());
            }
            _ => {
                // Not granted (pools exhausted): the memory goes back instead of leaking.
                self.buffers.free(obj.addr);
                self.remove_idle_object(obj.addr);
            }
        }
    }

    /// Grants `obj` to `asker` (windows are bound in this batch's chain); false if the pools
    /// cannot serve it, in which case every copy of the request is refused.
    pub(super) fn grant(
        &mut self,
        now: Timestamp,
        asker: Asker,
        obj: Object,
        lease_us: u64,
        (access, mode): (Access, Mode),
        replacing: bool,
    ) -> bool {
        let client = asker.client;
        // A renewal replaces a permission the tenant holds: it needs no room of its own.
        if !replacing && !self.tenants.within(client, self.quotas(), 0, Some(mode)) {
            self.refuse(asker, Status::QuotaExceeded);
            return false;
        }
        let contiguous = self.cfg.techniques.contiguity
            && access == Access::ReadWrite
            && !self.objects.get(&obj.addr).is_some_and(|o| o.embedded_busy);
        let header_addr = if contiguous {
            obj.addr
        } else {
            match self.headers.take() {
                Some(h) => {
                    if let Some(mw) = self.stale_headers.remove(&h) {
                        self.stale_owner.remove(&mw);
                        self.mws.remove_stale(mw);
                        self.releasing.push((mw, client));
                    }
                    h
                }
                None => {
                    self.refuse(asker, Status::PoolExhausted);
                    return false;
                }
            }
        };
        let windows_needed = if contiguous { 1 } else { 2 };
        let domain = self.mws.domain_of_client(client);
        let (free, stale, _) = self.mws.counts_in(domain);
        // Windows released in this batch serve grants too: rebound by handover, or (without
        // it) unbound and then bound. Counting them keeps the check a true reservation when a
        // stale window moves to `releasing` (its header or memory is reused) after the check.
        let handover_supply = self
            .releasing
            .iter()
            .filter(|(mw, _)| self.mws.domain_of(*mw) == domain)
            .count();
        let queued = self
            .needs
            .iter()
            .filter(|n| self.mws.domain_of_client(n.3) == domain)
            .count();
        if free + stale + handover_supply < queued + windows_needed {
            if !contiguous {
                self.headers.give(header_addr);
            }
            self.refuse(asker, Status::PoolExhausted);
            return false;
        }
        let last = self.last_start.get(&header_addr).copied().unwrap_or(0);
        let start = now.0.max(last + 1);
        self.last_start.insert(header_addr, start);
        let lifetime = self.floored_lease(lease_us);
        let (buf_addr, buf_len) = obj.buffer();
        let p = Permission {
            id: PermissionId {
                header_addr,
                start_us: start,
            },
            client,
            object: obj.addr,
            buffer: (buf_addr, buf_len),
            access,
            mode,
            header: if contiguous {
                HeaderSlot::Embedded
            } else {
                HeaderSlot::Pooled
            },
            buffer_mw: None,
            header_mw: None,
            lifetime_us: lifetime,
            deadline: Timestamp(start).plus_us(lifetime),
            hard_deadline: Timestamp(start).plus_us(self.cfg.max_lifetime_us),
            refused: false,
            refuse_pending: false,
            phase: Phase::Granting,
        };
        let key = self.perms.insert(p);
        self.tenants.count_permission(client, mode, true);
        let state = self.objects.entry(obj.addr).or_default();
        reuse_allocation(&mut state.perms, &mut self.spare_lists);
        state.perms.push(key);
        state.hold(mode);
        if contiguous {
            state.embedded_busy = true;
        }
        self.push_window_needs(key, client);
        self.grants.push(PendingGrant {
            copies: asker.copies,
            ..PendingGrant::new(key, client, asker.req_id)
        });
        true
    }

    /// The windows a permission needs: one over lifetime field + buffer when contiguous, else
    /// one over the buffer (rights by access) and one over the lifetime field.
    pub(super) fn push_window_needs(&mut self, key: PermKey, client: ClientId) {
        let Some(p) = self.perms.get(key) else { return };
        let lifetime_field = p.id.header_addr + LIFETIME_OFFSET as u64;
        let (buf_addr, buf_len) = p.buffer;
        if p.header == HeaderSlot::Embedded {
            let end = buf_addr + buf_len;
            self.needs.push((
                key,
                true,
                BindTarget {
                    addr: lifetime_field,
                    len: end - lifetime_field,
                    access: BUFFER_RW,
                },
                client,
            ));
            return;
        }
        let buffer_rights = match p.access {
            Access::Read => AccessFlags::REMOTE_READ,
            Access::ReadWrite => BUFFER_RW,
        };
        self.needs.push((
            key,
            true,
            BindTarget {
                addr: buf_addr,
                len: buf_len,
                access: buffer_rights,
            },
            client,
        ));
        self.needs.push((
            key,
            false,
            BindTarget {
                addr: lifetime_field,
                len: 8,
                access: LIFETIME_RIGHTS,
            },
            client,
        ));
    }

    /// Binds a permission's windows anew (type-2 isolation after the client switched QPs):
    /// the old windows are unbound in this chain, new ones bound to the client's current QP,
    /// and the reply is a grant with the same id and lifetime and the new rkeys.
    pub(super) fn rebind(&mut self, client: ClientId, req_id: u64, id: PermissionId) {
        let Some(key) = self.lookup(client, id) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        let domain = self.mws.domain_of_client(client);
        let (free, stale, _) = self.mws.counts_in(domain);
        let queued = self
            .needs
            .iter()
            .filter(|n| self.mws.domain_of_client(n.3) == domain)
            .count();
        let Some(p) = self.perms.get_mut(key) else {
            return;
        };
        let wanted = if p.header == HeaderSlot::Embedded {
            1
        } else {
            2
        };
        let old: Vec<MwId> = p
            .buffer_mw
            .take()
            .into_iter()
            .chain(p.header_mw.take())
            .collect();
        if free + stale + old.len() < queued + wanted {
            p.buffer_mw = old.first().copied();
            p.header_mw = old.get(1).copied();
            return self.fail(client, req_id, Status::PoolExhausted);
        }
        for mw in old {
            self.releasing.push((mw, client));
        }
        self.push_window_needs(key, client);
        self.counters.rebinds_for_qp_switch += 1;
        self.grants.push(PendingGrant {
            rebind: true,
            ..PendingGrant::new(key, client, req_id)
        });
    }

    pub(super) fn rpc_extend(
        &mut self,
        now: Timestamp,
        client: ClientId,
        req_id: u64,
        id: PermissionId,
        lease_us: u64,
    ) {
        let Some(key) = self.lookup(client, id) else {
            return self.fail(client, req_id, Status::NotFound);
        };
        let Some(p) = self.perms.get(key) else { return };
        let max = self.cfg.max_lifetime_us;
        // A lease already over (its expiry is pending: the check of this batch found a
        // one-sided extension that is itself past) is not revived.
        if p.refused || p.refuse_pending || p.lifetime_us >= max || p.deadline <= now {
            return self.fail(client, req_id, Status::ExtensionRefused);
        }
        let new = p.lifetime_us.saturating_add(lease_us).min(max);
        let (pid, expected) = (p.id, p.lifetime_us);
        self.push_lifetime_cas(
            pid,
            expected,
            new,
            Cont::Extend {
                perm: key,
                id: pid,
                expected,
                lifetime_us: new,
                asker: (client, req_id),
            },
        );
    }
}
