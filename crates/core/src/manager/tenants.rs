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
//! cannot take the pool, the headers or the windows from the others.

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
    /// Each object's owner and the bytes it counts for.
    owners: FastMap<u64, (TenantId, u64)>,
    shares: FastMap<u64, Vec<(TenantId, Access)>>,
    usage: FastMap<TenantId, Usage>,
}

impl Tenants {
    /// Records a client's tenant.
    pub fn set_client(&mut self, client: ClientId, tenant: TenantId) {
        self.clients.insert(client, tenant);
    }

    /// `client` left (its objects stay its tenant's).
    pub fn forget_client(&mut self, client: ClientId) {
        self.clients.remove(&client);
    }

    /// The tenant `client` acts for.
    pub fn tenant_of(&self, client: ClientId) -> TenantId {
        self.clients.get(&client).copied().unwrap_or(DEFAULT_TENANT)
    }

    /// `client`'s tenant now owns `object`, which counts `bytes` against its quota.
    pub fn own(&mut self, object: u64, client: ClientId, bytes: u64) {
        let t = self.tenant_of(client);
        if let Some((old, old_bytes)) = self.owners.insert(object, (t, bytes)) {
            self.usage_mut(old).memory_bytes -= old_bytes;
        }
        self.usage_mut(t).memory_bytes += bytes;
    }

    /// `object` was freed: it belongs to nobody and is shared with nobody.
    pub fn disown(&mut self, object: u64) {
        if let Some((t, bytes)) = self.owners.remove(&object) {
            self.usage_mut(t).memory_bytes -= bytes;
        }
        self.shares.remove(&object);
    }

    /// Whether `client`'s tenant owns `object`.
    pub fn owns(&self, client: ClientId, object: u64) -> bool {
        self.owners.get(&object).map(|o| o.0) == Some(self.tenant_of(client))
    }

    /// A permission of `client` in `mode` began (`true`) or ended.
    pub fn count_permission(&mut self, client: ClientId, mode: Mode, began: bool) {
        let u = self.usage_mut(self.tenant_of(client));
        let exclusive = u32::from(mode == Mode::Exclusive);
        if began {
            u.permissions += 1;
            u.exclusive += exclusive;
        } else {
            u.permissions = u.permissions.saturating_sub(1);
            u.exclusive = u.exclusive.saturating_sub(exclusive);
        }
    }

    /// Whether `client`'s tenant may hold `bytes` more memory and (when `permission`) one
    /// more permission in `mode`, within `quota`.
    pub fn within(
        &self,
        client: ClientId,
        quota: &TenantQuota,
        bytes: u64,
        permission: Option<Mode>,
    ) -> bool {
        let u = self
            .usage
            .get(&self.tenant_of(client))
            .copied()
            .unwrap_or_default();
        let memory = u.memory_bytes.saturating_add(bytes) <= quota.memory_bytes;
        let permissions = match permission {
            None => true,
            Some(mode) => {
                u.permissions < quota.permissions
                    && (mode == Mode::Shared || u.exclusive < quota.exclusive)
            }
        };
        memory && permissions
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
            + self.usage.capacity() * 21) as u64
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
}
