//! A session with the memory node: what one `Hello` opened. A control channel to every manager
//! shard (shard 0's first: its `Hello` gives the client an id and a secret), and the data QPs
//! (an active one and its spares) that present that id and secret.
//!
//! The memory node ends a session when one of its control QPs fails, or when the client stays
//! silent on the control path past the node's idle timeout: the session's permissions end
//! (their windows are unbound), its id and secret are forgotten, its data QPs are closed.
//! Nothing of a session outlives it, so the client never repairs one: it opens a new session
//! (a new `Hello`, so a new id and secret; new control QPs to every shard; new data QPs) and
//! retires the old one whole. A memory node that keeps an ended session's permissions until
//! their leases run out (one that only forgets the broken QP) is served the same way.
//!
//! A connection of the session refused because the node ended the session meanwhile (a
//! control connection joining another shard, a data QP) is reported as
//! [`ClientError::SessionEnded`] with the node's reason, never as a refused secret.
//!
//! Invariants:
//! - Every QP of a session presents that session's id and secret.
//! - No QP outlives its session: [`Session::retire`] moves every one to ERR before the session
//!   is dropped, so no work request of an old session completes into memory the client reuses.
//! - Sessions are numbered from 0 in the order the client opened them; a permission carries
//!   the number of the session that granted it, and dies with that session.

use super::config::{ClientConfig, RECV_SLOTS};
use super::core::{ClientCore, Owner};
use super::error::{ClientError, unexpected};
use super::pump::{Clocks, ControlLink, Pump};
use super::qps::{DataCq, DataQps, Slotted};
use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{PermissionId, Reply, Request};
use crate::proto::shards::ShardMap;
use parking_lot::Mutex;
use rnic::{
    AccessFlags, Context, ProtectionDomain, Provider, QpInit, QpState, QpTiming, QueuePair,
};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};

/// Where and with what a client opens sessions: the device, the memory node's address, the
/// protection domain every QP is created in, the completion channel its control CQs report to
/// (the caller's, or the client's own), and the data CQ every data QP shares.
pub(super) struct Endpoint<P: Provider> {
    pub(super) ctx: P::Context,
    pub(super) address: P::Address,
    pub(super) pd: P::Pd,
    pub(super) channel: P::Channel,
    pub(super) data_cq: Arc<DataCq<P>>,
}

/// One session with the memory node (see the module docs).
pub(super) struct Session<P: Provider> {
    /// Its number (0: the compute node's first).
    pub(super) number: u64,
    /// A control channel to each manager shard (shard 0 first).
    pub(super) ctrl: Vec<ControlLink<P>>,
    /// Which shard owns which address.
    pub(super) shards: ShardMap,
    /// What the data path of every client of the session uses (each keeps a handle to it).
    pub(super) data: Arc<DataSession<P>>,
    /// The id the `Welcome` gave.
    pub(super) client_id: u32,
    /// The node's maximum lifetime of a permission, µs (from the `Welcome`).
    pub(super) max_lifetime_us: u64,
}

/// A session's data path, shared by the clients of the compute node: its data QPs and, under
/// type-2 isolation, which of the lane's QPs the session's windows are bound to.
///
/// Invariant (type 2): `bound` is the incarnation of the lane's QP every live permission of
/// the session was bound to last; a client posts only when it equals the lane's current
/// incarnation, and whoever finds it behind binds every live permission again (`UseQp` +
/// `Rebind`) under its lock, so one promotion costs one rebinding, whoever's access broke the
/// QP, and no client posts an old rkey on the promoted QP.
pub(super) struct DataSession<P: Provider> {
    /// The session's number.
    pub(super) number: u64,
    /// The data QPs.
    pub(super) qps: DataQps<P>,
    /// Windows are type 2, bound to the active QP: a QP switch needs `UseQp` + `Rebind`.
    pub(super) type2: bool,
    /// Type 2: the lane incarnation the live permissions are bound to.
    pub(super) bound: Mutex<u64>,
    /// Type 2: the permissions of the session that may be alive (every client's), for
    /// binding again after a switch.
    pub(super) live: Mutex<Vec<(PermissionId, Weak<AtomicU64>)>>,
}

fn qp_init<'a, P: Provider>(cq: &'a P::Cq, max_recv: u32, timing: QpTiming) -> QpInit<'a, P> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 1024,
        max_recv_wr: max_recv,
        access: AccessFlags::empty(),
        timing,
    }
}

impl<P: Provider> Endpoint<P> {
    fn control_cq(&self) -> Result<P::Cq, ClientError> {
        Ok(self.ctx.create_cq_on(64, &self.channel)?)
    }

    /// A control channel to shard `slot`, connected with `intent`.
    fn control_channel(
        &self,
        intent: Intent,
        timing: QpTiming,
    ) -> Result<ControlLink<P>, ClientError> {
        let cq = self.control_cq()?;
        let qp = self
            .pd
            .create_qp(qp_init::<P>(&cq, RECV_SLOTS + 1, timing))?;
        qp.connect(&self.address, &intent.encode())
            .map_err(ClientError::from_connect)?;
        Ok(ControlLink::new(&self.ctx, &self.pd, qp, cq, RECV_SLOTS)?)
    }
}

impl<P: Provider> Session<P> {
    /// Opens session `number`: a control QP to shard 0 and a `Hello`, control QPs to the
    /// other shards, then the data QPs, all with the id and secret of the `Welcome`. The
    /// `Hello` goes through `core`, which starts the session's bookkeeping.
    pub(super) fn open(
        at: &Endpoint<P>,
        cfg: &ClientConfig,
        number: u64,
        core: &mut ClientCore,
        clocks: &Clocks,
    ) -> Result<Self, ClientError> {
        let t = cfg.qp_timing;
        let first = Intent {
            role: Role::Control,
            client_id: 0,
            secret: 0,
            slot: 0,
        };
        let mut ctrls = vec![at.control_channel(first, t)?];
        // The Hello gives the other QPs an identity to present.
        let hello = Request::Hello {
            tenant: cfg.tenant,
            secret: cfg.tenant_secret,
        };
        core.begin_session(number);
        let id = core.start(hello, Owner::Reply, clocks.now())?;
        Pump::<P> {
            core: &mut *core,
            links: &mut ctrls,
            clocks,
            channel: &at.channel,
        }
        .run(|c| c.is_done(id), None)?;
        let welcome = core
            .take_outcome(id)
            .unwrap_or(Err(ClientError::RpcTimeout))?;
        let (client_id, secret, type2, shards, max_lifetime_us) = match welcome {
            Reply::Welcome {
                client_id,
                secret,
                type2,
                shards,
                max_lifetime_us,
            } => (client_id, secret, type2, shards, max_lifetime_us),
            other => return Err(unexpected(other)),
        };
        // One control channel per manager shard, with disjoint request ids.
        core.session_opened(shards, client_id, max_lifetime_us);
        let n = shards.shards.max(1) as u64;
        ctrls[0].set_id_step(n);
        for k in 1..n {
            let intent = Intent {
                role: Role::Control,
                client_id,
                secret,
                slot: k as u8,
            };
            let mut channel = at.control_channel(intent, t)?;
            channel.set_id_step(n);
            ctrls.push(channel);
        }
        let intent = Intent {
            role: Role::Data,
            client_id,
            secret,
            slot: 0,
        };
        let mut qps = Vec::with_capacity(cfg.spare_qps + 1);
        for slot in 0..=cfg.spare_qps.min(u8::MAX as usize) as u8 {
            let qp = at.pd.create_qp(qp_init::<P>(at.data_cq.cq(), 1, t))?;
            qp.connect(&at.address, &Intent { slot, ..intent }.encode())
                .map_err(ClientError::from_connect)?;
            qps.push(Slotted::new(slot, qp));
        }
        let qps = DataQps::new(
            qps,
            1,
            at.address.clone(),
            intent,
            cfg.background_recovery,
            at.data_cq.clone(),
        );
        let bound = qps.current(0).map_or(0, |lane| lane.incarnation);
        Ok(Session {
            number,
            ctrl: ctrls,
            shards,
            data: Arc::new(DataSession {
                number,
                qps,
                type2,
                bound: Mutex::new(bound),
                live: Mutex::new(Vec::new()),
            }),
            client_id,
            max_lifetime_us,
        })
    }

    /// Whether a control QP of the session has failed (the memory node ends the session when
    /// one does). One state load per shard.
    pub(super) fn is_broken(&self) -> bool {
        self.ctrl.iter().any(|c| c.qp().state() == QpState::Error)
    }

    /// Ends the session on this side: every QP to ERR (outstanding work flushes; nothing more
    /// executes). Dropping the session then closes the connections.
    pub(super) fn retire(&self, data_cq: &DataCq<P>) {
        for c in &self.ctrl {
            c.qp().set_error();
        }
        self.data.qps.set_error(|qpn| data_cq.forget_cause(qpn));
    }
}
