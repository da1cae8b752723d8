//! Ending permissions, waking waiters, refusing extensions, and pairing windows with binds
//! (MW handover).

use super::*;

impl ManagerCore {
    /// Ends a permission: its windows stop covering live memory in this batch (or, for freed
    /// memory under delayed unbinding, are left stale), its header returns, waiters may enter.
    pub(super) fn end_permission(&mut self, key: PermKey, freeing: bool, now: Timestamp) {
        let Some(p) = self.perms.remove(key) else {
            return;
        };
        self.tenants.count_permission(p.client, p.mode, false);
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
            StaleOwner::Object(addr) => {
                let obj = self.objects.entry(addr).or_default();
                if obj.stale_mws.is_empty() {
                    self.stale_objects.push_back(addr);
                }
                reuse_allocation(&mut obj.stale_mws, &mut self.spare_lists);
                obj.stale_mws.push(mw);
            }
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
                self.waiting.remove(&(w.client, w.req_id));
                self.refuse(Asker::of(&w), Status::NotFound);
            }
        }
        // Taken out while they end (each end takes its key out of the list): no copy.
        let keys = self
            .objects
            .get_mut(&object)
            .map(|o| std::mem::take(&mut o.perms))
            .unwrap_or_default();
        for &key in &keys {
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
        self.recycle_list(keys);
        self.buffers.free(object);
        self.tenants.disown(object);
        self.remove_idle_object(object);
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
            self.waiting.remove(&(w.client, w.req_id));
            if self.departing.contains(&w.client) {
                // Gone: dropped unanswered (a grant would bind windows for nobody, over a
                // header its departure gives back).
                continue;
            }
            let asker = Asker::of(&w);
            let Some(o) = self.buffers.object_at(object) else {
                self.refuse(asker, Status::NotFound);
                continue;
            };
            self.grant(now, asker, o, lease_us, (access, mode), false);
        }
        self.remove_idle_object(object);
    }

    /// Zeroes the lifetime field of every holder of `object`, so nobody extends past its
    /// current deadline while others wait.
    pub(super) fn refuse_holders(&mut self, object: u64) {
        // Taken out and put back: queueing CASes leaves the holders as they are.
        let Some(keys) = self
            .objects
            .get_mut(&object)
            .map(|o| std::mem::take(&mut o.perms))
        else {
            return;
        };
        for &key in &keys {
            let Some(p) = self.perms.get_mut(key) else {
                continue;
            };
            if p.phase != Phase::Active || p.refused || p.refuse_pending {
                continue;
            }
            p.refuse_pending = true;
            let (id, expected) = (p.id, p.lifetime_us);
            self.push_lifetime_cas(
                id,
                expected,
                0,
                Cont::Refuse {
                    perm: key,
                    id,
                    expected,
                },
            );
        }
        if let Some(o) = self.objects.get_mut(&object) {
            o.perms = keys;
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
                key: None,
            },
            Cont::UnbindBeforeRebind,
        ));
    }

    /// Pairs the windows the grants need with windows: with handover, first those that must
    /// stop covering their memory in this batch (one rebind both revokes and grants), then
    /// delayed-unbound ones (rebinding them is their overdue unbind); then unbound ones.
    /// Windows still releasing afterwards are unbound.
    pub(super) fn assign_windows(&mut self) {
        let handover = self.cfg.techniques.handover;
        // Kept from batch to batch (put back below): no allocation per batch.
        let mut needs = std::mem::take(&mut self.needs);
        for (key, is_buffer, target, client) in needs.drain(..) {
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
            let key_byte = self.keys.as_mut().map(|k| k.next(mw));
            self.ops.push((
                NicOp::Bind {
                    mw,
                    client,
                    target: Some(target),
                    key: key_byte,
                },
                Cont::GrantBind {
                    perm: key,
                    window: if is_buffer {
                        GrantWindow::Buffer
                    } else {
                        GrantWindow::Lifetime
                    },
                },
            ));
        }
        if self.needs.is_empty() {
            self.needs = needs;
        }
        for &(mw, client) in &self.releasing {
            self.counters.unbinds += 1;
            self.ops.push((
                NicOp::Bind {
                    mw,
                    client,
                    target: None,
                    key: None,
                },
                Cont::Release { mw },
            ));
        }
        self.releasing.clear();
    }

    pub(super) fn take_stale_window(&mut self, domain: u32) -> Option<MwId> {
        let mw = self.mws.take_stale(domain)?;
        match self.stale_owner.remove(&mw) {
            Some(StaleOwner::Object(addr)) => {
                if let Some(o) = self.objects.get_mut(&addr) {
                    o.stale_mws.retain(|&m| m != mw);
                    self.remove_idle_object(addr);
                }
            }
            Some(StaleOwner::Header(addr)) => {
                self.stale_headers.remove(&addr);
            }
            None => {}
        }
        Some(mw)
    }
}
