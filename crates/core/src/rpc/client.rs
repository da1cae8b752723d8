//! The client end of the control channel (see the module docs of [`super`]).
//!
//! Invariants, beyond the channel's:
//! - An answer nobody is owed — an unknown request id (forged, or for a request forgotten long
//!   ago), a second copy of an answer already taken care of (the duplicate a retry produces),
//!   a slot that does not decode — is dropped and counted ([`RpcClient::stray_replies`]); its
//!   receive slot is posted again like any other. A stray never changes what is owed.
//! - Every wait ends by its deadline: the deadline is looked at on every turn, also on turns
//!   that found completions, so no stream of strays keeps a waiter past it. Deadlines are read
//!   from an injectable clock ([`RpcClient::with_clock`]; wall time by default).

use super::link::{Arrival, Link};
use super::{IdleWait, Protocol, RpcError};
use rnic::{Clock, Provider, RealClock, WorkCompletion};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Longest single sleep on the CQ: polling drives the provider's timers (retransmissions), so
/// a waiter looks again at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(1);

/// An answer to a request that was given up on (it timed out): the request may have been
/// carried out, and its owner decides how to undo it.
pub struct Orphan<Pr: Protocol> {
    /// The request's id.
    pub req_id: u64,
    /// The request as it was sent.
    pub request: Pr::Request,
    /// Its late answer.
    pub reply: Pr::Reply,
}

impl<Pr: Protocol> std::fmt::Debug for Orphan<Pr> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orphan")
            .field("req_id", &self.req_id)
            .field("request", &self.request)
            .field("reply", &self.reply)
            .finish()
    }
}

#[derive(Debug)]
struct Pending<R> {
    id: u64,
    request: R,
    /// Answers still owed (one more per retry or replayed copy).
    owed: u32,
    /// Answers still to deliver: 1 for a request someone waits for (its retries' answers are
    /// duplicates, dropped), one more per replayed copy, 0 once delivered or when nobody
    /// cares (a fire-and-forget request).
    deliver: u32,
    /// Given up on: the next answer is handed out as an orphan, later ones dropped.
    abandoned: bool,
    /// Sent with nobody to take its answer ([`RpcClient::submit_detached`]): its first answer
    /// is expected and dropped; later ones are strays like any other duplicate.
    detached: bool,
}

/// The client end of a control channel over a connected RC QP.
pub struct RpcClient<P: Provider, Pr: Protocol> {
    link: Link<P, Pr>,
    slots: u32,
    next_req: u64,
    /// Ids advance by this much (channels of one client to several servers use disjoint ids).
    id_step: u64,
    /// Answers owed over all pending requests (each needs a posted receive slot).
    owed: u32,
    pending: Vec<Pending<Pr::Request>>,
    /// Answers that arrived for requests someone waits for, oldest first.
    early: VecDeque<(u64, Pr::Reply)>,
    orphans: Vec<Orphan<Pr>>,
    submitted: u64,
    resent: u64,
    /// Answers nobody was owed, dropped (see [`RpcClient::stray_replies`]).
    strays: u64,
    /// What deadlines are read from (wall time unless a test injects another).
    clock: Arc<dyn Clock>,
}

impl<P: Provider, Pr: Protocol> std::fmt::Debug for RpcClient<P, Pr> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("link", &self.link)
            .field("owed", &self.owed)
            .field("pending", &self.pending.len())
            .field("strays", &self.strays)
            .finish_non_exhaustive()
    }
}

impl<P: Provider, Pr: Protocol> RpcClient<P, Pr> {
    /// Takes over `qp` (connected, its receive completions on `cq`) with `slots` receive
    /// slots posted in memory registered in `pd`.
    pub fn new(
        ctx: &P::Context,
        pd: &P::Pd,
        qp: P::Qp,
        cq: P::Cq,
        slots: u32,
    ) -> Result<Self, RpcError> {
        let link = Link::new(ctx, pd, qp, cq, slots)?;
        Ok(RpcClient {
            slots: link.slots(),
            link,
            next_req: 1,
            id_step: 1,
            owed: 0,
            pending: Vec::new(),
            early: VecDeque::new(),
            orphans: Vec::new(),
            submitted: 0,
            resent: 0,
            strays: 0,
            clock: RealClock::shared(),
        })
    }

    /// Reads the deadlines of [`RpcClient::wait`] and [`RpcClient::wait_any`] from `clock`
    /// instead of wall time (a test's virtual clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// From now on, request ids are `first + i * step` (the next such id not below the ids
    /// used so far): channels of one client to several servers use disjoint ids.
    pub fn use_ids(&mut self, first: u64, step: u64) {
        let step = step.max(1);
        let mut next = self.next_req.max(first);
        let off = (first % step + step - next % step) % step;
        next += off;
        self.next_req = next;
        self.id_step = step;
        self.link.set_id_step(step);
    }

    /// Arms the CQ (`req_notify`): its next completion raises an event on its channel.
    pub fn arm(&self) {
        self.link.arm();
    }

    /// The QP under the channel.
    pub fn qp(&self) -> &P::Qp {
        self.link.qp()
    }

    /// Requests submitted so far (retries not counted).
    pub fn submitted(&self) -> u64 {
        self.submitted
    }

    /// Requests sent again so far ([`RpcClient::resend`]).
    pub fn resent(&self) -> u64 {
        self.resent
    }

    /// Answers dropped because nobody was owed them: an unknown request id (forged, or for a
    /// request forgotten long ago), a second answer to one request (the duplicate a retry
    /// produces), or a reply that does not decode. Each is dropped and its receive slot
    /// posted again.
    pub fn stray_replies(&self) -> u64 {
        self.strays
    }

    /// Most answers the channel can be owed at once.
    pub fn capacity(&self) -> u32 {
        self.slots
    }

    /// Sends `req` without waiting; returns its id. [`RpcError::Busy`] if every receive slot
    /// is owed an answer already.
    pub fn submit(&mut self, req: Pr::Request) -> Result<u64, RpcError> {
        self.submit_as(req, false)
    }

    /// Sends `req` and forgets it: its answer is dropped (e.g. handing back an orphan grant).
    pub fn submit_detached(&mut self, req: Pr::Request) -> Result<u64, RpcError> {
        self.submit_as(req, true)
    }

    fn submit_as(&mut self, req: Pr::Request, detached: bool) -> Result<u64, RpcError> {
        if self.owed >= self.slots {
            return Err(self.busy());
        }
        let id = self.next_req;
        self.send(id, &req)?;
        self.next_req += self.id_step;
        self.submitted += 1;
        self.owed += 1;
        self.pending.push(Pending {
            id,
            request: req,
            owed: 1,
            deliver: u32::from(!detached),
            abandoned: false,
            detached,
        });
        self.bound_pending();
        Ok(id)
    }

    /// Sends request `id` once more under the same id (a retry: the server answers every
    /// copy with the same reply, and the channel delivers one). [`RpcError::Busy`] if no slot
    /// is free for the second answer.
    pub fn resend(&mut self, id: u64) -> Result<(), RpcError> {
        if self.owed >= self.slots {
            return Err(RpcError::Busy);
        }
        let Some(i) = self.pending.iter().position(|p| p.id == id) else {
            return Ok(()); // answered meanwhile
        };
        let req = self.pending[i].request.clone();
        self.send(id, &req)?;
        self.pending[i].owed += 1;
        self.owed += 1;
        self.resent += 1;
        Ok(())
    }

    /// Tamper helper: sends `req` under an earlier `id`, as a replayed message would, and
    /// waits for the answer.
    #[cfg(feature = "testing")]
    pub fn replay(
        &mut self,
        id: u64,
        req: Pr::Request,
        timeout: Duration,
    ) -> Result<Pr::Reply, RpcError> {
        if self.owed >= self.slots {
            return Err(RpcError::Busy);
        }
        self.send(id, &req)?;
        self.owed += 1;
        match self.pending.iter_mut().find(|p| p.id == id) {
            Some(p) => {
                p.owed += 1;
                p.deliver += 1;
            }
            None => self.pending.push(Pending {
                id,
                request: req,
                owed: 1,
                deliver: 1,
                abandoned: false,
                detached: false,
            }),
        }
        self.wait(id, timeout, false)
    }

    /// Gives up on request `id`: its answer, if it comes, is handed out as an [`Orphan`].
    pub fn abandon(&mut self, id: u64) {
        if let Some(p) = self.pending.iter_mut().find(|p| p.id == id) {
            p.abandoned = p.deliver > 0;
        } else if let Some(i) = self.early.iter().position(|(rid, _)| *rid == id) {
            // Answered but not taken: nobody will take it now.
            self.early.remove(i);
        }
    }

    /// Answers to abandoned requests that arrived since the last call.
    pub fn take_orphans(&mut self) -> Vec<Orphan<Pr>> {
        std::mem::take(&mut self.orphans)
    }

    /// Takes the answer to `id` if it has arrived (without polling).
    pub fn take(&mut self, id: u64) -> Option<Pr::Reply> {
        let i = self.early.iter().position(|(rid, _)| *rid == id)?;
        self.early.remove(i).map(|(_, r)| r)
    }

    /// Takes the oldest arrived answer, polling the CQ first.
    pub fn poll(&mut self) -> Result<Option<(u64, Pr::Reply)>, RpcError> {
        if self.early.is_empty() {
            self.poll_cq()?;
        }
        Ok(self.early.pop_front())
    }

    /// Waits up to `max` (sleeping on the CQ after a short spin) until some answer has
    /// arrived; returns the oldest, if any.
    pub fn wait_any(&mut self, max: Duration) -> Result<Option<(u64, Pr::Reply)>, RpcError> {
        let deadline = self.clock.now().plus(max);
        let mut idle = IdleWait::default();
        loop {
            if let Some(r) = self.poll()? {
                return Ok(Some(r));
            }
            let now = self.clock.now();
            if now >= deadline {
                return Ok(None);
            }
            idle.idle(self.link.cq(), deadline.since(now).min(MAX_SLEEP));
        }
    }

    /// Sends `req` and waits up to `timeout` for its answer; with `retry`, the request is
    /// sent once more halfway to the deadline (the server answers retries idempotently).
    pub fn call(
        &mut self,
        req: Pr::Request,
        timeout: Duration,
        retry: bool,
    ) -> Result<Pr::Reply, RpcError> {
        let id = self.submit_when_free(req, timeout)?;
        self.wait(id, timeout, retry)
    }

    /// [`RpcClient::submit`], waiting up to `timeout` for a slot while every slot is owed an
    /// answer to a pipelined request (whose answers come, and are kept for their owners'
    /// polls): a blocking call behind requests another user of the channel has in flight
    /// (e.g. logical clients sharing one connection) waits its turn instead of failing.
    fn submit_when_free(&mut self, req: Pr::Request, timeout: Duration) -> Result<u64, RpcError> {
        let deadline = self.clock.now().plus(timeout);
        let mut idle = IdleWait::default();
        loop {
            match self.submit(req.clone()) {
                Err(RpcError::Busy) => {}
                other => return other,
            }
            if self.poll_cq()? > 0 {
                idle.busy();
                continue;
            }
            let now = self.clock.now();
            if now >= deadline {
                return Err(RpcError::Busy);
            }
            idle.idle(self.link.cq(), deadline.since(now).min(MAX_SLEEP));
        }
    }

    /// Waits up to `timeout` for the answer to `id` (see [`RpcClient::call`]). On a timeout
    /// the request is abandoned. The deadline is looked at on every turn, busy or idle: a
    /// stream of completions that are not the answer (stray replies) never holds a waiter past
    /// it.
    pub fn wait(&mut self, id: u64, timeout: Duration, retry: bool) -> Result<Pr::Reply, RpcError> {
        let started = self.clock.now();
        let deadline = started.plus(timeout);
        let mut retry_at = retry.then(|| started.plus(timeout / 2));
        let mut idle = IdleWait::default();
        loop {
            if let Some(reply) = self.take(id) {
                return Ok(reply);
            }
            let polled = self.poll_cq()?;
            if polled > 0
                && let Some(reply) = self.take(id)
            {
                return Ok(reply);
            }
            let now = self.clock.now();
            if now >= deadline {
                self.abandon(id);
                return Err(RpcError::Timeout);
            }
            if let Some(at) = retry_at
                && now >= at
            {
                retry_at = None;
                // No slot for a second answer: the original may still be answered.
                match self.resend(id) {
                    Ok(()) | Err(RpcError::Busy) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            if polled > 0 {
                idle.busy();
                continue;
            }
            let until = retry_at.map_or(deadline, |r| r.min(deadline));
            idle.idle(self.link.cq(), until.since(now).min(MAX_SLEEP));
        }
    }

    /// Polls the CQ and files every answer found; returns how many completions it took.
    /// Completions that are not the channel's are dropped, so a caller sharing the CQ with
    /// other work must route completions itself with [`RpcClient::on_completion`].
    pub fn poll_cq(&mut self) -> Result<usize, RpcError> {
        let mut wcs = [WorkCompletion::default(); 16];
        let n = self.link.poll_completions(&mut wcs);
        for wc in &wcs[..n] {
            let a = self.link.arrival(wc)?;
            self.file_arrival(a);
        }
        Ok(n)
    }

    /// Files one completion polled from the channel's CQ. Returns whether it was the
    /// channel's; a failed one means the QP broke ([`RpcError::QpFailed`]).
    pub fn on_completion(&mut self, wc: &WorkCompletion) -> Result<bool, RpcError> {
        let a = self.link.arrival(wc)?;
        let ours = !matches!(a, Arrival::NotOurs);
        self.file_arrival(a);
        Ok(ours)
    }

    fn file_arrival(&mut self, a: Arrival<Pr::Reply>) {
        match a {
            Arrival::Reply(id, reply) => self.file(id, reply),
            // A malformed answer is dropped: the request it answers times out.
            Arrival::Malformed => self.strays += 1,
            Arrival::NotOurs | Arrival::Nothing => {}
        }
    }

    /// Files an answer: delivered, handed out as an orphan, dropped as expected (a detached
    /// request's), or dropped and counted as a stray (nothing owed under this id, or the
    /// request's answer was taken care of already).
    fn file(&mut self, id: u64, reply: Pr::Reply) {
        let Some(i) = self.pending.iter().position(|p| p.id == id) else {
            self.strays += 1; // nothing owed under this id (forgotten, forged, never sent)
            return;
        };
        self.owed = self.owed.saturating_sub(1);
        let p = &mut self.pending[i];
        p.owed = p.owed.saturating_sub(1);
        if p.abandoned {
            p.abandoned = false;
            p.deliver = 0;
            self.orphans.push(Orphan {
                req_id: id,
                request: p.request.clone(),
                reply,
            });
        } else if p.deliver > 0 {
            p.deliver -= 1;
            self.early.push_back((id, reply));
        } else if p.detached {
            p.detached = false;
        } else {
            self.strays += 1; // a duplicate (a retry's second answer)
        }
        if self.pending[i].owed == 0 {
            self.pending.swap_remove(i);
        }
    }

    /// Why no slot is free: [`RpcError::Wedged`] when every answer owed is for a request given
    /// up on (the server stopped answering: they will never come), else [`RpcError::Busy`].
    fn busy(&self) -> RpcError {
        let wedged = self
            .pending
            .iter()
            .filter(|p| p.owed > 0)
            .all(|p| p.abandoned || p.detached);
        if wedged {
            RpcError::Wedged
        } else {
            RpcError::Busy
        }
    }

    /// Forgets the oldest requests nobody waits for once there are many (their answers were
    /// lost): their slots count as free again.
    fn bound_pending(&mut self) {
        let cap = 4 * self.slots as usize;
        while self.pending.len() > cap {
            let Some(i) = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, p)| p.deliver == 0 || p.abandoned)
                .min_by_key(|(_, p)| p.id)
                .map(|(i, _)| i)
            else {
                break;
            };
            let p = self.pending.remove(i);
            self.owed = self.owed.saturating_sub(p.owed);
        }
    }

    fn send(&mut self, id: u64, req: &Pr::Request) -> Result<(), RpcError> {
        self.link.send(id, req)
    }
}
