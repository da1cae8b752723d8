//! Verbs plumbing shared by every section: a memory node (`rnic`'s open responder plus one
//! registered buffer) and client endpoints (`rnic`'s requester), plus post/poll helpers.

use anyhow::{Result, anyhow};
use rnic::endpoints::{OpenResponder, Requester, wait_completions as wait_on};
use rnic::soft::{
    SoftAddress, SoftBuffer, SoftContext, SoftCq, SoftMr, SoftMw, SoftProvider, SoftQp,
};
use rnic::{AccessFlags, Context, ProtectionDomain, QueuePair, RealClock, SendWr};
use std::time::Duration;

/// Give up on a completion after this long (a hang is a bug, not a measurement).
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// Spins on `cq` until `n` completions arrived; every one must be successful.
pub(crate) fn wait_completions(cq: &SoftCq, n: usize) -> Result<()> {
    let clock = RealClock::new();
    Ok(wait_on::<SoftProvider>(cq, n, &clock, COMPLETION_TIMEOUT)?)
}

pub(crate) fn post(qp: &SoftQp, wrs: &[SendWr<'_, SoftMw, SoftMr>]) -> Result<()> {
    qp.post_send(wrs)
        .map_err(|(i, e)| anyhow!("post_send rejected work request {i}: {e}"))
}

/// A memory node: an open responder (every accepted QP kept, full remote rights) and one
/// registered buffer.
pub(crate) struct MemoryNode {
    responder: OpenResponder<SoftProvider>,
    pub(crate) buf: SoftBuffer,
    pub(crate) mr: SoftMr,
}

impl MemoryNode {
    pub(crate) fn new(ctx: SoftContext, buf_len: usize) -> Result<MemoryNode> {
        let responder = OpenResponder::<SoftProvider>::new(ctx, 4096, usize::MAX)?;
        let buf = responder.ctx.alloc_buffer(buf_len)?;
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
        let mr = responder.pd.reg_mr(&buf, 0, buf_len, all)?;
        Ok(MemoryNode { responder, buf, mr })
    }

    pub(crate) fn address(&self) -> &SoftAddress {
        self.responder.address()
    }
}

/// A client endpoint: its own CQ, QP and registered 4 KiB staging buffer.
pub(crate) type Client = Requester<SoftProvider>;
