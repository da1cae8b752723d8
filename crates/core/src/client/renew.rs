//! Transparent renewal for long-running users (a question the paper leaves open: what if a
//! user needs memory longer than the maximum lifetime?). A [`LongLease`] keeps a permission
//! alive across the maximum lifetime: while the manager allows, it extends one-sidedly; once
//! extension is refused, it asks the manager to renew: a new permission over the same object
//! replaces the current one in one step, so access never lapses and an exclusive holder keeps
//! the object without a gap. While others wait for the object the manager refuses both
//! extension and renewal (`ExtensionRefused`): the holder keeps its current permission until
//! that permission's own deadline, and must then acquire again like everyone else.

use super::core::Renewal;
use super::driver::Client;
use super::error::ClientError;
use super::perm::Perm;
use crate::proto::messages::{Access, Mode, Reply, Request, Status};
use rnic::Provider;

/// A permission that [`LongLease::renew`] keeps valid.
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
    /// Acquires a permission that [`LongLease::renew`] keeps valid past the maximum lifetime.
    /// `renew_before` is how much validity `renew` guarantees.
    pub fn acquire<P: Provider>(
        client: &mut Client<P>,
        addr: u64,
        size: u64,
        lease: std::time::Duration,
        access: Access,
        mode: Mode,
        renew_before: std::time::Duration,
    ) -> Result<LongLease, ClientError> {
        let perm = client.acquire(addr, size, lease, access, mode)?;
        let (lease_us, renew_before_us) = (
            super::lease::micros(lease),
            super::lease::micros(renew_before),
        );
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

    /// Makes sure the permission stays valid for the renewal margin more: nothing, a
    /// one-sided extension, or a renewal (a new permission over the same object, in one step).
    pub fn renew<P: Provider>(&mut self, client: &mut Client<P>) -> Result<&Perm, ClientError> {
        client.renew(self)
    }

    /// The current permission (valid for at least the renewal margin after `renew`).
    pub fn perm(&self) -> Result<&Perm, ClientError> {
        self.perm.as_ref().ok_or(ClientError::NotFound)
    }
}

impl<P: Provider> Client<P> {
    /// Makes sure the lease's permission stays valid for `renew_before_us` more: nothing,
    /// a one-sided extension, or a renewal, as the core decides (`ClientCore::renewal`).
    fn renew<'l>(&mut self, lease: &'l mut LongLease) -> Result<&'l Perm, ClientError> {
        let now = self.clocks.lease.now();
        let margin = lease.renew_before_us;
        let expiry = lease.perm.as_ref().map(Perm::expiry);
        let mut step = self.node.lock().core.renewal(expiry, now, margin, false);
        if let (Renewal::Extend, Some(p)) = (step, &lease.perm) {
            let enough = match self.extend(p, std::time::Duration::from_micros(lease.lease_us)) {
                Ok(()) => {
                    lease.extended += 1;
                    p.expiry().0 >= now.0.saturating_add(margin)
                }
                Err(
                    ClientError::ExtensionRefused
                    | ClientError::Denied(_)
                    | ClientError::SessionLost,
                ) => false,
                Err(e) => return Err(e),
            };
            step = if enough {
                Renewal::Keep
            } else {
                self.node
                    .lock()
                    .core
                    .renewal(Some(p.expiry()), now, margin, true)
            };
        }
        if step != Renewal::Keep {
            self.renew_now(lease, step)?;
        }
        lease.perm()
    }

    /// A new permission over `lease`'s object, acquired as anyone would.
    fn acquire_again(&mut self, lease: &LongLease) -> Result<Perm, ClientError> {
        self.acquire(
            lease.addr,
            lease.size,
            std::time::Duration::from_micros(lease.lease_us),
            lease.access,
            lease.mode,
        )
    }

    fn renew_now(&mut self, lease: &mut LongLease, step: Renewal) -> Result<(), ClientError> {
        let fresh = match &lease.perm {
            // The hole fixed before (a `testing` mutation only): give it back, acquire again.
            Some(_) if step == Renewal::RevokeThenAcquire => {
                if let Some(old) = lease.perm.take() {
                    let _ = self.revoke(old);
                }
                self.acquire_again(lease)?
            }
            // Ended with an earlier session: acquire like anyone.
            Some(old) if self.current(old).is_err() => {
                lease.perm = None;
                self.acquire_again(lease)?
            }
            Some(old) => {
                let sent = self.clocks.lease.now();
                match self.rpc(Request::Renew {
                    id: old.id(),
                    lease_us: lease.lease_us,
                })? {
                    Reply::Granted(g) => self.take_grant(g, lease.access, lease.mode, sent),
                    Reply::Failed(Status::NotFound) => {
                        // The permission ended meanwhile (expired): acquire like anyone.
                        lease.perm = None;
                        self.acquire_again(lease)?
                    }
                    other => return Err(super::error::unexpected(other)),
                }
            }
            None => self.acquire_again(lease)?,
        };
        lease.perm = Some(fresh);
        lease.reacquired += 1;
        Ok(())
    }
}
