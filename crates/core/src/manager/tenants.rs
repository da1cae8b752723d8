//! Tenants: who owns which object, and with whom an owner shared it.
//!
//! A client authenticates as a tenant when it connects (the memory node checks the tenant's
//! secret); an object belongs to the tenant whose client allocated it, until it is freed (a
//! disconnect frees nothing). Clients of the same tenant share its objects freely; another
//! tenant may acquire an object only if its owner shared it (up to the shared access), and may
//! never free it. The manager answers "no such object" and "not yours" alike, so a tenant
//! cannot map another's memory by probing.

use super::state::ClientId;
use crate::proto::messages::Access;
use std::collections::HashMap;

/// Identifies a tenant (configured on the memory node with its secret).
pub type TenantId = u32;

/// The tenant of clients that never authenticated as another (a node with no tenants
/// configured serves every client as this one tenant).
pub const DEFAULT_TENANT: TenantId = 0;

/// Ownership and sharing of objects.
#[derive(Debug, Default)]
pub struct Tenants {
    clients: HashMap<ClientId, TenantId>,
    owners: HashMap<u64, TenantId>,
    shares: HashMap<u64, Vec<(TenantId, Access)>>,
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

    /// `client`'s tenant now owns `object`.
    pub fn own(&mut self, object: u64, client: ClientId) {
        let t = self.tenant_of(client);
        self.owners.insert(object, t);
    }

    /// `object` was freed: it belongs to nobody and is shared with nobody.
    pub fn disown(&mut self, object: u64) {
        self.owners.remove(&object);
        self.shares.remove(&object);
    }

    /// Whether `client`'s tenant owns `object`.
    pub fn owns(&self, client: ClientId, object: u64) -> bool {
        self.owners.get(&object) == Some(&self.tenant_of(client))
    }

    /// Whether `client` may acquire `object` with `access`.
    pub fn may_acquire(&self, client: ClientId, object: u64, access: Access) -> bool {
        let t = self.tenant_of(client);
        if self.owners.get(&object) == Some(&t) {
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
        (self.clients.capacity() * 9 + self.owners.capacity() * 13 + self.shares.capacity() * 33)
            as u64
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
        t.own(0x100, 1);
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
