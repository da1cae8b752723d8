//! Verbs plumbing shared by every section: a memory node (PD, listener, registered buffer)
//! and client endpoints (CQ, QP, staging buffer), plus post/poll helpers.

use anyhow::{Result, anyhow, bail};
use rnic::soft::{
    SoftAddress, SoftBuffer, SoftContext, SoftCq, SoftListener, SoftMr, SoftMw, SoftPd,
    SoftProvider, SoftQp,
};
use rnic::{
    AcceptPolicy, AccessFlags, CompletionQueue, Context, ProtectionDomain, QpInit, QpNumber,
    QpState, QpTiming, QueuePair, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::measure::now;
use crate::one_sided::BATCH;

/// Give up on a completion after this long (a hang is a bug, not a measurement).
pub(crate) const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) const NO_WC: WorkCompletion = WorkCompletion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    byte_len: 0,
    qp_num: QpNumber(0),
    invalidated_rkey: None,
};

/// Spins on `cq` until `n` completions arrived; every one must be successful.
pub(crate) fn wait_completions(cq: &SoftCq, n: usize) -> Result<()> {
    let mut wc = [NO_WC; BATCH];
    let mut got = 0;
    let mut spins = 0u32;
    let mut deadline: Option<Instant> = None;
    while got < n {
        let k = cq.poll(&mut wc[..(n - got).min(BATCH)]);
        for c in &wc[..k] {
            if c.status != WcStatus::Success {
                bail!("work request {} completed with {}", c.wr_id, c.status);
            }
        }
        got += k;
        if k == 0 {
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                let d = *deadline.get_or_insert_with(|| now() + COMPLETION_TIMEOUT);
                if now() > d {
                    bail!("no completion within {COMPLETION_TIMEOUT:?} ({got}/{n} arrived)");
                }
            }
            relax(spins);
        }
    }
    Ok(())
}

/// One step of a busy-poll loop: spin, but let another runnable thread have the core now and
/// then, so an oversubscribed machine (more spinning threads than cores) does not stall for
/// whole scheduler time slices.
pub(crate) fn relax(spins: u32) {
    if spins % 256 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

pub(crate) fn post(qp: &SoftQp, wrs: &[SendWr<'_, SoftMw, SoftMr>]) -> Result<()> {
    qp.post_send(wrs)
        .map_err(|(i, e)| anyhow!("post_send rejected work request {i}: {e}"))
}

pub(crate) fn qp_init(cq: &SoftCq, access: AccessFlags) -> QpInit<'_, SoftProvider> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 256,
        max_recv_wr: 16,
        access,
        timing: QpTiming::default(),
    }
}

/// The memory node's accept policy: every connection gets a QP on `pd` with full remote rights
/// (protection is by rkey only, as in the paper's shared-PD setup). Accepted QPs are kept alive.
pub(crate) struct AcceptAll {
    pd: SoftPd,
    cq: SoftCq,
    accepted: Mutex<Vec<SoftQp>>,
}

impl AcceptPolicy<SoftProvider> for AcceptAll {
    fn create_qp(&self, _private_data: &[u8]) -> Result<SoftQp, String> {
        self.pd
            .create_qp(qp_init(&self.cq, AccessFlags::REMOTE_ALL))
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, _private_data: &[u8]) {
        if let Ok(mut v) = self.accepted.lock() {
            v.push(qp);
        }
    }
}

/// A memory node: one PD, one CQ, a listener, and one registered buffer.
pub(crate) struct MemoryNode {
    _policy: Arc<AcceptAll>,
    listener: SoftListener,
    pub(crate) buf: SoftBuffer,
    pub(crate) mr: SoftMr,
}

impl MemoryNode {
    pub(crate) fn new(ctx: SoftContext, buf_len: usize) -> Result<MemoryNode> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(4096)?;
        let policy = Arc::new(AcceptAll {
            pd: pd.clone(),
            cq: cq.clone(),
            accepted: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(policy.clone())?;
        let buf = ctx.alloc_buffer(buf_len)?;
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
        let mr = pd.reg_mr(&buf, 0, buf_len, all)?;
        Ok(MemoryNode {
            _policy: policy,
            listener,
            buf,
            mr,
        })
    }

    pub(crate) fn address(&self) -> &SoftAddress {
        self.listener.address()
    }
}

/// A client endpoint: its own CQ, QP and registered 4 KiB staging buffer.
pub(crate) struct Client {
    pub(crate) cq: SoftCq,
    pub(crate) qp: SoftQp,
    pub(crate) buf: SoftBuffer,
    pub(crate) mr: SoftMr,
}

impl Client {
    pub(crate) fn connect(ctx: &SoftContext, pd: &SoftPd, to: &SoftAddress) -> Result<Client> {
        let cq = ctx.create_cq(1024)?;
        let qp = pd.create_qp(qp_init(&cq, AccessFlags::empty()))?;
        qp.connect(to, b"rnic_micro")?;
        if qp.state() != QpState::ReadyToSend {
            bail!("connected QP is in {}", qp.state().name());
        }
        let buf = ctx.alloc_buffer(4096)?;
        let mr = pd.reg_mr(&buf, 0, 4096, AccessFlags::LOCAL_WRITE)?;
        Ok(Client { cq, qp, buf, mr })
    }
}
