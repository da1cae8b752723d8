//! The denial-of-service experiment's notes: its method, the abusers, and where the numbers
//! of one run can be compared.

use super::{Outcome, RPC_TIMEOUT, flooder};
use crate::harness::BenchOpts;
use patronus_core::cluster::Link;
use patronus_core::manager::NodeLimits;
use std::time::Duration;

/// The notes of a run with `outcomes`, windows of `window`, on `opts.transport`.
pub(super) fn notes(outcomes: &[Outcome], window: Duration, opts: &BenchOpts) -> Vec<String> {
    let mut notes = vec![
        format!(
            "One honest round: allocate 128 B exclusive, write 16 B, read them back, free. \
             Windows of {:.1} s before, during and after each abuse, each abuse in a fresh \
             cluster; the abuser runs on its own thread and device and is stopped and joined \
             before the window after. Every client's RPC timeout is {} ms, so a starved \
             round fails (and is counted by its error) inside a window; none is retried.",
            window.as_secs_f64(),
            RPC_TIMEOUT.as_millis()
        ),
        "Two baselines run first, in the same run: spin, a thread that never blocks and never \
         touches the node (what CPU contention alone costs), and twin, a second client doing \
         the honest rounds (a fair share of the node). The honest client, the abuser, the \
         manager thread (and over TCP the NIC engines) share 2 cores, and in-process the \
         honest client and the manager each keep a core busy even alone (both poll while \
         they wait; see the cores columns), so any third busy thread takes CPU from their ping-pong: \
         compare an abuse's share with the spinner's and the twin's, not with 1."
            .into(),
        format!(
            "The flooder uses raw verbs: {} control connections, each a Hello and then the \
             same Extend of a permission that does not exist, posted as fast as a {}-deep send \
             queue takes it; it never posts a receive for the replies and opens a new \
             connection when one breaks. With credits each connection gets {} receive slots; \
             with the shared receive queue (limits.control_credits = 0, the paper's design) all \
             connections share {} slots.",
            flooder::CONNECTIONS,
            flooder::DEPTH,
            NodeLimits::default().control_credits,
            patronus_core::manager::NodeConfig::default().srq_depth
        ),
        "What perf showed when this experiment was written (in-process, 3 s windows): under \
         the spinner the honest thread gets ~0.3 of a core and the manager ~0.7, against a \
         core each alone; under the flood with credits ~70 % of the manager's samples are its \
         CQ polls running the timers of its reply QPs (the flooder never posts receives, so \
         its replies wait out receiver-not-ready retries) and ~4 % are request handling; a \
         throttled faulter's refused reconnections run the node's accept policy on the \
         faulter's own thread; in the type-2 storm the reconnections themselves are under 1 % \
         of the manager's samples, and the storm's cost is its 9 RPCs a fault (UseQp and a \
         Rebind for each of its 8 permissions)."
            .into(),
        "MN CPU/op is the manager's (and over TCP the engines') CPU during the abuse divided by \
         the honest rounds in that window: it includes the work the abuser caused."
            .into(),
        "Isolation: the paper's shared PD with type-1 windows, except the storm, which needs \
         type-2 windows (its fault budget raised to 10⁶ so nothing throttles it; the storm \
         client holds 8 permissions, rebound after every fault). Hoard and faults run with two \
         tenants configured (abuser and honest) with the default quotas (an equal share each) \
         and the default fault budget (1024 at once, 100 a second); the hoard's node is \
         small (16 MiB pool, 512 headers and windows) so that the hog reaches its quotas \
         early in a window."
            .into(),
        {
            let alone = outcomes.iter().map(|o| o.before.rounds_per_s() / 1e3);
            let (lo, hi) = alone.fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
                (lo.min(r), hi.max(r))
            });
            format!(
                "Shares from short windows are noisy: in this run the honest client's rate \
                 alone (the windows before the abuses) ranged from {lo:.1} to {hi:.1} K \
                 rounds/s. Compare rows of one run, and read the spinner's after/before as \
                 the noise of that run."
            )
        },
        "The paper has no denial-of-service evaluation; there are no paper numbers to compare."
            .into(),
    ];
    if opts.transport == Link::Tcp {
        notes.push(
            "Over TCP each of the three devices has a NIC engine thread (default options: \
             they poll before they park), so a round costs hundreds of microseconds and the \
             CPU contention is larger than in-process."
                .into(),
        );
    }
    notes
}
