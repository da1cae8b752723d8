//! Verbs plumbing for Figure 1: `rnic`'s open responder (a memory node whose accepted QPs are
//! kept, so the responder side's access flags can be changed) and requesters, on any provider
//! (the soft NIC, or an rdma-core device with `--provider rdma`), and one synchronous execute
//! that gives up instead of hanging.

use anyhow::{Result, anyhow};
use rnic::endpoints::{self, OpenResponder, wait_completions};
use rnic::{Context, Provider, QueuePair, RealClock, SendWr};
use std::time::Duration;

/// A completion that has not arrived after this long is a bug, not a measurement.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted QPs kept alive; older ones are dropped so a reconnect loop does not accumulate.
const KEEP_ACCEPTED: usize = 4;

/// A memory node: one PD, a listener, and the QPs it accepted.
pub(super) type MemoryNode<P> = OpenResponder<P>;

/// A requester: its own CQ and QP, connected, and a registered 4 KiB staging buffer.
pub(super) type Requester<P> = endpoints::Requester<P>;

/// Listens on `ctx`.
pub(super) fn memory_node<P: Provider>(ctx: P::Context) -> Result<MemoryNode<P>> {
    Ok(OpenResponder::new(ctx, 1024, KEEP_ACCEPTED)?)
}

/// The responder QP of the most recent connection to `mn`.
pub(super) fn last_accepted<P: Provider>(mn: &MemoryNode<P>) -> Result<P::Qp> {
    mn.last_accepted()
        .ok_or_else(|| anyhow!("the memory node accepted no connection"))
}

/// A requester on a PD of its own, connected to `to`.
pub(super) fn requester<P: Provider>(ctx: &P::Context, to: &P::Address) -> Result<Requester<P>> {
    let pd = ctx.alloc_pd()?;
    Ok(Requester::connect(ctx, &pd, to, b"fig1")?)
}

/// Posts `wr` on `r` and spins until its completion arrives (it must succeed).
pub(super) fn execute<P: Provider>(r: &Requester<P>, wr: SendWr<'_, P::Mw, P::Mr>) -> Result<()> {
    r.qp.post_send(&[wr])
        .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
    let clock = RealClock::new();
    Ok(wait_completions::<P>(&r.cq, 1, &clock, COMPLETION_TIMEOUT)?)
}
