//! The abusers that use the client library: each runs on its own thread and device until
//! told to stop, as fast as it can, and counts what it achieved and what the node refused.
//! (The flooder, which ignores the library's rules, is in `flooder`.)

use super::{MSG, error_kind, round};
use anyhow::{Result, bail};
use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::proto::messages::{Access, Mode};
use rnic::VerbsError;
use rnic::soft::{SoftAddress, SoftContext, SoftProvider};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Objects the hog allocates (its memory quota is some twenty of them).
const HOG_OBJECT: u64 = 256 << 10;
/// Leases the hog and the faulters hold (the node's maximum lifetime in this experiment).
const LONG_LEASE: Duration = Duration::from_secs(60);
/// Permissions a storm client holds: each of its QP switches rebinds them (type 2).
const STORM_PERMISSIONS: usize = 8;

/// What an abuser achieved.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Its unit of work ("rounds", "sessions", "requests", "grants", "faults").
    pub unit: &'static str,
    /// Units done.
    pub done: u64,
    /// Operations the node refused (quota, refused reconnections).
    pub refused: u64,
    /// Other failures, by kind.
    pub failed: BTreeMap<&'static str, u64>,
    /// Abuse-specific counts.
    pub extra: Vec<(&'static str, u64)>,
}

impl Tally {
    pub fn new(unit: &'static str) -> Self {
        Tally {
            unit,
            ..Tally::default()
        }
    }

    fn fail(&mut self, kind: &'static str) {
        *self.failed.entry(kind).or_default() += 1;
    }

    /// Failures of every kind.
    pub fn failures(&self) -> u64 {
        self.failed.values().sum()
    }

    /// One line for the console table.
    pub fn summary(&self) -> String {
        let mut s = format!("{} {}", self.done, self.unit);
        if self.refused > 0 {
            s.push_str(&format!(", {} refused", self.refused));
        }
        if self.failures() > 0 {
            s.push_str(&format!(", {} failed", self.failures()));
        }
        s
    }
}

/// The CPU-only baseline: a thread that never blocks and never touches the node (a
/// compute-bound neighbour), as much CPU as a busy abuser takes from the honest client and
/// the manager, and nothing else.
pub(super) fn spin(stop: &AtomicBool) -> Tally {
    let mut t = Tally::new("M iterations");
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        t.done += 1;
    }
    t
}

/// The fair-share baseline: a second client doing the honest rounds.
pub(super) fn twin(
    ctx: &SoftContext,
    node: &SoftAddress,
    cfg: ClientConfig,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut t = Tally::new("rounds");
    let mut c = Client::<SoftProvider>::connect(ctx, node, cfg)?;
    let mut back = [0u8; MSG.len()];
    while !stop.load(Ordering::Relaxed) {
        match round(&mut c, &mut back) {
            Ok(()) => t.done += 1,
            Err(e) => t.fail(error_kind(&e)),
        }
    }
    t.extra = vec![("rpcs", rpcs(&c))];
    Ok(t)
}

/// Control RPCs `c` made (each one's round trip is recorded).
fn rpcs(c: &Client<SoftProvider>) -> u64 {
    c.status().stats().rtt_us.len()
}

/// Clients connecting, working (allocate, write, read back, free) and disconnecting.
pub(super) fn churn(
    ctx: &SoftContext,
    node: &SoftAddress,
    cfg: ClientConfig,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut t = Tally::new("sessions");
    let mut back = [0u8; MSG.len()];
    while !stop.load(Ordering::Relaxed) {
        let session = Client::<SoftProvider>::connect(ctx, node, cfg.clone())
            .and_then(|mut c| round(&mut c, &mut back));
        match session {
            Ok(()) => t.done += 1,
            Err(ClientError::QuotaExceeded) => t.refused += 1,
            Err(e) => t.fail(error_kind(&e)),
        }
    }
    Ok(t)
}

/// A tenant taking all it can (as in the hoard test): memory until its quota refuses (it
/// lets each object's permission go, so that only the memory quota stops it), then shared
/// permissions on its own objects until that quota refuses too, and then it keeps asking for
/// both. It never gives anything back.
pub(super) fn hoard(
    ctx: &SoftContext,
    node: &SoftAddress,
    cfg: ClientConfig,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut t = Tally::new("grants");
    let mut c = Client::<SoftProvider>::connect(ctx, node, cfg)?;
    let mut objects = Vec::new();
    let mut held = Vec::new();
    let (mut memory_full, mut permissions_full) = (false, false);
    let (mut memory_refused, mut permissions_refused) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        if !memory_full || permissions_full {
            match c.allocate(HOG_OBJECT, LONG_LEASE, Mode::Shared) {
                Ok(p) => {
                    objects.push(p.addr());
                    t.done += 1;
                    if let Err(e) = c.revoke(p) {
                        t.fail(error_kind(&e));
                    }
                }
                Err(ClientError::QuotaExceeded) => {
                    memory_full = true;
                    t.refused += 1;
                    memory_refused += 1;
                }
                Err(e) => t.fail(error_kind(&e)),
            }
        }
        let Some(&obj) = objects.get(held.len() % objects.len().max(1)) else {
            continue;
        };
        if memory_full {
            match c.acquire(obj, 8, LONG_LEASE, Access::Read, Mode::Shared) {
                Ok(p) => {
                    held.push(p);
                    t.done += 1;
                }
                Err(ClientError::QuotaExceeded) => {
                    permissions_full = true;
                    t.refused += 1;
                    permissions_refused += 1;
                }
                Err(e) => t.fail(error_kind(&e)),
            }
        }
    }
    t.extra = vec![
        ("objects", objects.len() as u64),
        ("bytes", objects.len() as u64 * HOG_OBJECT),
        ("permissions", held.len() as u64),
        ("memory_refused", memory_refused),
        ("permissions_refused", permissions_refused),
        ("rpcs", rpcs(&c)),
    ];
    Ok(t)
}

/// A client writing through a corrupted rkey in a loop: every write faults its QP, which it
/// replaces (a spare, then a data reconnection at the node). Past its tenant's fault budget
/// the node refuses the reconnections, and the client's writes fail with `FailoverFailed`.
/// In type-2 isolation it holds a few permissions, which every switch rebinds.
pub(super) fn faults(
    ctx: &SoftContext,
    node: &SoftAddress,
    cfg: ClientConfig,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut t = Tally::new("faults");
    let mut c = Client::<SoftProvider>::connect(ctx, node, cfg)?;
    let held = (0..STORM_PERMISSIONS)
        .map(|_| c.allocate(64, LONG_LEASE, Mode::Shared))
        .collect::<Result<Vec<_>, _>>()?;
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut bad = held[i % held.len()].forged_copy();
        bad.corrupt_rkey();
        i += 1;
        match c.write(&bad, 0, b"x") {
            Err(ClientError::Denied(_)) => t.done += 1,
            Err(ClientError::FailoverFailed(why))
                if matches!(
                    why.as_ref(),
                    ClientError::Verbs(VerbsError::ConnectionRefused(_))
                ) =>
            {
                t.refused += 1
            }
            Ok(()) => bail!("a write through a corrupted rkey succeeded"),
            Err(e) => t.fail(error_kind(&e)),
        }
    }
    t.extra = vec![
        ("switches", c.status().qps().switches()),
        ("rpcs", rpcs(&c)),
    ];
    Ok(t)
}
