//! The client library (CN-lib, paper Table 2): control path over a control QP (RPCs into the
//! memory node's shared receive queue), data path as one-sided verbs through windows on a
//! virtual QP with spares.
//!
//! - `allocate`, `acquire`, `extend` (one-sided CAS on the lifetime field), `extend_rpc`,
//!   `revoke`, `free`;
//! - `read`, `write`, `cas`, `faa`, and [`Batch`] for many ops behind one doorbell.
//!
//! The control QP is separate from the data QPs, so a data-QP fault never disturbs the
//! control plane. The client's expiry is conservative: (send time of the request + granted
//! lifetime − margin) on its own clock; only durations travel.

mod data;
mod error;
mod perm;
mod renew;
mod vqp;

pub use data::{Batch, OpResult};
pub use error::ClientError;
pub use perm::Perm;
pub use renew::LongLease;
pub use vqp::SwitchKind;

use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{
    Access, Grant, Mode, Reply, Request, SLOT_SIZE, Status, decode_reply, encode_request,
};
use rnic::{
    AccessFlags, Clock, CompletionQueue, Context, MemoryBuffer, MemoryRegion, ProtectionDomain,
    Provider, QpInit, QpTiming, QueuePair, RecvWr, SendOp, SendWr, Sge, Timestamp, WcOpcode,
    WcStatus, WorkCompletion,
};
use std::sync::Arc;
use std::time::Duration;
use vqp::VirtualQp;

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Spare data QPs prepared (0 disables the technique).
    pub spare_qps: usize,
    /// Recover broken QPs on a background thread.
    pub background_recovery: bool,
    /// Safety margin subtracted from the local expiry, µs (clock skew, one-way latency).
    pub lease_margin_us: u64,
    /// How long a control RPC may take (wall time).
    pub rpc_timeout: Duration,
    /// How long `acquire` waits for conflicting holders to leave, µs (then it fails with
    /// `ConflictTimeout`). Capped at three quarters of `rpc_timeout`, so the memory node
    /// answers before the client gives up; 0 fails a conflicting acquire at once.
    pub acquire_wait_us: u64,
    /// The tenant this client acts for, and the tenant's secret (a memory node with no
    /// tenants configured serves everyone as tenant 0).
    pub tenant: crate::manager::TenantId,
    /// The tenant's secret.
    pub tenant_secret: u64,
    /// Bytes of registered staging memory for the data path.
    pub staging_bytes: usize,
    /// QP timing.
    pub qp_timing: QpTiming,
    /// Refuse data ops on a locally expired lease without issuing them (default). Turning it
    /// off lets tests and demos show what the NIC does with a late access.
    pub check_local_expiry: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            spare_qps: 2,
            background_recovery: true,
            lease_margin_us: 5,
            rpc_timeout: Duration::from_secs(5),
            acquire_wait_us: 1_000_000,
            tenant: crate::manager::DEFAULT_TENANT,
            tenant_secret: 0,
            staging_bytes: 1 << 20,
            qp_timing: QpTiming::default(),
            check_local_expiry: true,
        }
    }
}

const RECV_SLOTS: u32 = 16;
/// Control requests a client may have unanswered at once.
pub const MAX_OUTSTANDING_RPCS: u32 = RECV_SLOTS;

/// A client of one memory node.
pub struct Client<P: Provider> {
    clock: Arc<dyn Clock>,
    cfg: ClientConfig,
    _pd: P::Pd,
    ctrl_qp: P::Qp,
    ctrl_cq: P::Cq,
    ctrl_buf: P::Buffer,
    ctrl_mr: P::Mr,
    data_cq: P::Cq,
    staging: P::Buffer,
    staging_mr: P::Mr,
    vqp: VirtualQp<P>,
    next_req: u64,
    outstanding: u32,
    /// Replies that arrived while waiting for another one.
    early: Vec<(u64, Reply)>,
    /// Requests sent twice (a retry) whose first reply was taken: the second copy is dropped.
    answered_twice: Vec<u64>,
    /// Requests given up on (RPC timeout), and whether each allocated memory: a grant that
    /// arrives after all is handed back at once, so no permission (or memory) is orphaned.
    abandoned: Vec<(u64, bool)>,
    epoch: u64,
    client_id: u32,
    /// Control RPCs issued.
    pub rpcs: u64,
    /// Windows are type 2, bound to the active QP: a QP switch needs `UseQp` + `Rebind`.
    type2: bool,
    /// Permissions that may be alive, for rebinding after a QP switch (type 2).
    live: Vec<(
        crate::proto::messages::PermissionId,
        std::sync::Weak<std::sync::atomic::AtomicU64>,
    )>,
}

impl<P: Provider> std::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.client_id)
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
        let pd = ctx.alloc_pd()?;
        let ctrl_cq = ctx.create_cq(64)?;
        let data_cq = ctx.create_cq(4096)?;
        fn init<'a, P: Provider>(
            send: &'a P::Cq,
            recv: &'a P::Cq,
            max_recv: u32,
            timing: QpTiming,
        ) -> QpInit<'a, P> {
            QpInit {
                send_cq: send,
                recv_cq: recv,
                srq: None,
                max_send_wr: 1024,
                max_recv_wr: max_recv,
                access: AccessFlags::empty(),
                timing,
            }
        }
        let t = cfg.qp_timing;
        let ctrl_qp = pd.create_qp(init::<P>(&ctrl_cq, &ctrl_cq, RECV_SLOTS + 1, t))?;
        let ctrl_buf = ctx.alloc_buffer(2 * RECV_SLOTS as usize * SLOT_SIZE)?;
        let ctrl_mr = pd.reg_mr(&ctrl_buf, 0, ctrl_buf.len(), AccessFlags::LOCAL_WRITE)?;
        let staging = ctx.alloc_buffer(cfg.staging_bytes.max(4096))?;
        let staging_mr = pd.reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        let control = Intent {
            role: Role::Control,
            client_id: 0,
            secret: 0,
            slot: 0,
        };
        ctrl_qp.connect(address, &control.encode())?;
        for slot in 0..RECV_SLOTS {
            ctrl_qp.post_recv(&[recv_wr::<P>(&ctrl_buf, &ctrl_mr, slot)])?;
        }
        // Data QPs are created after the Hello, which gives them an identity to present.
        let mut client = Client {
            clock: ctx.clock(),
            _pd: pd.clone(),
            ctrl_qp,
            ctrl_cq,
            ctrl_buf,
            ctrl_mr,
            data_cq: data_cq.clone(),
            staging,
            staging_mr,
            // Placeholder until the data QPs exist.
            vqp: VirtualQp::new(
                (0, pd.create_qp(init::<P>(&data_cq, &data_cq, 1, t))?),
                Vec::new(),
                address.clone(),
                control,
                false,
            ),
            type2: false,
            live: Vec::new(),
            next_req: 1,
            outstanding: 0,
            early: Vec::new(),
            answered_twice: Vec::new(),
            abandoned: Vec::new(),
            epoch: 0,
            client_id: 0,
            rpcs: 0,
            cfg: cfg.clone(),
        };
        let hello = Request::Hello {
            tenant: cfg.tenant,
            secret: cfg.tenant_secret,
        };
        let (client_id, secret, type2) = match client.rpc(hello)? {
            Reply::Welcome {
                client_id,
                secret,
                type2,
            } => (client_id, secret, type2),
            other => return Err(unexpected(other)),
        };
        client.client_id = client_id;
        client.type2 = type2;
        let intent = Intent {
            role: Role::Data,
            client_id,
            secret,
            slot: 0,
        };
        let mut qps = Vec::with_capacity(cfg.spare_qps + 1);
        for slot in 0..=cfg.spare_qps.min(u8::MAX as usize) as u8 {
            let qp = pd.create_qp(init::<P>(&data_cq, &data_cq, 1, t))?;
            qp.connect(address, &Intent { slot, ..intent }.encode())?;
            qps.push((slot, qp));
        }
        let active = qps.remove(0);
        client.vqp = VirtualQp::new(
            active,
            qps,
            address.clone(),
            intent,
            cfg.background_recovery && cfg.spare_qps > 0,
        );
        Ok(client)
    }

    fn track(&mut self, perm: Perm) -> Perm {
        if self.type2 {
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
        if !self.type2 {
            return Ok(());
        }
        let slot = self.vqp.active_slot();
        match self.rpc(Request::UseQp { slot })? {
            Reply::Welcome { .. } => {}
            other => return Err(unexpected(other)),
        }
        self.live.retain(|(_, w)| w.strong_count() > 0);
        for (id, rkeys) in self.live.clone() {
            match self.rpc(Request::Rebind { id })? {
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

    /// This client's id on the memory node.
    pub fn id(&self) -> u32 {
        self.client_id
    }

    /// The clock the client times leases with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// QP switches so far, and the duration of the last one on the application's path.
    pub fn qp_switches(&self) -> (u64, Duration) {
        (self.vqp.switches, self.vqp.last_switch)
    }

    /// Spare QPs ready now.
    pub fn spares_ready(&mut self) -> usize {
        self.vqp.spares_ready()
    }

    /// `allocate(size, lease, mode)`: new memory with a read-write permission over it.
    pub fn allocate(&mut self, size: u64, lease_us: u64, mode: Mode) -> Result<Perm, ClientError> {
        let sent = self.clock.now();
        match self.rpc(Request::Allocate {
            size,
            lease_us,
            mode,
        })? {
            Reply::Granted(g) => Ok(self.track(Perm::new(
                g,
                Access::ReadWrite,
                mode,
                sent,
                self.cfg.lease_margin_us,
            ))),
            other => Err(unexpected(other)),
        }
    }

    /// `acquire(addr, size, lease, access, mode)` over an allocated object's buffer.
    pub fn acquire(
        &mut self,
        addr: u64,
        size: u64,
        lease_us: u64,
        access: Access,
        mode: Mode,
    ) -> Result<Perm, ClientError> {
        let sent = self.clock.now();
        let wait_cap = (self.cfg.rpc_timeout * 3 / 4).as_micros();
        match self.rpc(Request::Acquire {
            addr,
            size,
            lease_us,
            access,
            mode,
            wait_us: self
                .cfg
                .acquire_wait_us
                .min(u64::try_from(wait_cap).unwrap_or(u64::MAX)),
        })? {
            Reply::Granted(g) => {
                Ok(self.track(Perm::new(g, access, mode, sent, self.cfg.lease_margin_us)))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Turns the `Granted` reply of a pipelined `Allocate`/`Acquire` (sent with
    /// [`Client::submit`] at `sent`, the client clock's time before sending) into a
    /// permission, as [`Client::acquire`] does for a blocking one. The local expiry counts
    /// from `sent`, so a late adoption never overestimates the lease.
    pub fn adopt(&mut self, grant: Grant, access: Access, mode: Mode, sent: Timestamp) -> Perm {
        self.track(Perm::new(
            grant,
            access,
            mode,
            sent,
            self.cfg.lease_margin_us,
        ))
    }

    /// RPC-based extension (the baseline CN-collaborated extension is compared against).
    pub fn extend_rpc(&mut self, perm: &Perm, lease_us: u64) -> Result<(), ClientError> {
        match self.rpc(Request::Extend {
            id: perm.id(),
            lease_us,
        })? {
            Reply::Extended { lifetime_us } => {
                perm.lifetime_us
                    .store(lifetime_us, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Lets clients of `tenant` acquire the object whose buffer starts at `addr` with at most
    /// `access` (`None` withdraws; permissions already granted end by their leases). Only a
    /// client of the owner tenant may share; to anyone else the object does not exist.
    pub fn share(
        &mut self,
        addr: u64,
        tenant: crate::manager::TenantId,
        access: Option<Access>,
    ) -> Result<(), ClientError> {
        match self.rpc(Request::Share {
            addr,
            tenant,
            access,
        })? {
            Reply::Shared => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// `revoke(perm)`: ends the permission; its rkeys fail once this returns.
    pub fn revoke(&mut self, perm: Perm) -> Result<(), ClientError> {
        self.end(perm, false)
    }

    /// Ends the permission and frees the memory (every permission on it ends too). If the
    /// memory node refuses to free (`NotOwner`: the object is another tenant's; or a read-only
    /// permission), the permission is still ended, so nothing outlives the handle this call
    /// consumed, and the refusal is returned.
    pub fn free(&mut self, perm: Perm) -> Result<(), ClientError> {
        self.end(perm, true)
    }

    fn end(&mut self, perm: Perm, free: bool) -> Result<(), ClientError> {
        match self.rpc(Request::Revoke {
            id: perm.id(),
            free,
        })? {
            Reply::Revoked => Ok(()),
            Reply::Failed(s @ (Status::NotOwner | Status::InvalidArgument)) if free => {
                // Freeing was refused; the caller gave up the handle, so end the permission.
                match self.rpc(Request::Revoke {
                    id: perm.id(),
                    free: false,
                })? {
                    Reply::Revoked | Reply::Failed(Status::NotFound) => {}
                    other => return Err(unexpected(other)),
                }
                Err(ClientError::from_status(s))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Sends a request on the control QP and waits for its reply.
    #[allow(clippy::disallowed_methods)] // the RPC timeout is wall time by definition
    pub(crate) fn rpc(&mut self, req: Request) -> Result<Reply, ClientError> {
        let req_id = self.submit(req)?;
        let started = std::time::Instant::now();
        let deadline = started + self.cfg.rpc_timeout;
        // Halfway to the deadline the request is sent once more with the same id: the memory
        // node answers a retry with the reply it gave (or gives) the original.
        let mut retry_at = Some(started + self.cfg.rpc_timeout / 2);
        loop {
            if let Some(i) = self.early.iter().position(|(id, _)| *id == req_id) {
                if retry_at.is_none() {
                    self.expect_copy(req_id);
                }
                return Ok(self.early.swap_remove(i).1);
            }
            match self.poll_cq()? {
                Some((id, reply)) if id == req_id => {
                    if retry_at.is_none() {
                        self.expect_copy(req_id);
                    }
                    return Ok(reply);
                }
                Some(other) => self.stash(other),
                None => {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        if self.abandoned.len() >= MAX_OUTSTANDING_RPCS as usize {
                            self.abandoned.remove(0);
                        }
                        let allocating = matches!(req, Request::Allocate { .. });
                        self.abandoned.push((req_id, allocating));
                        if retry_at.is_none() {
                            self.abandoned.push((req_id, allocating)); // the retry's answer
                        }
                        return Err(ClientError::RpcTimeout);
                    }
                    if retry_at.is_some_and(|t| now >= t) {
                        retry_at = None;
                        self.send_request(req_id, &req)?;
                        self.outstanding += 1; // both copies will be answered
                    }
                    // The manager (or a TCP engine) may need this core.
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Sends a control request without waiting (pipelined RPCs; at most
    /// [`MAX_OUTSTANDING_RPCS`] unanswered at a time). Returns its request id.
    pub fn submit(&mut self, req: Request) -> Result<u64, ClientError> {
        if self.outstanding >= MAX_OUTSTANDING_RPCS {
            return Err(ClientError::InvalidArgument(
                "too many outstanding control requests",
            ));
        }
        self.rpcs += 1;
        let req_id = self.next_req;
        self.next_req += 1;
        self.send_request(req_id, &req)?;
        self.outstanding += 1;
        Ok(req_id)
    }

    /// Tamper helper: sends `req` again under an earlier id, as a retry (or a replayed
    /// message) would. The memory node answers with the reply the id already got.
    #[cfg(feature = "testing")]
    pub fn replay(&mut self, req_id: u64, req: Request) -> Result<Reply, ClientError> {
        self.send_request(req_id, &req)?;
        self.outstanding += 1;
        self.wait_reply(req_id)
    }

    #[cfg(feature = "testing")]
    #[allow(clippy::disallowed_methods)] // the RPC timeout is wall time by definition
    fn wait_reply(&mut self, req_id: u64) -> Result<Reply, ClientError> {
        let deadline = std::time::Instant::now() + self.cfg.rpc_timeout;
        loop {
            if let Some(i) = self.early.iter().position(|(id, _)| *id == req_id) {
                return Ok(self.early.swap_remove(i).1);
            }
            match self.poll_cq()? {
                Some((id, reply)) if id == req_id => return Ok(reply),
                Some(other) => self.stash(other),
                None if std::time::Instant::now() >= deadline => {
                    return Err(ClientError::RpcTimeout);
                }
                None => std::thread::yield_now(),
            }
        }
    }

    /// Keeps a reply that arrived while waiting for another (bounded: duplicates of retried
    /// requests nobody waits for are dropped oldest first).
    /// The memory node answers each copy of a retried request: drop the second answer.
    fn expect_copy(&mut self, req_id: u64) {
        if self.answered_twice.len() >= MAX_OUTSTANDING_RPCS as usize {
            self.answered_twice.remove(0);
        }
        self.answered_twice.push(req_id);
    }

    fn stash(&mut self, reply: (u64, Reply)) {
        if self.early.len() >= 64 {
            self.early.remove(0);
        }
        self.early.push(reply);
    }

    fn send_request(&mut self, req_id: u64, req: &Request) -> Result<(), ClientError> {
        let slot = RECV_SLOTS + (req_id % RECV_SLOTS as u64) as u32;
        let send_off = slot as usize * SLOT_SIZE;
        self.ctrl_buf
            .write(send_off, &encode_request(req_id, req))?;
        let wr = SendWr {
            wr_id: u64::MAX,
            signaled: false,
            op: SendOp::Send {
                local: Some(Sge {
                    addr: self.ctrl_buf.addr() + send_off as u64,
                    length: SLOT_SIZE as u32,
                    lkey: self.ctrl_mr.lkey(),
                }),
            },
        };
        self.ctrl_qp
            .post_send(std::slice::from_ref(&wr))
            .map_err(|(_, e)| ClientError::Verbs(e))?;
        Ok(())
    }

    /// Takes one arrived reply, if any, as (request id, reply).
    pub fn poll_reply(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        if let Some(r) = self.early.pop() {
            return Ok(Some(r));
        }
        self.poll_cq()
    }

    /// Takes one reply from the control CQ (not from the stash), dropping second answers to
    /// retried requests.
    fn poll_cq(&mut self) -> Result<Option<(u64, Reply)>, ClientError> {
        let mut wcs = [WorkCompletion::default(); 1];
        loop {
            if self.ctrl_cq.poll(&mut wcs) == 0 {
                return Ok(None);
            }
            let wc = wcs[0];
            if wc.status != WcStatus::Success {
                return Err(ClientError::Transport(format!("control QP: {}", wc.status)));
            }
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = wc.wr_id as u32;
            let mut buf = [0u8; SLOT_SIZE];
            let read = self.ctrl_buf.read(slot as usize * SLOT_SIZE, &mut buf);
            self.ctrl_qp
                .post_recv(&[recv_wr::<P>(&self.ctrl_buf, &self.ctrl_mr, slot)])?;
            read?;
            if let Ok(reply) = decode_reply(&buf) {
                self.outstanding = self.outstanding.saturating_sub(1);
                if let Some(i) = self.answered_twice.iter().position(|&id| id == reply.0) {
                    self.answered_twice.swap_remove(i);
                    continue;
                }
                if let Some(i) = self.abandoned.iter().position(|&(id, _)| id == reply.0) {
                    let (_, allocating) = self.abandoned.swap_remove(i);
                    if let (_, Reply::Granted(g)) = reply {
                        // Nobody waits for this grant any more: end it (and free what it
                        // allocated); that reply is dropped too.
                        let revoke = Request::Revoke {
                            id: g.id,
                            free: allocating,
                        };
                        if let Ok(rid) = self.submit(revoke) {
                            self.abandoned.push((rid, false));
                        }
                    }
                    continue;
                }
                return Ok(Some(reply));
            }
        }
    }
}

fn recv_wr<P: Provider>(buf: &P::Buffer, mr: &P::Mr, slot: u32) -> RecvWr {
    RecvWr {
        wr_id: slot as u64,
        sge: Some(Sge {
            addr: buf.addr() + (slot as usize * SLOT_SIZE) as u64,
            length: SLOT_SIZE as u32,
            lkey: mr.lkey(),
        }),
    }
}

fn unexpected(reply: Reply) -> ClientError {
    match reply {
        Reply::Failed(s) => ClientError::from_status(s),
        _ => ClientError::Transport(format!("unexpected reply {reply:?}")),
    }
}
