//! The manager alone: a [`ManagerCore`] driven through [`ManagerCore::step`] in one thread,
//! with no network, no other thread and a NIC that completes every chain at once (binds
//! succeed with the key byte asked for, lifetime CASes find the value expected). What a
//! request costs here is the manager's own work, apart from the soft NIC's and the
//! scheduler's (`docs/evaluation.md`, "The manager alone").
//!
//! A [`Bed`] holds a warm manager with a population of live permissions (each on an object
//! of its own, leases at the maximum lifetime, so none ends during a run) and runs batches of
//! one [`Kind`] of request; the clock advances 10 µs per batch. Shared by the criterion
//! benchmark (`benches/manager_alone`) and the allocation count (`tests/manager_alone.rs`).
#![allow(dead_code)] // each user takes what it needs

use patronus_core::manager::{
    ClientId, Finished, ManagerConfig, ManagerCore, NicExecutor, NicOp, NicResult, Scrub,
    SlabConfig, Techniques, TenantQuota,
};
use patronus_core::proto::messages::{Access, Mode, PermissionId, Reply, Request};
use rnic::{MemoryKey, Timestamp};

/// Lease of Figure 6's "+ Expr" permissions, µs (they end by expiry).
pub const EXPR_LEASE_US: u64 = 300;
/// Objects the "+ Expr" mix acquires, as Figure 6 does.
pub const EXPR_OBJECTS: usize = 1024;
/// Virtual time per batch, µs.
const TURN_US: u64 = 10;
/// Clients the requests come from.
const CLIENTS: ClientId = 64;
/// Longest lease (the population's, which outlives every run).
const MAX_LIFETIME_US: u64 = 1 << 40;

/// What one batch asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A request answered without a grant (a `Hello` reaching the core): the bare turn.
    Bare,
    /// Figure 6's "+ Expr": shared read-write acquires of random objects among
    /// [`EXPR_OBJECTS`], leases of [`EXPR_LEASE_US`] that end by expiry (the expiry checks
    /// of earlier batches run in the same turns).
    Expr,
    /// Allocations of 64 B, freed again in the next batch (each batch of one is counted).
    AllocateFree,
    /// Exclusive acquires of idle objects, revoked in the next batch.
    AcquireRevoke,
    /// RPC extensions of live permissions.
    Extend,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 5] = [
        Kind::Bare,
        Kind::Expr,
        Kind::AllocateFree,
        Kind::AcquireRevoke,
        Kind::Extend,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bare => "bare",
            Kind::Expr => "expr",
            Kind::AllocateFree => "allocate+free",
            Kind::AcquireRevoke => "acquire+revoke",
            Kind::Extend => "extend",
        }
    }
}

/// A NIC that completes every op at once: binds succeed (rkey = window ‖ key byte), CASes find
/// what they expect.
struct InstantNic;

impl NicExecutor for InstantNic {
    fn execute(&mut self, ops: &[NicOp], results: &mut Vec<NicResult>) {
        results.extend(ops.iter().map(|op| match *op {
            NicOp::Bind { mw, key, .. } => NicResult::Bound(MemoryKey::new(mw, key.unwrap_or(0))),
            NicOp::LifetimeCas { compare, .. } => NicResult::CasOld(compare),
        }));
    }
}

/// The configuration: every §5.4 technique, the paper's shared PD, pools for `live` objects
/// and the runs' own.
pub fn config(live: usize) -> ManagerConfig {
    let objects = live + 4 * EXPR_OBJECTS + 4096;
    ManagerConfig {
        techniques: Techniques::ALL,
        max_lifetime_us: MAX_LIFETIME_US,
        header_base: 0x1000_0000,
        header_count: objects,
        buffer_base: 0x10_0000_0000,
        // A 64 B object takes a 96 B slot (its header embedded before it, §5.4 contiguity).
        buffer_len: (objects as u64) * 128 + (1 << 20),
        slab: SlabConfig {
            min_class: 64,
            max_class: 64,
            slab_bytes: 1 << 16,
        },
        mw_count: (objects as u32).saturating_mul(2),
        buffer_watermark: 0,
        scrub: Scrub::OnGrant,
        max_wait_us: 0,
        key_seed: None,
        lease_floor_us: 0,
        lease_floor_turns: 0,
        quota: TenantQuota::UNLIMITED,
        client_quota: TenantQuota::UNLIMITED,
    }
}

/// A warm manager and the state of a run over it.
pub struct Bed {
    core: ManagerCore,
    /// The last batch's outcome (kept: its vectors are reused, as the node's driver does).
    finished: Finished,
    now: u64,
    requests: Vec<(ClientId, u64, Request)>,
    next_req: u64,
    /// Objects the "+ Expr" mix and the exclusive acquires use (allocated, no permission).
    objects: Vec<u64>,
    /// Live permissions of the population (extended by [`Kind::Extend`]).
    live: Vec<(ClientId, PermissionId)>,
    /// Permissions of the last batch, ended by the next ([`Kind::AllocateFree`],
    /// [`Kind::AcquireRevoke`]).
    pending: Vec<(ClientId, PermissionId)>,
    rng: u64,
    /// Requests answered so far, and how many of the answers were grants and refusals.
    pub replies: u64,
    pub grants: u64,
    pub refusals: u64,
}

/// The grants of a batch: who, which permission, and the start of its buffer.
fn grants(f: &Finished) -> impl Iterator<Item = (ClientId, PermissionId, u64)> + '_ {
    f.replies.iter().filter_map(|o| match o.reply {
        Reply::Granted(g) => Some((o.client, g.id, g.buffer_addr)),
        _ => None,
    })
}

fn granted(f: &Finished) -> impl Iterator<Item = (ClientId, PermissionId)> + '_ {
    grants(f).map(|(client, id, _)| (client, id))
}

impl Bed {
    /// A manager holding `live` live permissions, and [`EXPR_OBJECTS`] idle objects.
    pub fn new(live: usize) -> Bed {
        let mut bed = Bed {
            core: ManagerCore::new(config(live)),
            finished: Finished::default(),
            now: 1_000,
            requests: Vec::with_capacity(1024),
            next_req: 1,
            objects: Vec::new(),
            live: Vec::with_capacity(live),
            pending: Vec::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            replies: 0,
            grants: 0,
            refusals: 0,
        };
        // The population, in batches of 64.
        let mut left = live;
        while left > 0 {
            let n = left.min(64);
            for i in 0..n {
                // Half the maximum: extensions stay within it.
                bed.push(i as ClientId % CLIENTS, allocate(MAX_LIFETIME_US / 2));
            }
            bed.turn();
            let got: Vec<_> = granted(&bed.finished).collect();
            assert_eq!(got.len(), n, "the population's allocations");
            bed.live.extend(got);
            left -= n;
        }
        // The idle objects: allocated, their permissions revoked.
        for _ in 0..EXPR_OBJECTS / 64 {
            for i in 0..64 {
                bed.push(i % CLIENTS, allocate(MAX_LIFETIME_US));
            }
            bed.turn();
            let got: Vec<_> = grants(&bed.finished).collect();
            assert_eq!(got.len(), 64, "the idle objects' allocations");
            bed.objects.extend(got.iter().map(|&(_, _, buffer)| buffer));
            for (client, id, _) in got {
                bed.push(client, Request::Revoke { id, free: false });
            }
            bed.turn();
        }
        bed
    }

    fn push(&mut self, client: ClientId, req: Request) {
        self.requests.push((client, self.next_req, req));
        self.next_req += 1;
    }

    fn random(&mut self, n: usize) -> usize {
        // xorshift64*: the same sequence every run.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    /// One batch of what is queued, at the next instant; its outcome is `self.finished`.
    fn turn(&mut self) {
        self.now += TURN_US;
        let now = Timestamp(self.now);
        self.core
            .step_into(now, &self.requests, &mut InstantNic, &mut self.finished);
        self.requests.clear();
        self.replies += self.finished.replies.len() as u64;
        for o in &self.finished.replies {
            match o.reply {
                Reply::Granted(_) => self.grants += 1,
                Reply::Failed(_) => self.refusals += 1,
                _ => {}
            }
        }
    }

    /// Runs one batch of `batch` requests of `kind` (with what ends the previous batch's
    /// permissions, for the kinds that pair them); returns the requests it counted.
    pub fn batch(&mut self, kind: Kind, batch: usize) -> u64 {
        match kind {
            Kind::Bare => {
                for i in 0..batch {
                    let hello = Request::Hello {
                        tenant: 0,
                        secret: 0,
                    };
                    self.push(i as ClientId % CLIENTS, hello);
                }
                self.turn();
            }
            Kind::Expr => {
                for i in 0..batch {
                    let k = self.random(EXPR_OBJECTS);
                    let addr = self.objects[k];
                    self.push(i as ClientId % CLIENTS, acquire(addr, Mode::Shared));
                }
                self.turn();
            }
            Kind::AllocateFree | Kind::AcquireRevoke => {
                // The previous batch's permissions end in this one.
                let free = kind == Kind::AllocateFree;
                for i in 0..self.pending.len() {
                    let (client, id) = self.pending[i];
                    self.push(client, Request::Revoke { id, free });
                }
                for i in 0..batch {
                    let req = if kind == Kind::AllocateFree {
                        allocate(1_000_000)
                    } else {
                        acquire(self.objects[i % EXPR_OBJECTS], Mode::Exclusive)
                    };
                    self.push(i as ClientId % CLIENTS, req);
                }
                self.turn();
                // Into the emptied vector (no allocation once grown).
                self.pending.clear();
                self.pending.extend(granted(&self.finished));
            }
            Kind::Extend => {
                if self.live.is_empty() {
                    return 0;
                }
                for _ in 0..batch {
                    let k = self.random(self.live.len());
                    let (client, id) = self.live[k];
                    self.push(
                        client,
                        Request::Extend {
                            id,
                            lease_us: 1_000,
                        },
                    );
                }
                self.turn();
            }
        }
        batch as u64
    }

    /// Live permissions now.
    pub fn active(&self) -> usize {
        self.core.active_permissions()
    }

    /// Forgets the counts of answers so far (a measurement starts).
    pub fn reset_counts(&mut self) {
        (self.replies, self.grants, self.refusals) = (0, 0, 0);
    }
}

fn allocate(lease_us: u64) -> Request {
    Request::Allocate {
        size: 64,
        lease_us,
        mode: Mode::Exclusive,
    }
}

fn acquire(addr: u64, mode: Mode) -> Request {
    Request::Acquire {
        addr,
        size: 64,
        lease_us: EXPR_LEASE_US,
        access: Access::ReadWrite,
        mode,
        wait_us: 0,
    }
}
