//! Completion queues (with completion channels for blocking waits) and shared receive queues.
//!
//! Invariants:
//! - A CQ from `create_cq` has a completion channel of its own, which its `wait` sleeps on; a
//!   CQ from `create_cq_on` reports to a channel shared with other CQs ([`RdmaChannel`]),
//!   whose `wait` sleeps until any of them has work. Events are acknowledged on the CQ they
//!   name, whichever channel they come from.
//! - `wait` never loses a completion: it arms the CQ *before* polling, then sleeps on the
//!   channel; completions it polls while waiting go to a stash that `poll` drains first, in
//!   order, before polling the device again.
//! - A completion's opcode comes from `ibv_wc.opcode` only on success; on errors (where
//!   libibverbs leaves it undefined) it comes from the QP's record of posted send requests,
//!   and a completion that matches no posted send is a receive.

use crate::context::{RdmaContext, alloc_error};
use crate::ffi::{self, RawRecvWr, RawWc};
use crate::memory::RdmaPd;
use crate::translate::{verbs_error, wc_opcode_from_ibv, wc_status_from_ibv};
use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use rnic::{
    CompletionQueue, CqNumber, MemoryKey, QpNumber, RecvWr, Resource, SharedReceiveQueue,
    VerbsResult, WcOpcode, WorkCompletion,
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A completion queue. Cloning shares it.
#[derive(Clone)]
pub struct RdmaCq {
    inner: Arc<CqInner>,
}

struct CqInner {
    ctx: RdmaContext,
    /// A number for the verbs contract's `cq_num`, unique in the process. This provider runs
    /// no cross-channel WAIT, so nothing resolves it; mlx5's `cqn` would need `mlx5dv`.
    cqn: CqNumber,
    raw: Arc<ffi::Cq>,
    stash: Mutex<VecDeque<WorkCompletion>>,
    waiting: Mutex<()>,
}

impl fmt::Debug for RdmaCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RdmaCq")
    }
}

/// A completion channel several CQs report to. Cloning shares it.
#[derive(Clone)]
pub struct RdmaChannel {
    raw: Arc<ffi::Channel>,
}

impl fmt::Debug for RdmaChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RdmaChannel")
    }
}

impl RdmaChannel {
    pub(crate) fn new(ctx: &RdmaContext) -> VerbsResult<RdmaChannel> {
        let raw = ffi::create_channel(&ctx.inner.dev)
            .map_err(|e| alloc_error("ibv_create_comp_channel", Resource::CompletionQueue, e))?;
        Ok(RdmaChannel { raw: Arc::new(raw) })
    }
}

impl rnic::CompletionChannel for RdmaChannel {
    fn wait(&self, timeout: Duration) -> bool {
        if self.raw.drain_events() > 0 {
            return true;
        }
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
        self.raw.wait_readable(ms) && self.raw.drain_events() > 0
    }
}

impl RdmaCq {
    pub(crate) fn new(ctx: &RdmaContext, capacity: u32) -> VerbsResult<RdmaCq> {
        let err = |e| alloc_error("ibv_create_comp_channel", Resource::CompletionQueue, e);
        let channel = Arc::new(ffi::create_channel(&ctx.inner.dev).map_err(err)?);
        Self::on(ctx, capacity, &channel)
    }

    pub(crate) fn new_on(
        ctx: &RdmaContext,
        capacity: u32,
        channel: &RdmaChannel,
    ) -> VerbsResult<RdmaCq> {
        Self::on(ctx, capacity, &channel.raw)
    }

    fn on(ctx: &RdmaContext, capacity: u32, channel: &Arc<ffi::Channel>) -> VerbsResult<RdmaCq> {
        let err = |e| alloc_error("ibv_create_cq", Resource::CompletionQueue, e);
        let raw = ffi::create_cq(&ctx.inner.dev, capacity.max(1), channel).map_err(err)?;
        Ok(RdmaCq {
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                cqn: CqNumber(NEXT_CQN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
                raw: Arc::new(raw),
                stash: Mutex::new(VecDeque::new()),
                waiting: Mutex::new(()),
            }),
        })
    }

    pub(crate) fn raw(&self) -> &Arc<ffi::Cq> {
        &self.inner.raw
    }

    fn convert(&self, w: RawWc) -> WorkCompletion {
        let status = wc_status_from_ibv(w.status);
        let record = self.inner.ctx.inner.records.lock().get(&w.qp_num).cloned();
        let from_record = || {
            record
                .as_ref()
                .and_then(|r| r.complete(w.wr_id, status.is_success()))
                .unwrap_or(WcOpcode::Recv)
        };
        let opcode = match (status.is_success(), wc_opcode_from_ibv(w.opcode)) {
            (true, Some(WcOpcode::Recv)) => WcOpcode::Recv,
            (true, Some(op)) => {
                if let Some(r) = &record {
                    r.complete(w.wr_id, true);
                }
                op
            }
            _ => from_record(),
        };
        let with_inv = w.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_INV.0 != 0;
        WorkCompletion {
            wr_id: w.wr_id,
            status,
            opcode,
            byte_len: w.byte_len,
            qp_num: QpNumber(w.qp_num),
            invalidated_rkey: with_inv.then_some(MemoryKey(w.invalidated_rkey)),
        }
    }

    /// Polls the device into `out`; a device error reads as nothing polled (it only happens
    /// with a destroyed CQ, which the handle structure rules out).
    fn poll_device(&self, out: &mut [WorkCompletion]) -> usize {
        let mut raw = vec![RawWc::default(); out.len()];
        let n = self.inner.raw.poll(&mut raw).unwrap_or(0);
        for (slot, w) in out.iter_mut().zip(raw.into_iter().take(n)) {
            *slot = self.convert(w);
        }
        n
    }

    fn poll_into_stash(&self) -> bool {
        let mut buf = [WorkCompletion::default(); 16];
        let n = self.poll_device(&mut buf);
        self.inner.stash.lock().extend(buf[..n].iter().copied());
        n > 0
    }
}

/// The next `CqInner::cqn`.
static NEXT_CQN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl CompletionQueue for RdmaCq {
    fn cq_num(&self) -> CqNumber {
        self.inner.cqn
    }

    fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        {
            let mut stash = self.inner.stash.lock();
            while n < out.len() {
                let Some(wc) = stash.pop_front() else { break };
                out[n] = wc;
                n += 1;
            }
        }
        n + self.poll_device(&mut out[n..])
    }

    #[allow(clippy::disallowed_methods)] // a blocking wait is a driver: it reads real time
    fn wait(&self, timeout: Duration) -> bool {
        if !self.inner.stash.lock().is_empty() {
            return true;
        }
        let _one_waiter = self.inner.waiting.lock();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // Arm first, then poll: a completion that arrives after the poll raises an event.
            if self.inner.raw.req_notify().is_err() {
                return self.poll_into_stash();
            }
            if self.poll_into_stash() {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            if self.inner.raw.channel().wait_readable(ms) {
                self.inner.raw.drain_events();
            }
        }
    }

    fn req_notify(&self) {
        // Fails only for a destroyed CQ, which the handle structure rules out.
        let _ = self.inner.raw.req_notify();
    }
}

/// A shared receive queue. Cloning shares it.
#[derive(Clone)]
pub struct RdmaSrq {
    pub(crate) raw: Arc<ffi::Srq>,
}

impl fmt::Debug for RdmaSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RdmaSrq")
    }
}

impl RdmaSrq {
    pub(crate) fn new(pd: &RdmaPd, capacity: u32) -> VerbsResult<RdmaSrq> {
        let raw = ffi::create_srq(&pd.raw, capacity.max(1))
            .map_err(|e| alloc_error("ibv_create_srq", Resource::SharedReceiveQueue, e))?;
        Ok(RdmaSrq { raw: Arc::new(raw) })
    }
}

/// A receive request as plain values.
pub(crate) fn raw_recv(wr: &RecvWr) -> RawRecvWr {
    RawRecvWr {
        wr_id: wr.wr_id,
        sge: wr.sge.map(|s| (s.addr, s.length, s.lkey.0)),
    }
}

impl SharedReceiveQueue for RdmaSrq {
    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()> {
        let raw: Vec<RawRecvWr> = wrs.iter().map(raw_recv).collect();
        self.raw
            .post_recv(&raw)
            .map_err(|(_, e)| verbs_error("ibv_post_srq_recv", Resource::QueueSlot, e))
    }
}
