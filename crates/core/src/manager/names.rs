//! Named roots (LITE's named memory regions): a client publishes an object under a name and
//! other clients of its tenant look it up, so independent processes can share a structure
//! (a hash table's metadata, say) knowing only its name.
//!
//! Invariants: names are per tenant — a lookup finds only the caller's tenant's names, and a
//! name of one tenant never hides another's. A name is an address, not a right: the object is
//! reached through an `acquire`, which checks ownership and sharing, so a wrong address
//! published costs only its own tenant. Each tenant keeps at most [`NAMES_PER_TENANT`] names
//! per shard (the table cannot be grown without bound). A name stays until withdrawn, whoever
//! published it (names are the tenant's, like its memory).

use super::fast_hash::FastMap;
use super::tenants::TenantId;
use crate::proto::messages::{RootName, Status};

/// Names a tenant may keep on one manager shard.
pub const NAMES_PER_TENANT: usize = 1024;

/// The names published on one manager shard.
#[derive(Debug, Default)]
pub(crate) struct RootNames {
    objects: FastMap<(TenantId, RootName), (u64, u64)>,
    per_tenant: FastMap<TenantId, usize>,
}

impl RootNames {
    /// Publishes `(addr, len)` under `name` for `tenant`.
    pub(crate) fn publish(
        &mut self,
        tenant: TenantId,
        name: RootName,
        addr: u64,
        len: u64,
    ) -> Result<(), Status> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Status::InvalidArgument);
        }
        if self.objects.contains_key(&(tenant, name)) {
            return Err(Status::NameTaken);
        }
        let count = self.per_tenant.entry(tenant).or_default();
        if *count >= NAMES_PER_TENANT {
            return Err(Status::QuotaExceeded);
        }
        *count += 1;
        self.objects.insert((tenant, name), (addr, len));
        Ok(())
    }

    /// The object `tenant` published under `name`.
    pub(crate) fn lookup(&self, tenant: TenantId, name: RootName) -> Option<(u64, u64)> {
        self.objects.get(&(tenant, name)).copied()
    }

    /// Withdraws `tenant`'s `name`; whether it was there.
    pub(crate) fn unpublish(&mut self, tenant: TenantId, name: RootName) -> bool {
        if self.objects.remove(&(tenant, name)).is_none() {
            return false;
        }
        if let Some(n) = self.per_tenant.get_mut(&tenant) {
            *n -= 1;
            if *n == 0 {
                self.per_tenant.remove(&tenant);
            }
        }
        true
    }

    /// Names kept.
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Estimated bytes of the table (by capacity).
    pub(crate) fn metadata_bytes(&self) -> u64 {
        use std::mem::size_of;
        (self.objects.capacity() * (size_of::<((TenantId, RootName), (u64, u64))>() + 1)
            + self.per_tenant.capacity() * (size_of::<(TenantId, usize)>() + 1)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> RootName {
        RootName::new(s).unwrap()
    }

    #[test]
    fn names_are_per_tenant_unique_and_bounded() {
        let mut n = RootNames::default();
        n.publish(1, name("table"), 4096, 64).unwrap();
        assert_eq!(
            n.publish(1, name("table"), 8192, 64),
            Err(Status::NameTaken)
        );
        n.publish(2, name("table"), 8192, 64).unwrap();
        assert_eq!(n.lookup(1, name("table")), Some((4096, 64)));
        assert_eq!(n.lookup(2, name("table")), Some((8192, 64)));
        assert_eq!(
            n.lookup(3, name("table")),
            None,
            "another tenant sees nothing"
        );
        assert!(!n.unpublish(3, name("table")), "nor withdraws anything");
        assert!(n.unpublish(1, name("table")));
        assert_eq!(n.lookup(1, name("table")), None);
        assert_eq!(n.publish(1, name("x"), 0, 0), Err(Status::InvalidArgument));
        for i in 0..NAMES_PER_TENANT - 1 {
            n.publish(2, name(&format!("n{i}")), 64, 64).unwrap();
        }
        assert_eq!(
            n.publish(2, name("one too many"), 64, 64),
            Err(Status::QuotaExceeded)
        );
        n.publish(1, name("other tenant"), 64, 64).unwrap();
        assert!(n.unpublish(2, name("n0")));
        n.publish(2, name("room again"), 64, 64).unwrap();
        assert_eq!(n.len(), NAMES_PER_TENANT + 1);
    }

    #[test]
    fn root_names_are_checked_both_ways() {
        assert!(RootName::new("").is_none());
        assert!(RootName::new(&"x".repeat(33)).is_none());
        assert!(RootName::new("a\0b").is_none());
        let n = RootName::new(&"y".repeat(32)).unwrap();
        assert_eq!(RootName::from_padded(n.padded()), Some(n));
        let mut raw = name("ab").padded();
        raw[5] = b'c'; // bytes after the padding started
        assert!(RootName::from_padded(raw).is_none());
        assert!(RootName::from_padded([0xff; 32]).is_none(), "not UTF-8");
        assert_eq!(name("héllo").as_str(), "héllo");
    }
}
