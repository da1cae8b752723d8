//! [`Client`]: the driver of one client. It owns the provider's objects (the session's QPs,
//! the staging memory, the completion queues) and the clocks, and pumps the sans-IO
//! [`ClientCore`] that makes the control path's decisions; the calls of Table 2 that go
//! through the control path live here, the data path in `data`, the tickets in `ticket`.

use super::config::ClientConfig;
use super::error::{ClientError, unexpected};
use super::lease::micros;
use super::node::{ComputeNode, Shared};
use super::perm::{self, Perm};
use super::qps::{DRAIN_USER, LaneView, Routed, UserTag};
use super::session::DataSession;
use super::{posted, pump};
use crate::proto::messages::{Access, Grant, Mode, Reply, Request, Status};
use rnic::{AccessFlags, Context, MemoryBuffer, ProtectionDomain, Provider, Timestamp};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A client of one memory node: one logical client (a thread, a coroutine's driver) of a
/// [`ComputeNode`], whose session it shares with the handle's other clients.
/// [`Client::connect`] makes a compute node with this one client.
pub struct Client<P: Provider> {
    /// What the compute node's clients share: the session, its control path and data QPs.
    pub(super) node: Arc<Shared<P>>,
    /// The lease clock (the device's) and the timer clock (wall time), as the node's.
    pub(super) clocks: pump::Clocks,
    pub(super) cfg: ClientConfig,
    /// The data path of the session this client last saw (a new one is adopted at the next
    /// operation, see [`Client::sync_session`]).
    pub(super) data: Arc<DataSession<P>>,
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
    /// A batch of this client's is posted and not yet taken (`batch_run`).
    pub(super) batch_in_flight: bool,
    /// Such a batch, dropped untaken: finished before the next batch.
    pub(super) abandoned: super::op::Abandoned,
    /// Extensions posted without waiting (`Op::Extend` tickets).
    pub(super) posted: posted::PostedOps,
    /// The one-sided allocation connection, once opened (`one_sided.rs`).
    pub(super) one_sided: Option<super::alloc_link::AllocLink<P>>,
}

impl<P: Provider> std::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("user", &self.user)
            .field("session", &self.data.number)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Drop for Client<P> {
    fn drop(&mut self) {
        // Completions still due to this client are dropped from now on.
        self.node.data_cq.leave(self.user);
    }
}

impl<P: Provider> ComputeNode<P> {
    /// A new client of this compute node: its own tag on the data CQ, its own staging memory
    /// (`staging_bytes` of the configuration), the handle's session. A handle makes at most
    /// 65,535 clients over its life (`InvalidArgument` after).
    pub fn client(&self) -> Result<Client<P>, ClientError> {
        let user = self.shared.next_user.fetch_add(1, Ordering::Relaxed);
        let user = UserTag::try_from(user)
            .ok()
            .filter(|&u| u != DRAIN_USER)
            .ok_or(ClientError::InvalidArgument(
                "a compute node makes at most 65,535 clients",
            ))?;
        Client::of_node(self.shared.clone(), user)
    }
}

impl<P: Provider> Client<P> {
    /// Connects to the memory node at `address`: a compute node of its own (a control QP per
    /// shard and a `Hello`, then the data QPs) with this one client.
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
        ComputeNode::connect_on(ctx, address, cfg, channel)?.client()
    }

    /// Client `user` of the compute node `node`.
    pub(super) fn of_node(node: Arc<Shared<P>>, user: UserTag) -> Result<Self, ClientError> {
        let cfg = node.cfg.clone();
        // `staging_bytes` for batches, and the posted extensions' result slots after them.
        let staging = node
            .endpoint
            .ctx
            .alloc_buffer(cfg.staging_bytes.max(4096) + posted::POSTED_STAGING)?;
        let staging_mr =
            node.endpoint
                .pd
                .reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        node.data_cq.join(user);
        let data = node.lock().session.data.clone();
        let lane = data.qps.lane_of(user);
        Ok(Client {
            clocks: node.clocks.clone(),
            cfg,
            data,
            user,
            lane,
            last_switch: Duration::ZERO,
            routed: Vec::new(),
            staging,
            staging_mr,
            epoch: 0,
            batch_in_flight: false,
            abandoned: Default::default(),
            posted: posted::PostedOps::default(),
            one_sided: None,
            node,
        })
    }

    /// Adopts the compute node's current session if another client (or this one) opened a
    /// new one: the old session's QPs are retired, so what they completed is filed now, and
    /// the result slots of posted extensions nobody polls are free again. One atomic load
    /// when nothing changed.
    pub(super) fn sync_session(&mut self) {
        if self.node.session_number.load(Ordering::Acquire) == self.data.number {
            return;
        }
        let fresh = self.node.lock().session.data.clone();
        self.drain_data_cq();
        // Nothing of the old session will complete now: forgotten extensions' slots are free.
        self.posted.release_forgotten();
        self.lane = fresh.qps.lane_of(self.user);
        self.data = fresh;
    }

    /// Files this client's completions on the data CQ (posted extensions' flushes; a batch's
    /// are dropped, as none is running).
    pub(super) fn drain_data_cq(&mut self) {
        let mut routed = Vec::new();
        // Bounded: a retired session's QPs complete each work request once.
        for _ in 0..1024 {
            routed.clear();
            let n = self.node.data_cq.poll(self.user, &mut routed);
            for r in &routed {
                self.posted.file(&r.wc);
            }
            if n == 0 {
                return;
            }
        }
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
        let perm = self.node.lock().core.grant(grant, access, mode, sent, now);
        self.track(perm)
    }

    /// Keeps a type-2 permission in its session's list, for binding again after a switch.
    pub(super) fn track(&mut self, perm: Perm) -> Perm {
        self.sync_session();
        if self.data.type2 && perm.session == self.data.number {
            let mut live = self.data.live.lock();
            live.retain(|(_, w)| w.strong_count() > 0);
            live.push((perm.id(), Arc::downgrade(&perm.rkeys)));
        }
        perm
    }

    /// The lane's QP to post on now. Under type-2 isolation, once the lane's QP was replaced,
    /// first tells the memory node which QP is active and has every live permission of the
    /// session (every client's) bound to it; the permissions' rkeys are refreshed in place, so
    /// the applications keep using the same `Perm`s. That is done once per replacement, by
    /// whichever client gets there first; the others wait for it (the session's `bound` lock)
    /// instead of posting old rkeys. The QP returned is the one the windows were bound to: if
    /// it is replaced before the post, the post flushes on it and the switch is reported as
    /// any other.
    pub(crate) fn bound_lane(&mut self) -> Result<LaneView<P>, ClientError> {
        let data = self.data.clone();
        let current = || {
            data.qps
                .current(self.lane)
                .ok_or(ClientError::Internal("a session without a data QP"))
        };
        if !data.type2 {
            return current();
        }
        let mut bound = data.bound.lock();
        let lane = current()?;
        if *bound == lane.incarnation {
            return Ok(lane);
        }
        let session = data.number;
        match self.rpc(Request::UseQp { slot: lane.slot })? {
            // The slot is the ended session's: the new one's windows are bound as granted.
            _ if self.data.number != session => return Err(ClientError::SessionLost),
            Reply::Welcome { .. } => {}
            other => return Err(unexpected(other)),
        }
        let live = {
            let mut live = data.live.lock();
            live.retain(|(_, w)| w.strong_count() > 0);
            live.clone()
        };
        for (id, rkeys) in live {
            match self.rpc(Request::Rebind { id })? {
                _ if self.data.number != session => return Err(ClientError::SessionLost),
                Reply::Granted(g) => {
                    if let Some(r) = rkeys.upgrade() {
                        r.store(perm::pack(g.buffer_rkey, g.lifetime_rkey), Ordering::SeqCst);
                    }
                }
                // Ended meanwhile (revoked, expired): nothing to refresh.
                Reply::Failed(Status::NotFound) => {}
                other => return Err(unexpected(other)),
            }
        }
        *bound = lane.incarnation;
        Ok(lane)
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
        if perm.is_one_sided() {
            return Err(ClientError::OneSidedChunk(
                "it is no permission of the manager's (it returns when the session ends)",
            ));
        }
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
        if perm.is_one_sided() {
            return self.free_one_sided(perm);
        }
        self.sync_session();
        if perm.session != self.data.number {
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
    pub(crate) fn current(&mut self, perm: &Perm) -> Result<(), ClientError> {
        self.sync_session();
        if perm.session == self.data.number {
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
