//! The memory node: the manager's shards (`Sim`: one `ManagerCore` per shard over one fake
//! NIC, each stepped on the requests its channel carried) and the runner's work around the
//! core, modelled after `manager/node/runner.rs` (which needs real QPs, so it is not reused):
//! - sessions: a connection gets a fresh `ClientId` when it is accepted; its `Hello` (shard 0)
//!   authenticates it as a tenant (`ManagerCore::set_tenant` on every shard) and is answered
//!   with the `Welcome` there, outside the core, as the runner does;
//! - the per-client record of recent requests (`node/recent.rs`, 128 per channel): an
//!   answered copy gets the same reply again, a copy in the same batch one reply more, a copy
//!   of a waiting request goes to the core (which joins it), another body under a used id is
//!   refused;
//! - departure: a broken connection ends the session on every shard (`ManagerCore::depart`)
//!   and the next batch gives back what it held;
//! - idle work when `Scrub::Idle`: unbind the windows left over freed memory, then scrub.
//!
//! The data QPs' responder side is in `cluster_sim/data.rs` and `world.rs` (`DataCtx`): each
//! one-sided op is checked against the fake NIC's windows as the NIC would, and executed.
//!
//! Not modelled: the hello and idle timeouts, quotas and the fault budget, several PDs
//! (the shared-PD mode: type-1 windows usable from any QP), memory contents beyond which
//! granules are dirty (a READ returns nothing, a CAS or FAA is an 8-byte write).

use super::support::Sim;
use patronus_core::manager::{ClientId, ManagerConfig, Outgoing, Scrub, TenantId};
use patronus_core::proto::messages::{Reply, Request, Status};
use rnic::{MemoryKey, Timestamp};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Requests remembered per client and channel (as `node/recent.rs`).
const RECENT: usize = 128;

/// A session: one client connection, authenticated or not.
pub struct Session {
    pub slot: usize,
    pub conn: u64,
    pub tenant: Option<TenantId>,
    /// Per shard: (wire id, request, first reply).
    recent: Vec<VecDeque<(u64, Request, Option<Reply>)>>,
}

/// A reply leaving the node, with what it answers.
pub struct Sent {
    pub client: ClientId,
    pub slot: usize,
    pub conn: u64,
    pub shard: usize,
    pub wire: u64,
    pub request: Request,
    pub reply: Reply,
    /// Whether the core produced it, first copy (else: another copy, the reply cache or the
    /// runner's refusal).
    pub fresh: bool,
}

pub struct Node {
    pub sim: Sim,
    pub sessions: BTreeMap<ClientId, Session>,
    next_id: ClientId,
    inbox: Vec<Vec<(ClientId, u64, Request)>>,
    batch_copies: HashMap<(ClientId, usize, u64), u32>,
    /// Requests handed to a core and not answered yet (the recent record may have forgotten
    /// a long-waiting one).
    asked: HashMap<(ClientId, usize, u64), Request>,
    /// Buffers zeroed since the last [`Node::take_scrubs`].
    scrubs: Vec<(u64, u64)>,
    /// Batches run.
    pub batches: u64,
}

impl Node {
    /// A fresh node (ids start at `first_id`: a restarted node never reuses an id).
    pub fn new(cfg: ManagerConfig, shards: usize, first_id: ClientId) -> Self {
        let sim = Sim::with_shards(cfg, shards);
        Node {
            inbox: vec![Vec::new(); sim.cores.len()],
            sim,
            sessions: BTreeMap::new(),
            next_id: first_id,
            batch_copies: HashMap::new(),
            asked: HashMap::new(),
            scrubs: Vec::new(),
            batches: 0,
        }
    }

    pub fn shards(&self) -> usize {
        self.sim.cores.len()
    }

    pub fn next_id(&self) -> ClientId {
        self.next_id
    }

    /// Accepts client `slot`'s control connection `conn` (shard 0): a new, unauthenticated
    /// session.
    pub fn connect(&mut self, slot: usize, conn: u64) -> ClientId {
        let id = self.next_id;
        self.next_id += 1;
        let recent = vec![VecDeque::new(); self.shards()];
        self.sessions.insert(
            id,
            Session {
                slot,
                conn,
                tenant: None,
                recent,
            },
        );
        id
    }

    /// The session of client `slot`'s connection `conn`, if it is alive.
    pub fn session_of(&self, slot: usize, conn: u64) -> Option<ClientId> {
        self.sessions
            .iter()
            .find(|(_, s)| s.slot == slot && s.conn == conn)
            .map(|(&id, _)| id)
    }

    /// The session ended (its connection broke): every shard clears it out in its next batch.
    pub fn depart(&mut self, client: ClientId) {
        if self.sessions.remove(&client).is_none() {
            return;
        }
        for core in &mut self.sim.cores {
            core.depart(client);
        }
        for inbox in &mut self.inbox {
            inbox.retain(|(c, _, _)| *c != client);
        }
        self.batch_copies.retain(|(c, _, _), _| *c != client);
        self.asked.retain(|(c, _, _), _| *c != client);
    }

    /// A request arrived on `shard`'s channel of connection (`slot`, `conn`). Replies the
    /// runner gives at once (a `Welcome`, a cached reply, a refusal) go to `out`.
    pub fn receive(
        &mut self,
        slot: usize,
        conn: u64,
        shard: usize,
        wire: u64,
        req: Request,
        out: &mut Vec<Sent>,
    ) {
        let Some(client) = self.session_of(slot, conn) else {
            return; // from a connection that is no session's any more
        };
        if trace(client, wire) {
            eprintln!(
                "t {} node receives {client}/{wire} on {shard}: {req:?}",
                self.sim.now.0
            );
        }
        let cores = &mut self.sim.cores;
        let session = self.sessions.get_mut(&client).expect("session");
        let answer = |reply: Reply, out: &mut Vec<Sent>| {
            out.push(Sent {
                client,
                slot,
                conn,
                shard,
                wire,
                request: req,
                reply,
                fresh: false,
            })
        };
        if let Request::Hello { tenant, .. } = req {
            // The simulation's tenants all authenticate (secrets are not modelled).
            if shard != 0 || session.tenant.is_some_and(|t| t != tenant) {
                return answer(Reply::Failed(Status::Unauthorized), out);
            }
            session.tenant = Some(tenant);
            for core in cores.iter_mut() {
                core.set_tenant(client, tenant);
            }
            let reply = Reply::Welcome {
                client_id: client,
                secret: 1,
                type2: false,
                shards: self.sim.map,
                max_lifetime_us: cores[0].max_lifetime_us(),
            };
            return answer(reply, out);
        }
        if session.tenant.is_none() {
            return answer(Reply::Failed(Status::Unauthorized), out);
        }
        let recent = &mut session.recent[shard];
        match recent.iter().find(|(id, _, _)| *id == wire) {
            Some((_, earlier, _)) if *earlier != req => {
                answer(Reply::Failed(Status::InvalidArgument), out)
            }
            Some((_, _, Some(reply))) => answer(*reply, out),
            Some((_, _, None)) => {
                if self.inbox[shard]
                    .iter()
                    .any(|(c, id, _)| *c == client && *id == wire)
                {
                    *self.batch_copies.entry((client, shard, wire)).or_default() += 1;
                } else {
                    self.inbox[shard].push((client, wire, req));
                    self.asked.insert((client, shard, wire), req);
                }
            }
            None => {
                if recent.len() == RECENT {
                    recent.pop_front();
                }
                recent.push_back((wire, req, None));
                self.inbox[shard].push((client, wire, req));
                self.asked.insert((client, shard, wire), req);
            }
        }
    }

    /// Whether shard `k` has work at `now`.
    fn due(&self, k: usize, now: Timestamp) -> bool {
        let core = &self.sim.cores[k];
        !self.inbox[k].is_empty()
            || core.has_pending_work()
            || core.next_deadline().is_some_and(|d| d <= now)
    }

    /// The earliest deadline of any shard.
    pub fn next_deadline(&self) -> Option<u64> {
        self.sim
            .cores
            .iter()
            .filter_map(|c| c.next_deadline())
            .map(|t| t.0)
            .min()
    }

    /// Runs every shard at `now` until nothing is due, then its idle work; replies to `out`.
    /// Returns whether any batch ran.
    pub fn run(&mut self, now: u64, out: &mut Vec<Sent>) -> bool {
        let now = Timestamp(now);
        self.sim.now = now;
        let mut ran = false;
        for k in 0..self.shards() {
            for _ in 0..64 {
                if !self.due(k, now) {
                    break;
                }
                let reqs = std::mem::take(&mut self.inbox[k]);
                let (replies, keys) = self.sim.shard_step(k, &reqs);
                self.batches += 1;
                ran = true;
                for o in replies {
                    self.send(k, o, &keys, out);
                }
            }
            if self.sim.cfg.scrub == Scrub::Idle && !self.due(k, now) {
                if self.sim.cores[k].unbind_idle(16) {
                    let (replies, keys) = self.sim.shard_step(k, &[]);
                    self.batches += 1;
                    ran = true;
                    for o in replies {
                        self.send(k, o, &keys, out);
                    }
                }
                let zeroed = self.sim.cores[k].scrub_idle(16);
                for &(addr, len) in &zeroed {
                    let over = self.sim.nic.windows_over(addr, len);
                    assert!(
                        over.is_empty(),
                        "idle scrub of {addr:#x}+{len} under windows {over:?}"
                    );
                }
                self.scrubs.extend(zeroed);
            }
        }
        self.scrubs.append(&mut self.sim.scrubbed);
        ran
    }

    /// Buffers zeroed since the last call, in order.
    pub fn take_scrubs(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.scrubs)
    }

    /// Sends the core's reply `o` once per copy (plus the copies of the same batch).
    fn send(&mut self, shard: usize, o: Outgoing, keys: &[MemoryKey], out: &mut Vec<Sent>) {
        let extra = self
            .batch_copies
            .remove(&(o.client, shard, o.req_id))
            .unwrap_or(0);
        let Some(session) = self.sessions.get_mut(&o.client) else {
            panic!("a reply to a departed client: {o:?}");
        };
        if let Some(entry) = session.recent[shard]
            .iter_mut()
            .find(|(id, _, _)| *id == o.req_id)
        {
            entry.2.get_or_insert(o.reply);
        }
        let Some(request) = self.asked.remove(&(o.client, shard, o.req_id)) else {
            panic!(
                "not exactly once: a reply to a request nobody asked or that was answered already: {o:?}"
            );
        };
        if trace(o.client, o.req_id) {
            eprintln!(
                "t {} node answers {}/{} on {shard} x{}+{extra}: {:?}",
                self.sim.now.0, o.client, o.req_id, o.copies, o.reply
            );
        }
        if let Reply::Granted(g) = o.reply {
            // As it leaves, before any later batch changes the header or the windows.
            self.sim.check_grant(o.client, request, &g, keys);
        }
        for copy in 0..o.copies + extra {
            out.push(Sent {
                client: o.client,
                slot: session.slot,
                conn: session.conn,
                shard,
                wire: o.req_id,
                request,
                reply: o.reply,
                fresh: copy == 0,
            });
        }
    }
}

/// Debugging a replayed seed: `PATRONUS_SIM_TRACE=<client>/<wire id>` prints that request's
/// history (node and client side).
pub fn trace(client: ClientId, wire: u64) -> bool {
    static TRACED: std::sync::OnceLock<Option<(ClientId, u64)>> = std::sync::OnceLock::new();
    let traced = TRACED.get_or_init(|| {
        let v = std::env::var("PATRONUS_SIM_TRACE").ok()?;
        let (c, w) = v.split_once('/')?;
        Some((c.parse().ok()?, w.parse().ok()?))
    });
    *traced == Some((client, wire))
}
