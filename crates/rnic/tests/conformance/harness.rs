//! The conformance harness: everything a rule test needs, generic over the provider.
//!
//! A [`TestBed`] opens two devices — the memory node (MN) and the client node (CN) — and knows
//! how to move time and packets on its transport. A [`World`] builds the usual furniture on a
//! bed (PDs, registered buffers, an MN loopback "admin" QP for binds) and makes connected QP
//! pairs through `listen`/`connect` with a [`TestPolicy`] whose options ([`ConnOpts`]) pick the
//! server's PD, QP access flags, SRQ and timing.
//!
//! Waiting is spin-polling: CQs are polled (which also drives the provider's timers), the bed
//! is driven, and the loop gives up after a generous wall-clock bound with a clear message.
//! Nothing sleeps.

#![allow(dead_code)] // each test binary uses a different subset

use rnic::{
    AcceptPolicy, AccessFlags, AsyncEvent, BindInfo, Clock, CompletionQueue, Context, CrossChannel,
    Lkey, MemoryBuffer, MemoryKey, MemoryRegion, MemoryWindow, MwType, ProtectionDomain, Provider,
    QpInit, QpNumber, QpState, QpTiming, QueuePair, RealClock, RecvWr, Rkey, SendOp, SendWr, Sge,
    SharedReceiveQueue, VirtAddr, WcOpcode, WcStatus, WorkCompletion,
};
use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long any wait may take in wall-clock time before the test fails. Generous: the suite
/// runs many tests in parallel and an operation normally takes microseconds.
pub const WAIT_BOUND: Duration = Duration::from_secs(20);
/// How long an async event may lag the state change it reports (the QP already in ERR). On a
/// device that never raises it (rxe) every such rule waits this long, so it is short.
pub const EVENT_BOUND: Duration = Duration::from_secs(3);

/// A send work request of provider `P`.
pub type Wr<'a, P> = SendWr<'a, <P as Provider>::Mw, <P as Provider>::Mr>;

/// How window keys change on bind (maps to the provider's key policy where it has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Keys {
    /// +1 per bind (`ibv_inc_rkey`).
    #[default]
    Increment,
    /// Seeded random key bytes.
    Random(u64),
}

/// Options for opening a bed.
#[derive(Clone, Copy, Debug, Default)]
pub struct BedOptions {
    /// Key policy of both devices.
    pub keys: Keys,
}

/// Two devices of one provider and the means to drive them.
pub trait TestBed<P: Provider>: Sized {
    /// Opens the memory node and the client node.
    fn open(opts: BedOptions) -> Self;
    /// The memory node.
    fn mn(&self) -> &P::Context;
    /// The client node.
    fn cn(&self) -> &P::Context;
    /// Moves packets if the transport needs it (a queued network); no-op for inline and TCP.
    fn drive(&self) {}
    /// Lets `d` of device time pass. Beds on a virtual clock advance it; real-time beds do
    /// nothing (time passes by itself while the caller polls).
    fn advance(&self, _d: Duration) {}
    /// Whether the bed runs on a virtual clock: completions then happen exactly when the test
    /// drives them, and a test may assert that nothing has completed yet.
    fn virtual_time(&self) -> bool;
    /// Whether a QP entering ERR closes its connection, so that its peer fails at once (the
    /// soft NIC's TCP transport: `docs/tcp-transport.md`); an RC peer otherwise stays up.
    fn hangs_up_on_error(&self) -> bool {
        false
    }
    /// Timing for QPs that are not about timers: long ack timeouts so a loaded machine never
    /// triggers a spurious retransmission on a real-time bed.
    fn quiet_timing(&self) -> QpTiming {
        QpTiming {
            ack_timeout_us: 2_000_000,
            retry_count: 7,
            rnr_timer_us: 1_000,
            rnr_retry: 7,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// A completion to fill poll slices with.
pub fn blank_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: u64::MAX,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qp_num: QpNumber(0),
        invalidated_rkey: None,
    }
}

/// Spins (driving the bed) until `cond` holds, failing with `what` after [`WAIT_BOUND`].
pub fn wait_until<P: Provider, B: TestBed<P>>(bed: &B, what: &str, cond: impl FnMut() -> bool) {
    wait_until_within::<P, B>(bed, what, WAIT_BOUND, cond);
}

/// [`wait_until`] with another bound.
pub fn wait_until_within<P: Provider, B: TestBed<P>>(
    bed: &B,
    what: &str,
    bound: Duration,
    mut cond: impl FnMut() -> bool,
) {
    let clock = RealClock::new();
    let mut spins = 0u64;
    loop {
        if cond() {
            return;
        }
        bed.drive();
        if cond() {
            return;
        }
        assert!(
            clock.now().0 < bound.as_micros() as u64,
            "timed out after {bound:?} waiting for {what}"
        );
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Polls `cq` (driving the bed, and advancing device time by `step` per round if given) until
/// `n` completions arrived; returns them in order. Fails with what did arrive after the bound.
pub fn wait_completions_advancing<P: Provider, B: TestBed<P>>(
    bed: &B,
    cq: &P::Cq,
    n: usize,
    step: Option<Duration>,
) -> Vec<WorkCompletion> {
    let clock = RealClock::new();
    let mut got = Vec::with_capacity(n);
    let mut buf = [blank_wc(); 16];
    let mut spins = 0u64;
    while got.len() < n {
        let want = (n - got.len()).min(buf.len());
        let k = cq.poll(&mut buf[..want]);
        got.extend_from_slice(&buf[..k]);
        if got.len() >= n {
            break;
        }
        bed.drive();
        if let Some(d) = step {
            bed.advance(d);
        }
        assert!(
            clock.now().0 < WAIT_BOUND.as_micros() as u64,
            "timed out after {WAIT_BOUND:?} waiting for {n} completion(s); got {}: {got:#?}",
            got.len()
        );
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    got
}

/// Polls `cq` until `n` completions arrived; returns them in order.
pub fn wait_completions<P: Provider, B: TestBed<P>>(
    bed: &B,
    cq: &P::Cq,
    n: usize,
) -> Vec<WorkCompletion> {
    wait_completions_advancing::<P, B>(bed, cq, n, None)
}

/// Polls once (after driving the bed) and returns whatever is there.
pub fn poll_now<P: Provider, B: TestBed<P>>(bed: &B, cq: &P::Cq) -> Vec<WorkCompletion> {
    bed.drive();
    let mut buf = [blank_wc(); 64];
    let k = cq.poll(&mut buf);
    buf[..k].to_vec()
}

/// Asserts that nothing more is queued on `cq`. Only meaningful when every completion that
/// could still arrive would have been ordered before one already received.
pub fn assert_cq_empty<P: Provider, B: TestBed<P>>(bed: &B, cq: &P::Cq, what: &str) {
    let extra = poll_now::<P, B>(bed, cq);
    assert!(
        extra.is_empty(),
        "unexpected completions on {what}: {extra:#?}"
    );
}

/// Waits until `ctx` reports `event`, skipping other events. Called once the QP the event is
/// about is in ERR, so the event is due already: it gets [`EVENT_BOUND`], not [`WAIT_BOUND`].
pub fn wait_event<P: Provider, B: TestBed<P>>(bed: &B, ctx: &P::Context, event: AsyncEvent) {
    let mut seen = Vec::new();
    let what = format!("async event {event:?}");
    wait_until_within::<P, B>(bed, &what, EVENT_BOUND, || {
        while let Some(e) = ctx.poll_async_event() {
            if e == event {
                return true;
            }
            seen.push(e);
        }
        false
    });
}

/// Drains the async events queued on `ctx`.
pub fn drain_events<P: Provider>(ctx: &P::Context) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| ctx.poll_async_event()).collect()
}

/// Waits until `qp` is in `state`.
pub fn wait_state<P: Provider, B: TestBed<P>>(bed: &B, qp: &P::Qp, state: QpState, who: &str) {
    wait_until::<P, B>(bed, &format!("{who} to reach {state:?}"), || {
        qp.state() == state
    });
}

// ---------------------------------------------------------------------------------------------
// Work-request builders

/// `len` bytes at `offset` of a registered local buffer.
pub fn sge<Buf: MemoryBuffer>(buf: &Buf, lkey: Lkey, offset: usize, len: u32) -> Sge {
    Sge {
        addr: buf.addr() + offset as u64,
        length: len,
        lkey,
    }
}

/// A signaled WR.
pub fn wr<'a, P: Provider>(wr_id: u64, op: SendOp<'a, P::Mw, P::Mr>) -> Wr<'a, P> {
    SendWr {
        wr_id,
        signaled: true,
        op,
    }
}

/// An unsignaled WR.
pub fn wr_unsignaled<'a, P: Provider>(wr_id: u64, op: SendOp<'a, P::Mw, P::Mr>) -> Wr<'a, P> {
    SendWr {
        wr_id,
        signaled: false,
        op,
    }
}

/// READ op.
pub fn op_read<'a, P: Provider>(
    local: Sge,
    remote_addr: VirtAddr,
    rkey: Rkey,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::Read {
        local,
        remote_addr,
        rkey,
    }
}

/// WRITE op.
pub fn op_write<'a, P: Provider>(
    local: Sge,
    remote_addr: VirtAddr,
    rkey: Rkey,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::Write {
        local,
        remote_addr,
        rkey,
    }
}

/// FAA op.
pub fn op_faa<'a, P: Provider>(
    local: Sge,
    remote_addr: VirtAddr,
    rkey: Rkey,
    add: u64,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::FetchAdd {
        local,
        remote_addr,
        rkey,
        add,
    }
}

/// CAS op.
pub fn op_cas<'a, P: Provider>(
    local: Sge,
    remote_addr: VirtAddr,
    rkey: Rkey,
    compare: u64,
    swap: u64,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::CompareSwap {
        local,
        remote_addr,
        rkey,
        compare,
        swap,
    }
}

/// BIND_MW op.
pub fn op_bind<'a, P: Provider>(
    mw: &'a P::Mw,
    mr: Option<&'a P::Mr>,
    addr: VirtAddr,
    length: u64,
    access: AccessFlags,
) -> SendOp<'a, P::Mw, P::Mr> {
    SendOp::BindMw {
        mw,
        bind: BindInfo {
            mr,
            addr,
            length,
            access,
            key: None,
            target_qp: None,
        },
    }
}

/// A key nobody was given: index and key byte chosen to name nothing.
pub const GARBAGE_RKEY: MemoryKey = MemoryKey(0xdead_beef);

/// Read, write and atomic remote rights.
pub const RWA: AccessFlags = AccessFlags::REMOTE_ALL;

/// The rights of MN regions that windows are bound over.
pub fn mn_mr_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND
}

// ---------------------------------------------------------------------------------------------
// Connections

/// Per-listener options of the test accept policy.
#[derive(Debug)]
pub struct ConnOpts<P: Provider> {
    /// PD of the server (MN) QP; default: the world's `mpd`.
    pub server_pd: Option<P::Pd>,
    /// Remote rights the server QP accepts (`qp_access_flags`).
    pub server_access: AccessFlags,
    /// Serve receives from this SRQ instead of the QP's own queue.
    pub srq: Option<Arc<P::Srq>>,
    /// Timing of the server QP; default: the bed's quiet timing.
    pub server_timing: Option<QpTiming>,
    /// Timing of the client QP; default: the bed's quiet timing.
    pub client_timing: Option<QpTiming>,
    /// PD of the client QP; default: the world's `cpd` (or `mpd` for loopback).
    pub client_pd: Option<P::Pd>,
    /// Receives the server posts on its own queue as soon as a connection is established.
    pub server_recvs: Vec<RecvWr>,
    /// Connect from the MN itself (a loopback QP, as the Patronus manager binds with).
    pub loopback: bool,
    /// Make the server QP cross-channel, with these managed queues.
    pub server_cross: Option<CrossChannel>,
    /// Make the client QP cross-channel, with these managed queues.
    pub client_cross: Option<CrossChannel>,
}

impl<P: Provider> Default for ConnOpts<P> {
    fn default() -> Self {
        ConnOpts {
            server_pd: None,
            server_access: RWA,
            srq: None,
            server_timing: None,
            client_timing: None,
            client_pd: None,
            server_recvs: Vec::new(),
            loopback: false,
            server_cross: None,
            client_cross: None,
        }
    }
}

/// The accept policy used by every test listener.
pub struct TestPolicy<P: Provider> {
    pd: P::Pd,
    /// Send CQ of accepted QPs.
    pub send_cq: Arc<P::Cq>,
    /// Receive CQ of accepted QPs.
    pub recv_cq: Arc<P::Cq>,
    srq: Option<Arc<P::Srq>>,
    access: AccessFlags,
    timing: QpTiming,
    recvs: Vec<RecvWr>,
    cross: Option<CrossChannel>,
    accepted: Mutex<VecDeque<P::Qp>>,
    refusals: Mutex<Vec<String>>,
}

impl<P: Provider> Debug for TestPolicy<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPolicy")
            .field("pd", &self.pd)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> AcceptPolicy<P> for TestPolicy<P> {
    fn create_qp(&self, _private_data: &[u8]) -> Result<P::Qp, String> {
        let init = QpInit {
            send_cq: &*self.send_cq,
            recv_cq: &*self.recv_cq,
            srq: self.srq.as_deref(),
            max_send_wr: 256,
            max_recv_wr: 256,
            access: self.access,
            timing: self.timing,
        };
        let r = match self.cross {
            Some(cross) => self.pd.create_cross_channel_qp(init, cross),
            None => self.pd.create_qp(init),
        };
        r.map_err(|e| {
            let msg = e.to_string();
            self.refusals.lock().expect("policy lock").push(msg.clone());
            msg
        })
    }

    fn established(&self, qp: P::Qp, _private_data: &[u8]) {
        if !self.recvs.is_empty() {
            qp.post_recv(&self.recvs)
                .expect("test policy: posting receives on an established QP");
        }
        self.accepted.lock().expect("policy lock").push_back(qp);
    }
}

/// A connected RC QP pair: the client's (CN, requester of one-sided ops) and the server's (MN).
pub struct Conn<P: Provider> {
    /// Client QP.
    pub cqp: P::Qp,
    /// Client send CQ.
    pub ccq: P::Cq,
    /// Client receive CQ.
    pub crcq: P::Cq,
    /// Server QP (accepted by the policy).
    pub sqp: P::Qp,
    /// The listener's policy (its CQs are the server QP's).
    pub policy: Arc<TestPolicy<P>>,
    /// Kept alive so reconnects reach the same policy.
    _listener: P::Listener,
    addr: P::Address,
}

impl<P: Provider> Debug for Conn<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("cqp", &self.cqp)
            .field("sqp", &self.sqp)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Conn<P> {
    /// Server send CQ (binds and LOCAL_INV posted on the server QP complete here).
    pub fn scq(&self) -> &P::Cq {
        &self.policy.send_cq
    }
    /// The listener's address.
    pub fn address(&self) -> &P::Address {
        &self.addr
    }
    /// Server receive CQ.
    pub fn srcq(&self) -> &P::Cq {
        &self.policy.recv_cq
    }

    /// Posts `wrs` on the client QP; panics if the post itself is refused.
    pub fn post(&self, wrs: &[Wr<'_, P>]) {
        if let Err((i, e)) = self.cqp.post_send(wrs) {
            panic!("post_send refused WR #{i}: {e}");
        }
    }

    /// Posts one signaled WR on the client QP and waits for its completion.
    pub fn exec<B: TestBed<P>>(&self, bed: &B, op: SendOp<'_, P::Mw, P::Mr>) -> WorkCompletion {
        self.post(&[wr::<P>(0x5eed, op)]);
        let wc = wait_completions::<P, B>(bed, &self.ccq, 1)[0];
        assert_eq!(wc.wr_id, 0x5eed, "completion of another request: {wc:?}");
        wc
    }

    /// Posts one signaled WR on the server QP and waits for its completion.
    pub fn exec_server<B: TestBed<P>>(
        &self,
        bed: &B,
        op: SendOp<'_, P::Mw, P::Mr>,
    ) -> WorkCompletion {
        if let Err((_, e)) = self.sqp.post_send(&[wr::<P>(0xb14d, op)]) {
            panic!("server post_send refused: {e}");
        }
        let wc = wait_completions::<P, B>(bed, self.scq(), 1)[0];
        assert_eq!(wc.wr_id, 0xb14d, "completion of another request: {wc:?}");
        wc
    }

    /// Resets the client QP and connects it again (a new handshake, a new server QP).
    pub fn reconnect<B: TestBed<P>>(&mut self, bed: &B) {
        self.cqp.reset().expect("reset client QP");
        assert_eq!(self.cqp.state(), QpState::Reset);
        self.cqp
            .connect(&self.addr, b"conformance")
            .expect("reconnect");
        self.sqp = take_accepted::<P, B>(bed, &self.policy);
    }
}

fn take_accepted<P: Provider, B: TestBed<P>>(bed: &B, policy: &TestPolicy<P>) -> P::Qp {
    let mut qp = None;
    wait_until::<P, B>(bed, "the accept policy to receive the server QP", || {
        qp = policy.accepted.lock().expect("policy lock").pop_front();
        qp.is_some()
    });
    let qp = qp.expect("accepted QP");
    wait_state::<P, B>(bed, &qp, QpState::ReadyToSend, "server QP");
    qp
}

// ---------------------------------------------------------------------------------------------
// The world

/// Buffer size on each node.
pub const BUF_LEN: usize = 64 * 1024;

/// A bed with the usual objects: PDs, registered buffers, an admin QP for MN-side binds.
pub struct World<P: Provider, B: TestBed<P>> {
    /// The bed.
    pub bed: B,
    /// MN PD that windows and most server QPs use.
    pub mpd: P::Pd,
    /// A second MN PD, for PD-mismatch rules.
    pub mpd2: P::Pd,
    /// CN PD.
    pub cpd: P::Pd,
    /// MN memory.
    pub mbuf: P::Buffer,
    /// `mbuf` registered on `mpd` with LOCAL_WRITE | MW_BIND (no remote rights of its own).
    pub mmr: P::Mr,
    /// CN memory.
    pub cbuf: P::Buffer,
    /// `cbuf` registered on `cpd` with LOCAL_WRITE.
    pub cmr: P::Mr,
    /// MN loopback connection whose client QP posts type-1 binds (like Patronus's manager).
    pub admin: Conn<P>,
}

impl<P: Provider, B: TestBed<P>> World<P, B> {
    /// A world on a bed opened with default options.
    pub fn new() -> Self {
        Self::with(BedOptions::default())
    }

    /// A world on a bed opened with `opts`.
    pub fn with(opts: BedOptions) -> Self {
        let bed = B::open(opts);
        let mn = bed.mn().clone();
        let cn = bed.cn().clone();
        let mpd = mn.alloc_pd().expect("alloc MN PD");
        let mpd2 = mn.alloc_pd().expect("alloc second MN PD");
        let cpd = cn.alloc_pd().expect("alloc CN PD");
        let mbuf = mn.alloc_buffer(BUF_LEN).expect("alloc MN buffer");
        let mmr = mpd
            .reg_mr(&mbuf, 0, BUF_LEN, mn_mr_access())
            .expect("register MN buffer");
        let cbuf = cn.alloc_buffer(BUF_LEN).expect("alloc CN buffer");
        let cmr = cpd
            .reg_mr(&cbuf, 0, BUF_LEN, AccessFlags::LOCAL_WRITE)
            .expect("register CN buffer");
        let admin = Self::connect_on(
            &bed,
            &mpd,
            &cpd,
            ConnOpts {
                loopback: true,
                ..ConnOpts::default()
            },
        );
        World {
            bed,
            mpd,
            mpd2,
            cpd,
            mbuf,
            mmr,
            cbuf,
            cmr,
            admin,
        }
    }

    /// The MN device.
    pub fn mn(&self) -> &P::Context {
        self.bed.mn()
    }

    /// The CN device.
    pub fn cn(&self) -> &P::Context {
        self.bed.cn()
    }

    /// A new connection CN → MN with default options.
    pub fn connect(&self) -> Conn<P> {
        self.connect_with(ConnOpts::default())
    }

    /// A new connection with `opts`.
    pub fn connect_with(&self, opts: ConnOpts<P>) -> Conn<P> {
        Self::connect_on(&self.bed, &self.mpd, &self.cpd, opts)
    }

    /// A fresh MN loopback QP pair on `mpd`, for binds after the admin QP failed one.
    pub fn fresh_admin(&mut self) {
        self.admin = Self::connect_on(
            &self.bed,
            &self.mpd,
            &self.cpd,
            ConnOpts {
                loopback: true,
                ..ConnOpts::default()
            },
        );
    }

    fn connect_on(bed: &B, mpd: &P::Pd, cpd: &P::Pd, opts: ConnOpts<P>) -> Conn<P> {
        let mn = bed.mn().clone();
        let client_ctx = if opts.loopback {
            mn.clone()
        } else {
            bed.cn().clone()
        };
        let policy = Arc::new(TestPolicy::<P> {
            pd: opts.server_pd.unwrap_or_else(|| mpd.clone()),
            send_cq: Arc::new(mn.create_cq(1024).expect("server send CQ")),
            recv_cq: Arc::new(mn.create_cq(1024).expect("server recv CQ")),
            srq: opts.srq,
            access: opts.server_access,
            timing: opts.server_timing.unwrap_or_else(|| bed.quiet_timing()),
            recvs: opts.server_recvs,
            cross: opts.server_cross,
            accepted: Mutex::new(VecDeque::new()),
            refusals: Mutex::new(Vec::new()),
        });
        let listener = mn.listen(policy.clone()).expect("listen");
        let addr = mn.listener_address(&listener);
        let client_pd = opts.client_pd.unwrap_or_else(|| {
            if opts.loopback {
                mpd.clone()
            } else {
                cpd.clone()
            }
        });
        let ccq = client_ctx.create_cq(1024).expect("client send CQ");
        let crcq = client_ctx.create_cq(1024).expect("client recv CQ");
        let init = QpInit {
            send_cq: &ccq,
            recv_cq: &crcq,
            srq: None,
            max_send_wr: 256,
            max_recv_wr: 256,
            access: RWA,
            timing: opts.client_timing.unwrap_or_else(|| bed.quiet_timing()),
        };
        let cqp = match opts.client_cross {
            Some(cross) => client_pd.create_cross_channel_qp(init, cross),
            None => client_pd.create_qp(init),
        }
        .expect("create client QP");
        assert_eq!(cqp.state(), QpState::Reset, "a new QP starts in RESET");
        if let Err(e) = cqp.connect(&addr, b"conformance") {
            panic!(
                "connect failed: {e}; policy refusals: {:?}",
                policy.refusals.lock().expect("policy lock")
            );
        }
        assert_eq!(
            cqp.state(),
            QpState::ReadyToSend,
            "a connected QP is in RTS"
        );
        let sqp = take_accepted::<P, B>(bed, &policy);
        Conn {
            cqp,
            ccq,
            crcq,
            sqp,
            policy,
            _listener: listener,
            addr,
        }
    }

    /// MN address of `offset` in `mbuf`.
    pub fn maddr(&self, offset: usize) -> VirtAddr {
        self.mbuf.addr() + offset as u64
    }

    /// A CN scatter/gather entry over `cbuf`.
    pub fn csge(&self, offset: usize, len: u32) -> Sge {
        sge(&self.cbuf, self.cmr.lkey(), offset, len)
    }

    /// Binds `mw` over `[offset, offset + len)` of `mmr` with `access`, posted on `qp`
    /// (whose send CQ is `cq`); returns the completion status.
    #[allow(clippy::too_many_arguments)] // the QP and CQ, then `ibv_mw_bind_info`'s fields
    pub fn bind_on(
        &self,
        qp: &P::Qp,
        cq: &P::Cq,
        mw: &P::Mw,
        mr: Option<&P::Mr>,
        addr: VirtAddr,
        len: u64,
        access: AccessFlags,
    ) -> WcStatus {
        if let Err((_, e)) =
            qp.post_send(&[wr::<P>(0xb1d, op_bind::<P>(mw, mr, addr, len, access))])
        {
            panic!("bind post refused: {e}");
        }
        let wc = wait_completions::<P, B>(&self.bed, cq, 1)[0];
        assert_eq!(wc.wr_id, 0xb1d, "completion of another request: {wc:?}");
        if wc.status == WcStatus::Success {
            assert_eq!(wc.opcode, WcOpcode::BindMw);
        }
        wc.status
    }

    /// Binds a type-1 window over `mmr` from the admin QP; returns the status.
    pub fn bind1(&self, mw: &P::Mw, offset: usize, len: u64, access: AccessFlags) -> WcStatus {
        self.bind_on(
            &self.admin.cqp,
            &self.admin.ccq,
            mw,
            Some(&self.mmr),
            self.maddr(offset),
            len,
            access,
        )
    }

    /// Allocates a type-1 window on `mpd` and binds it over `mmr`; returns it with its rkey.
    pub fn window1(&self, offset: usize, len: u64, access: AccessFlags) -> (P::Mw, Rkey) {
        let mw = self.mpd.alloc_mw(MwType::Type1).expect("alloc type-1 MW");
        assert_eq!(mw.mw_type(), MwType::Type1);
        assert_eq!(
            self.bind1(&mw, offset, len, access),
            WcStatus::Success,
            "type-1 bind"
        );
        let rkey = mw.rkey();
        (mw, rkey)
    }

    /// Allocates a type-2 window on `mpd` and binds it over `mmr` from `conn`'s server QP.
    pub fn window2(
        &self,
        conn: &Conn<P>,
        offset: usize,
        len: u64,
        access: AccessFlags,
    ) -> (P::Mw, Rkey) {
        let mw = self.mpd.alloc_mw(MwType::Type2).expect("alloc type-2 MW");
        assert_eq!(mw.mw_type(), MwType::Type2);
        let st = self.bind_on(
            &conn.sqp,
            conn.scq(),
            &mw,
            Some(&self.mmr),
            self.maddr(offset),
            len,
            access,
        );
        assert_eq!(st, WcStatus::Success, "type-2 bind");
        let rkey = mw.rkey();
        (mw, rkey)
    }

    /// Reads `len` bytes from the MN at `offset` through `rkey` into `cbuf[local..]`.
    pub fn read(
        &self,
        conn: &Conn<P>,
        local: usize,
        offset: usize,
        len: u32,
        rkey: Rkey,
    ) -> WorkCompletion {
        conn.exec(
            &self.bed,
            op_read::<P>(self.csge(local, len), self.maddr(offset), rkey),
        )
    }

    /// Writes `cbuf[local..local+len]` to the MN at `offset` through `rkey`.
    pub fn write(
        &self,
        conn: &Conn<P>,
        local: usize,
        offset: usize,
        len: u32,
        rkey: Rkey,
    ) -> WorkCompletion {
        conn.exec(
            &self.bed,
            op_write::<P>(self.csge(local, len), self.maddr(offset), rkey),
        )
    }

    /// Fetch-and-adds at MN `offset`; the old value lands at `cbuf[local..local+8]`.
    pub fn faa(
        &self,
        conn: &Conn<P>,
        local: usize,
        offset: usize,
        rkey: Rkey,
        add: u64,
    ) -> WorkCompletion {
        conn.exec(
            &self.bed,
            op_faa::<P>(self.csge(local, 8), self.maddr(offset), rkey, add),
        )
    }

    /// Registers `[offset, offset + len)` of `mbuf` on `pd` with `access` (a region of its own,
    /// so a test can observe its bound-window count through `deregister`).
    pub fn extra_mr(&self, pd: &P::Pd, offset: usize, len: usize, access: AccessFlags) -> P::Mr {
        pd.reg_mr(&self.mbuf, offset, len, access)
            .expect("register an extra MN region")
    }

    /// Snapshot of MN memory.
    pub fn mn_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mbuf.read(offset, &mut v).expect("read MN buffer");
        v
    }

    /// Snapshot of CN memory.
    pub fn cn_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.cbuf.read(offset, &mut v).expect("read CN buffer");
        v
    }

    /// Fills `mbuf[offset..offset+len]` with a pattern derived from `seed`.
    pub fn fill_mn(&self, offset: usize, len: usize, seed: u8) -> Vec<u8> {
        let v = pattern(len, seed);
        self.mbuf.write(offset, &v).expect("write MN buffer");
        v
    }

    /// Fills `cbuf[offset..offset+len]` with a pattern derived from `seed`.
    pub fn fill_cn(&self, offset: usize, len: usize, seed: u8) -> Vec<u8> {
        let v = pattern(len, seed);
        self.cbuf.write(offset, &v).expect("write CN buffer");
        v
    }

    /// Asserts the full consequences of a rejected remote request on `conn`: the completion
    /// has `status`, both QPs are in ERR, and the MN raised `event` for the server QP.
    pub fn assert_rejected(
        &self,
        conn: &Conn<P>,
        wc: &WorkCompletion,
        status: WcStatus,
        event: fn(QpNumber) -> AsyncEvent,
    ) {
        assert_eq!(wc.status, status, "completion: {wc:?}");
        assert_eq!(
            wc.qp_num,
            conn.cqp.qp_num(),
            "completion names the requester QP"
        );
        assert_eq!(
            conn.cqp.state(),
            QpState::Error,
            "requester QP must enter ERR"
        );
        wait_state::<P, B>(&self.bed, &conn.sqp, QpState::Error, "responder QP");
        wait_event::<P, B>(&self.bed, self.mn(), event(conn.sqp.qp_num()));
    }

    /// [`assert_rejected`](Self::assert_rejected) with a remote access error.
    pub fn assert_access_error(&self, conn: &Conn<P>, wc: &WorkCompletion) {
        self.assert_rejected(
            conn,
            wc,
            WcStatus::RemoteAccessError,
            AsyncEvent::QpAccessError,
        );
    }

    /// [`assert_rejected`](Self::assert_rejected) with a remote invalid-request error.
    pub fn assert_invalid_request(&self, conn: &Conn<P>, wc: &WorkCompletion) {
        self.assert_rejected(
            conn,
            wc,
            WcStatus::RemoteInvalidRequestError,
            AsyncEvent::QpRequestError,
        );
    }

    /// Posts receives on an SRQ.
    pub fn post_srq(&self, srq: &P::Srq, wrs: &[RecvWr]) {
        srq.post_recv(wrs).expect("post SRQ receives");
    }
}

impl<P: Provider, B: TestBed<P>> Default for World<P, B> {
    fn default() -> Self {
        Self::new()
    }
}

/// A recognizable byte pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ 0x5a)
        .collect()
}

/// Asserts that `mr` cannot be deregistered because `bound` windows are bound over it, and
/// hands it back. A provider that counts them must report the count; one that cannot
/// (rdma-core's `ibv_dereg_mr` says `EBUSY` and no more) reports `Busy`.
pub fn assert_dereg_busy<M: MemoryRegion>(mr: M, bound: u32) -> M {
    match mr.deregister() {
        Ok(()) => panic!("deregistering a region with {bound} bound window(s) succeeded"),
        Err((mr, rnic::VerbsError::MrHasBoundWindows(n))) => {
            assert_eq!(n, bound, "bound-window count reported by dereg_mr");
            mr
        }
        Err((mr, rnic::VerbsError::Busy(_))) => mr,
        Err((_, e)) => panic!("dereg_mr failed with {e}, expected MrHasBoundWindows({bound})"),
    }
}

/// Asserts that `mr` deregisters (no window is bound over it).
pub fn assert_dereg_ok<M: MemoryRegion>(mr: M) {
    if let Err((_, e)) = mr.deregister() {
        panic!("dereg_mr failed: {e}");
    }
}
