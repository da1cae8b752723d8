//! Verbs plumbing for Figure 1: a memory-node device with a listener whose accepted QPs are
//! kept (so the responder side's access flags can be changed), requester QPs, and a spinning
//! wait for completions that gives up instead of hanging.

use anyhow::{Result, anyhow, bail};
use parking_lot::Mutex;
use rnic::soft::{
    SoftAddress, SoftBuffer, SoftContext, SoftCq, SoftListener, SoftMr, SoftMw, SoftPd,
    SoftProvider, SoftQp,
};
use rnic::{
    AcceptPolicy, AccessFlags, CompletionQueue, Context, ProtectionDomain, QpInit, QpNumber,
    QpState, QpTiming, QueuePair, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A completion that has not arrived after this long is a bug, not a measurement.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted QPs kept alive; older ones are dropped so a reconnect loop does not accumulate.
const KEEP_ACCEPTED: usize = 4;

fn qp_init(cq: &SoftCq, access: AccessFlags) -> QpInit<'_, SoftProvider> {
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

/// Every connection gets a QP with full remote rights (protection by rkey, one shared PD).
struct AcceptAll {
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
        let mut kept = self.accepted.lock();
        if kept.len() >= KEEP_ACCEPTED {
            kept.remove(0);
        }
        kept.push(qp);
    }
}

/// A memory node: one PD, a listener, and the QPs it accepted.
pub(super) struct MemoryNode {
    pub(super) ctx: SoftContext,
    pub(super) pd: SoftPd,
    policy: Arc<AcceptAll>,
    listener: SoftListener,
}

impl MemoryNode {
    pub(super) fn new(ctx: SoftContext) -> Result<Self> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(1024)?;
        let policy = Arc::new(AcceptAll {
            pd: pd.clone(),
            cq,
            accepted: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(policy.clone())?;
        Ok(MemoryNode {
            ctx,
            pd,
            policy,
            listener,
        })
    }

    pub(super) fn address(&self) -> &SoftAddress {
        self.listener.address()
    }

    /// The responder QP of the most recent connection.
    pub(super) fn last_accepted(&self) -> Result<SoftQp> {
        self.policy
            .accepted
            .lock()
            .last()
            .cloned()
            .ok_or_else(|| anyhow!("the memory node accepted no connection"))
    }
}

/// A requester: its own CQ and QP, connected to a memory node, and a registered 4 KiB
/// staging buffer for READ destinations.
pub(super) struct Requester {
    pub(super) cq: SoftCq,
    pub(super) qp: SoftQp,
    pub(super) buf: SoftBuffer,
    pub(super) mr: SoftMr,
}

impl Requester {
    pub(super) fn connect(ctx: &SoftContext, to: &SoftAddress) -> Result<Self> {
        let pd = ctx.alloc_pd()?;
        Self::connect_on(ctx, &pd, to)
    }

    /// On an existing PD (the memory node's own loopback QP binds windows of that PD).
    pub(super) fn connect_on(ctx: &SoftContext, pd: &SoftPd, to: &SoftAddress) -> Result<Self> {
        let cq = ctx.create_cq(1024)?;
        let qp = pd.create_qp(qp_init(&cq, AccessFlags::empty()))?;
        qp.connect(to, b"fig1")?;
        if qp.state() != QpState::ReadyToSend {
            bail!("connected QP is in {}", qp.state().name());
        }
        let buf = ctx.alloc_buffer(4096)?;
        let mr = pd.reg_mr(&buf, 0, 4096, AccessFlags::LOCAL_WRITE)?;
        Ok(Requester { cq, qp, buf, mr })
    }

    /// Posts `wr` and spins until its completion arrives (it must succeed).
    pub(super) fn execute(&self, wr: SendWr<'_, SoftMw, SoftMr>) -> Result<()> {
        self.qp
            .post_send(&[wr])
            .map_err(|(_, e)| anyhow!("post_send: {e}"))?;
        wait_one(&self.cq)
    }
}

const NO_WC: WorkCompletion = WorkCompletion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    byte_len: 0,
    qp_num: QpNumber(0),
    invalidated_rkey: None,
};

/// Spins on `cq` for one successful completion; yields now and then so an oversubscribed
/// machine does not lose whole time slices to the spinner.
#[allow(clippy::disallowed_methods)] // an experiment driver bounds its wait in wall time
fn wait_one(cq: &SoftCq) -> Result<()> {
    let mut wc = [NO_WC];
    let mut spins = 0u32;
    let mut deadline: Option<Instant> = None;
    loop {
        if cq.poll(&mut wc) == 1 {
            if wc[0].status != WcStatus::Success {
                bail!(
                    "work request {} completed with {}",
                    wc[0].wr_id,
                    wc[0].status
                );
            }
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins % 256 == 0 {
            std::thread::yield_now();
            let d = *deadline.get_or_insert_with(|| Instant::now() + COMPLETION_TIMEOUT);
            if Instant::now() > d {
                bail!("no completion within {COMPLETION_TIMEOUT:?}");
            }
        } else {
            std::hint::spin_loop();
        }
    }
}
