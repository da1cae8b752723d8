//! Verbs plumbing for Figure 1: `rnic`'s open responder (a memory node whose accepted QPs are
//! kept, so the responder side's access flags can be changed) and requesters, each on the soft
//! provider, and one synchronous execute that gives up instead of hanging.

use anyhow::{Result, anyhow};
use rnic::endpoints::{self, OpenResponder, wait_completions};
use rnic::soft::{SoftAddress, SoftContext, SoftMr, SoftMw, SoftProvider, SoftQp};
use rnic::{Context, QueuePair, RealClock, SendWr};
use std::time::Duration;

/// A completion that has not arrived after this long is a bug, not a measurement.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted QPs kept alive; older ones are dropped so a reconnect loop does not accumulate.
const KEEP_ACCEPTED: usize = 4;

/// A memory node: one PD, a listener, and the QPs it accepted.
pub(super) type MemoryNode = OpenResponder<SoftProvider>;

/// A requester: its own CQ and QP, connected, and a registered 4 KiB staging buffer.
pub(super) type Requester = endpoints::Requester<SoftProvider>;

/// Listens on `ctx`.
pub(super) fn memory_node(ctx: SoftContext) -> Result<MemoryNode> {
    Ok(OpenResponder::new(ctx, 1024, KEEP_ACCEPTED)?)
}

/// The responder QP of the most recent connection to `mn`.
pub(super) fn last_accepted(mn: &MemoryNode) -> Result<SoftQp> {
    mn.last_accepted()
        .ok_or_else(|| anyhow!("the memory node accepted no connection"))
}

/// A requester on a PD of its own, connected to `to`.
pub(super) fn requester(ctx: &SoftContext, to: &SoftAddress) -> Result<Requester> {
    let pd = ctx.alloc_pd()?;
    Ok(Requester::connect(ctx, &pd, to, b"fig1")?)
}

/// Posts `wr` on `r` and spins until its completion arrives (it must succeed).
pub(super) fn execute(r: &Requester, wr: SendWr<'_, SoftMw, SoftMr>) -> Result<()> {
    r.qp.post_send(&[wr])
        .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
    let clock = RealClock::new();
    Ok(wait_completions::<SoftProvider>(
        &r.cq,
        1,
        &clock,
        COMPLETION_TIMEOUT,
    )?)
}
