//! The driver's loop: moves the sans-IO core's sends onto the control channels, their
//! completions back into the core, and sleeps (never spins for long) until a reply, the
//! core's next deadline, or the caller's.
//!
//! Invariants:
//! - A wait ends by the core's deadlines and the caller's: both are looked at on every turn,
//!   busy or idle, so no stream of strays keeps a waiter past them.
//! - A control QP that fails loses the session in the core (every call waiting ends with
//!   `ControlLost`); the driver never sends anything again on it.

use super::core::{ClientCore, Now};
use super::error::ClientError;
use crate::proto::messages::ControlProtocol;
use crate::rpc::{Arrival, IdleWait, Link, RpcError};
use rnic::{Clock, CompletionChannel, Provider, Timestamp, WcStatus, WorkCompletion};
use std::sync::Arc;
use std::time::Duration;

/// A control channel of a session.
pub(super) type ControlLink<P> = Link<P, ControlProtocol>;

/// Longest single sleep: polling drives the provider's timers (retransmissions), so a waiter
/// looks again at least this often.
pub(super) const MAX_SLEEP: Duration = Duration::from_millis(1);

/// The client's two clocks (see [`super::core`]): leases, and waits.
#[derive(Clone)]
pub(super) struct Clocks {
    pub(super) lease: Arc<dyn Clock>,
    pub(super) timer: Arc<dyn Clock>,
}

impl Clocks {
    pub(super) fn now(&self) -> Now {
        Now {
            lease: self.lease.now(),
            timer: self.timer.now(),
        }
    }
}

/// One session's channels, driven for a core.
pub(super) struct Pump<'a, P: Provider> {
    pub(super) core: &'a mut ClientCore,
    pub(super) links: &'a mut [ControlLink<P>],
    pub(super) clocks: &'a Clocks,
    /// Where every control CQ reports (waits on several channels sleep on it).
    pub(super) channel: &'a P::Channel,
}

impl<P: Provider> Pump<'_, P> {
    /// Puts every send the core has on the wire. A failed post loses the session.
    pub(super) fn flush(&mut self) -> Result<(), ClientError> {
        while let Some(t) = self.core.poll_transmit() {
            let Some(link) = self.links.get_mut(t.channel) else {
                continue;
            };
            if let Err(e) = link.send(t.id, &t.request) {
                self.core.lose_session(WcStatus::WrFlushError);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Polls every channel once and files what arrived; how many completions it took. A
    /// failed QP loses the session.
    ///
    /// The clocks are read after each poll, never before: a reply that arrived while the
    /// caller was descheduled between the two would otherwise be stamped earlier than it
    /// came, and a round trip measured short (the lease slack is built from those samples).
    pub(super) fn poll(&mut self) -> usize {
        let mut wcs = [WorkCompletion::default(); 16];
        let mut taken = 0;
        for (k, link) in self.links.iter_mut().enumerate() {
            let n = link.poll_completions(&mut wcs);
            let now = self.clocks.now();
            taken += n;
            for wc in &wcs[..n] {
                match link.arrival(wc) {
                    Ok(Arrival::Reply(id, reply)) => self.core.on_reply(k, id, reply, now),
                    Ok(Arrival::Malformed) => self.core.on_malformed(),
                    Ok(Arrival::NotOurs | Arrival::Nothing) => {}
                    Err(RpcError::QpFailed(s)) => {
                        self.core.lose_session(s);
                        return taken;
                    }
                    Err(_) => {
                        self.core.lose_session(WcStatus::WrFlushError);
                        return taken;
                    }
                }
            }
        }
        self.core.handle_timeout(self.clocks.now());
        taken
    }

    /// One non-blocking turn: sends, polls, sends what the replies caused.
    pub(super) fn turn(&mut self) -> Result<usize, ClientError> {
        self.flush()?;
        let n = self.poll();
        self.flush()?;
        Ok(n)
    }

    /// Drives until `done(core)` holds, the session is lost, or `until` (timer clock) passes;
    /// sleeps on the control CQs while nothing arrives.
    pub(super) fn run(
        &mut self,
        mut done: impl FnMut(&ClientCore) -> bool,
        until: Option<Timestamp>,
    ) -> Result<(), ClientError> {
        let mut idle = IdleWait::default();
        loop {
            let n = self.turn()?;
            if done(self.core) || self.core.is_lost() {
                return Ok(());
            }
            let now = self.clocks.timer.now();
            if until.is_some_and(|u| now >= u) {
                return Ok(());
            }
            if n > 0 {
                idle.busy();
                continue;
            }
            let nap = nap(self.core, until, now);
            if nap.is_zero() {
                continue;
            }
            self.sleep(&mut idle, nap);
        }
    }

    /// Waits up to `nap` for a completion (see [`Pump::sleeper`]).
    fn sleep(&mut self, idle: &mut IdleWait, nap: Duration) {
        if let Some(sleeper) = self.sleeper() {
            sleeper.sleep(idle, nap);
        }
    }

    /// What to sleep on until a completion comes: one channel's CQ, or the completion channel
    /// several report to (armed, then polled once more for a completion that came before:
    /// `None` when that poll took one). The sleep itself needs nothing of the pump, so a
    /// compute node's waiter sleeps with the channels unlocked.
    pub(super) fn sleeper(&mut self) -> Option<Sleeper<P>> {
        if let [link] = &*self.links {
            return Some(Sleeper::Cq(link.cq().clone()));
        }
        for link in self.links.iter() {
            link.arm();
        }
        if self.poll() > 0 {
            return None;
        }
        Some(Sleeper::Channel(self.channel.clone()))
    }
}

/// How long a waiter at `now` may sleep: until the core's next deadline or the caller's
/// (`until`), and never longer than [`MAX_SLEEP`].
pub(super) fn nap(core: &ClientCore, until: Option<Timestamp>, now: Timestamp) -> Duration {
    let wake = match (core.poll_timeout(), until) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(now.plus(MAX_SLEEP)),
    };
    wake.since(now).min(MAX_SLEEP)
}

/// Where a waiter sleeps until the control channels have a completion ([`Pump::sleeper`]).
pub(super) enum Sleeper<P: Provider> {
    /// The one channel's CQ: spins a little, then sleeps on it.
    Cq(P::Cq),
    /// The completion channel the armed CQs report to.
    Channel(P::Channel),
}

impl<P: Provider> Sleeper<P> {
    /// Sleeps up to `nap` (after `idle`'s spin, on a CQ).
    pub(super) fn sleep(&self, idle: &mut IdleWait, nap: Duration) {
        match self {
            Sleeper::Cq(cq) => idle.idle(cq, nap),
            Sleeper::Channel(channel) => {
                channel.wait(nap);
            }
        }
    }
}
