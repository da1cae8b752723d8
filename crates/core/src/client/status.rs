//! The client's two handles beside Table 2 and the tickets: [`ClientStatus`], what the client
//! knows and counted (read-only), and [`SessionControl`], what a session does besides moving
//! permissions and bytes — opening a new one, arming its completion notifications, sharing
//! objects with other tenants and naming them.

use super::driver::Client;
use super::error::{ClientError, unexpected};
use super::lease::{ClientStats, LeasePolicy};
use super::qps::QpStats;
use crate::proto::messages::TenantId;
use crate::proto::messages::{Access, Reply, Request, RootName};
use crate::proto::shards::ShardMap;
use rnic::{Clock, Provider};
use std::sync::Arc;
use std::time::Duration;

/// What a client knows and counted ([`Client::status`]).
#[derive(Debug)]
pub struct ClientStatus<'a, P: Provider> {
    pub(super) client: &'a Client<P>,
}

impl<P: Provider> Client<P> {
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
}

impl<P: Provider> ClientStatus<'_, P> {
    /// This client's id on the memory node (in the current session: each session gets a
    /// new one).
    pub fn id(&self) -> u32 {
        self.client.node.lock().session.client_id
    }

    /// The number of the current session with the memory node: 0 for the first, one more
    /// for each new session the compute node opened after losing one.
    pub fn session(&self) -> u64 {
        self.client.node.lock().session.number
    }

    /// The longest lease the memory node grants (its maximum lifetime of a permission, learned
    /// when the client connected): a longer lease asked for is capped at it, and a permission
    /// cannot be extended past it (renewal starts a new one, see [`super::LongLease`]).
    pub fn max_lease(&self) -> Duration {
        Duration::from_micros(self.client.node.lock().session.max_lifetime_us)
    }

    /// The memory node's manager shards, as it told this client.
    pub fn shard_map(&self) -> ShardMap {
        self.client.node.lock().session.shards
    }

    /// The clock the client times leases with.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.client.clocks.lease.clone()
    }

    /// The id of this client's compute node, unique in the process: clients with the same
    /// id share their session, its QPs and the counts of [`ClientStatus::stats`].
    pub fn node_id(&self) -> u64 {
        self.client.node.id
    }

    /// What the compute node's clients counted so far (this client's, when it is the only
    /// one: [`Client::connect`]). Clients of one compute node report the same counts
    /// ([`ClientStatus::node_id`]): sum over nodes, not over clients.
    pub fn stats(&self) -> ClientStats {
        let g = self.client.node.lock();
        let mut s = g.core.stats().clone();
        s.stray_replies = g.core.counts().strays;
        s
    }

    /// The lease policy (its round-trip estimate and the slack it adds), as it is now.
    pub fn lease_policy(&self) -> LeasePolicy {
        self.client.node.lock().core.lease_policy().clone()
    }

    /// Control requests issued so far by the compute node's clients, over every session
    /// (retries not counted).
    pub fn rpcs(&self) -> u64 {
        self.client.node.lock().core.counts().submitted
    }

    /// What the session's data QPs did so far: lanes, spares (configured and ready), and
    /// how faults were answered (promotions, reconnections on the path, background
    /// recoveries).
    pub fn qps(&self) -> QpStats {
        QpStats {
            last_switch: self.client.last_switch,
            ..self.client.data.qps.stats()
        }
    }

    /// Blocks until the recovery worker has finished `n` recoveries of this session's QPs, or
    /// `max` passes; returns the stats then. Tests and benchmarks wait for spares to come back
    /// this way.
    pub fn wait_recoveries(&self, n: u64, max: Duration) -> QpStats {
        QpStats {
            last_switch: self.client.last_switch,
            ..self.client.data.qps.wait_recoveries(n, max)
        }
    }

    /// Spare QPs ready now.
    pub fn spares_ready(&self) -> usize {
        self.client.data.qps.spares_ready()
    }

    /// Operations started with tickets (or blocking calls under way) whose outcome was not
    /// taken yet, posted extensions included (the control calls of every client of the
    /// compute node).
    pub fn in_flight(&self) -> usize {
        self.client.node.lock().core.in_flight() + self.client.posted.in_flight()
    }

    /// Posted extensions whose result slot is still held (not yet polled, or cancelled and
    /// not yet completed).
    pub fn posted_in_flight(&self) -> usize {
        self.client.posted.in_flight()
    }
}

/// What a session does besides Table 2 and the tickets ([`Client::control`]).
#[derive(Debug)]
pub struct SessionControl<'a, P: Provider> {
    pub(super) client: &'a mut Client<P>,
}

fn root_name(name: &str) -> Result<RootName, ClientError> {
    RootName::new(name).ok_or(ClientError::InvalidArgument(
        "a root name is 1 to 32 bytes of UTF-8 without NUL",
    ))
}

impl<P: Provider> SessionControl<'_, P> {
    /// Opens a new session with the memory node now and retires the current one: its QPs to
    /// ERR (the node ends the session and its permissions). Permissions of the old session are
    /// refused from now on ([`ClientError::SessionLost`]); nothing of it is sent again. The
    /// client does this by itself at the first control operation after its session was lost or
    /// ended; call this to start the new session at once. On failure the client stays without
    /// a session, and the next control operation tries again.
    pub fn reconnect(&mut self) -> Result<(), ClientError> {
        self.client.reconnect()
    }

    /// Arms the control CQs and the data CQ on the channel given to [`Client::connect_on`]:
    /// the next reply or completion raises an event there. Arm, poll ([`Client::poll_any`],
    /// a posted batch's `poll`), and only if nothing came, wait on the channel.
    pub fn arm(&self) {
        for c in &self.client.node.lock().session.ctrl {
            c.arm();
        }
        self.client.node.data_cq.arm();
    }

    /// Lets clients of `tenant` acquire the object whose buffer starts at `addr` with at most
    /// `access` (`None` withdraws; permissions already granted end by their leases). Only a
    /// client of the owner tenant may share; to anyone else the object does not exist.
    pub fn share(
        &mut self,
        addr: u64,
        tenant: TenantId,
        access: Option<Access>,
    ) -> Result<(), ClientError> {
        match self.client.rpc(Request::Share {
            addr,
            tenant,
            access,
        })? {
            Reply::Shared => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Publishes `[addr, addr + len)` (an object's buffer, e.g. a permission's
    /// [`Perm::addr`](super::Perm::addr) and [`Perm::len`](super::Perm::len)) under `name` for
    /// this client's tenant (named roots: another client of the tenant looks it up, then
    /// acquires the object as usual). `NameTaken` if the tenant has published that name
    /// already.
    pub fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), ClientError> {
        let name = root_name(name)?;
        match self.client.rpc(Request::Publish { name, addr, len })? {
            Reply::Named => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The object this client's tenant published under `name`: (address, length).
    /// `NotFound` if there is none.
    pub fn lookup(&mut self, name: &str) -> Result<(u64, u64), ClientError> {
        let name = root_name(name)?;
        match self.client.rpc(Request::Lookup { name })? {
            Reply::Found { addr, len } => Ok((addr, len)),
            other => Err(unexpected(other)),
        }
    }

    /// Withdraws `name` (the object stays allocated). `NotFound` if there is none.
    pub fn unpublish(&mut self, name: &str) -> Result<(), ClientError> {
        let name = root_name(name)?;
        match self.client.rpc(Request::Unpublish { name })? {
            Reply::Named => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Tamper helper: moves the active data QP to ERR, as a local fault would; the next data
    /// op replaces it (a spare, or a reconnection at the memory node).
    #[cfg(feature = "testing")]
    pub fn break_data_qp(&self) {
        let c = &self.client;
        if let Some(lane) = c.data.qps.current(c.lane) {
            c.node
                .data_cq
                .forget_cause(rnic::QueuePair::qp_num(&lane.qp));
            rnic::QueuePair::set_error(&lane.qp);
        }
    }

    /// Tamper helper: the client id and secret the current session's connections present
    /// (what a hand-made connection needs to claim them).
    #[cfg(feature = "testing")]
    pub fn credentials(&self) -> (u32, u64) {
        let g = self.client.node.lock();
        (g.session.client_id, g.session.data.qps.intent().secret)
    }

    /// Tamper helper: turns the `Granted` reply of a hand-made `Allocate`/`Acquire` (sent at
    /// `sent`, the lease clock's time before sending) into a permission.
    #[cfg(feature = "testing")]
    pub fn adopt(
        &mut self,
        grant: crate::proto::messages::Grant,
        access: Access,
        mode: crate::proto::messages::Mode,
        sent: rnic::Timestamp,
    ) -> super::perm::Perm {
        self.client.take_grant(grant, access, mode, sent)
    }

    /// Tamper helper: sends `req` again under an earlier id, as a retry (or a replayed
    /// message) would. The memory node answers with the reply the id already got.
    #[cfg(feature = "testing")]
    pub fn replay(&mut self, req_id: u64, req: Request) -> Result<Reply, ClientError> {
        let now = self.client.clocks.now();
        let id = self.client.node.lock().core.replay(req_id, req, now)?;
        self.client.wait_for(id)
    }
}
