//! The data CQ, shared by every user of a compute node's data QPs: whoever polls it files
//! each completion for the user whose work request it answers (the user is tagged in the
//! work-request id), so users of one QP never take each other's completions.
//!
//! A flushed completion is filed with its QP's **cause**: the last error completion (not a
//! flush) seen on that QP since its last success. On one RC QP completions arrive in the
//! order the work requests were posted, and the error that breaks a QP is reported before
//! the flushes behind it; so when a user's op is flushed, the cause says whether someone
//! else's access was refused ahead of it (then the responder stopped there and the flushed
//! op never executed) or the QP broke for a reason that does not say what ran.
//!
//! Invariants:
//! - Every completion polled is filed for exactly one user, in CQ order, or dropped when its
//!   user is gone (its work requests' outcomes were given up on).
//! - A cause is forgotten when the QP completes a success, and before it is moved to ERR
//!   locally ([`DataCq::forget_cause`]): a QP broken locally flushes with no cause.

use parking_lot::{Condvar, Mutex, MutexGuard};
use rnic::{
    CompletionQueue, Provider, QpNumber, QpState, QueuePair, SendOp, SendWr, WcStatus,
    WorkCompletion,
};
use std::collections::VecDeque;
use std::time::Duration;

/// Bit of a work-request id where its user's tag starts.
const USER_SHIFT: u32 = 47;
/// The user-tag bits of a work-request id (16 bits: 47..=62).
const USER_MASK: u64 = 0xffff << USER_SHIFT;

/// A user's own part of a work-request id: bit 63 and bits 0..=46.
const LOCAL_ID_MASK: u64 = !USER_MASK;

/// Who a completion belongs to: one logical client of the compute node.
pub(crate) type UserTag = u16;

/// The tag of drain markers ([`DataCq::drain`]); no client is given it.
pub(crate) const DRAIN_USER: UserTag = UserTag::MAX;

/// How long a drain waits for its marker before the QP is reset anyway.
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// `id` (the user's own bits) tagged with `user`.
pub(crate) fn tagged(user: UserTag, id: u64) -> u64 {
    (id & LOCAL_ID_MASK) | (u64::from(user) << USER_SHIFT)
}

fn user_of(wr_id: u64) -> UserTag {
    ((wr_id & USER_MASK) >> USER_SHIFT) as UserTag
}

/// A completion as its user receives it: its work-request id without the user's tag, and
/// for a flush, the error that broke the QP ahead of it (if any was seen).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Routed {
    pub(crate) wc: WorkCompletion,
    pub(crate) cause: Option<WcStatus>,
}

/// Small tables searched linearly: a compute node has few users per CQ and few QPs with an
/// error on record, and the common case (one user, no error) touches neither.
#[derive(Default)]
struct Filed {
    by_user: Vec<(UserTag, VecDeque<Routed>)>,
    /// The last error of each QP since its last success.
    cause: Vec<(QpNumber, WcStatus)>,
    /// A user sleeps on the CQ ([`DataCq::wait`]).
    sleeping: bool,
}

impl Filed {
    fn cause_of(&self, qpn: QpNumber) -> Option<WcStatus> {
        self.cause.iter().find(|(q, _)| *q == qpn).map(|&(_, s)| s)
    }

    fn forget(&mut self, qpn: QpNumber) {
        if !self.cause.is_empty() {
            self.cause.retain(|(q, _)| *q != qpn);
        }
    }

    fn queue(&mut self, user: UserTag) -> Option<&mut VecDeque<Routed>> {
        self.by_user
            .iter_mut()
            .find(|(u, _)| *u == user)
            .map(|(_, q)| q)
    }
}

/// The data CQ and the completions polled from it for each user.
pub(crate) struct DataCq<P: Provider> {
    cq: P::Cq,
    filed: Mutex<Filed>,
    /// One drain at a time (their markers share a tag), and the next marker's id.
    draining: Mutex<u64>,
    /// Signalled when a poll filed a completion for another user, and when the user that
    /// slept on the CQ wakes (see [`DataCq::wait`]).
    filed_more: Condvar,
}

impl<P: Provider> DataCq<P> {
    /// Asks the CQ's channel for an event at the next completion.
    pub(crate) fn arm(&self) {
        self.cq.req_notify();
    }

    pub(crate) fn new(cq: P::Cq) -> Self {
        let cq = DataCq {
            cq,
            filed: Mutex::new(Filed::default()),
            draining: Mutex::new(0),
            filed_more: Condvar::new(),
        };
        cq.join(DRAIN_USER);
        cq
    }

    /// Makes sure every work request posted on `qp` so far has completed into this CQ (and
    /// was filed for its user) before the QP is reset: moves it to ERR if it is not there
    /// (its flushes then say nothing about what ran), posts a marker behind everything, and
    /// polls until the marker's flush comes back. A reset drops what a QP has not completed,
    /// so without this a user of a shared QP whose requests were still queued when another
    /// user reset it (to reconnect it in place, or to recover it as a spare) would never
    /// get their completions and would report them unknown after the dead-transport bound.
    /// Returns whether the marker came back within [`DRAIN_WAIT`].
    pub(crate) fn drain(&self, qp: &P::Qp) -> bool {
        let mut next = self.draining.lock();
        *next = (*next + 1) & !(1 << 63) & LOCAL_ID_MASK;
        let marker = *next;
        let qpn = qp.qp_num();
        if qp.state() != QpState::Error {
            self.forget_cause(qpn);
            qp.set_error();
        }
        let wr = SendWr {
            wr_id: tagged(DRAIN_USER, marker),
            signaled: true,
            op: SendOp::Send { local: None },
        };
        if qp.post_send(&[wr]).is_err() {
            return false;
        }
        let mut out = Vec::new();
        let step = Duration::from_millis(1);
        let tries = DRAIN_WAIT.as_millis().max(1);
        for _ in 0..tries {
            out.clear();
            self.poll(DRAIN_USER, &mut out);
            if out
                .iter()
                .any(|r| r.wc.qp_num == qpn && r.wc.wr_id == marker)
            {
                return true;
            }
            self.wait(DRAIN_USER, step);
        }
        false
    }

    /// The CQ every data QP is created on.
    pub(crate) fn cq(&self) -> &P::Cq {
        &self.cq
    }

    /// Starts filing completions for `user` (they are dropped until then).
    pub(crate) fn join(&self, user: UserTag) {
        let mut filed = self.filed.lock();
        if filed.queue(user).is_none() {
            filed.by_user.push((user, VecDeque::new()));
        }
    }

    /// Stops filing completions for `user` (they are dropped from now on).
    pub(crate) fn leave(&self, user: UserTag) {
        self.filed.lock().by_user.retain(|(u, _)| *u != user);
    }

    /// Moves `user`'s filed completions to `out`, polls the CQ once and files what it
    /// returns (`user`'s own straight into `out`, after those filed before). Returns how many
    /// completions the CQ returned (anyone's).
    pub(crate) fn poll(&self, user: UserTag, out: &mut Vec<Routed>) -> usize {
        let mut wcs = [WorkCompletion::default(); 32];
        let mut filed = self.filed.lock();
        if let Some(q) = filed.queue(user) {
            out.extend(q.drain(..));
        }
        let n = self.cq.poll(&mut wcs);
        let mut for_others = false;
        for wc in &wcs[..n] {
            let cause = match wc.status {
                WcStatus::Success => {
                    filed.forget(wc.qp_num);
                    None
                }
                WcStatus::WrFlushError => filed.cause_of(wc.qp_num),
                s => {
                    filed.forget(wc.qp_num);
                    filed.cause.push((wc.qp_num, s));
                    None
                }
            };
            let owner = user_of(wc.wr_id);
            let mut wc = *wc;
            wc.wr_id &= LOCAL_ID_MASK;
            let routed = Routed { wc, cause };
            if owner == user {
                out.push(routed);
            } else if let Some(q) = filed.queue(owner) {
                q.push_back(routed);
                for_others = true;
            }
        }
        drop(filed);
        if for_others {
            self.filed_more.notify_all();
        }
        n
    }

    /// A QP is about to be moved to ERR locally: its flushes say nothing about what ran.
    pub(crate) fn forget_cause(&self, qpn: QpNumber) {
        self.filed.lock().forget(qpn);
    }

    /// Sleeps until `user` may have a completion, or `max` passes: one user at a time sleeps
    /// on the CQ itself; the others until a poll files something for them or the sleeper
    /// wakes (then they poll themselves). Returns at once if `user` has completions filed.
    pub(crate) fn wait(&self, user: UserTag, max: Duration) {
        let mut filed = self.filed.lock();
        if filed.queue(user).is_some_and(|q| !q.is_empty()) {
            return;
        }
        if filed.sleeping {
            self.filed_more.wait_for(&mut filed, max);
            return;
        }
        filed.sleeping = true;
        MutexGuard::unlocked(&mut filed, || self.cq.wait(max));
        filed.sleeping = false;
        drop(filed);
        self.filed_more.notify_all();
    }
}
