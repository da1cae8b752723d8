//! A session's data QPs to its memory node, as the paper's compute node holds them (§5.5):
//! a few **lanes** (active physical QPs) that the node's users are spread over, prepared
//! **spares**, and one recovery worker. A user sees a lane as a virtual QP: when an illegal
//! access breaks the lane's QP, the first user to report it promotes a spare at once (a swap
//! under a lock) and the worker resets and reconnects the broken QP off everyone's path,
//! then returns it as a spare. With no spare ready, the reporting user reconnects the lane's
//! QP itself. Type-1 windows belong to the PD, so permissions survive the switch; type-2
//! windows are bound again by each user (`UseQp` + `Rebind`).
//!
//! Invariants:
//! - A physical QP is in exactly one place: a lane, the spares, or the worker.
//! - A lane's incarnation changes exactly when its QP is replaced. A user reports a failure
//!   with the incarnation it saw fail, so a lane broken once is replaced once, however many
//!   of its users saw the failure ([`Switch::AlreadyReplaced`] for the later ones).
//! - Completions are filed per user by [`DataCq`]; what a flush says about the ops it ended
//!   is decided by the cause filed with it (see `router.rs`).

mod recovery;
mod router;

pub(crate) use recovery::Slotted;
pub(crate) use router::{DRAIN_USER, DataCq, Routed, UserTag, tagged};

use crate::proto::connect::Intent;
use parking_lot::Mutex;
use recovery::{Recovery, reconnect};
use rnic::{Provider, QueuePair};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a failure report ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchKind {
    /// A spare was promoted.
    Promoted,
    /// No spare was ready: the broken QP was reset and reconnected on the user's path.
    Recovered,
    /// Another user of the lane had replaced the broken QP already.
    AlreadyReplaced,
}

/// What the data QPs did so far ([`ClientStatus::qps`](super::ClientStatus::qps)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// Active physical QPs.
    pub lanes: usize,
    /// Spares configured.
    pub spares: usize,
    /// Spares ready now.
    pub spares_ready: usize,
    /// Faults answered by promoting a spare.
    pub promotions: u64,
    /// Faults answered by reconnecting the broken QP on the user's path (no spare ready).
    pub reconnects: u64,
    /// Broken QPs the recovery worker reconnected and returned as spares.
    pub recovered: u64,
    /// Broken QPs the worker could not reconnect (dropped; the set has one spare fewer).
    pub recovery_failures: u64,
    /// How long this client's last switch took on its path (a promotion, or a reconnection
    /// when no spare was ready), by its timer clock.
    pub last_switch: Duration,
}

impl QpStats {
    /// Faults answered so far (promotions and reconnections on the path).
    pub fn switches(&self) -> u64 {
        self.promotions + self.reconnects
    }
}

/// A lane: its active QP and the incarnation of that QP there.
struct Lane<P: Provider> {
    qp: Slotted<P>,
    incarnation: u64,
}

struct Lanes<P: Provider> {
    lanes: Vec<Lane<P>>,
    spares: VecDeque<Slotted<P>>,
    next_incarnation: u64,
}

/// What a user needs to post on a lane: its QP, the QP's slot, and its incarnation, as
/// looked up at one moment.
#[derive(Clone)]
pub(crate) struct LaneView<P: Provider> {
    pub(crate) qp: P::Qp,
    pub(crate) slot: u8,
    pub(crate) incarnation: u64,
    /// The QP's generation when it was looked up, and its lock.
    generation: u64,
    gate: std::sync::Arc<parking_lot::RwLock<u64>>,
}

impl<P: Provider> LaneView<P> {
    /// Posts `wrs` on the lane's QP, unless the QP was reset since it was looked up (the
    /// lane moved on and the QP was recovered as a spare): then nothing is posted, and the
    /// error says the QP is not the one looked up. A post on a QP that broke but was not
    /// reset yet flushes, as any post on a QP in ERR.
    pub(crate) fn post_send(
        &self,
        wrs: &[rnic::SendWr<'_, P::Mw, P::Mr>],
    ) -> Result<(), (usize, rnic::VerbsError)> {
        let now = self.gate.read();
        if *now != self.generation {
            return Err((
                0,
                rnic::VerbsError::InvalidQpState {
                    qpn: self.qp.qp_num(),
                    state: "reset since it was looked up",
                    action: "post_send",
                },
            ));
        }
        self.qp.post_send(wrs)
    }
}

/// A session's data QPs (see the module docs).
pub(crate) struct DataQps<P: Provider> {
    state: Mutex<Lanes<P>>,
    /// The CQ the QPs complete into (drained before a QP is reset).
    cq: std::sync::Arc<DataCq<P>>,
    recovery: Option<Recovery<P>>,
    address: P::Address,
    intent: Intent,
    spares: usize,
    promotions: AtomicU64,
    reconnects: AtomicU64,
}

impl<P: Provider> DataQps<P> {
    /// `lanes` connected QPs become the lanes and the rest the spares; with `background`,
    /// a worker recovers broken QPs. `intent` is what the QPs present (the slot aside).
    pub(crate) fn new(
        mut qps: Vec<Slotted<P>>,
        lanes: usize,
        address: P::Address,
        intent: Intent,
        background: bool,
        cq: std::sync::Arc<DataCq<P>>,
    ) -> Self {
        let lanes = lanes.clamp(1, qps.len().max(1));
        let spares: VecDeque<Slotted<P>> = qps.split_off(lanes.min(qps.len())).into();
        let spare_count = spares.len();
        let lanes: Vec<Lane<P>> = qps
            .into_iter()
            .enumerate()
            .map(|(i, qp)| Lane {
                qp,
                incarnation: i as u64,
            })
            .collect();
        let next_incarnation = lanes.len() as u64;
        let recovery = (background && spare_count > 0)
            .then(|| Recovery::start(address.clone(), intent, cq.clone()))
            .flatten();
        DataQps {
            state: Mutex::new(Lanes {
                lanes,
                spares,
                next_incarnation,
            }),
            recovery,
            cq,
            address,
            intent,
            spares: spare_count,
            promotions: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        }
    }

    /// The lane `user` posts on.
    pub(crate) fn lane_of(&self, user: UserTag) -> usize {
        usize::from(user) % self.state.lock().lanes.len().max(1)
    }

    /// Lane `lane`'s QP now.
    pub(crate) fn current(&self, lane: usize) -> Option<LaneView<P>> {
        let s = self.state.lock();
        s.lanes.get(lane).map(|l| LaneView {
            qp: l.qp.qp.clone(),
            slot: l.qp.slot,
            incarnation: l.incarnation,
            generation: *l.qp.generation.read(),
            gate: l.qp.generation.clone(),
        })
    }

    /// What its QPs present when they connect (the slot aside).
    pub(crate) fn intent(&self) -> Intent {
        self.intent
    }

    /// Replaces lane `lane`'s QP, which failed as incarnation `seen`: promotes a spare (the
    /// broken QP goes to the worker, or is recovered here after the promotion when there is
    /// none), or reconnects it here when no spare is ready. Nothing is done when the lane's
    /// QP was replaced since.
    pub(crate) fn fail_over(&self, lane: usize, seen: u64) -> Result<SwitchKind, rnic::VerbsError> {
        let mut s = self.state.lock();
        let Lanes {
            lanes,
            spares,
            next_incarnation,
        } = &mut *s;
        let Some(l) = lanes.get_mut(lane) else {
            return Ok(SwitchKind::AlreadyReplaced);
        };
        if l.incarnation != seen {
            return Ok(SwitchKind::AlreadyReplaced);
        }
        if let Some(r) = &self.recovery {
            while let Some(qp) = r.take() {
                spares.push_back(qp);
            }
        }
        let kind = match spares.pop_front() {
            Some(spare) => {
                let broken = std::mem::replace(&mut l.qp, spare);
                self.promotions.fetch_add(1, Ordering::Relaxed);
                let handed = match &self.recovery {
                    Some(r) => r.send(broken),
                    None => Err(broken),
                };
                if let Err(broken) = handed {
                    // No worker: recover now, after the promotion, still on this thread.
                    if reconnect::<P>(&broken, &self.cq, &self.address, self.intent).is_ok() {
                        spares.push_back(broken);
                    }
                }
                SwitchKind::Promoted
            }
            None => {
                reconnect::<P>(&l.qp, &self.cq, &self.address, self.intent)?;
                self.reconnects.fetch_add(1, Ordering::Relaxed);
                SwitchKind::Recovered
            }
        };
        l.incarnation = *next_incarnation;
        *next_incarnation += 1;
        Ok(kind)
    }

    /// Moves every QP held here to ERR (their session ended; the ones the worker holds are
    /// dropped with it). `forget` is told each QP first, so their flushes carry no cause.
    pub(crate) fn set_error(&self, forget: impl Fn(rnic::QpNumber)) {
        let s = self.state.lock();
        for q in s.lanes.iter().map(|l| &l.qp).chain(s.spares.iter()) {
            forget(q.qp.qp_num());
            q.qp.set_error();
        }
    }

    /// Spares ready now (the worker's recovered ones included).
    pub(crate) fn spares_ready(&self) -> usize {
        self.state.lock().spares.len() + self.recovery.as_ref().map_or(0, Recovery::ready)
    }

    /// What the QPs did so far.
    pub(crate) fn stats(&self) -> QpStats {
        let (recovered, recovery_failures) =
            self.recovery.as_ref().map_or((0, 0), Recovery::counts);
        // One lock at a time (a guard in the literal would live through `spares_ready`).
        let lanes = self.state.lock().lanes.len();
        let spares_ready = self.spares_ready();
        QpStats {
            lanes,
            spares: self.spares,
            spares_ready,
            promotions: self.promotions.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            recovered,
            recovery_failures,
            last_switch: Duration::ZERO,
        }
    }

    /// Blocks until the worker has finished `n` recoveries or `max` passes (tests and
    /// benchmarks wait for the spares to come back this way, never by sleeping). Returns the
    /// stats then.
    pub(crate) fn wait_recoveries(&self, n: u64, max: Duration) -> QpStats {
        if let Some(r) = &self.recovery {
            r.wait_done(n, max);
        }
        self.stats()
    }
}
