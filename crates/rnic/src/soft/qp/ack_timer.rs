//! The requester's ack timer under its link's [`RetryPolicy`], sans-IO: when the oldest
//! unanswered request is late, what to resend, and when to give up. The requester tells it
//! when it starts waiting and when the peer answers; it answers with deadlines and verdicts.
//!
//! - **Verbs** (IB spec, `QpTiming`): the deadline is `ack_timeout_us` after the last
//!   transmission or response; each expiry resends every unanswered request (go-back-N) and
//!   uses one of `retry_count` retries; an expiry with none left gives up. A response that
//!   answers the oldest request restores the retries.
//! - **Stream** (a connection that delivers by itself, e.g. TCP; [`AdaptiveTimeouts`]): the
//!   deadline is one RTO (RFC 6298, [`RtoEstimator`]) after the last transmission or
//!   response, but never later than `budget` after the peer last answered (or, if it had
//!   nothing to answer, after the request went out). An expiry before the budget is spent
//!   backs the RTO off and probes with the oldest unanswered request only — on a live
//!   connection nothing was lost, so more would only load a slow peer with duplicates; the
//!   first expiry at or past the budget gives up. A response is progress: it restarts the
//!   budget; if it answers a request sent only once, its round trip is a sample (Karn's
//!   algorithm: the requester does not offer samples from retransmitted requests).
//! - **Stream, our own stalls**: the budget measures the peer's silence only if the requester
//!   was looking. The requester runs the timer at every poll of its CQ ([`AckTimer::tick`]);
//!   a run at the budget's end that comes more than `min_rto` after the previous one is late —
//!   this process was descheduled or stopped, or its owner did not poll — and responses may
//!   be waiting unread. It does not give up then: it looks once more, `min_rto` later (no
//!   resend: nothing says the request is lost), and gives up at that run if still nothing.
//!
//! Invariant (Stream): the QP never gives up sooner than `budget` after the peer's last
//! response; it gives up at the first timer run at or after that instant, or, if that run was
//! late, at the first run `min_rto` after it.

use super::rto::RtoEstimator;
use crate::soft::link::{AdaptiveTimeouts, RetryPolicy};
use crate::verbs::{QpTiming, Timestamp};
use std::time::Duration;

/// What an expired ack timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Resend every unanswered request, oldest first.
    ResendAll,
    /// Resend the oldest unanswered request only (a probe).
    ResendOldest,
    /// Resend nothing; look again at the new deadline (the run came late, see the module docs).
    Look,
    /// The retries or the budget are spent: the oldest request fails with `RetryExceeded`.
    GiveUp,
}

/// The ack timer of one requester.
#[derive(Clone, Copy, Debug)]
pub enum AckTimer {
    /// IB semantics.
    Verbs {
        /// Time without a response before a retransmission, µs.
        timeout_us: u64,
        /// Retries restored by each response.
        retry_count: u8,
        /// Retries left.
        retries_left: u8,
    },
    /// Adaptive probes within a budget.
    Stream {
        /// The budget.
        budget: Duration,
        /// The RTO.
        rto: RtoEstimator,
        /// When the peer last answered, or the request now awaited went out if later: the
        /// budget counts from here.
        since: Timestamp,
        /// When the requester last ran (a poll, a transmission, a response).
        last_run: Timestamp,
        /// The one extra look granted after a late run at the budget's end, until then.
        grace: Option<Timestamp>,
    },
}

impl AckTimer {
    /// The timer of a requester whose QP has `timing` and whose link has `policy`.
    pub fn new(policy: RetryPolicy, timing: QpTiming) -> Self {
        match policy {
            RetryPolicy::Verbs => AckTimer::Verbs {
                timeout_us: timing.ack_timeout_us,
                retry_count: timing.retry_count,
                retries_left: timing.retry_count,
            },
            RetryPolicy::Stream(t) => AckTimer::stream(&t),
        }
    }

    fn stream(t: &AdaptiveTimeouts) -> Self {
        AckTimer::Stream {
            budget: t.budget,
            rto: RtoEstimator::new(t),
            since: Timestamp::ZERO,
            last_run: Timestamp::ZERO,
            grace: None,
        }
    }

    /// The requester ran at `now` (a poll of its CQ) with no timer due.
    pub fn tick(&mut self, now: Timestamp) {
        if let AckTimer::Stream { last_run, .. } = self {
            *last_run = now;
        }
    }

    /// The peer answered (or, with nothing outstanding before, a request went out): the budget
    /// counts from `now`.
    fn restart(&mut self, now: Timestamp) {
        if let AckTimer::Stream {
            since,
            last_run,
            grace,
            ..
        } = self
        {
            *since = now;
            *last_run = now;
            *grace = None;
        }
    }

    /// A request went out with nothing else awaiting a response: the wait starts now.
    pub fn start(&mut self, now: Timestamp) {
        self.restart(now);
    }

    /// The peer answered the oldest request in order (`sample`: its round trip, if it was
    /// sent once).
    pub fn progress(&mut self, now: Timestamp, sample: Option<Duration>) {
        match self {
            AckTimer::Verbs {
                retry_count,
                retries_left,
                ..
            } => *retries_left = *retry_count,
            AckTimer::Stream { rto, .. } => {
                if let Some(r) = sample {
                    rto.sample(r);
                }
                self.restart(now);
            }
        }
    }

    /// The peer answered with a receiver-not-ready NAK: alive, though the request waits.
    /// (On the verbs timer an RNR NAK restores no retries, as before: RNR has its own count.)
    pub fn peer_alive(&mut self, now: Timestamp) {
        self.restart(now);
    }

    /// The deadline for a response, set at `now` (after a transmission or a response).
    pub fn deadline(&self, now: Timestamp) -> Timestamp {
        match self {
            AckTimer::Verbs { timeout_us, .. } => now.plus_us(*timeout_us),
            AckTimer::Stream {
                budget,
                rto,
                since,
                grace,
                ..
            } => {
                let end = since.plus(*budget).max(grace.unwrap_or(Timestamp::ZERO));
                now.plus(rto.rto()).min(end)
            }
        }
    }

    /// The deadline passed at `now` with a request still unanswered.
    pub fn expire(&mut self, now: Timestamp) -> Expiry {
        match self {
            AckTimer::Verbs { retries_left, .. } => {
                if *retries_left == 0 {
                    return Expiry::GiveUp;
                }
                *retries_left -= 1;
                Expiry::ResendAll
            }
            AckTimer::Stream {
                budget,
                rto,
                since,
                last_run,
                grace,
            } => {
                let late = now.since(*last_run) > rto.floor();
                *last_run = now;
                if now >= since.plus(*budget) {
                    if late && grace.is_none() {
                        *grace = Some(now.plus(rto.floor()));
                        return Expiry::Look;
                    }
                    return Expiry::GiveUp;
                }
                rto.back_off();
                Expiry::ResendOldest
            }
        }
    }

    /// The current retransmission timeout (the verbs timer's is fixed).
    pub fn rto(&self) -> Duration {
        match self {
            AckTimer::Verbs { timeout_us, .. } => Duration::from_micros(*timeout_us),
            AckTimer::Stream { rto, .. } => rto.rto(),
        }
    }

    /// The RTO estimator, on a stream.
    pub fn estimator(&self) -> Option<&RtoEstimator> {
        match self {
            AckTimer::Verbs { .. } => None,
            AckTimer::Stream { rto, .. } => Some(rto),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn at_ms(ms: u64) -> Timestamp {
        Timestamp(ms * MS)
    }

    fn stream() -> AckTimer {
        AckTimer::new(
            RetryPolicy::Stream(AdaptiveTimeouts::default()),
            QpTiming::default(),
        )
    }

    /// Polls `t` every millisecond from `from` (exclusive) while no verdict ends the wait, as
    /// a requester's owner polling its CQ does; returns the expiries and when they came.
    fn poll_until_given_up(t: &mut AckTimer, from: Timestamp) -> Vec<(u64, Expiry)> {
        let mut out = Vec::new();
        let mut deadline = t.deadline(from);
        let mut now = from;
        loop {
            now = now.plus_us(MS);
            if now < deadline {
                t.tick(now);
                continue;
            }
            let e = t.expire(now);
            out.push((now.0 / MS, e));
            if e == Expiry::GiveUp {
                return out;
            }
            deadline = t.deadline(now);
        }
    }

    #[test]
    fn the_verbs_timer_is_the_qps_timing() {
        let timing = QpTiming {
            ack_timeout_us: 16 * MS,
            retry_count: 2,
            ..QpTiming::default()
        };
        let mut t = AckTimer::new(RetryPolicy::Verbs, timing);
        t.start(at_ms(0));
        assert_eq!(t.deadline(at_ms(0)), at_ms(16));
        assert_eq!(t.expire(at_ms(16)), Expiry::ResendAll);
        assert_eq!(t.expire(at_ms(32)), Expiry::ResendAll);
        assert_eq!(t.expire(at_ms(48)), Expiry::GiveUp);
        t.progress(at_ms(50), Some(Duration::from_millis(1)));
        assert_eq!(t.expire(at_ms(66)), Expiry::ResendAll, "retries restored");
        assert_eq!(t.rto(), Duration::from_millis(16));
        assert!(t.estimator().is_none());
    }

    #[test]
    fn a_stream_probes_on_a_backed_off_rto_and_gives_up_at_the_budget() {
        let mut t = stream();
        t.start(at_ms(0));
        // No sample yet: the initial 1 s RTO, doubling on each expiry up to 5 s; the last
        // deadline is the budget's end, 15 s after the request went out.
        let got = poll_until_given_up(&mut t, at_ms(0));
        let probe = Expiry::ResendOldest;
        assert_eq!(
            got,
            [
                (1_000, probe),
                (3_000, probe),
                (7_000, probe),
                (12_000, probe),
                (15_000, Expiry::GiveUp)
            ]
        );
    }

    #[test]
    fn a_stream_never_gives_up_before_the_budget() {
        let mut t = stream();
        t.start(at_ms(0));
        // However the timer is run (late, early, often), an expiry before the budget probes.
        for ms in [1, 200, 999, 1_000, 14_000, 14_999] {
            assert_eq!(t.expire(at_ms(ms)), Expiry::ResendOldest, "at {ms} ms");
        }
        assert_eq!(t.expire(at_ms(15_000)), Expiry::GiveUp);
    }

    #[test]
    fn a_late_run_at_the_budgets_end_looks_once_more_before_giving_up() {
        let mut t = stream();
        t.start(at_ms(0));
        t.tick(at_ms(5_000));
        // The requester did not run from 5 s to 20 s (its process was stopped): the first
        // run after the budget's end does not give up...
        assert_eq!(t.expire(at_ms(20_000)), Expiry::Look);
        assert_eq!(t.deadline(at_ms(20_000)), at_ms(20_200), "one floor later");
        // ...and if nothing came meanwhile, the next run does, late or not.
        assert_eq!(t.expire(at_ms(20_200)), Expiry::GiveUp);
        let mut t = stream();
        t.start(at_ms(0));
        assert_eq!(t.expire(at_ms(20_000)), Expiry::Look);
        assert_eq!(t.expire(at_ms(90_000)), Expiry::GiveUp, "one look only");
        // A response during the look restarts everything.
        let mut t = stream();
        t.start(at_ms(0));
        assert_eq!(t.expire(at_ms(20_000)), Expiry::Look);
        t.progress(at_ms(20_001), None);
        t.tick(at_ms(34_900));
        assert_eq!(
            t.expire(at_ms(35_001)),
            Expiry::GiveUp,
            "15 s after the response"
        );
    }

    #[test]
    fn a_run_exactly_one_floor_after_the_last_is_not_late() {
        let mut t = stream();
        t.start(at_ms(0));
        t.tick(at_ms(14_800));
        assert_eq!(t.expire(at_ms(15_000)), Expiry::GiveUp);
    }

    #[test]
    fn progress_restarts_the_budget_and_ends_the_backoff() {
        let mut t = stream();
        t.start(at_ms(0));
        for ms in [1_000, 3_000, 7_000] {
            assert_eq!(t.expire(at_ms(ms)), Expiry::ResendOldest);
        }
        assert_eq!(t.rto(), Duration::from_secs(5), "backed off to the ceiling");
        // The peer answers 14 s in, a retransmitted request: no sample, the backoff stays.
        t.progress(at_ms(14_000), None);
        assert_eq!(t.rto(), Duration::from_secs(5));
        // The budget counts from the answer, so 15 s is not the end any more.
        assert_eq!(t.expire(at_ms(15_000)), Expiry::ResendOldest);
        assert_eq!(t.expire(at_ms(28_999)), Expiry::ResendOldest);
        assert_eq!(t.expire(at_ms(29_000)), Expiry::GiveUp);
        // A valid sample ends the backoff.
        t.progress(at_ms(29_001), Some(Duration::from_millis(2)));
        assert_eq!(t.rto(), Duration::from_millis(200));
        assert_eq!(t.deadline(at_ms(29_001)), at_ms(29_201));
    }

    #[test]
    fn the_deadline_never_passes_the_budget() {
        let mut t = AckTimer::new(
            RetryPolicy::Stream(AdaptiveTimeouts {
                initial_rto: Duration::from_secs(10),
                max_rto: Duration::from_secs(10),
                budget: Duration::from_secs(3),
                ..AdaptiveTimeouts::default()
            }),
            QpTiming::default(),
        );
        t.start(at_ms(100));
        assert_eq!(t.deadline(at_ms(100)), at_ms(3_100));
        t.tick(at_ms(3_000));
        assert_eq!(t.expire(at_ms(3_100)), Expiry::GiveUp);
    }

    #[test]
    fn an_rnr_nak_shows_the_peer_alive_on_a_stream_only() {
        let mut t = stream();
        t.start(at_ms(0));
        t.peer_alive(at_ms(14_000));
        assert_eq!(t.expire(at_ms(15_000)), Expiry::ResendOldest);
        let mut v = AckTimer::new(
            RetryPolicy::Verbs,
            QpTiming {
                retry_count: 0,
                ..QpTiming::default()
            },
        );
        v.peer_alive(at_ms(1));
        assert_eq!(v.expire(at_ms(17)), Expiry::GiveUp);
    }
}
