//! The manager core against a model of who may access what.
//!
//! The model is a set of permissions (client, object, rights, deadline, how it ended) built
//! from the replies the clients receive, the lifetime words they and the manager CAS, and the
//! virtual clock. After every batch, for *every* grant ever issued, the fake NIC must let its
//! rkeys through exactly when the model says the permission is alive — with one exception,
//! delayed unbinding (§5.4 #2): a dead permission's window may still be bound if (and only if)
//! delayed unbinding is on and the window covers memory nobody owns:
//! - its buffer window (or contiguous window) after the object was *freed* by a revoke, while
//!   that object has not been allocated again; or
//! - its pooled header's lifetime-word window, while that header has not been used again.
//!
//! Also checked per batch: every request gets exactly one reply; grants respect
//! shared/exclusive conflicts; stale ids are filtered (a revoke/extend succeeds only for a live
//! permission of that client); no bound window is unaccounted for; occupancy matches the model.
//! The storm test runs thousands of random operations of 8 clients and then checks that every
//! pool drains once all leases are over.

mod support;

use patronus_core::manager::{
    BindTarget, ClientId, ManagerConfig, Outgoing, SlabConfig, Techniques,
};
use patronus_core::proto::header::HEADER_SIZE;
use patronus_core::proto::messages::{Access, Grant, Mode, PermissionId, Reply, Request, Status};
use proptest::prelude::*;
use std::collections::HashMap;
use support::*;

const HDR: u64 = HEADER_SIZE as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Revoked,
    Freed,
    Expired,
}

#[derive(Clone, Debug)]
struct MPerm {
    client: ClientId,
    grant: Grant,
    object: u64,
    mode: Mode,
    /// The lifetime the manager will go by: the last non-zero value of the lifetime word.
    seen: u64,
    hard: u64,
    /// Windows as granted.
    buffer_target: BindTarget,
    lifetime_target: BindTarget,
    /// Bind epochs of the two windows at the grant (to tell an 8-bit key wrap from the key).
    buffer_epoch: u64,
    lifetime_epoch: u64,
    obj_gen: u64,
    hdr_gen: u64,
    end: Option<End>,
    ended_at: u64,
}

impl MPerm {
    fn deadline(&self) -> u64 {
        (self.grant.id.start_us + self.seen).min(self.hard)
    }
}

#[derive(Clone, Copy, Debug)]
struct MObj {
    live: bool,
    generation: u64,
    class: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        client: u32,
        size: u64,
        lease: u64,
        excl: bool,
    },
    Acquire {
        client: u32,
        object: usize,
        size_pct: u64,
        rw: bool,
        excl: bool,
        wait: u64,
        lease: u64,
    },
    Revoke {
        shift: u32,
        grant: usize,
        free: bool,
    },
    RpcExtend {
        shift: u32,
        grant: usize,
        lease: u64,
    },
    CasExtend {
        grant: usize,
        add: u64,
    },
    Garbage {
        client: u32,
        kind: u8,
        x: u64,
    },
    Step {
        dt: u64,
    },
}

struct Harness {
    sim: Sim,
    t: Techniques,
    clients: u32,
    perms: Vec<MPerm>,
    by_id: HashMap<PermissionId, usize>,
    objects: HashMap<u64, MObj>,
    object_list: Vec<u64>,
    header_gen: HashMap<u64, u64>,
    reqs: HashMap<u64, (ClientId, Request)>,
    checks: u64,
}

impl Harness {
    fn new(cfg: ManagerConfig, clients: u32, shards: usize) -> Self {
        Harness {
            t: cfg.techniques,
            sim: Sim::with_shards(cfg, shards),
            clients,
            perms: Vec::new(),
            by_id: HashMap::new(),
            objects: HashMap::new(),
            object_list: Vec::new(),
            header_gen: HashMap::new(),
            reqs: HashMap::new(),
            checks: 0,
        }
    }

    fn submit(&mut self, client: ClientId, req: Request) {
        let id = self.sim.submit(client, req);
        self.reqs.insert(id, (client, req));
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Allocate {
                client,
                size,
                lease,
                excl,
            } => self.submit(
                client % self.clients,
                Request::Allocate {
                    size,
                    lease_us: lease,
                    mode: if excl { Mode::Exclusive } else { Mode::Shared },
                },
            ),
            Op::Acquire {
                client,
                object,
                size_pct,
                rw,
                excl,
                wait,
                lease,
            } => {
                if self.object_list.is_empty() {
                    return;
                }
                let o = self.object_list[object % self.object_list.len()];
                let len = self.objects[&o].class - self.slot();
                self.submit(
                    client % self.clients,
                    Request::Acquire {
                        addr: o + self.slot(),
                        size: (len * size_pct / 100).max(1),
                        lease_us: lease,
                        access: if rw { Access::ReadWrite } else { Access::Read },
                        mode: if excl { Mode::Exclusive } else { Mode::Shared },
                        wait_us: wait,
                    },
                );
            }
            Op::Revoke { shift, grant, free } => {
                if self.perms.is_empty() {
                    return;
                }
                let p = &self.perms[grant % self.perms.len()];
                let (c, id) = ((p.client + shift) % self.clients, p.grant.id);
                self.submit(c, Request::Revoke { id, free });
            }
            Op::RpcExtend {
                shift,
                grant,
                lease,
            } => {
                if self.perms.is_empty() {
                    return;
                }
                let p = &self.perms[grant % self.perms.len()];
                let (c, id) = ((p.client + shift) % self.clients, p.grant.id);
                self.submit(
                    c,
                    Request::Extend {
                        id,
                        lease_us: lease,
                    },
                );
            }
            Op::CasExtend { grant, add } => {
                if self.perms.is_empty() {
                    return;
                }
                let i = grant % self.perms.len();
                let (g, seen) = (self.perms[i].grant, self.perms[i].seen);
                // Live or not: a dead permission's CAS is a stray access (it must be rejected,
                // or land in memory nobody owns).
                let r = self.sim.client_cas_extend(&g, seen, seen + add);
                if r == Some(seen) && self.perms[i].end.is_none() {
                    self.perms[i].seen = seen + add;
                }
            }
            Op::Garbage { client, kind, x } => {
                let c = client % self.clients;
                let cfg = &self.sim.cfg;
                let req = match kind % 5 {
                    0 => Request::Acquire {
                        addr: cfg.buffer_base + (x % cfg.buffer_len),
                        size: 8,
                        lease_us: 100,
                        access: Access::Read,
                        mode: Mode::Shared,
                        wait_us: 0,
                    },
                    1 => Request::Revoke {
                        id: PermissionId {
                            header_addr: x,
                            start_us: x >> 7,
                        },
                        free: x & 1 == 1,
                    },
                    2 => Request::Allocate {
                        size: if x & 1 == 0 { 0 } else { x | (1 << 40) },
                        lease_us: x & 3,
                        mode: Mode::Shared,
                    },
                    3 => Request::Extend {
                        id: PermissionId {
                            header_addr: cfg.header_base + (x % 64) * HDR,
                            start_us: x,
                        },
                        lease_us: x,
                    },
                    _ => Request::Acquire {
                        addr: x,
                        size: 0,
                        lease_us: 10,
                        access: Access::ReadWrite,
                        mode: Mode::Exclusive,
                        wait_us: x & 0xffff,
                    },
                };
                self.submit(c, req);
            }
            Op::Step { dt } => self.step(dt),
        }
    }

    /// Runs the queued requests at `now + dt` and checks everything.
    fn step(&mut self, dt: u64) {
        self.sim.advance(dt);
        let out = self.sim.run();
        let now = self.sim.now.0;
        // The manager goes by the lifetime words: read them (0 means refused or expired).
        // Lifetimes only grow here, so the largest value seen is the one the manager adopted
        // last — an RPC extension's reply tells it even if a refusal zeroed the word since.
        // (A header granted again in this run belongs to the new permission now: the old one
        // ended in this run or before, and its word says nothing about it.)
        let regranted: Vec<u64> = out
            .iter()
            .filter_map(|o| match o.reply {
                Reply::Granted(g) => Some(g.id.header_addr),
                _ => None,
            })
            .collect();
        for p in self.perms.iter_mut().filter(|p| p.end.is_none()) {
            if !regranted.contains(&p.grant.id.header_addr) {
                let w = self.sim.nic.word(p.grant.lifetime_addr());
                p.seen = p.seen.max(w);
            }
        }
        for o in &out {
            let Reply::Extended { lifetime_us } = o.reply else {
                continue;
            };
            let Some(&(_, Request::Extend { id, .. })) = self.reqs.get(&o.req_id) else {
                panic!("Extended answers an extend");
            };
            let i = *self.by_id.get(&id).expect("extended an id never granted");
            if self.perms[i].end.is_none() {
                self.perms[i].seen = self.perms[i].seen.max(lifetime_us);
            }
        }
        // Every deadline at or before `now` has been processed (the driver settles).
        for p in self.perms.iter_mut().filter(|p| p.end.is_none()) {
            if p.deadline() <= now {
                p.end = Some(End::Expired);
                p.ended_at = now;
            }
        }
        // Revokes are decided in `plan`, before any grant of the run leaves `finish`; their
        // effects (freed memory, failed waiters) are ordered before the other replies.
        let is_revoke = |o: &Outgoing, reqs: &HashMap<u64, (ClientId, Request)>| {
            matches!(reqs.get(&o.req_id), Some((_, Request::Revoke { .. })))
        };
        let (first, rest): (Vec<Outgoing>, Vec<Outgoing>) =
            out.iter().partition(|o| is_revoke(o, &self.reqs));
        for o in first.iter().chain(&rest) {
            self.on_reply(o, now);
        }
        self.check(now);
    }

    fn ambiguous(p: &MPerm, now: u64) -> bool {
        // Its deadline passed in this very run: the manager may have served a request for it
        // before the (rescheduled) expiry in the same run, or after.
        p.end == Some(End::Expired) && p.ended_at == now
    }

    fn free_object(&mut self, object: u64, now: u64) {
        for p in self.perms.iter_mut().filter(|p| p.object == object) {
            if p.end.is_none() || Self::ambiguous(p, now) {
                p.end = Some(End::Freed);
                p.ended_at = now;
            }
        }
        self.objects.get_mut(&object).expect("known object").live = false;
    }

    fn on_reply(&mut self, o: &Outgoing, now: u64) {
        let (client, req) = self.reqs.remove(&o.req_id).expect("one reply per request");
        assert_eq!(client, o.client);
        match (req, o.reply) {
            (Request::Allocate { mode, .. }, Reply::Granted(g)) => {
                let slot = self.slot();
                let object = g.buffer_addr - slot;
                let obj = self.objects.entry(object).or_insert(MObj {
                    live: false,
                    generation: 0,
                    class: g.buffer_len + slot,
                });
                assert!(!obj.live, "allocated live memory again: {g:?}");
                obj.live = true;
                obj.generation += 1;
                if obj.generation == 1 {
                    self.object_list.push(object);
                }
                self.add(client, g, mode);
            }
            (
                Request::Acquire {
                    addr, mode, size, ..
                },
                Reply::Granted(g),
            ) => {
                let object = g.buffer_addr - self.slot();
                assert_eq!(g.buffer_addr, addr);
                assert!(size >= 1 && size <= g.buffer_len);
                assert!(
                    self.objects.get(&object).is_some_and(|o| o.live),
                    "acquire granted on memory that is not allocated: {g:?}"
                );
                for p in self
                    .perms
                    .iter()
                    .filter(|p| p.object == object && p.end.is_none())
                {
                    assert!(
                        mode == Mode::Shared && p.mode == Mode::Shared,
                        "conflict: {mode:?} grant {g:?} while {:?} holds {:?}",
                        p.mode,
                        p.grant
                    );
                }
                self.add(client, g, mode);
            }
            (Request::Revoke { id, free }, Reply::Revoked) => {
                let i = *self
                    .by_id
                    .get(&id)
                    .expect("revoked an id that was never granted");
                let p = &mut self.perms[i];
                assert_eq!(p.client, client, "revoked another client's permission");
                assert!(
                    p.end.is_none() || Self::ambiguous(p, now),
                    "revoked a dead permission (stale id accepted): {p:?}"
                );
                p.end = Some(End::Revoked);
                p.ended_at = now;
                if free {
                    let object = p.object;
                    self.free_object(object, now);
                    self.perms[i].end = Some(End::Freed);
                }
            }
            (Request::Revoke { id, free: true }, Reply::Failed(Status::InvalidArgument)) => {
                // Only a writer may free memory (freeing ends everyone's permissions).
                let i = *self
                    .by_id
                    .get(&id)
                    .expect("refused a free for an unknown id");
                let p = &self.perms[i];
                assert!(
                    !p.buffer_target
                        .access
                        .contains(rnic::AccessFlags::REMOTE_WRITE),
                    "a writer's free was refused: {p:?}"
                );
            }
            (Request::Revoke { id, .. }, Reply::Failed(Status::NotFound))
            | (Request::Extend { id, .. }, Reply::Failed(Status::NotFound)) => {
                if let Some(&i) = self.by_id.get(&id) {
                    let p = &self.perms[i];
                    assert!(
                        !(p.end.is_none() && p.client == client),
                        "a live permission was not found: {p:?}"
                    );
                }
            }
            (Request::Extend { id, .. }, Reply::Extended { lifetime_us }) => {
                let i = *self.by_id.get(&id).expect("extended an id never granted");
                let p = &self.perms[i];
                assert_eq!(p.client, client);
                assert!(p.end.is_none(), "extended a dead permission: {p:?}");
                assert!(p.seen >= lifetime_us);
                assert!(lifetime_us <= self.sim.cfg.max_lifetime_us);
            }
            (Request::Extend { .. }, Reply::Failed(Status::ExtensionRefused)) => {}
            (
                Request::Acquire {
                    addr,
                    size,
                    lease_us,
                    ..
                },
                Reply::Failed(s),
            ) => {
                let valid = addr >= self.slot()
                    && self.objects.get(&(addr - self.slot())).is_some_and(|o| {
                        o.live && size >= 1 && size <= o.class - self.slot() && lease_us > 0
                    });
                // (Whether the object is live at the moment the request was decided can differ
                // from the model's view after the whole run: an allocation or a free of the
                // same object in the batch. Conflicts and exhaustion need a well-formed request.)
                let well_formed = addr >= self.slot()
                    && self.objects.get(&(addr - self.slot())).is_some_and(|o| {
                        size >= 1 && size <= o.class - self.slot() && lease_us > 0
                    });
                match s {
                    Status::InvalidArgument => assert!(!valid, "valid acquire refused: {req:?}"),
                    Status::NotFound => assert!(
                        !addr
                            .checked_sub(self.slot())
                            .and_then(|a| self.objects.get(&a))
                            .is_some_and(|o| o.live),
                        "NotFound for live memory: {req:?}"
                    ),
                    Status::ConflictTimeout | Status::PoolExhausted => {
                        assert!(well_formed, "{s:?} for an invalid acquire {req:?}")
                    }
                    other => panic!("unexpected {other:?} for {req:?}"),
                }
            }
            (Request::Allocate { size, lease_us, .. }, Reply::Failed(s)) => match s {
                Status::InvalidArgument => assert!(size == 0 || lease_us == 0, "{req:?}"),
                Status::TooLarge => assert!(size > self.sim.cfg.slab.max_class, "{req:?}"),
                Status::NoMemory | Status::PoolExhausted => {}
                other => panic!("unexpected {other:?} for {req:?}"),
            },
            (req, reply) => panic!("unexpected reply {reply:?} to {req:?}"),
        }
    }

    fn add(&mut self, client: ClientId, g: Grant, mode: Mode) {
        let object = g.buffer_addr - self.slot();
        let hdr_gen = if g.contiguous {
            0
        } else {
            let e = self.header_gen.entry(g.id.header_addr).or_insert(0);
            *e += 1;
            *e
        };
        let nic = &self.sim.nic;
        let p = MPerm {
            client,
            grant: g,
            object,
            mode,
            seen: g.lifetime_us,
            hard: g.id.start_us + self.sim.cfg.max_lifetime_us,
            buffer_target: nic.binding(g.buffer_rkey).expect("granted window bound"),
            lifetime_target: nic.binding(g.lifetime_rkey).expect("granted window bound"),
            buffer_epoch: nic.window(g.buffer_rkey.index()).epoch,
            lifetime_epoch: nic.window(g.lifetime_rkey.index()).epoch,
            obj_gen: self.objects[&object].generation,
            hdr_gen,
            end: None,
            ended_at: 0,
        };
        assert!(
            self.by_id.insert(g.id, self.perms.len()).is_none(),
            "id issued twice"
        );
        self.perms.push(p);
    }

    /// Whether a dead permission's window bound to `t` is the delayed-unbinding exception.
    fn exception(&self, p: &MPerm, t: BindTarget, lifetime_window: bool) -> bool {
        if !self.t.delayed_unbind {
            return false;
        }
        let obj = self.objects[&p.object];
        let freed_memory = p.end == Some(End::Freed)
            && !obj.live
            && obj.generation == p.obj_gen
            && t.addr >= p.object
            && t.addr + t.len <= p.object + obj.class;
        let free_header = lifetime_window
            && !p.grant.contiguous
            && t.addr == p.grant.lifetime_addr()
            && t.len == 8
            && self.header_gen.get(&p.grant.id.header_addr) == Some(&p.hdr_gen);
        freed_memory || free_header
    }

    fn check(&mut self, now: u64) {
        self.checks += 1;
        let nic = &self.sim.nic;
        let mut keys: HashMap<(rnic::MemoryKey, u64), usize> = HashMap::new();
        for (i, p) in self.perms.iter().enumerate() {
            keys.insert((p.grant.buffer_rkey, p.buffer_epoch), i);
            keys.insert((p.grant.lifetime_rkey, p.lifetime_epoch), i);
            let g = &p.grant;
            for (key, want, epoch, lifetime_window) in [
                (g.buffer_rkey, p.buffer_target, p.buffer_epoch, false),
                (g.lifetime_rkey, p.lifetime_target, p.lifetime_epoch, true),
            ] {
                // The same key after 256 rebinds of the window is the accepted 8-bit limit
                // (`docs/threat-model.md`, attack 3), not this grant's binding.
                let b = nic
                    .binding(key)
                    .filter(|_| nic.window(key.index()).epoch == epoch);
                if p.end.is_none() {
                    assert_eq!(
                        b,
                        Some(want),
                        "at {now}: a live permission lost its window: {p:?}"
                    );
                } else if let Some(t) = b {
                    assert!(
                        self.exception(p, t, lifetime_window || g.contiguous),
                        "at {now}: a dead permission's rkey still reaches {t:?}: {p:?} ({:?})",
                        self.objects[&p.object]
                    );
                }
            }
        }
        // No window is bound that no grant accounts for.
        for (mw, key, t) in nic.bound_windows() {
            assert!(
                keys.contains_key(&(key, nic.window(mw).epoch)),
                "at {now}: window {mw} is bound to {t:?} but no reply carried its rkey"
            );
        }
        let live = self.perms.iter().filter(|p| p.end.is_none()).count();
        let o = self.sim.occupancy();
        assert_eq!(
            o.permissions, live,
            "at {now}: manager and model disagree on live permissions"
        );
        let objects = self.objects.values().filter(|o| o.live).count();
        assert_eq!(o.live_objects, objects, "at {now}: allocated objects");
        assert_eq!(
            self.sim.unanswered(),
            o.waiters,
            "every non-waiting request is answered"
        );
        assert_eq!(self.reqs.len(), o.waiters);
        assert!(o.mw_free + o.mw_stale <= o.mw_capacity);
        assert!(o.headers_free <= o.headers_capacity);
    }

    /// Bytes of the header slot in front of each buffer (only with contiguity).
    fn slot(&self) -> u64 {
        if self.t.contiguity { HDR } else { 0 }
    }

    /// After every lease is over: all pools drained, no window over live data.
    fn drain_and_check_leaks(&mut self) {
        let max = self.sim.cfg.max_lifetime_us;
        self.step(max + 1_000_000);
        self.step(1);
        let o = self.sim.occupancy();
        assert_eq!(o.permissions, 0, "{o:?}");
        assert_eq!(o.waiters, 0, "{o:?}");
        assert_eq!(o.headers_free, o.headers_capacity, "headers leaked: {o:?}");
        assert_eq!(
            o.mw_free + o.mw_stale,
            o.mw_capacity,
            "windows leaked: {o:?}"
        );
        let bound = self.sim.nic.bound_windows();
        assert_eq!(bound.len(), o.mw_stale, "every bound window is a stale one");
        if !self.t.delayed_unbind {
            assert!(bound.is_empty());
        }
        for (mw, _, t) in &bound {
            for (addr, obj) in &self.objects {
                let overlaps = t.addr < addr + obj.class && *addr < t.addr + t.len;
                assert!(
                    !(obj.live && overlaps),
                    "stale window {mw} over live object {addr:#x}"
                );
            }
        }
        // Free what is still allocated (acquire + revoke with free); then only stale windows
        // over free memory remain, and nothing is tracked but them.
        let live: Vec<u64> = self
            .objects
            .iter()
            .filter(|(_, o)| o.live)
            .map(|(a, _)| *a)
            .collect();
        for obj in live {
            let r = self.sim.call(
                0,
                Request::Acquire {
                    addr: obj + self.slot(),
                    size: 1,
                    lease_us: 100,
                    access: Access::ReadWrite,
                    mode: Mode::Exclusive,
                    wait_us: 0,
                },
            );
            let g = expect_grant(r);
            assert_eq!(self.sim.revoke(0, g.id, true), Reply::Revoked);
        }
        let o = self.sim.occupancy();
        assert_eq!(
            (o.permissions, o.live_objects, o.waiters),
            (0, 0, 0),
            "{o:?}"
        );
        assert_eq!(o.headers_free, o.headers_capacity, "{o:?}");
        assert_eq!(o.mw_free + o.mw_stale, o.mw_capacity, "{o:?}");
    }
}

fn model_config(t: Techniques, headers: usize, mws: u32, watermark: u64) -> ManagerConfig {
    ManagerConfig {
        max_lifetime_us: 2_000,
        header_count: headers,
        mw_count: mws,
        buffer_len: 32 << 10,
        buffer_watermark: watermark,
        slab: SlabConfig {
            min_class: 64,
            max_class: 4096,
            slab_bytes: 4096,
        },
        ..test_config(t)
    }
}

fn techniques_of(bits: u8) -> Techniques {
    Techniques {
        delayed_unbind: bits & 1 != 0,
        contiguity: bits & 2 != 0,
        handover: bits & 4 != 0,
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        Just(1u64),
        Just(32),
        Just(64),
        Just(96),
        Just(200),
        Just(1000),
        Just(4000),
        Just(5000)
    ];
    let lease = prop_oneof![1u64..50, 50u64..3000, Just(u64::MAX)];
    prop_oneof![
        3 => (0u32..8, size, lease.clone(), any::<bool>())
            .prop_map(|(client, size, lease, excl)| Op::Allocate { client, size, lease, excl }),
        4 => (0u32..8, any::<usize>(), 1u64..=100, any::<bool>(), any::<bool>(),
              prop_oneof![Just(0u64), 1u64..3000], lease)
            .prop_map(|(client, object, size_pct, rw, excl, wait, lease)| Op::Acquire {
                client, object, size_pct, rw, excl, wait, lease
            }),
        3 => (prop_oneof![4 => Just(0u32), 1 => 1u32..8], any::<usize>(), any::<bool>())
            .prop_map(|(shift, grant, free)| Op::Revoke { shift, grant, free }),
        1 => (prop_oneof![4 => Just(0u32), 1 => 1u32..8], any::<usize>(), 0u64..2000)
            .prop_map(|(shift, grant, lease)| Op::RpcExtend { shift, grant, lease }),
        2 => (any::<usize>(), 1u64..1500).prop_map(|(grant, add)| Op::CasExtend { grant, add }),
        1 => (0u32..8, any::<u8>(), any::<u64>()).prop_map(|(client, kind, x)| Op::Garbage { client, kind, x }),
        4 => prop_oneof![Just(0u64), 1u64..100, 100u64..2500].prop_map(|dt| Op::Step { dt }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Access through any rkey ever granted succeeds exactly while the model says the
    /// permission lives (plus the delayed-unbinding exception over unowned memory).
    #[test]
    fn rkeys_work_exactly_while_the_model_says_so(
        bits in 0u8..8,
        headers in prop_oneof![Just(2usize), Just(8), Just(64)],
        mws in prop_oneof![Just(3u32), Just(8), Just(64)],
        watermark in prop_oneof![Just(0u64), Just(16u64 << 10), Just(u64::MAX)],
        shards in prop_oneof![Just(1usize), Just(test_shards().max(2))],
        ops in proptest::collection::vec(op_strategy(), 1..60),
    ) {
        let cfg = model_config(techniques_of(bits), headers, mws, watermark);
        let shards = feasible_shards(&cfg, shards);
        let mut h = Harness::new(cfg, 3, shards);
        for op in &ops {
            h.apply(op);
        }
        h.step(1);
        h.drain_and_check_leaks();
    }
}

/// Many clients, thousands of random operations, then every lease runs out: nothing leaks.
/// With one manager shard and with four.
#[test]
fn storm_of_clients_then_every_pool_drains() {
    for (bits, shards) in (0..8u8).flat_map(|b| [(b, 1), (b, 4)]) {
        let mut rng = support::Rng::new(0x5708 + bits as u64);
        let cfg = model_config(techniques_of(bits), 48, 96, 8 << 10);
        let mut h = Harness::new(cfg, 8, shards);
        for _ in 0..3000 {
            let op = random_op(&mut rng);
            h.apply(&op);
        }
        h.step(1);
        assert!(
            h.perms.len() > 100,
            "the storm granted little: {}",
            h.perms.len()
        );
        h.drain_and_check_leaks();
        let c = h.sim.counters();
        println!(
            "storm {:?} on {shards} shard(s): {} grants, {} checks, {} batches, {c:?}",
            techniques_of(bits),
            h.perms.len(),
            h.checks,
            h.sim.batches
        );
        assert!(c.expired > 0 && c.ended > 0, "{c:?}");
    }
}

fn random_op(rng: &mut support::Rng) -> Op {
    let client = rng.below(8) as u32;
    let pick = rng.below(100);
    let lease = match rng.below(10) {
        0 => 1 + rng.below(20),
        9 => u64::MAX,
        _ => 50 + rng.below(2000),
    };
    match pick {
        0..=17 => Op::Allocate {
            client,
            size: [1, 32, 64, 96, 200, 1000, 3000][rng.below(7) as usize],
            lease,
            excl: rng.chance(1, 3),
        },
        18..=42 => Op::Acquire {
            client,
            object: rng.next_u64() as usize,
            size_pct: 1 + rng.below(100),
            rw: rng.chance(1, 2),
            excl: rng.chance(1, 3),
            wait: if rng.chance(1, 2) { 0 } else { rng.below(3000) },
            lease,
        },
        43..=60 => Op::Revoke {
            shift: if rng.chance(1, 10) {
                1 + rng.below(7) as u32
            } else {
                0
            },
            grant: rng.next_u64() as usize,
            free: rng.chance(1, 3),
        },
        61..=65 => Op::RpcExtend {
            shift: 0,
            grant: rng.next_u64() as usize,
            lease: rng.below(2000),
        },
        66..=75 => Op::CasExtend {
            grant: rng.next_u64() as usize,
            add: 1 + rng.below(1500),
        },
        76..=78 => Op::Garbage {
            client,
            kind: rng.below(256) as u8,
            x: rng.next_u64(),
        },
        _ => Op::Step {
            dt: match rng.below(4) {
                0 => 0,
                1 => rng.below(100),
                _ => rng.below(1200),
            },
        },
    }
}
