//! [`Client`]: the driver of one client. It owns the provider's objects (the session's QPs,
//! the staging memory, the completion queues) and the clocks, and pumps the sans-IO
//! [`ClientCore`] that makes the control path's decisions; the calls of Table 2 that go
//! through the control path live here, the data path in `data`, the tickets in `ticket`.

use super::config::{ClientConfig, RECV_SLOTS};
use super::core::ClientCore;
use super::error::{ClientError, unexpected};
use super::lease::micros;
use super::perm::{self, Perm};
use super::qps::{DataCq, Routed, UserTag};
use super::session::{Endpoint, Session};
use super::{posted, pump};
use crate::proto::messages::{Access, Grant, Mode, Reply, Request, Status};
use rnic::{AccessFlags, Context, MemoryBuffer, ProtectionDomain, Provider, Timestamp};
use std::time::Duration;

/// A client of one memory node.
pub struct Client<P: Provider> {
    /// Its lease clock (the device's) and its timer clock (wall time).
    pub(super) clocks: pump::Clocks,
    pub(super) cfg: ClientConfig,
    /// Where sessions are opened.
    pub(super) endpoint: Endpoint<P>,
    /// The current session: control channels, identity, data QPs.
    pub(super) session: Session<P>,
    /// The control path's decisions: requests in flight, routing, retries, back-off, the
    /// lease policy and the client's counts.
    pub(super) core: ClientCore,
    /// Why the memory node ended the current session, once it said so (it refused a
    /// reconnection of the session): what its data ops report until a new session opens.
    pub(super) ended: Option<crate::proto::refusal::SessionEnd>,
    /// Completions of every data QP, of every session, filed per user.
    pub(super) data_cq: std::sync::Arc<DataCq<P>>,
    /// This client's tag on the data CQ, and the lane of the session's data QPs it posts on.
    pub(super) user: UserTag,
    pub(super) lane: usize,
    /// How long the last QP switch took on this client's path (timer clock).
    pub(super) last_switch: Duration,
    /// The batch's completions as the data CQ hands them over (kept to reuse its memory).
    pub(super) routed: Vec<Routed>,
    pub(super) staging: P::Buffer,
    pub(super) staging_mr: P::Mr,
    pub(super) epoch: u64,
    /// Extensions posted without waiting (`Op::Extend` tickets).
    pub(super) posted: posted::PostedOps,
    /// Permissions that may be alive, for rebinding after a QP switch (type 2).
    pub(super) live: Vec<(
        crate::proto::messages::PermissionId,
        std::sync::Weak<std::sync::atomic::AtomicU64>,
    )>,
}

impl<P: Provider> std::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.session.client_id)
            .field("session", &self.session.number)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Client<P> {
    /// Connects to the memory node at `address`: a control QP, a `Hello`, then the data QPs.
    pub fn connect(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
    ) -> Result<Self, ClientError> {
        Self::connect_on(ctx, address, cfg, None)
    }

    /// Connects as [`Client::connect`] does, with the control CQs on `channel`: a thread that
    /// drives several clients can [`arm`](super::SessionControl::arm) them all and sleep on the one channel
    /// until any has a reply ([`rnic::CompletionChannel::wait`]).
    pub fn connect_on(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
        channel: Option<&P::Channel>,
    ) -> Result<Self, ClientError> {
        let pd = ctx.alloc_pd()?;
        let data_cq = std::sync::Arc::new(DataCq::<P>::new(ctx.create_cq(4096)?));
        let user: UserTag = 0;
        data_cq.join(user);
        // `staging_bytes` for batches, and the posted extensions' result slots after them.
        let staging = ctx.alloc_buffer(cfg.staging_bytes.max(4096) + posted::POSTED_STAGING)?;
        let staging_mr = pd.reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        let endpoint = Endpoint {
            ctx: ctx.clone(),
            address: address.clone(),
            pd,
            // The client's own when none is given: a wait for a reply on any of several
            // shards' channels sleeps on it.
            channel: match channel {
                Some(ch) => ch.clone(),
                None => ctx.create_channel()?,
            },
            data_cq: data_cq.cq().clone(),
        };
        let clocks = pump::Clocks {
            lease: ctx.clock(),
            timer: rnic::RealClock::shared(),
        };
        let mut core = ClientCore::new(&cfg, RECV_SLOTS, rand::random());
        let session = Session::open(&endpoint, &cfg, 0, &mut core, &clocks)?;
        let lane = session.qps.lane_of(user);
        Ok(Client {
            clocks,
            endpoint,
            session,
            core,
            ended: None,
            data_cq,
            user,
            lane,
            last_switch: Duration::ZERO,
            routed: Vec::new(),
            staging,
            staging_mr,
            live: Vec::new(),
            epoch: 0,
            posted: posted::PostedOps::default(),
            cfg,
        })
    }

    /// Turns a grant of a request sent at `sent` into a permission, counting it.
    pub(super) fn take_grant(
        &mut self,
        grant: Grant,
        access: Access,
        mode: Mode,
        sent: Timestamp,
    ) -> Perm {
        let now = self.clocks.lease.now();
        let perm = self.core.grant(grant, access, mode, sent, now);
        self.track(perm)
    }

    pub(super) fn track(&mut self, perm: Perm) -> Perm {
        if self.session.type2 {
            self.live.retain(|(_, w)| w.strong_count() > 0);
            self.live
                .push((perm.id(), std::sync::Arc::downgrade(&perm.rkeys)));
        }
        perm
    }

    /// After a QP switch under type-2 isolation: tell the memory node which QP is active and
    /// have every live permission's windows bound to it; the permissions' rkeys are refreshed
    /// in place, so the application keeps using the same `Perm`s.
    pub(crate) fn rebind_after_switch(&mut self) -> Result<(), ClientError> {
        if !self.session.type2 {
            return Ok(());
        }
        let slot = self
            .session
            .qps
            .current(self.lane)
            .ok_or(ClientError::Internal("a session without a data QP"))?
            .slot;
        let session = self.session.number;
        match self.rpc(Request::UseQp { slot })? {
            // The slot is the ended session's: the new one's windows are bound as granted.
            _ if self.session.number != session => return Err(ClientError::SessionLost),
            Reply::Welcome { .. } => {}
            other => return Err(unexpected(other)),
        }
        self.live.retain(|(_, w)| w.strong_count() > 0);
        for (id, rkeys) in self.live.clone() {
            match self.rpc(Request::Rebind { id })? {
                _ if self.session.number != session => return Err(ClientError::SessionLost),
                Reply::Granted(g) => {
                    if let Some(r) = rkeys.upgrade() {
                        r.store(
                            perm::pack(g.buffer_rkey, g.lifetime_rkey),
                            std::sync::atomic::Ordering::SeqCst,
                        );
                    }
                }
                // Ended meanwhile (revoked, expired): nothing to refresh.
                Reply::Failed(Status::NotFound) => {}
                other => return Err(unexpected(other)),
            }
        }
        Ok(())
    }

    /// `allocate(size, lease, mode)`: new memory with a read-write permission over it.
    pub fn allocate(
        &mut self,
        size: u64,
        lease: Duration,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let sent = self.clocks.lease.now();
        match self.rpc(Request::Allocate {
            size,
            lease_us: micros(lease),
            mode,
        })? {
            Reply::Granted(g) => Ok(self.take_grant(g, Access::ReadWrite, mode, sent)),
            other => Err(unexpected(other)),
        }
    }

    /// `acquire(addr, size, lease, access, mode)` over an allocated object's buffer.
    pub fn acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let req = self.acquire_request(addr, size, lease, access, mode);
        self.acquire_by(req, access, mode)
    }

    /// The `Acquire` request [`Client::acquire`] sends (its wait capped below the RPC
    /// timeout, so the memory node answers before the client gives up).
    pub(super) fn acquire_request(
        &self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Request {
        let wait_cap = micros(self.cfg.rpc_timeout * 3 / 4);
        Request::Acquire {
            addr,
            size,
            lease_us: micros(lease),
            access,
            mode,
            wait_us: micros(self.cfg.acquire_wait).min(wait_cap),
        }
    }

    /// `acquire` that does not wait for conflicting holders ([`Op::Acquire`] without `wait`),
    /// blocking.
    pub(crate) fn try_acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease: Duration,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let mut req = self.acquire_request(addr, size, lease, access, mode);
        if let Request::Acquire { wait_us, .. } = &mut req {
            *wait_us = 0;
        }
        self.acquire_by(req, access, mode)
    }

    /// RPC-based extension (the baseline CN-collaborated extension is compared against),
    /// blocking.
    pub(crate) fn extend_rpc(&mut self, perm: &Perm, lease: Duration) -> Result<(), ClientError> {
        self.current(perm)?;
        match self.rpc(Request::Extend {
            id: perm.id(),
            lease_us: micros(lease),
        })? {
            Reply::Extended { lifetime_us } => {
                perm.note_extended(lifetime_us);
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Sends the `Acquire` request `req` and waits for its grant.
    pub(super) fn acquire_by(
        &mut self,
        req: Request,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let sent = self.clocks.lease.now();
        match self.rpc(req)? {
            Reply::Granted(g) => Ok(self.take_grant(g, access, mode, sent)),
            other => Err(unexpected(other)),
        }
    }

    /// `revoke(perm)`: ends the permission; its rkeys fail once this returns.
    /// `SessionLost` if it belongs to an earlier session (it ended with that session).
    pub fn revoke(&mut self, perm: Perm) -> Result<(), ClientError> {
        self.current(&perm)?;
        self.end(perm, false)
    }

    /// Ends the permission and frees the memory (every permission on it ends too). If the
    /// memory node refuses to free (`NotOwner`: the object is another tenant's; or a read-only
    /// permission), the permission is still ended, so nothing outlives the handle this call
    /// consumed, and the refusal is returned.
    ///
    /// A permission of an earlier session ended with it, but the memory is the tenant's: the
    /// client acquires the object again in the current session (shared, read-write, waiting
    /// for conflicting holders as [`Client::acquire`] does) and frees it through that.
    pub fn free(&mut self, perm: Perm) -> Result<(), ClientError> {
        if perm.session != self.session.number {
            let again = self.acquire(
                perm.addr(),
                perm.len(),
                self.cfg.rpc_timeout,
                Access::ReadWrite,
                Mode::Shared,
            )?;
            return self.end(again, true);
        }
        self.end(perm, true)
    }

    /// `SessionLost` unless `perm` was granted in the current session.
    pub(crate) fn current(&self, perm: &Perm) -> Result<(), ClientError> {
        if perm.session == self.session.number {
            Ok(())
        } else {
            Err(ClientError::SessionLost)
        }
    }

    pub(super) fn end(&mut self, perm: Perm, free: bool) -> Result<(), ClientError> {
        self.end_id(perm.id(), free)
    }

    /// Ends the permission `id` (and frees its memory if `free`): see [`Client::free`].
    pub(super) fn end_id(
        &mut self,
        id: crate::proto::messages::PermissionId,
        free: bool,
    ) -> Result<(), ClientError> {
        match self.rpc(Request::Revoke { id, free })? {
            Reply::Revoked => Ok(()),
            Reply::Failed(s @ (Status::NotOwner | Status::InvalidArgument)) if free => {
                // Freeing was refused; the caller gave up the handle, so end the permission.
                match self.rpc(Request::Revoke { id, free: false })? {
                    Reply::Revoked | Reply::Failed(Status::NotFound) => {}
                    other => return Err(unexpected(other)),
                }
                Err(ClientError::from_status(s))
            }
            other => Err(unexpected(other)),
        }
    }
}
