//! Transparent renewal for long-running users (a question the paper leaves open: what if a
//! user needs memory longer than the maximum lifetime?). A [`LongLease`] keeps a permission
//! alive across the maximum lifetime: while the manager allows, it extends one-sidedly; once
//! extension is refused, it re-acquires before the current permission expires (shared: the new
//! permission is granted before the old one is revoked, so access never lapses; exclusive: the
//! old one is revoked first, then the new one is acquired, waiting for conflicts).

use super::{Client, ClientError, Perm};
use crate::proto::messages::{Access, Mode};
use rnic::Provider;

/// A permission that [`Client::renew`] keeps valid.
#[derive(Debug)]
pub struct LongLease {
    perm: Option<Perm>,
    addr: u64,
    size: u64,
    access: Access,
    mode: Mode,
    lease_us: u64,
    renew_before_us: u64,
    /// Re-acquisitions so far.
    pub reacquired: u64,
    /// One-sided extensions so far.
    pub extended: u64,
}

impl LongLease {
    /// The current permission (valid for at least the renewal margin after `renew`).
    pub fn perm(&self) -> Result<&Perm, ClientError> {
        self.perm.as_ref().ok_or(ClientError::NotFound)
    }
}

impl<P: Provider> Client<P> {
    /// Acquires a permission that [`renew`](Self::renew) keeps valid past the maximum
    /// lifetime. `renew_before_us` is how much validity `renew` guarantees.
    pub fn acquire_long(
        &mut self,
        addr: u64,
        size: u64,
        lease_us: u64,
        access: Access,
        mode: Mode,
        renew_before_us: u64,
    ) -> Result<LongLease, ClientError> {
        let perm = self.acquire(addr, size, lease_us, access, mode)?;
        Ok(LongLease {
            perm: Some(perm),
            addr,
            size,
            access,
            mode,
            lease_us,
            renew_before_us,
            reacquired: 0,
            extended: 0,
        })
    }

    /// Makes sure the lease's permission stays valid for `renew_before_us` more: nothing,
    /// a one-sided extension, or a re-acquisition.
    pub fn renew<'l>(&mut self, lease: &'l mut LongLease) -> Result<&'l Perm, ClientError> {
        let now = self.clock().now();
        let needs = match &lease.perm {
            Some(p) => p.expiry().0 < now.0.saturating_add(lease.renew_before_us),
            None => true,
        };
        if needs {
            let extended = match &lease.perm {
                Some(p) if p.expiry() > now => match self.extend(p, lease.lease_us) {
                    Ok(()) => {
                        lease.extended += 1;
                        p.expiry().0 >= now.0.saturating_add(lease.renew_before_us)
                    }
                    Err(ClientError::ExtensionRefused | ClientError::Denied(_)) => false,
                    Err(e) => return Err(e),
                },
                _ => false,
            };
            if !extended {
                self.reacquire(lease)?;
            }
        }
        lease.perm()
    }

    fn reacquire(&mut self, lease: &mut LongLease) -> Result<(), ClientError> {
        let old = lease.perm.take();
        let shared = lease.mode == Mode::Shared;
        if !shared && let Some(old) = old.as_ref().map(Perm::forged_copy) {
            // Exclusive: make room first. A NotFound means it already ended.
            match self.revoke(old) {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        let fresh = self.acquire(
            lease.addr,
            lease.size,
            lease.lease_us,
            lease.access,
            lease.mode,
        )?;
        if shared && let Some(old) = old {
            match self.revoke(old) {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        lease.perm = Some(fresh);
        lease.reacquired += 1;
        Ok(())
    }
}
