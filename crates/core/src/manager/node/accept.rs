//! Which PD, queues and rights each incoming connection gets, from its connection intent.
//!
//! - A control QP goes to the shard its intent names, in the clients' PD, with its own block
//!   of receive slots posted before its client learns it is connected (flow control) — or on
//!   that shard's shared receive queue (without). None is accepted once the shard's blocks
//!   are all taken. A client's first connection is to shard 0, without an identity (its
//!   `Hello` authenticates it); every other control connection (to another shard, or one
//!   naming a client) must present the client id and secret of an authenticated client.
//! - A connection that names a client and is refused is told why (`proto/refusal.rs`,
//!   `ids.rs`): a wrong secret only when the id names a live session; else that the session
//!   ended (why, to the holder of its secret) or that the node restarted since it opened it.
//! - A data QP must present its client's id and secret, and a reconnection (a slot used
//!   before: its QP faulted) must fit in the tenant's access-fault budget (`faults.rs`); it is created in the client's own PD
//!   when clients are isolated by PD, with every remote right (windows gate access). Every
//!   shard learns of it (type-2 windows of any shard are bound to it).
//! - A client's first control connection (shard 0's) is refused when its source address has
//!   `sessions_per_address` sessions already (`addresses.rs`); its session counts there. It
//!   also takes a token from the node's session rate (`session_rate.rs`): without one it is
//!   refused.
//! - A client's first control connection whose peer presented a verified certificate (mutual
//!   TLS) with a common name the node maps to a tenant carries that tenant to its session:
//!   its `Hello` then needs no secret (`runner.rs`).
//! - A loopback QP (the manager's own) must present the node's loopback secret.

use super::{Accepted, Intent, Role, Shared};
use crate::manager::state::ClientId;
use crate::manager::tenants::TenantId;
use crate::proto::refusal::{Refusal, SessionEnd};
use crate::rpc::ConnectionSlots;
use rnic::{
    AcceptPolicy, AccessFlags, Clock, Peer, ProtectionDomain, Provider, QpInit, QpTiming, QueuePair,
};
use std::collections::HashMap;
use std::sync::Arc;

/// One shard's control queues: a shared receive queue, or a block of slots per connection.
pub(super) struct ControlQueues<P: Provider> {
    pub(super) srq: Option<P::Srq>,
    pub(super) slots: Option<ConnectionSlots<P>>,
    pub(super) send_cq: P::Cq,
    pub(super) recv_cq: P::Cq,
}

pub(super) struct Policy<P: Provider> {
    pub(super) shared: Arc<Shared<P>>,
    pub(super) client_pd: P::Pd,
    pub(super) manager_pd: P::Pd,
    /// Per shard.
    pub(super) control: Vec<ControlQueues<P>>,
    pub(super) data_cq: P::Cq,
    pub(super) timing: QpTiming,
    /// The node's clock (fault budgets refill with it).
    pub(super) clock: Arc<dyn Clock>,
    /// Tenants by the common name of their clients' certificates.
    pub(super) certificates: HashMap<String, TenantId>,
}

impl<P: Provider> Policy<P> {
    /// Whether `intent` carries the secret of an authenticated client; else the refusal
    /// (`proto/refusal.rs`): a live client's id with another secret, or an id with no live
    /// session (ended, and why if the secret is that session's; or of an earlier run).
    /// The tenant an authenticated client acts for.
    fn tenant_of(&self, client: ClientId) -> Option<TenantId> {
        self.shared.tenants_of.lock().get(&client).copied()
    }

    /// The PD of `client`'s data QPs: its own when clients are isolated by PD, else the
    /// clients' shared one.
    fn pd_of(&self, client: ClientId) -> P::Pd {
        self.shared
            .client_domains
            .lock()
            .get(&client)
            .map_or_else(|| self.client_pd.clone(), |(pd, _)| pd.clone())
    }

    fn check_client(&self, intent: &Intent) -> Result<(), String> {
        let live = self.shared.secrets.lock().get(&intent.client_id).copied();
        self.shared
            .ids
            .lock()
            .judge(intent.client_id, intent.secret, live)
            .map_err(|refusal| refusal.text())
    }
}

impl<P: Provider> AcceptPolicy<P> for Policy<P> {
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String> {
        self.create_qp_from(&Peer::LOCAL, private_data)
    }

    fn established(&self, qp: P::Qp, private_data: &[u8]) {
        self.established_from(qp, &Peer::LOCAL, private_data)
    }

    fn create_qp_from(&self, peer: &Peer, private_data: &[u8]) -> Result<P::Qp, String> {
        let intent = Intent::decode(private_data).ok_or("malformed connection intent")?;
        let init = |pd: &P::Pd, send: &P::Cq, recv: &P::Cq, srq, max_recv_wr, access| {
            pd.create_qp(QpInit {
                send_cq: send,
                recv_cq: recv,
                srq,
                max_send_wr: 1024,
                max_recv_wr,
                access,
                timing: self.timing,
            })
            .map_err(|e| e.to_string())
        };
        match intent.role {
            Role::Control => {
                let q = self
                    .control
                    .get(intent.slot as usize)
                    .ok_or("no such manager shard")?;
                // Only a client's first connection comes without an identity; one that
                // names a client (to join another shard, or shard 0 again) proves it.
                if intent.slot > 0 || intent.client_id != 0 {
                    self.check_client(&intent)?;
                }
                if let Some(from) = peer
                    .addr
                    .filter(|_| intent.slot == 0 && intent.client_id == 0)
                    && self.shared.addresses.lock().full(from)
                {
                    return Err(format!(
                        "too many clients connected from {from}: the memory node serves no more from one address"
                    ));
                }
                if q.slots.as_ref().is_some_and(|s| s.available() == 0) {
                    return Err("the memory node serves no more control connections".into());
                }
                // A new session (a client's first connection) takes a token of the node's
                // session rate, whoever opens it.
                if intent.slot == 0
                    && intent.client_id == 0
                    && !self
                        .shared
                        .session_rate
                        .lock()
                        .admit_connection(self.clock.now())
                {
                    return Err(
                        "too many new sessions: the memory node accepts no more this instant; try again shortly"
                            .into(),
                    );
                }
                let credits = q.slots.as_ref().map_or(1, ConnectionSlots::credits);
                let qp = init(
                    &self.client_pd,
                    &q.send_cq,
                    &q.recv_cq,
                    q.srq.as_ref(),
                    credits,
                    AccessFlags::empty(),
                )?;
                // Before its Hello, a client's first connection is served at the small
                // unauthenticated rate (`service.rs`); a connection naming a client is its
                // tenant's.
                let service = if intent.client_id == 0 {
                    self.shared.services.unauthenticated()
                } else {
                    self.tenant_of(intent.client_id)
                        .and_then(|t| self.shared.services.control(t))
                };
                if let Some(service) = service {
                    qp.set_service(service).map_err(|e| e.to_string())?;
                }
                Ok(qp)
            }
            Role::Data => {
                self.check_client(&intent)?;
                let Some(tenant) = self.tenant_of(intent.client_id) else {
                    // Its session ended since the check (its secret is forgotten first).
                    self.check_client(&intent)?;
                    return Err(Refusal::SessionEnded(SessionEnd::Unknown).text());
                };
                // A reconnection is an access fault's: it draws on the tenant's budget.
                let now = self.clock.now();
                if !self
                    .shared
                    .faults
                    .lock()
                    .admit(intent.client_id, tenant, intent.slot, now)
                {
                    tracing::warn!(
                        client = intent.client_id,
                        tenant,
                        "data reconnection refused: the tenant's access-fault budget is spent"
                    );
                    return Err("too many access faults: the tenant is throttled".into());
                }
                let pd = self.pd_of(intent.client_id);
                // With one-sided allocation, its receives take frees (SEND_WITH_INV).
                let recv_cq = self
                    .shared
                    .one_sided
                    .as_ref()
                    .map_or(&self.data_cq, |os| os.free_cq());
                let qp = init(
                    &pd,
                    &self.data_cq,
                    recv_cq,
                    None,
                    16,
                    AccessFlags::REMOTE_ALL,
                )?;
                // The tenant's weight and one-sided rate, per data QP (`service.rs`).
                if let Some(service) = self.shared.services.data(tenant) {
                    qp.set_service(service).map_err(|e| e.to_string())?;
                }
                Ok(qp)
            }
            Role::Alloc => {
                self.check_client(&intent)?;
                let Some(os) = &self.shared.one_sided else {
                    return Err("the memory node does not offer one-sided allocation".into());
                };
                if self.tenant_of(intent.client_id).is_none() {
                    self.check_client(&intent)?;
                    return Err(Refusal::SessionEnded(SessionEnd::Unknown).text());
                }
                let pd = self.pd_of(intent.client_id);
                os.create_qp(intent.client_id, intent.slot, &pd)
            }
            Role::Loopback => {
                if intent.secret != self.shared.loop_secret
                    || intent.slot as usize >= self.control.len()
                {
                    return Err("loopback intent with a wrong secret".into());
                }
                init(
                    &self.manager_pd,
                    &self.data_cq,
                    &self.data_cq,
                    None,
                    16,
                    AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ,
                )
            }
        }
    }

    fn established_from(&self, qp: P::Qp, peer: &Peer, private_data: &[u8]) {
        let Some(intent) = Intent::decode(private_data) else {
            return;
        };
        match intent.role {
            // Chains are posted before the client learns it is connected.
            Role::Alloc => {
                if let Some(os) = &self.shared.one_sided {
                    os.established(qp.qp_num());
                }
            }
            // Every shard may bind type-2 windows on a client's data QP.
            Role::Data => {
                if let Some(os) = &self.shared.one_sided {
                    os.data_qp(intent.client_id, intent.slot, &qp);
                }
                for incoming in &self.shared.incoming {
                    incoming.post(Accepted {
                        intent,
                        qp: qp.clone(),
                        block: None,
                        from: None,
                        certified: None,
                    });
                }
            }
            Role::Control => {
                let k = intent.slot as usize;
                let (Some(incoming), Some(q)) = (self.shared.incoming.get(k), self.control.get(k))
                else {
                    return;
                };
                // Its receive slots are posted before its client learns it is connected.
                let block = match &q.slots {
                    None => None,
                    Some(slots) => match slots.attach(&qp) {
                        Some(block) => Some(block),
                        None => {
                            // Taken meanwhile by another connection: this one is refused.
                            qp.set_error();
                            return;
                        }
                    },
                };
                // A client's first connection: its session counts against its address, and
                // its certificate may name its tenant.
                let first = k == 0 && intent.client_id == 0;
                let from = peer.addr.filter(|_| first);
                if let Some(from) = from {
                    self.shared.addresses.lock().add(from);
                }
                let certified = peer
                    .certificate_name
                    .as_ref()
                    .filter(|_| first)
                    .and_then(|name| self.certificates.get(name).copied());
                incoming.post(Accepted {
                    intent,
                    qp,
                    block,
                    from,
                    certified,
                });
            }
            Role::Loopback => {
                if let Some(incoming) = self.shared.incoming.get(intent.slot as usize) {
                    incoming.post(Accepted {
                        intent,
                        qp,
                        block: None,
                        from: None,
                        certified: None,
                    });
                }
            }
        }
    }
}
