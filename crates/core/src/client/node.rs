//! [`ComputeNode`]: what a compute node's clients of one memory node share (§3.2, §5.5). One
//! session — a control channel per manager shard, the data QPs (lanes and spares) and their
//! recovery worker, the data CQ — serves every [`Client`] the handle makes, so the QPs a
//! compute node holds do not grow with its clients (threads). The memory node sees one client:
//! the compute node is the isolation unit, and its clients act for one tenant.
//!
//! The control path is the sans-IO core ([`super::core`]), one for the session, behind a lock:
//! a client starts its calls under the lock, and waits for them by [`Shared::drive`]: one
//! waiter at a time drives the control channels and sleeps on their completions with the lock
//! released; the others sleep on a condition variable that every turn which filed something
//! signals. Each client keeps its own user tag on the data CQ, staging memory and posted
//! extensions; its calls are its own in the core ([`ClientCore::start_for`]).
//!
//! Invariants:
//! - At most one thread sleeps on the control channels (`driving`); a waiter never sleeps
//!   longer than [`MAX_SLEEP`] without looking at its call again, so no waiter is stranded
//!   when the driver's own call ends and it leaves.
//! - A session is replaced under the lock, and `session_number` moves only after the old
//!   session was retired (its QPs in ERR): a client that sees the new number finds nothing
//!   of the old session left to run, and its posted extensions of it report as such.
//! - Lock order: a session's `bound` (type 2), then `control`, then a session's `live`.

use super::config::{ClientConfig, RECV_SLOTS};
use super::core::ClientCore;
use super::error::ClientError;
use super::pump::{Clocks, MAX_SLEEP, Pump, nap};
use super::qps::{DataCq, QpStats};
use super::session::{Endpoint, Session};
use crate::proto::refusal::SessionEnd;
use crate::rpc::IdleWait;
use parking_lot::{Condvar, Mutex, MutexGuard};
use rnic::{Context, Provider, Timestamp, WcStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Ids of the compute nodes of this process.
static NEXT_NODE_ID: AtomicU64 = AtomicU64::new(0);

/// The control path of the compute node's session, under [`Shared::control`].
pub(super) struct Control<P: Provider> {
    /// The control path's decisions: requests in flight, routing, retries, back-off, the
    /// lease policy and the counts (of every client of the handle).
    pub(super) core: ClientCore,
    /// The current session: control channels, identity, data path.
    pub(super) session: Session<P>,
    /// Why the memory node ended the current session, once it said so (it refused a
    /// reconnection of the session): what data ops report until a new session opens.
    pub(super) ended: Option<SessionEnd>,
    /// A waiter sleeps on the control channels with the lock released.
    driving: bool,
}

impl<P: Provider> Control<P> {
    /// Whether the session is lost: a control QP failed, or the memory node told a client
    /// it no longer knows the session.
    pub(super) fn session_lost(&self) -> bool {
        self.core.is_lost() || self.session.is_broken()
    }
}

/// What the clients of a compute node share (see the module docs).
pub(super) struct Shared<P: Provider> {
    /// The lease clock (the device's) and the timer clock (wall time).
    pub(super) clocks: Clocks,
    pub(super) cfg: ClientConfig,
    /// Where sessions are opened.
    pub(super) endpoint: Endpoint<P>,
    /// Completions of every data QP, of every session, filed per client.
    pub(super) data_cq: Arc<DataCq<P>>,
    pub(super) control: Mutex<Control<P>>,
    /// Signalled after a turn of the control channels filed something, and when the waiter
    /// that drove them leaves.
    turned: Condvar,
    /// The current session's number, read without the lock to notice a new session.
    pub(super) session_number: AtomicU64,
    /// This compute node's id, unique in the process ([`super::ClientStatus::node_id`]).
    pub(super) id: u64,
    pub(super) next_user: AtomicU32,
}

/// A compute node's handle on one memory node: one session whose control channels and data QPs
/// (with spares and a recovery worker) every [`Client`](super::Client) it makes shares. Clone it freely;
/// each thread makes its own client with `ComputeNode::client` (in `driver`).
pub struct ComputeNode<P: Provider> {
    pub(super) shared: Arc<Shared<P>>,
}

impl<P: Provider> Clone for ComputeNode<P> {
    fn clone(&self) -> Self {
        ComputeNode {
            shared: self.shared.clone(),
        }
    }
}

impl<P: Provider> std::fmt::Debug for ComputeNode<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeNode")
            .field(
                "session",
                &self.shared.session_number.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

impl<P: Provider> ComputeNode<P> {
    /// Connects to the memory node at `address`: a session (control QPs and a `Hello`, then
    /// `cfg.spare_qps + 1` data QPs) that the clients of this handle will share.
    pub fn connect(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
    ) -> Result<Self, ClientError> {
        Self::connect_on(ctx, address, cfg, None)
    }

    /// Connects as [`ComputeNode::connect`] does, with the control CQs on `channel` (see
    /// [`Client::connect_on`](super::Client::connect_on)).
    pub fn connect_on(
        ctx: &P::Context,
        address: &P::Address,
        cfg: ClientConfig,
        channel: Option<&P::Channel>,
    ) -> Result<Self, ClientError> {
        let pd = ctx.alloc_pd()?;
        // The handle's own when none is given: a wait for a reply on any of several shards'
        // channels sleeps on it. The data CQ reports there too (when armed): a driver of many
        // clients sleeps on one channel for their replies and their batches' completions.
        let channel = match channel {
            Some(ch) => ch.clone(),
            None => ctx.create_channel()?,
        };
        let data_cq = Arc::new(DataCq::<P>::new(ctx.create_cq_on(4096, &channel)?));
        let endpoint = Endpoint {
            ctx: ctx.clone(),
            address: address.clone(),
            pd,
            channel,
            data_cq: data_cq.clone(),
        };
        let clocks = Clocks {
            lease: ctx.clock(),
            timer: rnic::RealClock::shared(),
        };
        let mut core = ClientCore::new(&cfg, RECV_SLOTS, rand::random());
        let session = Session::open(&endpoint, &cfg, 0, &mut core, &clocks)?;
        Ok(ComputeNode {
            shared: Arc::new(Shared {
                clocks,
                cfg,
                endpoint,
                data_cq,
                control: Mutex::new(Control {
                    core,
                    session,
                    ended: None,
                    driving: false,
                }),
                turned: Condvar::new(),
                session_number: AtomicU64::new(0),
                id: NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed),
                next_user: AtomicU32::new(0),
            }),
        })
    }

    /// QPs this compute node holds to the memory node: a control QP per manager shard, and
    /// the data QPs (lanes and spares) — however many clients share them.
    pub fn qp_count(&self) -> usize {
        let g = self.shared.control.lock();
        let stats = g.session.data.qps.stats();
        g.session.ctrl.len() + stats.lanes + stats.spares
    }

    /// This compute node's id, unique in the process (the id its clients report).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// What the data QPs did so far (every client's faults).
    pub fn qps(&self) -> QpStats {
        self.shared.control.lock().session.data.qps.stats()
    }
}

impl<P: Provider> Shared<P> {
    /// The control path, locked.
    pub(super) fn lock(&self) -> MutexGuard<'_, Control<P>> {
        self.control.lock()
    }

    fn pump<'a>(&'a self, c: &'a mut Control<P>) -> Pump<'a, P> {
        Pump {
            core: &mut c.core,
            links: &mut c.session.ctrl,
            clocks: &self.clocks,
            channel: &self.endpoint.channel,
        }
    }

    /// Puts every send the core has on the wire.
    pub(super) fn flush(&self, c: &mut Control<P>) -> Result<(), ClientError> {
        self.pump(c).flush()
    }

    /// One non-blocking turn of the control channels; wakes the waiters if it filed
    /// anything.
    pub(super) fn turn(&self, c: &mut Control<P>) -> Result<usize, ClientError> {
        let turned = self.pump(c).turn();
        if !matches!(turned, Ok(0)) {
            self.turned.notify_all();
        }
        turned
    }

    /// Drives the control channels until `done(core)` holds, the session is lost, or `until`
    /// (timer clock) passes (see the module docs: one waiter sleeps on the channels, with the
    /// lock released; the others on the condition variable).
    pub(super) fn drive(
        &self,
        g: &mut MutexGuard<'_, Control<P>>,
        mut done: impl FnMut(&ClientCore) -> bool,
        until: Option<Timestamp>,
    ) -> Result<(), ClientError> {
        let mut idle = IdleWait::default();
        loop {
            if g.driving {
                if done(&g.core) || g.core.is_lost() {
                    return Ok(());
                }
                let now = self.clocks.timer.now();
                if until.is_some_and(|u| now >= u) {
                    return Ok(());
                }
                let nap = until.map_or(MAX_SLEEP, |u| u.since(now).min(MAX_SLEEP));
                self.turned.wait_for(g, nap);
                continue;
            }
            let n = self.turn(g)?;
            if done(&g.core) || g.core.is_lost() {
                return Ok(());
            }
            let now = self.clocks.timer.now();
            if until.is_some_and(|u| now >= u) {
                return Ok(());
            }
            if n > 0 {
                idle.busy();
                continue;
            }
            let nap = nap(&g.core, until, now);
            if nap.is_zero() {
                continue;
            }
            let Some(sleeper) = self.pump(g).sleeper() else {
                self.turned.notify_all(); // the last look took a completion
                continue;
            };
            g.driving = true;
            MutexGuard::unlocked(g, || sleeper.sleep(&mut idle, nap));
            g.driving = false;
            // Whoever waits looks again (one of them drives next, if this caller is done).
            self.turned.notify_all();
        }
    }

    /// Opens a new session now and retires the current one (see
    /// [`super::SessionControl::reconnect`]); the clients adopt it at their next operation.
    pub(super) fn reconnect(&self, c: &mut Control<P>) -> Result<(), ClientError> {
        c.core.lose_session(WcStatus::WrFlushError); // until a new session is open
        let number = c.session.number + 1;
        let fresh = Session::open(&self.endpoint, &self.cfg, number, &mut c.core, &self.clocks);
        let fresh = match fresh {
            Ok(s) => s,
            Err(e) => {
                c.core.lose_session(WcStatus::WrFlushError);
                return Err(e);
            }
        };
        let old = std::mem::replace(&mut c.session, fresh);
        old.retire(&self.data_cq);
        drop(old);
        c.ended = None;
        c.core.stats_mut().reconnects += 1;
        self.session_number.store(number, Ordering::Release);
        self.turned.notify_all();
        Ok(())
    }
}
