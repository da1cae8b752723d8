//! The client library (CN-lib, paper Table 2): control path over a control QP (RPCs into the
//! memory node's shared receive queue), data path as one-sided verbs through windows on a
//! virtual QP with spares.
//!
//! - `allocate`, `acquire`, `extend` (one-sided CAS on the lifetime field), `revoke`, `free`;
//! - `read`, `write`, `cas`, `faa`, and [`Batch`] for many ops behind one doorbell;
//! - every operation without waiting: [`Client::start`] an [`Op`] for a [`Ticket`];
//! - [`Client::status`] (what it knows and counted) and [`Client::control`] (a new session,
//!   arming, sharing, named roots).
//!
//! The control QP is separate from the data QPs, so a data-QP fault never disturbs the
//! control plane. The client's expiry is conservative: (send time of the request + granted
//! lifetime − margin) on its own clock; only durations travel.
//!
//! Everything the client holds at the memory node belongs to a session (`session`): when the
//! control connection is lost, or the memory node ended the session (a refused reconnection
//! says so: [`ClientError::SessionEnded`], never a wrong secret), the next control operation
//! opens a new one (`control`; [`SessionControl::reconnect`] does it at once), and the permissions of
//! the old one are dead ([`ClientError::SessionLost`]). The memory they cover belongs to the
//! tenant, not to the session: [`Client::free`] of an old session's permission frees the
//! object by acquiring it again in the new session.
//!
//! - `session`: what one `Hello` opened (control channels, identity, data QPs);
//! - `control`: blocking and pipelined RPCs, and reconnecting a lost session;
//! - `data`, `posted`: the data path, and CN extensions posted without waiting;
//! - `perm`, `lease`, `renew`: permissions, the lease policy and the client's counts, and
//!   renewal past the maximum lifetime;
//! - `vqp`: the virtual data QP with spares; `error`: [`ClientError`].

mod control;
pub mod core;
mod data;
mod error;
mod lease;
mod many;
mod perm;
mod posted;
mod pump;
mod renew;
mod session;
mod status;
mod ticket;
mod vqp;

pub use data::{Batch, OpResult};
pub use error::ClientError;
pub use lease::{ClientStats, LeasePolicy, RttEstimator};
pub use perm::Perm;
pub use posted::MAX_POSTED;
pub use renew::LongLease;
pub use status::{ClientStatus, SessionControl};
pub use ticket::{Done, Op, Ticket};
pub use vqp::SwitchKind;
// The protocol's credit count: control requests a client may have unanswered at once.
pub use crate::proto::messages::MAX_OUTSTANDING_RPCS;

use self::core::ClientCore;
use crate::proto::messages::{Access, Grant, Mode, Reply, Request, Status};
use rnic::{AccessFlags, Context, MemoryBuffer, ProtectionDomain, Provider, QpTiming, Timestamp};
use session::{Endpoint, Session};

use std::time::Duration;

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Spare data QPs prepared (0 disables the technique).
    pub spare_qps: usize,
    /// Recover broken QPs on a background thread.
    pub background_recovery: bool,
    /// Safety margin subtracted from the local expiry (clock skew, one-way latency).
    pub lease_margin: Duration,
    /// How long a control RPC may take (wall time).
    pub rpc_timeout: Duration,
    /// How long `acquire` waits for conflicting holders to leave (then it fails with
    /// `ConflictTimeout`). Capped at three quarters of `rpc_timeout`, so the memory node
    /// answers before the client gives up; 0 fails a conflicting acquire at once.
    pub acquire_wait: Duration,
    /// The tenant this client acts for, and the tenant's secret (a memory node with no
    /// tenants configured serves everyone as tenant 0).
    pub tenant: crate::proto::messages::TenantId,
    /// The tenant's secret.
    pub tenant_secret: u64,
    /// Bytes of registered staging memory for the data path.
    pub staging_bytes: usize,
    /// QP timing.
    pub qp_timing: QpTiming,
    /// Refuse data ops on a locally expired lease without issuing them (default). Turning it
    /// off lets tests and demos show what the NIC does with a late access.
    pub check_local_expiry: bool,
    /// Round-trip bounds added to every lease asked for, so the lease asked for is what is
    /// left when the grant arrives ([`LeasePolicy`]; 0 asks for leases as given).
    pub lease_slack_rtts: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            spare_qps: 2,
            background_recovery: true,
            lease_margin: Duration::from_micros(5),
            rpc_timeout: Duration::from_secs(5),
            acquire_wait: Duration::from_secs(1),
            tenant: crate::proto::messages::DEFAULT_TENANT,
            tenant_secret: 0,
            staging_bytes: 1 << 20,
            qp_timing: QpTiming::default(),
            check_local_expiry: true,
            lease_slack_rtts: 2,
        }
    }
}

const RECV_SLOTS: u32 = MAX_OUTSTANDING_RPCS;

/// A client of one memory node.
pub struct Client<P: Provider> {
    /// Its lease clock (the device's) and its timer clock (wall time).
    clocks: pump::Clocks,
    cfg: ClientConfig,
    /// Where sessions are opened.
    endpoint: Endpoint<P>,
    /// The current session: control channels, identity, data QPs.
    session: Session<P>,
    /// The control path's decisions: requests in flight, routing, retries, back-off, the
    /// lease policy and the client's counts.
    core: ClientCore,
    /// Why the memory node ended the current session, once it said so (it refused a
    /// reconnection of the session): what its data ops report until a new session opens.
    ended: Option<crate::proto::refusal::SessionEnd>,
    /// Completions of every data QP, of every session.
    data_cq: P::Cq,
    staging: P::Buffer,
    staging_mr: P::Mr,
    epoch: u64,
    /// Extensions posted without waiting (`Op::Extend` tickets).
    posted: posted::PostedOps,
    /// Permissions that may be alive, for rebinding after a QP switch (type 2).
    live: Vec<(
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
    /// drives several clients can [`arm`](SessionControl::arm) them all and sleep on the one channel
    /// until any has a reply ([`rnic::CompletionChannel::wait`]).
    pub fn connect_on(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
        channel: Option<&P::Channel>,
    ) -> Result<Self, ClientError> {
        let pd = ctx.alloc_pd()?;
        let data_cq = ctx.create_cq(4096)?;
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
            data_cq: data_cq.clone(),
        };
        let clocks = pump::Clocks {
            lease: ctx.clock(),
            timer: rnic::RealClock::shared(),
        };
        let mut core = ClientCore::new(&cfg, RECV_SLOTS, rand::random());
        let session = Session::open(&endpoint, &cfg, 0, &mut core, &clocks)?;
        Ok(Client {
            clocks,
            endpoint,
            session,
            core,
            ended: None,
            data_cq,
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
        let slot = self.session.vqp.active_slot();
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

    /// What the client knows and counted: its id, session, the node's maximum lease and shard
    /// map, its clock, statistics and lease policy, its QP switches and spares.
    pub fn status(&self) -> ClientStatus<'_, P> {
        ClientStatus { client: self }
    }

    /// What the session does besides Table 2 and the tickets: open a new session, arm the
    /// control CQs, share objects with other tenants, name them.
    pub fn control(&mut self) -> SessionControl<'_, P> {
        SessionControl { client: self }
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
    fn acquire_by(
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

    fn end(&mut self, perm: Perm, free: bool) -> Result<(), ClientError> {
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

/// A duration in whole microseconds, as leases travel (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn unexpected(reply: Reply) -> ClientError {
    match reply {
        Reply::Failed(s) => ClientError::from_status(s),
        other => ClientError::UnexpectedReply(other.kind_name()),
    }
}
