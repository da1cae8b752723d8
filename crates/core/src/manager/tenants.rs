//! Tenants: who owns which object, and with whom an owner shared it.
//!
//! A client authenticates as a tenant when it connects (the memory node checks the tenant's
//! secret); an object belongs to the tenant whose client allocated it, until it is freed (a
//! disconnect frees nothing). Clients of the same tenant share its objects freely; another
//! tenant may acquire an object only if its owner shared it (up to the shared access), and may
//! never free it. The manager answers "no such object" and "not yours" alike, so a tenant
//! cannot map another's memory by probing.
//!
//! Each tenant's usage (bytes of objects it owns, live permissions, exclusive ones) is kept
//! here and checked against its [`TenantQuota`] before anything new is granted, so one tenant
//! cannot take the pool, the headers or the windows from the others. Each client's usage (bytes
//! of live objects it allocated, its live permissions) is kept too and checked against a
//! per-client quota, so that within one tenant — above all the default tenant of a node
//! without tenants, whose objects outlive their clients — one client cannot take everything.
//! A client's usage is forgotten when it leaves; its objects stay its tenant's.

use super::fast_hash::FastMap;
use super::state::ClientId;
use crate::proto::messages::{Access, Mode};

/// What one tenant may hold (on one manager shard: a node's quota is split over its shards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantQuota {
    /// Bytes of objects it owns (slab-class sizes, header slots included).
    pub memory_bytes: u64,
    /// Live permissions of its clients.
    pub permissions: u32,
    /// Of those, exclusive ones.
    pub exclusive: u32,
}

impl TenantQuota {
    /// No limit.
    pub const UNLIMITED: TenantQuota = TenantQuota {
        memory_bytes: u64::MAX,
        permissions: u32::MAX,
        exclusive: u32::MAX,
    };

    /// This quota's share on one of `shards` shards (rounded up; unlimited stays so).
    pub fn per_shard(&self, shards: usize) -> TenantQuota {
        let n = shards.max(1) as u64;
        let share = |q: u64, max: u64| if q == max { q } else { q.div_ceil(n) };
        TenantQuota {
            memory_bytes: share(self.memory_bytes, u64::MAX),
            permissions: share(self.permissions as u64, u32::MAX as u64) as u32,
            exclusive: share(self.exclusive as u64, u32::MAX as u64) as u32,
        }
    }
}

impl Default for TenantQuota {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// What one tenant holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of objects it owns.
    pub memory_bytes: u64,
    /// Live permissions.
    pub permissions: u32,
    /// Live exclusive permissions.
    pub exclusive: u32,
}

// Tenant ids travel in `Hello`, so the protocol defines them.
pub use crate::proto::messages::{DEFAULT_TENANT, TenantId};

/// Ownership and sharing of objects.
#[derive(Debug, Default)]
pub struct Tenants {
    clients: FastMap<ClientId, TenantId>,
    /// Each object's owner, the bytes it counts for and the client that allocated it.
    owners: FastMap<u64, (TenantId, u64, ClientId)>,
    shares: FastMap<u64, Vec<(TenantId, Access)>>,
    usage: FastMap<TenantId, Usage>,
    /// What each connected client holds (bytes of live objects it allocated, permissions).
    by_client: FastMap<ClientId, Usage>,
}

impl Tenants {
    /// Records a client's tenant.
    pub fn set_client(&mut self, client: ClientId, tenant: TenantId) {
        self.clients.insert(client, tenant);
    }

    /// `client` left (its objects stay its tenant's, and count against no client).
    pub fn forget_client(&mut self, client: ClientId) {
        self.clients.remove(&client);
        self.by_client.remove(&client);
    }

    /// The tenant `client` acts for.
    pub fn tenant_of(&self, client: ClientId) -> TenantId {
        self.clients.get(&client).copied().unwrap_or(DEFAULT_TENANT)
    }

    /// `client`'s tenant now owns `object`, which counts `bytes` against its quota.
    pub fn own(&mut self, object: u64, client: ClientId, bytes: u64) {
        let t = self.tenant_of(client);
        if let Some(old) = self.owners.insert(object, (t, bytes, client)) {
            self.release_bytes(old);
        }
        self.usage_mut(t).memory_bytes += bytes;
        if self.clients.contains_key(&client) {
            self.by_client.entry(client).or_default().memory_bytes += bytes;
        }
    }

    /// `object` was freed: it belongs to nobody and is shared with nobody.
    pub fn disown(&mut self, object: u64) {
        if let Some(old) = self.owners.remove(&object) {
            self.release_bytes(old);
        }
        self.shares.remove(&object);
    }

    /// An object's bytes no longer count for its tenant, nor for its client (if still here).
    fn release_bytes(&mut self, (tenant, bytes, client): (TenantId, u64, ClientId)) {
        self.usage_mut(tenant).memory_bytes -= bytes;
        if let Some(u) = self.by_client.get_mut(&client) {
            u.memory_bytes = u.memory_bytes.saturating_sub(bytes);
        }
    }

    /// Whether `client`'s tenant owns `object`.
    pub fn owns(&self, client: ClientId, object: u64) -> bool {
        self.owners.get(&object).map(|o| o.0) == Some(self.tenant_of(client))
    }

    /// Counts a permission that began or ended in `u`.
    fn count(u: &mut Usage, mode: Mode, began: bool) {
        let exclusive = u32::from(mode == Mode::Exclusive);
        if began {
            u.permissions += 1;
            u.exclusive += exclusive;
        } else {
            u.permissions = u.permissions.saturating_sub(1);
            u.exclusive = u.exclusive.saturating_sub(exclusive);
        }
    }

    /// A permission of `client` in `mode` began (`true`) or ended.
    pub fn count_permission(&mut self, client: ClientId, mode: Mode, began: bool) {
        let t = self.tenant_of(client);
        Self::count(self.usage_mut(t), mode, began);
        if self.clients.contains_key(&client) {
            Self::count(self.by_client.entry(client).or_default(), mode, began);
        }
    }

    /// Whether `client`'s tenant may hold `bytes` more memory and (when `permission`) one
    /// more permission in `mode`, within `quota`, and `client` itself within `client_quota`.
    pub fn within(
        &self,
        client: ClientId,
        (quota, client_quota): (&TenantQuota, &TenantQuota),
        bytes: u64,
        permission: Option<Mode>,
    ) -> bool {
        let fits = |u: Usage, q: &TenantQuota| {
            let memory = u.memory_bytes.saturating_add(bytes) <= q.memory_bytes;
            let permissions = match permission {
                None => true,
                Some(mode) => {
                    u.permissions < q.permissions
                        && (mode == Mode::Shared || u.exclusive < q.exclusive)
                }
            };
            memory && permissions
        };
        let tenant = self.usage.get(&self.tenant_of(client)).copied();
        let own = self.by_client.get(&client).copied();
        fits(tenant.unwrap_or_default(), quota) && fits(own.unwrap_or_default(), client_quota)
    }

    /// What `client` holds (while it is here).
    #[cfg(test)]
    pub fn client_usage(&self, client: ClientId) -> Usage {
        self.by_client.get(&client).copied().unwrap_or_default()
    }

    /// What `tenant` holds.
    pub fn usage(&self, tenant: TenantId) -> Usage {
        self.usage.get(&tenant).copied().unwrap_or_default()
    }

    fn usage_mut(&mut self, tenant: TenantId) -> &mut Usage {
        self.usage.entry(tenant).or_default()
    }

    /// Whether `client` may acquire `object` with `access`.
    pub fn may_acquire(&self, client: ClientId, object: u64, access: Access) -> bool {
        let t = self.tenant_of(client);
        if self.owners.get(&object).map(|o| o.0) == Some(t) {
            return true;
        }
        self.shares.get(&object).is_some_and(|s| {
            s.iter()
                .any(|&(st, a)| st == t && (a == Access::ReadWrite || access == Access::Read))
        })
    }

    /// Shares `object` with `tenant` up to `access` (`None` withdraws).
    pub fn share(&mut self, object: u64, tenant: TenantId, access: Option<Access>) {
        let list = self.shares.entry(object).or_default();
        list.retain(|&(t, _)| t != tenant);
        if let Some(a) = access {
            list.push((tenant, a));
        }
        if list.is_empty() {
            self.shares.remove(&object);
        }
    }

    /// Bytes of state (by capacity).
    pub fn metadata_bytes(&self) -> u64 {
        (self.clients.capacity() * 9
            + self.owners.capacity() * 21
            + self.shares.capacity() * 33
            + self.usage.capacity() * 21
            + self.by_client.capacity() * 21) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_shares_and_strangers() {
        let mut t = Tenants::default();
        t.set_client(1, 10);
        t.set_client(2, 10);
        t.set_client(3, 20);
        t.own(0x100, 1, 96);
        assert!(t.may_acquire(2, 0x100, Access::ReadWrite), "same tenant");
        assert!(t.owns(2, 0x100));
        assert!(!t.may_acquire(3, 0x100, Access::Read), "stranger");
        t.share(0x100, 20, Some(Access::Read));
        assert!(t.may_acquire(3, 0x100, Access::Read));
        assert!(
            !t.may_acquire(3, 0x100, Access::ReadWrite),
            "only up to the share"
        );
        assert!(!t.owns(3, 0x100), "a share is not ownership");
        t.share(0x100, 20, None);
        assert!(!t.may_acquire(3, 0x100, Access::Read), "withdrawn");
        t.share(0x100, 20, Some(Access::ReadWrite));
        t.disown(0x100);
        assert!(!t.may_acquire(1, 0x100, Access::Read) && !t.may_acquire(3, 0x100, Access::Read));
        assert_eq!(t.tenant_of(99), DEFAULT_TENANT);
    }

    #[test]
    fn a_client_is_held_to_its_own_quota_and_forgotten_when_it_leaves() {
        let mut t = Tenants::default();
        t.set_client(1, DEFAULT_TENANT);
        t.set_client(2, DEFAULT_TENANT);
        let each = TenantQuota {
            memory_bytes: 100,
            permissions: 2,
            exclusive: 1,
        };
        let q = (&TenantQuota::UNLIMITED, &each);
        t.own(0x100, 1, 64);
        t.count_permission(1, Mode::Exclusive, true);
        assert!(
            !t.within(1, q, 64, None),
            "client 1's memory share is spent"
        );
        assert!(t.within(2, q, 64, None), "client 2 has its own");
        assert!(!t.within(1, q, 0, Some(Mode::Exclusive)), "one exclusive");
        assert!(t.within(1, q, 0, Some(Mode::Shared)));
        t.count_permission(1, Mode::Shared, true);
        assert!(!t.within(1, q, 0, Some(Mode::Shared)), "two permissions");
        t.disown(0x100);
        assert_eq!(
            t.client_usage(1).memory_bytes,
            0,
            "a freed object counts no more"
        );
        t.own(0x200, 1, 96);
        t.forget_client(1);
        assert_eq!(
            t.client_usage(1),
            Usage::default(),
            "forgotten when it leaves"
        );
        assert_eq!(
            t.usage(DEFAULT_TENANT).memory_bytes,
            96,
            "its object stays the tenant's"
        );
        t.disown(0x200);
        assert_eq!(t.usage(DEFAULT_TENANT).memory_bytes, 0);
    }
}
