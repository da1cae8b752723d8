//! The remote-memory interface the data structures are written against.
//!
//! An object lives at an address of a memory node. A [`Region`] is the right to access a range
//! of it: a Patronus permission (a memory window's rkey with a lease), an MR's rkey, or
//! nothing at all (unprotected memory). A right ends by [`RemoteMemory::release`], by
//! [`RemoteMemory::free`] (of the object: every right over it ends), or by its lease; an access
//! through an ended right fails with [`MemError::Rejected`] and neither reads nor changes
//! memory. Mechanisms without leases (MR, Unprot) never expire a right.
//!
//! Invariants the structures rely on:
//! - [`RemoteMemory::execute`] posts its operations with one doorbell and returns one result
//!   per operation, in order; operations on one region take effect in the order given.
//! - An operation reported [`MemError::OutcomeUnknown`] may or may not have taken effect; it is
//!   never run again by the implementation (the structure finds out by reading).
//! - Memory handed out by [`RemoteMemory::allocate`] is zeroed.
//! - A region is not `Clone`: a right is held once and given up once (release or free).
//! - An acquire started with [`RemoteMemory::start_acquire`] ends exactly once: answered by
//!   [`RemoteMemory::poll_acquire`], or abandoned ([`RemoteMemory::abandon_acquire`]: a right
//!   it brings is given up). Polling never blocks.

use patronus_core::proto::messages::{Access, Mode};
use rnic::Timestamp;
use std::fmt::Debug;
use std::time::Duration;

/// The right to access `[addr, addr + len)` of a memory node.
pub trait Region: Debug + Send {
    /// First byte.
    fn addr(&self) -> u64;
    /// Bytes.
    fn len(&self) -> u64;
    /// Whether it covers no byte.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One data-path operation of a batch, at `offset` within its region.
#[derive(Clone, Copy, Debug)]
pub enum MemOp<'a, R> {
    /// READ `len` bytes.
    Read {
        /// The region read.
        on: &'a R,
        /// Offset in it.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// WRITE `data`.
    Write {
        /// The region written.
        on: &'a R,
        /// Offset in it.
        offset: u64,
        /// Bytes.
        data: &'a [u8],
    },
    /// Compare-and-swap of the aligned 8-byte word.
    Cas {
        /// The region.
        on: &'a R,
        /// Offset in it (a multiple of 8).
        offset: u64,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Fetch-and-add on the aligned 8-byte word.
    Faa {
        /// The region.
        on: &'a R,
        /// Offset in it (a multiple of 8).
        offset: u64,
        /// Added (wrapping).
        add: u64,
    },
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemOut {
    /// A READ's bytes.
    Read(Vec<u8>),
    /// A WRITE is done.
    Written,
    /// A CAS's or FAA's previous value.
    Atomic(u64),
}

impl MemOut {
    /// The previous value of a CAS or FAA.
    pub fn atomic(&self) -> Option<u64> {
        match self {
            MemOut::Atomic(v) => Some(*v),
            _ => None,
        }
    }

    /// A READ's bytes.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            MemOut::Read(b) => Some(b),
            _ => None,
        }
    }
}

/// Why a remote-memory request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    /// The NIC refused the access: the right ended (released, freed, expired, its window
    /// invalidated) or does not cover it. Nothing was read or changed.
    #[error("access rejected: the right to this memory has ended")]
    Rejected,
    /// The right's lease ended before the access was sent: nothing was sent.
    #[error("the lease has ended")]
    Expired,
    /// The operation may or may not have taken effect (the connection failed under it).
    #[error("outcome unknown: the operation may or may not have taken effect")]
    OutcomeUnknown,
    /// No such object (freed) or no such name.
    #[error("not found")]
    NotFound,
    /// A conflicting (exclusive) holder kept the object past the wait.
    #[error("conflict: another holder kept the object")]
    Conflict,
    /// No memory, or the tenant's quota is reached.
    #[error("out of memory or quota")]
    Exhausted,
    /// The name is published already.
    #[error("the name is taken")]
    NameTaken,
    /// Invalid use (an offset outside the region, a misaligned atomic, a name too long).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// Anything else the system reported.
    #[error("{0}")]
    Failed(String),
}

/// A batch started without waiting for its completions ([`RemoteMemory::start_execute`]).
#[derive(Debug)]
#[must_use = "a started batch is polled to its results"]
pub enum Executing {
    /// Done: one result per operation, in order.
    Answered(Vec<Result<MemOut, MemError>>),
    /// In flight: the implementation's ticket for it.
    InFlight(u64),
}

/// An `acquire` started without waiting ([`RemoteMemory::start_acquire`]).
#[derive(Debug)]
#[must_use = "a started acquire is polled to its answer or abandoned"]
pub enum Acquiring<R> {
    /// Answered: the right, or why not.
    Answered(Result<R, MemError>),
    /// In flight: the implementation's ticket for it.
    InFlight(u64),
}

/// Remote memory as a one-sided data structure uses it (see the module docs).
pub trait RemoteMemory {
    /// The right to access a range of an object.
    type Region: Region;

    /// Allocates one zeroed object per entry of `sizes`, each with its own read-write right
    /// for `lease` in `mode`, in as few round trips as the system allows (Patronus: one).
    /// All or nothing.
    fn allocate(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        mode: Mode,
    ) -> Result<Vec<Self::Region>, MemError>;

    /// A right over `len` bytes of the object at `addr` (as allocated). With
    /// [`Mode::Exclusive`], waits a bounded time for other holders to leave
    /// ([`MemError::Conflict`] if they do not).
    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Self::Region, MemError>;

    /// [`RemoteMemory::acquire`] that does not wait for conflicting holders:
    /// [`MemError::Conflict`] at once, and the holders are left alone (with Patronus, a
    /// waiting exclusive acquire makes the node refuse the holders' extensions). A try-lock
    /// for a lock object that may be held by a live client. By default — mechanisms whose
    /// acquire never waits — the plain acquire.
    fn try_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Self::Region, MemError> {
        self.acquire(addr, len, lease, access, mode)
    }

    /// Starts an [`RemoteMemory::acquire`] without waiting for its answer, so that one
    /// thread can keep several in flight (many logical clients on one thread). By default —
    /// mechanisms whose acquire does not pipeline — the blocking acquire, answered at once.
    fn start_acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Acquiring<Self::Region> {
        Acquiring::Answered(self.acquire(addr, len, lease, access, mode))
    }

    /// Polls a started acquire: `Answered` once its answer is here (an `Answered` is given
    /// back as it is), `InFlight` while it is not. Never blocks.
    fn poll_acquire(&mut self, a: Acquiring<Self::Region>) -> Acquiring<Self::Region> {
        match a {
            Acquiring::Answered(r) => Acquiring::Answered(r),
            Acquiring::InFlight(_) => Acquiring::Answered(Err(MemError::Invalid(
                "no acquire of this memory's is in flight",
            ))),
        }
    }

    /// Gives up a started acquire: a right it brings is given up
    /// ([`RemoteMemory::relinquish`]).
    fn abandon_acquire(&mut self, a: Acquiring<Self::Region>) {
        if let Acquiring::Answered(Ok(r)) = a {
            let _ = self.relinquish(r);
        }
    }

    /// Asks to be woken — on the completion channel the implementation's connection reports
    /// to — when an answer to an acquire, or a started batch's completion, arrives; whether
    /// any is in flight. A
    /// driver whose clients all wait for answers then sleeps on that channel instead of
    /// polling (arm, poll once more, then sleep). By default nothing is ever in flight.
    fn arm(&mut self) -> bool {
        false
    }

    /// Blocks (sleeping) up to `max` until an answer to an acquire in flight arrives; a
    /// blocking caller with nothing else to do calls it instead of polling. By default
    /// nothing is ever in flight: it returns at once.
    fn wait(&mut self, max: Duration) {
        let _ = max;
    }

    /// The longest lease a right can have (Patronus: the memory node's maximum lifetime,
    /// learned when the client connected); `None`: no limit (mechanisms without leases). A
    /// structure plans its leases and extensions within it: asking for more only gets it
    /// capped, and a right cannot be extended past it.
    fn max_lease(&self) -> Option<Duration> {
        None
    }

    /// Extends the right's lease by `lease` (Patronus: one-sided, a CAS on the permission's
    /// lifetime word). Fails once the right ended.
    fn extend(&mut self, region: &Self::Region, lease: Duration) -> Result<(), MemError>;

    /// Whether the right's lease ends within `margin` from now (never, for mechanisms without
    /// leases): its holder extends it or acquires again before using it.
    fn expires_within(&self, region: &Self::Region, margin: Duration) -> bool;

    /// The client's clock, the one its leases are measured on. A structure times with it what
    /// only time can tell (how long a producer has held a claimed slot without filling it).
    fn now(&self) -> Timestamp;

    /// Ends the right (the object stays allocated).
    fn release(&mut self, region: Self::Region) -> Result<(), MemError>;

    /// Ends every right of `regions`, in as few round trips as the system allows (Patronus:
    /// one per group of requests a connection carries at once). Every right is ended or
    /// reported: one that fails does not keep the others alive; the first failure is returned
    /// once all were tried. By default, one [`RemoteMemory::release`] after another.
    fn release_many(&mut self, regions: Vec<Self::Region>) -> Result<(), MemError> {
        let mut first = None;
        for r in regions {
            if let Err(e) = self.release(r) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Gives up a right its holder no longer needs, as cheaply as the system allows: with
    /// leases it may simply run out (no round trip: §5.4's "lease expiry instead of a revoke
    /// RPC"); without, it ends as [`RemoteMemory::release`] ends it (the default). Until it
    /// runs out, the right still works for nobody: its holder never uses it again.
    fn relinquish(&mut self, region: Self::Region) -> Result<(), MemError> {
        self.release(region)
    }

    /// Frees the object the right covers; every right over it ends.
    fn free(&mut self, region: Self::Region) -> Result<(), MemError>;

    /// Frees the object every right of `regions` covers, in as few round trips as the system
    /// allows (Patronus: one per group of requests a connection carries at once); one outcome
    /// per right, in order: a failure of one does not keep the others from being freed. By
    /// default, one [`RemoteMemory::free`] after another.
    fn free_many(&mut self, regions: Vec<Self::Region>) -> Vec<Result<(), MemError>> {
        regions.into_iter().map(|r| self.free(r)).collect()
    }

    /// Runs `ops` with one doorbell (see the module docs); one result per operation, in order.
    fn execute(&mut self, ops: &[MemOp<'_, Self::Region>]) -> Vec<Result<MemOut, MemError>>;

    /// Starts [`RemoteMemory::execute`] without waiting for the completions, so that one
    /// thread keeps several clients' batches in flight (many logical clients on one thread).
    /// At most one started batch per memory is not yet answered. By default — mechanisms
    /// whose batches do not pipeline — the blocking batch, answered at once.
    fn start_execute(&mut self, ops: &[MemOp<'_, Self::Region>]) -> Executing {
        Executing::Answered(self.execute(ops))
    }

    /// Polls a started batch: `Answered` once every operation has its result (an `Answered`
    /// is given back as it is), `InFlight` while not. Never blocks.
    fn poll_execute(&mut self, e: Executing) -> Executing {
        match e {
            Executing::InFlight(_) => Executing::Answered(Vec::new()),
            answered => answered,
        }
    }

    /// READs `len` bytes at `offset` of `region`.
    fn read(&mut self, region: &Self::Region, offset: u64, len: u32) -> Result<Vec<u8>, MemError> {
        match single(self.execute(&[MemOp::Read {
            on: region,
            offset,
            len,
        }]))? {
            MemOut::Read(bytes) => Ok(bytes),
            other => Err(MemError::Failed(format!("a read returned {other:?}"))),
        }
    }

    /// WRITEs `data` at `offset` of `region`.
    fn write(&mut self, region: &Self::Region, offset: u64, data: &[u8]) -> Result<(), MemError> {
        single(self.execute(&[MemOp::Write {
            on: region,
            offset,
            data,
        }]))
        .map(|_| ())
    }

    /// Compare-and-swap at `offset` of `region`; the previous value.
    fn cas(
        &mut self,
        region: &Self::Region,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemError> {
        atomic(single(self.execute(&[MemOp::Cas {
            on: region,
            offset,
            compare,
            swap,
        }]))?)
    }

    /// Fetch-and-add at `offset` of `region`; the previous value.
    fn faa(&mut self, region: &Self::Region, offset: u64, add: u64) -> Result<u64, MemError> {
        atomic(single(self.execute(&[MemOp::Faa {
            on: region,
            offset,
            add,
        }]))?)
    }
}

fn single(mut results: Vec<Result<MemOut, MemError>>) -> Result<MemOut, MemError> {
    match (results.pop(), results.is_empty()) {
        (Some(r), true) => r,
        _ => Err(MemError::Failed("one operation, not one result".into())),
    }
}

fn atomic(out: MemOut) -> Result<u64, MemError> {
    out.atomic()
        .ok_or_else(|| MemError::Failed(format!("an atomic returned {out:?}")))
}

/// Named roots: objects published under a name, so independent clients (of one tenant) can
/// find a shared structure's root knowing only its name. A name leads to an address; using the
/// object still takes a right ([`RemoteMemory::acquire`]).
pub trait NamedRoots {
    /// Publishes `[addr, addr + len)` under `name` (1 to 32 bytes). [`MemError::NameTaken`]
    /// if the name is published already.
    fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), MemError>;
    /// The object published under `name`: (address, length). [`MemError::NotFound`] if none.
    fn lookup(&mut self, name: &str) -> Result<(u64, u64), MemError>;
    /// Withdraws `name` (the object stays allocated).
    fn unpublish(&mut self, name: &str) -> Result<(), MemError>;
}
