//! The data structures' remote-memory interface ([`RemoteMemory`], [`NamedRoots`] of
//! `patronus-ods`) on the baselines, so the same structure code runs on Unprot, MR and RPC as
//! on Patronus:
//!
//! | | Unprot | Mr | Rpc |
//! |---|---|---|---|
//! | allocate | `Alloc` RPCs, pipelined | `Alloc` RPCs (each registers a region), pipelined | `Alloc` RPCs, pipelined |
//! | acquire / release | nothing (address + length under the pool's rkey) | `RegisterMr` / `DeregisterMr` (one RPC each) | nothing |
//! | extend, expiry | no leases: a no-op, never | the same | the same |
//! | free | `Free` | `Free` (every region over the object is deregistered) | `Free` |
//! | execute | one-sided, one doorbell | one-sided under the region's rkey, one doorbell | one RPC per op (per page), pipelined |
//! | names | `Publish` / `Lookup` / `Unpublish` RPCs | the same | the same |
//!
//! A [`BaselineMemory`] holds two connections to the node: the control connection carries
//! every RPC (and, under Rpc, the data path), and a data connection carries the one-sided
//! ops. An access the NIC refuses breaks the data connection's QP (RC semantics); the next
//! batch runs on a new one, while the control connection — under Mr, the owner of the regions
//! registered on it — lives on. A broken control connection is not replaced (under Mr its
//! regions went with it): every control request then fails, and the memory must be replaced.
//!
//! Invariants, beyond the interface's:
//! - Allocation is all or nothing: objects of a call that partly failed are freed again.
//! - Exactly once: an op whose outcome is unknown (its connection failed under it, a timeout)
//!   is reported [`MemError::OutcomeUnknown`] and never run again, unless it is a READ, or it
//!   never ran: flushed behind a refusal (the responder stopped there) or not posted — those
//!   run once more on a new data connection (`onesided`).
//! - Protection is what the scheme gives, no more: under Unprot and Rpc an access after the
//!   object was freed is carried out (on whatever the memory holds by then), a read-only
//!   acquire does not refuse writes, and acquire does not check that an object is there;
//!   under Mr, the NIC refuses an access through a region that was released or whose object
//!   was freed, and acquire refuses a range outside a live object ([`MemError::NotFound`]).
//! - Baselines have no exclusive mode: `Mode` is accepted and ignored, as are leases.

mod onesided;
mod plan;
mod rpc;

use plan::{Kind, Planned};

use super::BaselineError;
use super::client::{BaselineClient, BaselineClientConfig};
use super::proto::{BaselineReply, BaselineRequest, FailCode, Scheme};
use patronus_core::proto::messages::{Access, Mode, RootName};
use patronus_ods::{MemError, MemOp, MemOut, NamedRoots, Region, RemoteMemory};
use rnic::{MemoryKey, Provider, WcStatus};
use std::time::Duration;

/// The right to access `[addr, addr + len)` under a baseline: under Unprot the pool's rkey,
/// under Mr a region's own, under Rpc none.
#[derive(Debug, PartialEq, Eq)]
pub struct BaselineRegion {
    addr: u64,
    len: u64,
    rkey: Option<MemoryKey>,
}

impl BaselineRegion {
    /// The key one-sided ops use (none under Rpc).
    pub fn rkey(&self) -> Option<MemoryKey> {
        self.rkey
    }
}

impl Region for BaselineRegion {
    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// A baseline client as remote memory for the data structures (see the module docs).
pub struct BaselineMemory<P: Provider> {
    scheme: Scheme,
    ctx: P::Context,
    /// The device's clock (what `now` reads).
    clock: std::sync::Arc<dyn rnic::Clock>,
    address: P::Address,
    cfg: BaselineClientConfig,
    control: BaselineClient<P>,
    /// One-sided ops (Unprot, Mr); replaced once its QP broke.
    data: Option<BaselineClient<P>>,
    reconnects: u64,
}

impl<P: Provider> std::fmt::Debug for BaselineMemory<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineMemory")
            .field("scheme", &self.scheme)
            .field("reconnects", &self.reconnects)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> BaselineMemory<P> {
    /// Connects to the node at `address` under `scheme` (Unprot, Mr or Rpc: Qp gates a whole
    /// QP, not a region, and has no such interface).
    pub fn connect(
        ctx: &P::Context,
        address: &P::Address,
        scheme: Scheme,
        cfg: BaselineClientConfig,
    ) -> Result<Self, BaselineError> {
        if scheme == Scheme::Qp {
            return Err(BaselineError::InvalidUse(
                "the QP scheme gates a whole QP, not a region",
            ));
        }
        let control = BaselineClient::connect_with(ctx, address, scheme, cfg)?;
        if scheme == Scheme::Unprot && control.rkey().is_none() {
            return Err(BaselineError::InvalidUse(
                "Unprot needs the node's whole-pool region (an MR node has none)",
            ));
        }
        let data = match scheme {
            Scheme::Rpc => None,
            _ => Some(BaselineClient::connect_with(ctx, address, scheme, cfg)?),
        };
        Ok(BaselineMemory {
            scheme,
            ctx: ctx.clone(),
            clock: rnic::Context::clock(ctx),
            address: address.clone(),
            cfg,
            control,
            data,
            reconnects: 0,
        })
    }

    /// The protection scheme this handle runs (fixed at connect).
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The control connection (its counters, its own API).
    pub fn control(&self) -> &BaselineClient<P> {
        &self.control
    }

    /// Data connections opened to replace a broken one.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The data connection, a new one if the last broke.
    fn data(&mut self) -> Result<&mut BaselineClient<P>, MemError> {
        if self.data.as_ref().is_some_and(BaselineClient::is_broken) {
            self.data = None;
            self.reconnects += 1;
        }
        let client = match self.data.take() {
            Some(c) => c,
            None => BaselineClient::connect_with(&self.ctx, &self.address, self.scheme, self.cfg)?,
        };
        Ok(self.data.insert(client))
    }

    /// Frees the objects at `addrs`, pipelined, each whatever happens to the others; the first
    /// failure.
    fn free_all(&mut self, addrs: &[u64]) -> Result<(), MemError> {
        let requests: Vec<_> = addrs
            .iter()
            .map(|&addr| BaselineRequest::Free { addr })
            .collect();
        self.all_done(&requests)
    }

    /// Sends every request of `requests` (each answered `Done` when it worked), a wave of as
    /// many as the channel carries at once before any answer is awaited; the first failure.
    fn all_done(&mut self, requests: &[BaselineRequest]) -> Result<(), MemError> {
        let mut first = Ok(());
        for wave in requests.chunks(self.control.capacity()) {
            let mut ids = Vec::with_capacity(wave.len());
            for req in wave {
                match self.control.submit(req.clone()) {
                    Ok(id) => ids.push(id),
                    Err(e) => keep_first(&mut first, e),
                }
            }
            for id in ids {
                match self.control.wait(id) {
                    Ok(BaselineReply::Done) => {}
                    Ok(other) => keep_first(&mut first, unexpected(other)),
                    Err(e) => keep_first(&mut first, e),
                }
            }
        }
        first
    }

    /// Whether `[addr, addr + len)` is a non-empty range of the pool.
    fn in_pool(&self, addr: u64, len: u64) -> bool {
        let (start, end) = (
            self.control.pool_addr(),
            self.control.pool_addr() + self.control.pool_len(),
        );
        len > 0 && addr >= start && addr.checked_add(len).is_some_and(|e| e <= end)
    }
}

fn keep_first(first: &mut Result<(), MemError>, e: impl Into<MemError>) {
    if first.is_ok() {
        *first = Err(e.into());
    }
}

/// A refusal as its error; anything else as an unexpected reply.
fn unexpected(reply: BaselineReply) -> BaselineError {
    match reply {
        BaselineReply::Failed(code) => BaselineError::Failed(code),
        other => BaselineError::Unexpected(other),
    }
}

/// Whether a completion status is the NIC's refusal of an access.
fn is_refusal(s: WcStatus) -> bool {
    matches!(
        s,
        WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError
    )
}

impl From<BaselineError> for MemError {
    fn from(e: BaselineError) -> Self {
        match e {
            BaselineError::Remote(s) if is_refusal(s) => MemError::Rejected,
            // The connection failed under the request, or no answer came: it may have run.
            BaselineError::Remote(_) | BaselineError::Timeout => MemError::OutcomeUnknown,
            BaselineError::Failed(code) => match code {
                FailCode::UnknownObject | FailCode::UnknownRkey | FailCode::UnknownName => {
                    MemError::NotFound
                }
                FailCode::Exhausted => MemError::Exhausted,
                FailCode::NameTaken => MemError::NameTaken,
                FailCode::OutOfRange => MemError::Invalid("range outside the pool"),
                FailCode::TooLong => MemError::Invalid("payload too long"),
                FailCode::Misaligned => MemError::Invalid("atomics need an 8-byte-aligned address"),
                FailCode::Invalid => MemError::Invalid("invalid argument"),
                FailCode::WrongScheme => MemError::Invalid("request not allowed for this scheme"),
                other => MemError::Failed(other.to_string()),
            },
            BaselineError::InvalidUse(what) => MemError::Invalid(what),
            other => MemError::Failed(other.to_string()),
        }
    }
}

impl<P: Provider> RemoteMemory for BaselineMemory<P> {
    type Region = BaselineRegion;

    fn allocate(
        &mut self,
        sizes: &[u64],
        _lease: Duration,
        _mode: Mode,
    ) -> Result<Vec<BaselineRegion>, MemError> {
        let mut regions = Vec::with_capacity(sizes.len());
        let mut failed = Ok(());
        for wave in sizes.chunks(self.control.capacity()) {
            let mut ids = Vec::with_capacity(wave.len());
            for &size in wave {
                if failed.is_err() {
                    break;
                }
                match self.control.submit(BaselineRequest::Alloc { size }) {
                    Ok(id) => ids.push((id, size)),
                    Err(e) => keep_first(&mut failed, e),
                }
            }
            for (id, len) in ids {
                match self.control.wait(id) {
                    Ok(BaselineReply::Allocated { addr, rkey }) => {
                        regions.push(BaselineRegion { addr, len, rkey })
                    }
                    Ok(other) => keep_first(&mut failed, unexpected(other)),
                    Err(e) => keep_first(&mut failed, e),
                }
            }
            if failed.is_err() {
                break;
            }
        }
        if let Err(e) = failed {
            let addrs: Vec<u64> = regions.iter().map(|r| r.addr).collect();
            let _ = self.free_all(&addrs); // all or nothing
            return Err(e);
        }
        Ok(regions)
    }

    fn now(&self) -> rnic::Timestamp {
        self.clock.now()
    }

    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        _lease: Duration,
        access: Access,
        _mode: Mode,
    ) -> Result<BaselineRegion, MemError> {
        if !self.in_pool(addr, len) {
            return Err(MemError::Invalid("a range of the pool, not empty"));
        }
        let rkey = match self.scheme {
            Scheme::Mr => Some(
                self.control
                    .register_object(addr, len, access == Access::Read)?,
            ),
            _ => self.control.rkey(),
        };
        Ok(BaselineRegion { addr, len, rkey })
    }

    fn extend(&mut self, _region: &BaselineRegion, _lease: Duration) -> Result<(), MemError> {
        Ok(()) // no leases
    }

    fn expires_within(&self, _region: &BaselineRegion, _margin: Duration) -> bool {
        false
    }

    fn release(&mut self, region: BaselineRegion) -> Result<(), MemError> {
        match (self.scheme, region.rkey) {
            (Scheme::Mr, Some(rkey)) => Ok(self.control.deregister_mr(rkey)?),
            _ => Ok(()),
        }
    }

    fn release_many(&mut self, regions: Vec<BaselineRegion>) -> Result<(), MemError> {
        // MR: the deregistrations pipelined, as Patronus pipelines its revokes.
        let requests: Vec<_> = regions
            .iter()
            .filter_map(|r| match (self.scheme, r.rkey) {
                (Scheme::Mr, Some(rkey)) => Some(BaselineRequest::DeregisterMr { rkey }),
                _ => None,
            })
            .collect();
        self.all_done(&requests)
    }

    fn free(&mut self, region: BaselineRegion) -> Result<(), MemError> {
        let freed = self.control.free(region.addr);
        if let (Err(_), Scheme::Mr, Some(rkey)) = (&freed, self.scheme, region.rkey) {
            // Not an object's first byte: the region this handle held still ends with it.
            let _ = self.control.deregister_mr(rkey);
        }
        Ok(freed?)
    }

    fn execute(&mut self, ops: &[MemOp<'_, BaselineRegion>]) -> Vec<Result<MemOut, MemError>> {
        let mut results: Vec<Option<Result<MemOut, MemError>>> = vec![None; ops.len()];
        let mut todo = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            match Planned::of(op) {
                Ok(p) => todo.push((i, p)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        match self.scheme {
            Scheme::Rpc => self.execute_rpc(&todo, &mut results),
            _ => self.execute_one_sided(&todo, &mut results),
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(MemError::Failed("an op without a result".into()))))
            .collect()
    }
}

impl<P: Provider> NamedRoots for BaselineMemory<P> {
    fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), MemError> {
        Ok(self.control.publish(root_name(name)?, addr, len)?)
    }

    fn lookup(&mut self, name: &str) -> Result<(u64, u64), MemError> {
        Ok(self.control.lookup(root_name(name)?)?)
    }

    fn unpublish(&mut self, name: &str) -> Result<(), MemError> {
        Ok(self.control.unpublish(root_name(name)?)?)
    }
}

fn root_name(name: &str) -> Result<RootName, MemError> {
    RootName::new(name).ok_or(MemError::Invalid(
        "a root name is 1 to 32 bytes of UTF-8 without NUL",
    ))
}
