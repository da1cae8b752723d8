//! [`RemoteMemory`] on the Patronus client library: a region is a [`Perm`]; allocations go
//! several per round trip ([`Client::allocate_many`]); a batch is one
//! [`Client::batch`](patronus_core::client::Client::batch); extension is the one-sided CAS on
//! the permission's lifetime word. Acquires can be pipelined
//! ([`Client::start_acquire`]): a started acquire's ticket names its pending request here.

use crate::memory::{Acquiring, MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use crate::tickets::Tickets;
use patronus_core::client::{Client, ClientError, OpResult, PendingAcquire, Perm};
use patronus_core::proto::messages::{Access, Mode};
use rnic::{Provider, Timestamp};
use std::time::Duration;

impl Region for Perm {
    fn addr(&self) -> u64 {
        Perm::addr(self)
    }

    fn len(&self) -> u64 {
        Perm::len(self)
    }
}

/// A Patronus client as remote memory for the data structures.
#[derive(Debug)]
pub struct PatronusMemory<P: Provider> {
    client: Client<P>,
    /// Acquires in flight, by ticket.
    acquiring: Tickets<PendingAcquire>,
}

impl<P: Provider> PatronusMemory<P> {
    /// Wraps a connected client.
    pub fn new(client: Client<P>) -> Self {
        PatronusMemory {
            client,
            acquiring: Tickets::default(),
        }
    }

    /// The client (its statistics, its own API).
    pub fn client(&self) -> &Client<P> {
        &self.client
    }

    /// The client, mutably.
    pub fn client_mut(&mut self) -> &mut Client<P> {
        &mut self.client
    }

    /// Gives the client back.
    pub fn into_client(self) -> Client<P> {
        self.client
    }
}

impl From<ClientError> for MemError {
    fn from(e: ClientError) -> Self {
        match e {
            // The NIC refused the access, or the permission is known to have ended.
            ClientError::Denied(_) | ClientError::ExtensionRefused | ClientError::SessionLost => {
                MemError::Rejected
            }
            ClientError::LeaseExpired => MemError::Expired,
            ClientError::OutcomeUnknown(_) => MemError::OutcomeUnknown,
            ClientError::NotFound => MemError::NotFound,
            ClientError::ConflictTimeout => MemError::Conflict,
            ClientError::NoMemory | ClientError::PoolExhausted | ClientError::QuotaExceeded => {
                MemError::Exhausted
            }
            ClientError::InvalidArgument(what) => MemError::Invalid(what),
            ClientError::TooLarge => {
                MemError::Invalid("larger than the largest object the memory node allocates")
            }
            ClientError::NameTaken => MemError::NameTaken,
            other => MemError::Failed(other.to_string()),
        }
    }
}

impl<P: Provider> RemoteMemory for PatronusMemory<P> {
    type Region = Perm;

    fn allocate(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<Perm>, MemError> {
        Ok(self.client.allocate_many(sizes, lease, mode)?)
    }

    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, MemError> {
        Ok(self.client.acquire(addr, len, lease, access, mode)?)
    }

    fn try_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, MemError> {
        Ok(self.client.try_acquire(addr, len, lease, access, mode)?)
    }

    fn start_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Acquiring<Perm> {
        match self.client.start_acquire(addr, len, lease, access, mode) {
            Ok(p) => self.acquiring.start(p),
            // As many requests in flight as the channel takes: wait for this one.
            Err(ClientError::ControlBusy) => {
                Acquiring::Answered(self.acquire(addr, len, lease, access, mode))
            }
            Err(e) => Acquiring::Answered(Err(e.into())),
        }
    }

    fn poll_acquire(&mut self, a: Acquiring<Perm>) -> Acquiring<Perm> {
        let client = &mut self.client;
        self.acquiring.poll(a, |p| client.poll_acquire(p))
    }

    fn abandon_acquire(&mut self, a: Acquiring<Perm>) {
        let client = &mut self.client;
        self.acquiring.abandon(a, |p| client.abandon_acquire(p));
    }

    fn wait(&mut self, max: Duration) {
        if !self.acquiring.is_empty() {
            // A lost session shows at the next poll of each acquire.
            let _ = self.client.wait_for_reply(max);
        }
    }

    fn arm(&mut self) -> bool {
        self.client.arm();
        !self.acquiring.is_empty()
    }

    fn extend(&mut self, region: &Perm, lease: Duration) -> Result<(), MemError> {
        Ok(self.client.extend(region, lease)?)
    }

    fn max_lease(&self) -> Option<Duration> {
        Some(self.client.max_lease())
    }

    fn expires_within(&self, region: &Perm, margin: Duration) -> bool {
        let left = region.expiry().since(self.client.clock().now());
        left <= margin
    }

    fn now(&self) -> Timestamp {
        self.client.clock().now()
    }

    fn release(&mut self, region: Perm) -> Result<(), MemError> {
        Ok(self.client.revoke(region)?)
    }

    fn release_many(&mut self, regions: Vec<Perm>) -> Result<(), MemError> {
        Ok(self.client.revoke_many(regions)?)
    }

    fn relinquish(&mut self, region: Perm) -> Result<(), MemError> {
        // The lease runs out at the memory node: no revoke RPC (§5.4).
        drop(region);
        Ok(())
    }

    fn free(&mut self, region: Perm) -> Result<(), MemError> {
        Ok(self.client.free(region)?)
    }

    fn execute(&mut self, ops: &[MemOp<'_, Perm>]) -> Vec<Result<MemOut, MemError>> {
        let mut batch = self.client.batch();
        for op in ops {
            match *op {
                MemOp::Read { on, offset, len } => batch.read(on, offset, len),
                MemOp::Write { on, offset, data } => batch.write(on, offset, data),
                MemOp::Cas {
                    on,
                    offset,
                    compare,
                    swap,
                } => batch.cas(on, offset, compare, swap),
                MemOp::Faa { on, offset, add } => batch.faa(on, offset, add),
            };
        }
        batch
            .execute()
            .into_iter()
            .map(|r| {
                r.map(|out| match out {
                    OpResult::Read(bytes) => MemOut::Read(bytes),
                    OpResult::Written => MemOut::Written,
                    OpResult::Atomic(v) => MemOut::Atomic(v),
                })
                .map_err(MemError::from)
            })
            .collect()
    }
}

impl<P: Provider> NamedRoots for PatronusMemory<P> {
    fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), MemError> {
        Ok(self.client.publish(name, addr, len)?)
    }

    fn lookup(&mut self, name: &str) -> Result<(u64, u64), MemError> {
        Ok(self.client.lookup(name)?)
    }

    fn unpublish(&mut self, name: &str) -> Result<(), MemError> {
        Ok(self.client.unpublish(name)?)
    }
}
