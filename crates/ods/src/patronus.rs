//! [`RemoteMemory`] on the Patronus client library: a region is a [`Perm`]; allocations go
//! several per round trip (one [`Op::Allocate`] ticket each, all started before any is
//! awaited); a batch is one [`Client::batch`]; extension is the one-sided CAS on the
//! permission's lifetime word. Acquires can be pipelined: a started acquire's
//! [`Acquiring::InFlight`] id is the client's own [`Ticket`] id, so nothing is kept here.

use crate::memory::{Acquiring, MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use patronus_core::client::{Client, ClientError, Done, Op, OpResult, Perm, Ticket};
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
}

impl<P: Provider> PatronusMemory<P> {
    /// Wraps a connected client.
    pub fn new(client: Client<P>) -> Self {
        PatronusMemory { client }
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
        let started: Vec<Result<Ticket, ClientError>> = sizes
            .iter()
            .map(|&size| self.client.start(Op::Allocate { size, lease, mode }))
            .collect();
        let mut perms = Vec::with_capacity(sizes.len());
        let mut failed = None;
        for t in started {
            match t.and_then(|t| self.client.wait(t)) {
                Ok(Done::Perm(p)) => perms.push(p),
                Ok(_) => {
                    failed.get_or_insert(MemError::Failed(
                        "an allocation ended without a grant".into(),
                    ));
                }
                Err(e) => {
                    failed.get_or_insert(e.into());
                }
            }
        }
        match failed {
            None => Ok(perms),
            Some(e) => {
                // All or nothing: best effort; what cannot be freed now ends with its lease.
                for p in perms {
                    let _ = self.client.free(p);
                }
                Err(e)
            }
        }
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
        let t = self.client.start(Op::Acquire {
            addr,
            size: len,
            lease,
            access,
            mode,
            wait: false,
        })?;
        match self.client.wait(t)? {
            Done::Perm(p) => Ok(p),
            _ => Err(MemError::Failed("an acquire ended without a grant".into())),
        }
    }

    fn start_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Acquiring<Perm> {
        let op = Op::Acquire {
            addr,
            size: len,
            lease,
            access,
            mode,
            wait: true,
        };
        match self.client.start(op) {
            Ok(t) => Acquiring::InFlight(t.id()),
            Err(e) => Acquiring::Answered(Err(e.into())),
        }
    }

    fn poll_acquire(&mut self, a: Acquiring<Perm>) -> Acquiring<Perm> {
        let id = match a {
            Acquiring::InFlight(id) => id,
            answered => return answered,
        };
        match self.client.poll(Ticket::from_id(id)) {
            Ok(None) => Acquiring::InFlight(id),
            Ok(Some(Done::Perm(p))) => Acquiring::Answered(Ok(p)),
            Ok(Some(_)) => Acquiring::Answered(Err(MemError::Invalid("not an acquire's ticket"))),
            Err(e) => Acquiring::Answered(Err(e.into())),
        }
    }

    fn abandon_acquire(&mut self, a: Acquiring<Perm>) {
        // An answered right is dropped (its lease runs out); one in flight is handed back.
        if let Acquiring::InFlight(id) = a {
            self.client.cancel(Ticket::from_id(id));
        }
    }

    fn wait(&mut self, max: Duration) {
        if self.client.status().in_flight() > 0 {
            // A lost session shows at the next poll of each acquire.
            let _ = self.client.wait_any(max);
        }
    }

    fn arm(&mut self) -> bool {
        self.client.control().arm();
        self.client.status().in_flight() > 0
    }

    fn extend(&mut self, region: &Perm, lease: Duration) -> Result<(), MemError> {
        Ok(self.client.extend(region, lease)?)
    }

    fn max_lease(&self) -> Option<Duration> {
        Some(self.client.status().max_lease())
    }

    fn expires_within(&self, region: &Perm, margin: Duration) -> bool {
        let left = region.expiry().since(self.client.status().clock().now());
        left <= margin
    }

    fn now(&self) -> Timestamp {
        self.client.status().clock().now()
    }

    fn release(&mut self, region: Perm) -> Result<(), MemError> {
        Ok(self.client.revoke(region)?)
    }

    fn release_many(&mut self, regions: Vec<Perm>) -> Result<(), MemError> {
        let started: Vec<Result<Ticket, ClientError>> = regions
            .iter()
            .map(|p| {
                if p.session() != self.client.status().session() {
                    return Err(ClientError::SessionLost);
                }
                self.client.start(Op::Request(
                    patronus_core::proto::messages::Request::Revoke {
                        id: p.id(),
                        free: false,
                    },
                ))
            })
            .collect();
        let mut first = None;
        for t in started {
            let r = t.and_then(|t| self.client.wait(t));
            match r {
                Ok(Done::Reply(patronus_core::proto::messages::Reply::Revoked)) => {}
                Ok(Done::Reply(patronus_core::proto::messages::Reply::Failed(s))) => {
                    first.get_or_insert(ClientError::from_status(s).into());
                }
                Ok(_) => {
                    first
                        .get_or_insert(MemError::Failed("a revoke ended without its reply".into()));
                }
                Err(e) => {
                    first.get_or_insert(e.into());
                }
            }
        }
        first.map_or(Ok(()), Err)
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
        Ok(self.client.control().publish(name, addr, len)?)
    }

    fn lookup(&mut self, name: &str) -> Result<(u64, u64), MemError> {
        Ok(self.client.control().lookup(name)?)
    }

    fn unpublish(&mut self, name: &str) -> Result<(), MemError> {
        Ok(self.client.control().unpublish(name)?)
    }
}
