//! The world: the node, the clients, the network and one virtual clock, all randomness from
//! one seed. Each step advances the clock to the next event (a delivery, a manager deadline,
//! a client's timer or next operation, a fault), delivers what is due, runs the node's
//! shards, lets every client take its turn, injects a fault when one is due, and checks.
//!
//! Faults, each drawn from the seed: per-message delay (FIFO per channel); a channel failure
//! (a lost message breaks the RC QP: the node ends the session through the manager core's
//! departure path, the client loses it and opens a new one); a client freeze past its
//! leases (possibly between checking a lease and using it); a client crash (it disappears,
//! the node sees its QPs fail; a fresh client takes its place later); a node restart (all
//! state gone, every client sees its channels fail); per-client clock skew within the lease
//! margin (rate ±1% and an offset); and on the data link (`cluster_sim/data.rs`), a link that
//! dies before an op executes or after it executed but before its completion came back.

use super::client::{Client, Effect, client_config};
use super::data::{DataLink, DataOp, OpKind, Outcome};
use super::net::{Body, Msg, Net};
use super::node::Node;
use super::oracle::{Counts, Oracle};
use super::support::{Rng, test_config};
use patronus_core::client::ClientConfig;
use patronus_core::client::core::ClientMutation;
use patronus_core::manager::{ClientId, ManagerConfig, Mutation, Scrub, Techniques, TenantId};
use rnic::{MemoryKey, WcStatus};
use std::collections::VecDeque;

/// A hole to switch back on (see `ManagerCore::set_mutation`, `ClientCore::keep_late_grants`,
/// `ClientCore::set_mutation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mut {
    Manager(Mutation),
    KeepLateGrants,
    Client(ClientMutation),
}

/// One run's parameters.
#[derive(Clone, Debug)]
pub struct Params {
    pub seed: u64,
    /// Simulated operations to run before draining.
    pub ops: u64,
    pub mutation: Option<Mut>,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub steps: u64,
    pub ops: u64,
    pub sim_us: u64,
    pub batches: u64,
    pub messages: u64,
    pub clients: usize,
    pub shards: usize,
    pub counts: Counts,
    pub faults: [u64; 4],
    pub handed_back: u64,
    pub left_to_lease: u64,
    pub unknown: u64,
}

thread_local! {
    /// The step the world on this thread is at (a panic's report names it).
    pub static STEP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

const RPC_TIMEOUT: u64 = 20_000;
/// One op in this many meets a data link that dies before it executes, and as many one that
/// dies after (its completion lost).
const LINK_FAULT: u64 = 64;
const MARGIN: u64 = 400;

pub struct World {
    p: Params,
    rng: Rng,
    cfg: ManagerConfig,
    ccfg: ClientConfig,
    shards: usize,
    node: Node,
    net: Net,
    clients: Vec<Client>,
    /// Messages for a frozen client, held until it resumes.
    inbox: Vec<VecDeque<Msg>>,
    /// A crashed client's slot: when its replacement starts.
    crashed: Vec<Option<u64>>,
    oracle: Oracle,
    pub t: u64,
    pub step: u64,
    next_fault: u64,
    faults: [u64; 4],
    draining: bool,
    retired: Report,
    /// Clients started so far (each one's data-op tags start at its number << 40).
    started: u64,
}

fn delay(rng: &mut Rng) -> u64 {
    match rng.below(1000) {
        0..=3 => 5_000 + rng.below(25_000),
        4..=59 => 100 + rng.below(2_000),
        _ => 5 + rng.below(60),
    }
}

impl World {
    pub fn new(p: Params) -> Self {
        let mut rng = Rng::new(p.seed ^ 0x5EED_C1A5);
        let bits = rng.below(8);
        let mut cfg = test_config(Techniques {
            delayed_unbind: bits & 1 != 0,
            contiguity: bits & 2 != 0,
            handover: bits & 4 != 0,
        });
        cfg.scrub = if rng.chance(1, 2) {
            Scrub::Idle
        } else {
            Scrub::OnGrant
        };
        // Small pools: memory is reused (and must be scrubbed) often.
        cfg.buffer_len = 1 << 18;
        let shards = 1 + rng.below(3) as usize;
        let n = 3 + rng.below(4) as usize;
        let ccfg = client_config(RPC_TIMEOUT, MARGIN);
        let node = Node::new(cfg.clone(), shards, 1 + rng.below(1000) as ClientId);
        let clients = (0..n)
            .map(|slot| {
                let skew = rng.below(20_001) as i64 - 10_000;
                let tags = (slot as u64 + 1) << 40;
                Client::new(
                    slot,
                    (slot % 2) as TenantId,
                    &ccfg,
                    rng.next_u64(),
                    skew,
                    0,
                    tags,
                )
            })
            .collect();
        let mut w = World {
            net: Net::new(n, node.shards()),
            shards: node.shards(),
            node,
            clients,
            inbox: vec![VecDeque::new(); n],
            crashed: vec![None; n],
            oracle: Oracle::default(),
            t: 1_000,
            step: 0,
            next_fault: 5_000 + rng.below(30_000),
            faults: [0; 4],
            draining: false,
            retired: Report::default(),
            started: n as u64,
            p,
            rng,
            cfg,
            ccfg,
        };
        w.mutate_node();
        for c in &mut w.clients {
            mutate_client(c, w.p.mutation);
        }
        w
    }

    fn mutate_node(&mut self) {
        if let Some(Mut::Manager(m)) = self.p.mutation {
            for core in &mut self.node.sim.cores {
                core.set_mutation(Some(m));
            }
        }
    }

    /// Runs `p.ops` operations, then drains (no new work, no faults) and checks the end state.
    pub fn run(&mut self) -> Result<Report, String> {
        while self.ops() < self.p.ops {
            self.step()?;
        }
        self.draining = true;
        for c in &mut self.clients {
            c.next_op = u64::MAX;
        }
        let end = self.t + 3 * RPC_TIMEOUT + 4 * self.cfg.max_lifetime_us;
        self.next_fault = end; // nothing is injected any more: the horizon
        while self.t < end {
            self.step()?;
        }
        let occ = self.node.sim.occupancy();
        if occ.permissions != 0 || occ.waiters != 0 {
            return Err(format!("after every lease ended: {occ:?}"));
        }
        for c in &self.clients {
            if c.calls() != 0 {
                return Err(format!("client {} still has {} calls", c.slot, c.calls()));
            }
        }
        Ok(self.report())
    }

    pub fn ops(&self) -> u64 {
        self.retired.ops + self.clients.iter().map(|c| c.ops).sum::<u64>()
    }

    pub fn report(&self) -> Report {
        let mut r = self.retired.clone();
        for c in &self.clients {
            r.ops += c.ops;
            r.handed_back += c.handed_back;
            r.left_to_lease += c.left_to_lease;
            r.unknown += c.unknown;
        }
        r.steps = self.step;
        r.sim_us = self.t;
        r.batches += self.node.batches;
        r.messages = self.net.sent;
        r.clients = self.clients.len();
        r.shards = self.shards;
        r.counts = self.oracle.counts;
        r.faults = self.faults;
        r
    }

    fn next_time(&self) -> u64 {
        let mut next = self.next_fault;
        if let Some(a) = self.net.next_at() {
            next = next.min(a);
        }
        if let Some(d) = self.node.next_deadline() {
            next = next.min(d);
        }
        for (c, crashed) in self.clients.iter().zip(&self.crashed) {
            next = next.min(crashed.unwrap_or_else(|| c.wake()));
        }
        next.max(self.t + 1)
    }

    /// One step; the checks run inside.
    pub fn step(&mut self) -> Result<(), String> {
        self.step += 1;
        STEP.with(|s| s.set(self.step));
        let t = self.next_time();
        self.t = t;
        // Deliveries.
        let mut msgs = Vec::new();
        self.net.due(t, &mut msgs);
        let mut sent = Vec::new();
        for m in msgs {
            match m.body {
                Body::Request(r) => self
                    .node
                    .receive(m.slot, m.conn, m.shard, m.wire, r, &mut sent),
                Body::Reply(_) => self.inbox[m.slot].push_back(m),
            }
        }
        // The node.
        let ran = self.node.run(t, &mut sent);
        self.oracle.scrubbed(&self.node.take_scrubs());
        for s in &sent {
            self.oracle.on_reply(&self.node, s)?;
            let d = delay(&mut self.rng);
            self.net.send(
                t,
                d,
                Msg {
                    at: 0,
                    slot: s.slot,
                    shard: s.shard,
                    conn: s.conn,
                    wire: s.wire,
                    body: Body::Reply(s.reply),
                },
            );
        }
        if ran {
            self.oracle.refresh(&self.node, t)?;
        }
        // The clients.
        for slot in 0..self.clients.len() {
            if let Some(at) = self.crashed[slot] {
                if t < at {
                    self.inbox[slot].clear();
                    continue;
                }
                self.crashed[slot] = None;
            }
            self.client_turn(slot, t)?;
        }
        if !self.draining && t >= self.next_fault {
            self.fault(t);
            self.next_fault = t + 2_000 + self.rng.below(40_000);
        }
        Ok(())
    }

    fn client_turn(&mut self, slot: usize, t: u64) -> Result<(), String> {
        let mut effects = Vec::new();
        let c = &mut self.clients[slot];
        if !c.active(t) {
            return Ok(());
        }
        while let Some(m) = self.inbox[slot].pop_front() {
            let Body::Reply(reply) = m.body else { continue };
            if m.conn != c.conn {
                continue; // an old connection's
            }
            let nic = &self.node.sim.nic;
            let epoch = |k: MemoryKey| nic.window(k.index()).epoch;
            c.on_reply(t, m.shard, m.wire, reply, &epoch, &mut effects)?;
        }
        if t >= c.wake() || !effects.is_empty() {
            let mut data = DataCtx {
                node: &mut self.node,
                oracle: &mut self.oracle,
                rng: &mut self.rng,
            };
            c.turn(t, &mut data, &mut effects)?;
        }
        for (id, old, new) in c.renewals.drain(..) {
            self.oracle.renewed(id, old, new)?;
        }
        for e in effects {
            self.apply(slot, t, e);
        }
        Ok(())
    }

    fn apply(&mut self, slot: usize, t: u64, e: Effect) {
        let conn = self.clients[slot].conn;
        match e {
            Effect::Send { shard, wire, req } => {
                let d = delay(&mut self.rng);
                self.net.send(
                    t,
                    d,
                    Msg {
                        at: 0,
                        slot,
                        shard,
                        conn,
                        wire,
                        body: Body::Request(req),
                    },
                );
            }
            Effect::Connect => {
                self.depart_slot(slot);
                self.node.connect(slot, conn);
            }
            Effect::Disconnect(id) => {
                self.node.depart(id);
                self.net.break_client(slot);
                self.inbox[slot].clear();
            }
        }
    }

    /// Every session of client `slot` ends (its QPs broke).
    fn depart_slot(&mut self, slot: usize) {
        let ids: Vec<ClientId> = self
            .node
            .sessions
            .iter()
            .filter(|(_, s)| s.slot == slot)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.node.depart(id);
        }
    }

    fn fault(&mut self, t: u64) {
        let n = self.clients.len() as u64;
        let slot = self.rng.below(n) as usize;
        if self.crashed[slot].is_some() {
            return;
        }
        let max = self.cfg.max_lifetime_us;
        match self.rng.below(100) {
            // A lost message: the QP breaks, both ends see it.
            0..=39 => {
                self.faults[0] += 1;
                self.net.break_client(slot);
                self.inbox[slot].clear();
                self.depart_slot(slot);
                self.clients[slot].lose(t);
            }
            // A freeze past the client's leases, maybe between a lease check and its use.
            40..=69 => {
                self.faults[1] += 1;
                let c = &mut self.clients[slot];
                let until = t + max / 2 + self.rng.below(3 * max);
                let clock = c.clock(t);
                c.held.retain(|h| clock < h.perm.expiry());
                if c.id.is_some() && c.frozen_until.is_none() && self.rng.chance(1, 2) {
                    c.pending = c.decide_access();
                }
                c.frozen_until = Some(c.frozen_until.map_or(until, |f| f.max(until)));
            }
            // A crash: the client is gone; a fresh one starts in its place later.
            70..=89 => {
                self.faults[2] += 1;
                self.net.break_client(slot);
                self.inbox[slot].clear();
                self.depart_slot(slot);
                let old = &self.clients[slot];
                self.retired.ops += old.ops;
                self.retired.handed_back += old.handed_back;
                self.retired.left_to_lease += old.left_to_lease;
                self.retired.unknown += old.unknown;
                let restart = t + 1_000 + self.rng.below(2 * max);
                let skew = self.rng.below(20_001) as i64 - 10_000;
                self.started += 1;
                let mut fresh = Client::new(
                    slot,
                    old.tenant,
                    &self.ccfg,
                    self.rng.next_u64(),
                    skew,
                    restart,
                    self.started << 40,
                );
                fresh.conn = old.conn + 1;
                mutate_client(&mut fresh, self.p.mutation);
                self.clients[slot] = fresh;
                self.crashed[slot] = Some(restart);
            }
            // The node restarts: all its state is gone, every channel fails.
            _ => {
                self.faults[3] += 1;
                self.retired.batches += self.node.batches;
                let first = self.node.next_id() + 1_000;
                self.node = Node::new(self.cfg.clone(), self.shards, first);
                self.mutate_node();
                self.oracle.node_restarted();
                for slot in 0..self.clients.len() {
                    self.net.break_client(slot);
                    self.inbox[slot].clear();
                    if self.crashed[slot].is_none() {
                        self.clients[slot].lose(t);
                    }
                }
            }
        }
    }
}

fn mutate_client(c: &mut Client, m: Option<Mut>) {
    match m {
        Some(Mut::KeepLateGrants) => c.core.keep_late_grants(true),
        Some(Mut::Client(m)) => c.core.set_mutation(Some(m)),
        _ => {}
    }
}

/// The data path as a client sees it during its turn.
struct DataCtx<'a> {
    node: &'a mut Node,
    oracle: &'a mut Oracle,
    rng: &'a mut Rng,
}

/// A data link's state within one batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    Up,
    /// It died after an op executed: the responder may have run on behind it.
    Running,
    /// Broken: nothing more executes.
    Dead,
}

impl DataCtx<'_> {
    /// Whether the responder NIC lets `op` through.
    fn allowed(&self, op: &DataOp) -> bool {
        let nic = &self.node.sim.nic;
        match op.kind {
            OpKind::Read => nic.can_access(op.rkey, op.addr, op.len, false),
            OpKind::Write => nic.can_access(op.rkey, op.addr, op.len, true),
            OpKind::Cas | OpKind::Faa => nic.can_atomic(op.rkey, op.addr),
        }
    }

    /// The responder's check of `op` (`allowed`), and its execution if it passes.
    fn execute(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        op: &DataOp,
        allowed: bool,
    ) -> Result<(), String> {
        let nic = &self.node.sim.nic;
        let wrapped = op.rkey.index() < nic.window_count()
            && nic.window(op.rkey.index()).epoch >= op.epoch + 256;
        let write = !op.is_read();
        self.oracle
            .access(client, tenant, op.addr, op.len, write, allowed, wrapped)?;
        if allowed {
            self.oracle.executed(op)?;
        }
        Ok(())
    }
}

impl DataLink for DataCtx<'_> {
    fn post(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        ops: &[DataOp],
    ) -> Result<Vec<WcStatus>, String> {
        let mut out = Vec::with_capacity(ops.len());
        let mut link = Link::Up;
        for op in ops {
            let status = match link {
                Link::Up => {
                    let allowed = self.allowed(op);
                    match self.rng.below(LINK_FAULT) {
                        0 => {
                            self.oracle.counts.link_lost_before += 1;
                            link = Link::Dead;
                            WcStatus::RetryExceeded
                        }
                        1 => {
                            self.oracle.counts.link_lost_after += 1;
                            self.execute(client, tenant, op, allowed)?;
                            link = if allowed { Link::Running } else { Link::Dead };
                            WcStatus::RetryExceeded
                        }
                        _ if allowed => {
                            self.execute(client, tenant, op, true)?;
                            WcStatus::Success
                        }
                        _ => {
                            self.execute(client, tenant, op, false)?;
                            link = Link::Dead;
                            WcStatus::RemoteAccessError
                        }
                    }
                }
                Link::Running => {
                    if self.rng.chance(1, 2) && self.allowed(op) {
                        self.execute(client, tenant, op, true)?;
                    } else {
                        link = Link::Dead;
                    }
                    WcStatus::WrFlushError
                }
                Link::Dead => WcStatus::WrFlushError,
            };
            out.push(status);
        }
        Ok(out)
    }

    fn ended(&mut self, op: &DataOp, outcome: Outcome) -> Result<(), String> {
        self.oracle.op_ended(op, outcome)
    }
}

impl super::client::Data for DataCtx<'_> {
    fn cas(&mut self, rkey: MemoryKey, addr: u64, compare: u64, swap: u64) -> Option<u64> {
        self.node.sim.nic.client_cas(rkey, addr, compare, swap)
    }

    fn epoch(&self, rkey: MemoryKey) -> u64 {
        let nic = &self.node.sim.nic;
        if rkey.index() < nic.window_count() {
            nic.window(rkey.index()).epoch
        } else {
            0
        }
    }

    fn pick_object(&mut self, rng: &mut Rng, tenant: TenantId) -> Option<(u64, u64)> {
        let n = self.oracle.object_count();
        if n == 0 {
            return None;
        }
        // Mostly the client's own tenant's objects; sometimes anyone's (refused).
        for _ in 0..4 {
            let i = rng.below(n as u64) as usize;
            let (addr, len, owner) = self.oracle.objects().nth(i)?;
            if owner == tenant || rng.chance(1, 8) {
                return Some((addr, len));
            }
        }
        None
    }
}
