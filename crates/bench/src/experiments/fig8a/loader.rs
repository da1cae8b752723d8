//! A loader: a logical client inserting new keys into the table, one steppable [`Insert`] at
//! a time; any insert that finds its subtable full splits it (every loader is a resizer).
//!
//! The crash: once the run reaches the crash epoch, the first loader whose insert is splitting
//! a subtable in the crash phase takes a few more steps of that split and then is never
//! stepped again. Its connection stays open and it releases nothing: the split's lock (the
//! exclusive permission, or the lock word and a shared right) and its rights stay as they were
//! until their leases end — a fail-stop client, as in §7.2.3.

use super::timeline::{Crash, Timeline};
use crate::experiments::driver::{Logical, StepCtx};
use anyhow::{Result, bail};
use patronus_ods::PatronusMemory;
use patronus_ods::race::{Insert, Phase, RaceError, TableClient};
use rnic::soft::SoftProvider;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

/// When and where the resizer crashes.
#[derive(Debug)]
pub struct CrashPlan {
    /// Not before this time into the run (the crash epoch's start).
    pub after: Duration,
    /// In this phase of a split (as recorded in the lock object).
    pub phase: Phase,
    /// Steps of the split taken in that phase before it stops.
    pub extra_steps: u32,
    /// Taken by the loader that crashes (one crash per run).
    pub taken: AtomicBool,
}

/// Bytes of each value.
const VALUE: usize = 16;
/// Failed inserts a run tolerates (each one is retried).
const MAX_FAILURES: u64 = 1_000;

/// One loader (see the module docs).
pub struct Loader {
    table: TableClient<PatronusMemory<SoftProvider>>,
    mem: PatronusMemory<SoftProvider>,
    id: usize,
    next: u64,
    /// The insert in progress, its key and when it began.
    op: Option<(Insert<PatronusMemory<SoftProvider>>, Vec<u8>, Duration)>,
    /// A key whose insert failed, to insert again, and when it first began.
    again: Option<(Vec<u8>, Duration)>,
    timeline: Arc<Timeline>,
    plan: Arc<CrashPlan>,
    /// Steps left before the crash, once this loader is the one crashing.
    countdown: Option<u32>,
    /// Crashed: never stepped again.
    crashed: bool,
    /// Splits (recoveries included), recoveries and takeovers the table client had counted.
    seen: (u64, u64, u64),
    /// Keys each epoch on its schedule (see [`Loader::step`]); keys begun so far.
    per_epoch: u64,
    begun: u64,
}

impl Loader {
    /// Loader `id` of the table `table` opened on `mem`, beginning `per_epoch` keys an epoch.
    pub fn new(
        table: TableClient<PatronusMemory<SoftProvider>>,
        mem: PatronusMemory<SoftProvider>,
        id: usize,
        timeline: Arc<Timeline>,
        plan: Arc<CrashPlan>,
        per_epoch: u64,
    ) -> Self {
        Loader {
            table,
            mem,
            id,
            next: 0,
            op: None,
            again: None,
            timeline,
            plan,
            countdown: None,
            crashed: false,
            seen: (0, 0, 0),
            per_epoch,
            begun: 0,
        }
    }

    fn key(&self) -> Vec<u8> {
        format!("fig8a-{:03}-{:010}", self.id, self.next).into_bytes()
    }

    /// Whether this loader should start crashing now: its insert is splitting in the crash
    /// phase, the crash epoch has come, and no other loader crashed.
    fn crash_due(&self, t: Duration) -> bool {
        let splitting = self
            .op
            .as_ref()
            .and_then(|(op, _, _)| op.split())
            .is_some_and(|s| s.phase() == self.plan.phase);
        splitting
            && t >= self.plan.after
            && self
                .plan
                .taken
                .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Stops for good, recording what its split holds — unless the split ended meanwhile
    /// (it lost its lock): then the crash is left to the next resizer in the phase.
    fn crash(&mut self, t: Duration) {
        self.countdown = None;
        let split = self.op.as_ref().and_then(|(op, _, _)| op.split());
        let Some((split, class)) = split.and_then(|s| Some((s, s.key_class()?))) else {
            self.plan.taken.store(false, Ordering::Relaxed);
            return;
        };
        self.crashed = true;
        self.timeline.crashed(Crash {
            at: t,
            class,
            subtable: split.subtable(),
            loader: self.id,
        });
    }

    /// Reports what the table client counted since the last step, while inserting `key`.
    fn report_progress(&mut self, t: Duration, key: &[u8]) {
        let s = self.table.stats();
        let now = (s.splits + s.recoveries, s.recoveries, s.takeovers);
        if now != self.seen {
            let (a, b, c) = self.seen;
            // A writer of the crashed subtable's keys takes over (or finishes) that split.
            let in_class = self.in_crashed_class(key);
            let (recovered, took_over) = (now.1.saturating_sub(b), now.2.saturating_sub(c));
            self.timeline
                .progress(t, now.0.saturating_sub(a), recovered, took_over, in_class);
        }
        self.seen = now;
    }

    /// Whether the crashed subtable claimed `key` (false before a crash).
    fn in_crashed_class(&self, key: &[u8]) -> bool {
        self.timeline
            .crash()
            .is_some_and(|c| c.class.contains(&self.table, key))
    }
}

impl Logical for Loader {
    /// Keys arrive on a schedule: by the end of epoch `e` a loader may have begun
    /// `per_epoch × (e + 1)` of them, so the table grows at the same pace on a fast machine
    /// and a slow one (a loader behind its schedule inserts as fast as it can, and catches up
    /// after a stall). A crashed loader does nothing.
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        if self.crashed {
            return Ok(()); // crashed: never stepped again, nothing released
        }
        let t = self.timeline.elapsed();
        match self.countdown {
            Some(0) => {
                self.crash(t);
                if self.crashed {
                    return Ok(());
                }
            }
            Some(n) => self.countdown = Some(n - 1),
            None if self.crash_due(t) => self.countdown = Some(self.plan.extra_steps),
            None => {}
        }
        let (mut op, key, began) = match self.op.take() {
            Some(op) => op,
            None => {
                let (key, began) = match self.again.take() {
                    Some(again) => again,
                    // Ahead of its schedule: nothing to do this round.
                    None if self.begun >= self.per_epoch * (self.timeline.epochs_at(t) + 1) => {
                        return Ok(());
                    }
                    None => {
                        self.next += 1;
                        self.begun += 1;
                        (self.key(), t)
                    }
                };
                let value = [self.id as u8; VALUE];
                (Insert::new(&self.table, &key, &value)?, key, began)
            }
        };
        let polled = op.step(&mut self.table, &mut self.mem);
        let t = self.timeline.elapsed();
        self.report_progress(t, &key);
        self.timeline
            .busy(self.id, polled.is_pending().then_some(began));
        match polled {
            Poll::Pending => self.op = Some((op, key, began)),
            // (Keys are distinct: one exists only when an attempt that failed had landed.)
            Poll::Ready(Ok(()) | Err(RaceError::KeyExists)) => {
                let in_class = self.in_crashed_class(&key);
                self.timeline.inserted(t, began, in_class);
                ctx.latency.record(t.saturating_sub(began));
                ctx.done += 1;
            }
            // Its subtable is at the maximum depth and full: that part of the table is loaded.
            Poll::Ready(Err(RaceError::TableFull { .. })) => self.timeline.table_full(),
            // The transport failed under it (over TCP on a loaded machine, a READ that failed
            // twice on fresh QPs): counted, and the key inserted again.
            Poll::Ready(Err(e)) => {
                if self.timeline.failed() > MAX_FAILURES {
                    bail!(
                        "loader {}: insert: {e} (after {MAX_FAILURES} failures)",
                        self.id
                    );
                }
                self.again = Some((key, began));
            }
        }
        Ok(())
    }

    /// Its work is one-sided and synchronous in a step: nothing to sleep on (a thread whose
    /// loaders wait on a frozen subtable keeps polling it, as RACE's writers do).
    fn arm(&mut self) -> bool {
        false
    }

    fn patronus_client(&self) -> Option<&patronus_core::client::Client<SoftProvider>> {
        Some(self.mem.client())
    }
}
