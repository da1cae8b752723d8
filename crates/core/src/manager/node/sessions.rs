//! Client sessions on one shard, and how they end.
//!
//! A session starts when a client's control QP is adopted (shard 0: its first connection,
//! unauthenticated until its `Hello` is accepted; another shard: an authenticated client
//! joining). It ends when its control QP breaks (the client closed or crashed; one that broke
//! before it was adopted ends as it is adopted), when an unauthenticated connection stays
//! without a `Hello` past the hello timeout, or when the client is silent on the control path
//! of every shard past the idle timeout (shard 0 judges: every shard stamps the client's
//! shared last-heard time). The shard that sees the end tells the others, and forgets the
//! client's id and secret so that none of its connections can join again (a client that comes
//! back starts a new session). A connection that still names it is told its session ended,
//! and why if it presents the session's own secret (`ids.rs`): never "wrong secret".
//!
//! Invariants: everything a session held is given back — its control and data QPs, its
//! reply cache, its permissions (the core ends them and unbinds their windows in the next
//! batch, before any other reply of that batch leaves), its protection domain and windows
//! (deallocated once the core retired the domain: every window unbound). Its memory stays its
//! tenant's until freed. A permission never outlives its maximum lifetime, so the idle timeout
//! (at least twice that) never cuts off a client that still holds one.

use super::recent::RecentRequests;
use super::*;
use crate::proto::refusal::SessionEnd;
use rnic::{AsyncEvent, Timestamp};
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;

/// One client's session on a shard.
pub(super) struct Session<P: Provider> {
    /// Its control QP on this shard (replies go there).
    pub(super) control: P::Qp,
    /// Its block of receive slots (flow control; `None`: the shared receive queue).
    pub(super) block: Option<u32>,
    /// The tenant it authenticated as (`None`: no `Hello` accepted yet, shard 0 only).
    pub(super) tenant: Option<TenantId>,
    /// Its recent requests, by id, with their replies (retries get the same reply).
    pub(super) recent: RecentRequests,
    /// When it was last heard on any shard's control path, µs (shared by its sessions).
    pub(super) heard: Arc<AtomicU64>,
    /// When the session started.
    pub(super) opened: Timestamp,
    /// The address it came from (shard 0, network transports: counted per address until
    /// the session ends).
    pub(super) from: Option<IpAddr>,
    /// The tenant its certificate names (shard 0, mutual TLS, a mapped common name): its
    /// `Hello` needs no secret.
    pub(super) certified: Option<TenantId>,
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EndReason {
    /// The client closed its control connection in order (or its process ended and the
    /// operating system closed it).
    Closed,
    /// Its control QP failed: a transport or protocol error, a reset, retries exhausted.
    Broken,
    /// Silent on every shard's control path past the idle timeout.
    Idle,
    /// Connected and never authenticated within the hello timeout.
    NoHello,
    /// Another shard ended it.
    Elsewhere,
}

impl EndReason {
    /// What a connection that names the client is told (`None`: nothing to record — it never
    /// authenticated, so it holds no secret; or the shard that ended it recorded why).
    fn told(self) -> Option<SessionEnd> {
        match self {
            EndReason::Closed => Some(SessionEnd::Closed),
            EndReason::Broken => Some(SessionEnd::Failed),
            EndReason::Idle => Some(SessionEnd::Idle),
            EndReason::NoHello | EndReason::Elsewhere => None,
        }
    }
}

impl<P: Provider> Runner<P> {
    /// Starts a session for `client` on `qp`.
    pub(super) fn open_session(
        &mut self,
        client: ClientId,
        qp: P::Qp,
        block: Option<u32>,
        tenant: Option<TenantId>,
        heard: Arc<AtomicU64>,
        now: Timestamp,
    ) {
        self.by_qpn.insert(qp.qp_num(), client);
        let old = self.sessions.insert(
            client,
            Session {
                control: qp,
                block,
                tenant,
                recent: RecentRequests::default(),
                heard,
                opened: now,
                from: None,
                certified: None,
            },
        );
        if let Some(old) = old {
            // A second control QP of the same client on this shard replaces the first.
            self.by_qpn.remove(&old.control.qp_num());
            self.refuse_connection(&old.control, old.block);
        }
    }

    /// Ends `client`'s session on this shard if its control QP there broke before it was
    /// adopted (the client closed right after connecting): the QP's asynchronous event came
    /// when no session had its number and was passed over, so nothing else would end the
    /// session before a sweep. One that breaks after this check raises its event after the
    /// session has the number.
    pub(super) fn end_if_broken(&mut self, client: ClientId) {
        if self
            .sessions
            .get(&client)
            .is_some_and(|s| s.control.state() == QpState::Error)
        {
            self.end_session(client, EndReason::Closed);
        }
    }

    /// Breaks a control connection off and takes its receive slots back (nothing lands in
    /// them once its QP is in the error state).
    pub(super) fn refuse_connection(&mut self, qp: &P::Qp, block: Option<u32>) {
        qp.set_error();
        if let Some(block) = block {
            self.rpc.release(block);
        }
    }

    /// Ends `client`'s session on this shard and gives back what it held (see the module
    /// docs); unless another shard ended it, tells the others and forgets the client.
    pub(super) fn end_session(&mut self, client: ClientId, reason: EndReason) {
        // Its data QPs may have reached this shard before (or without) its control QP.
        self.nic.drop_client(client);
        let Some(session) = self.sessions.remove(&client) else {
            return;
        };
        self.by_qpn.remove(&session.control.qp_num());
        // What it asked and was not yet drawn is not answered (its QP is broken off).
        self.fair.forget(client);
        // Breaking the QP off tells a client that is still there (an idle one) at its next
        // request; a closed one's QP is broken already.
        self.refuse_connection(&session.control, session.block);
        if let Some(from) = session.from {
            self.shared.addresses.lock().remove(from);
        }
        self.batch_copies.retain(|(id, _), _| *id != client);
        self.core.depart(client);
        if self.shard == 0
            && let Some(os) = &self.shared.one_sided
        {
            os.close(client);
        }
        if let (0, Some(tenant)) = (self.shard, session.tenant)
            && let Some(n) = self.tenant_sessions.get_mut(&tenant)
        {
            *n -= 1;
            if *n == 0 {
                self.tenant_sessions.remove(&tenant);
            }
        }
        // Counted once node-wide: by the shard that forgets the client first (an
        // unauthenticated session exists on shard 0 only).
        if reason != EndReason::Elsewhere
            && (self.forget_client(client, reason) || session.tenant.is_none())
        {
            self.ended.count(reason);
            tracing::info!(
                client,
                tenant = session.tenant,
                from = ?session.from,
                reason = ?reason,
                "session ended; what it held is given back"
            );
        }
    }

    /// Forgets `client` node-wide (its secret first: no connection of it is accepted after
    /// this, and one refused is told why: the end is on record before the secret goes) and
    /// tells the other shards to end its sessions there. Whether it was known.
    fn forget_client(&self, client: ClientId, reason: EndReason) -> bool {
        let secret = self.shared.secrets.lock().get(&client).copied();
        if let (Some(secret), Some(why)) = (secret, reason.told()) {
            self.shared.ids.lock().ended(client, secret, why);
        }
        let known = self.shared.secrets.lock().remove(&client).is_some()
            | self.shared.tenants_of.lock().remove(&client).is_some();
        self.shared.heard.lock().remove(&client);
        self.shared.faults.lock().forget(client);
        // This shard's hold on the client's PD goes when its domain retires.
        self.shared.client_domains.lock().remove(&client);
        for (k, mailbox) in self.shared.ended.iter().enumerate() {
            if k != self.shard {
                mailbox.post(client);
            }
        }
        known
    }

    /// Shard 0: reads the device's asynchronous events and passes every broken QP to every
    /// shard. Then ends the sessions whose control QP broke, on this shard — O(1) each, so a
    /// storm of broken data QPs costs no session scans.
    pub(super) fn take_broken_qps(&mut self) {
        if self.shard == 0 {
            let mut broken = Vec::new();
            while let Some(event) = self.ctx.poll_async_event() {
                match event {
                    AsyncEvent::QpDisconnected(qpn) => broken.push((qpn, QpEnd::Closed)),
                    AsyncEvent::QpFatal(qpn)
                    | AsyncEvent::QpAccessError(qpn)
                    | AsyncEvent::QpRequestError(qpn) => broken.push((qpn, QpEnd::Failed)),
                    _ => {}
                }
            }
            for mailbox in &self.shared.broken {
                mailbox.post_all(&broken);
            }
        }
        let broken = self.shared.broken[self.shard].take();
        for (qpn, end) in broken {
            // The number may name a newer QP by now: only a broken one ends its session.
            let client = self.by_qpn.get(&qpn).copied().filter(|c| {
                self.sessions
                    .get(c)
                    .is_some_and(|s| s.control.state() == QpState::Error)
            });
            if let Some(client) = client {
                let reason = match end {
                    QpEnd::Closed => EndReason::Closed,
                    QpEnd::Failed => EndReason::Broken,
                };
                self.end_session(client, reason);
            }
        }
    }

    /// Ends the sessions other shards ended.
    pub(super) fn take_ended_elsewhere(&mut self) {
        let ended = self.shared.ended[self.shard].take();
        for client in ended {
            self.end_session(client, EndReason::Elsewhere);
        }
    }

    /// Ends sessions whose control QP broke, that never authenticated in time, or (shard 0)
    /// whose client went silent past the idle timeout. O(sessions) state reads.
    pub(super) fn sweep_sessions(&mut self, now: Timestamp) {
        self.last_sweep = now;
        let mut over = Vec::new();
        for (&client, s) in &self.sessions {
            let heard = Timestamp(s.heard.load(Ordering::Relaxed));
            let reason = if s.control.state() == QpState::Error {
                Some(EndReason::Closed)
            } else if s.tenant.is_none() && now.0 > s.opened.0 + self.limits.hello_timeout_us {
                Some(EndReason::NoHello)
            } else if self.shard == 0 && now.0 > heard.0 + self.limits.idle_timeout_us {
                Some(EndReason::Idle)
            } else {
                None
            };
            if let Some(reason) = reason {
                over.push((client, reason));
            }
        }
        for (client, reason) in over {
            self.end_session(client, reason);
        }
        self.others.retain(|qp| qp.state() != QpState::Error);
    }

    /// Deallocates the windows (and PDs, bind QPs) of domains the core retired.
    pub(super) fn retire_domains(&mut self) {
        for (_, ids) in self.core.take_retired() {
            self.nic.retire_domain(ids);
        }
    }
}

/// How a QP of a client ended, as its asynchronous event says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QpEnd {
    /// The peer disconnected in order.
    Closed,
    /// A failure (fatal transport error, access or request error).
    Failed,
}

/// Sessions ended, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionEnds {
    /// The client closed its connection in order (its process may have ended: the operating
    /// system closes what a process leaves open).
    pub closed: u64,
    /// The client's control QP failed (transport or protocol error, reset, retries
    /// exhausted): a QP error.
    pub broken: u64,
    /// The client was silent past the idle timeout.
    pub idle: u64,
    /// The connection never authenticated within the hello timeout.
    pub no_hello: u64,
}

impl SessionEnds {
    fn count(&mut self, reason: EndReason) {
        match reason {
            EndReason::Closed => self.closed += 1,
            EndReason::Broken => self.broken += 1,
            EndReason::Idle => self.idle += 1,
            EndReason::NoHello => self.no_hello += 1,
            EndReason::Elsewhere => {}
        }
    }

    /// The sum of two counts (e.g. of two shards).
    pub fn plus(&self, o: &SessionEnds) -> SessionEnds {
        SessionEnds {
            closed: self.closed + o.closed,
            broken: self.broken + o.broken,
            idle: self.idle + o.idle,
            no_hello: self.no_hello + o.no_hello,
        }
    }
}
