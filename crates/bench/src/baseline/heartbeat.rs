//! The §7.2.4 "QP polling" failure detector: the memory node periodically RDMA-READs an 8-byte
//! heartbeat counter on every client and suspects a client whose counter stops moving.
//!
//! - [`HeartbeatTarget`] lives on a client's device: the counter in a READ-only region, behind
//!   its own listener. The client's thread calls [`HeartbeatTarget::beat`] when it makes
//!   progress; a fail-slow client stops beating while hung, yet its NIC keeps answering READs
//!   — which is exactly why the counter, not the READ's success, is the signal.
//! - [`HeartbeatPoller`] lives on the memory node's device: one QP per target and one thread
//!   ("heartbeat-poller") that every `interval` posts one READ per target (all posted, then
//!   completions collected), and suspects a client whose value did not change for `timeout`
//!   or whose READ failed. A target with a READ still in flight gets no second one, so a dead
//!   NIC costs one outstanding READ, not one per interval.
//!
//! The first value read counts as a change (a target unanswered since start is timed from
//! start). Suspicion is cleared when the counter moves again (and reported again if it stops again); a
//! failed READ breaks the RC QP, so that client stays suspected.

use super::{BaselineError, thread_cpu};
use parking_lot::Mutex;
use rnic::{
    AcceptPolicy, AccessFlags, Clock, CompletionQueue, Context, MemoryBuffer, MemoryKey,
    MemoryRegion, ProtectionDomain, Provider, QpInit, QpTiming, QueuePair, SendOp, SendWr, Sge,
    Timestamp, VerbsError, WcStatus, WorkCompletion,
};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

const PRIVATE_DATA: &[u8] = b"PBHB";

/// What a poller needs to reach one target.
#[derive(Clone, Debug)]
pub struct HeartbeatDescriptor<P: Provider> {
    /// The target's listener.
    pub address: P::Address,
    /// Address of the counter on the target.
    pub addr: u64,
    /// Rkey of the counter's region.
    pub rkey: MemoryKey,
}

struct TargetPolicy<P: Provider> {
    pd: P::Pd,
    cq: P::Cq,
    /// Accepted QPs, kept alive as long as the target.
    qps: Mutex<Vec<P::Qp>>,
}

impl<P: Provider> AcceptPolicy<P> for TargetPolicy<P> {
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String> {
        if private_data != PRIVATE_DATA {
            return Err("not a heartbeat poller".into());
        }
        self.pd
            .create_qp(QpInit {
                send_cq: &self.cq,
                recv_cq: &self.cq,
                srq: None,
                max_send_wr: 1,
                max_recv_wr: 1,
                access: AccessFlags::REMOTE_READ,
                timing: QpTiming::default(),
            })
            .map_err(|e| e.to_string())
    }

    fn established(&self, qp: P::Qp, _private_data: &[u8]) {
        self.qps.lock().push(qp);
    }
}

/// A heartbeat counter a poller can READ, on a client's device.
pub struct HeartbeatTarget<P: Provider> {
    address: P::Address,
    counter: P::Buffer,
    mr: P::Mr,
    beats: AtomicU64,
    _policy: Arc<TargetPolicy<P>>,
    _listener: P::Listener,
}

impl<P: Provider> std::fmt::Debug for HeartbeatTarget<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatTarget")
            .field("address", &self.address)
            .field("beats", &self.beats)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> HeartbeatTarget<P> {
    /// Registers a zeroed 8-byte counter (REMOTE_READ only) and listens for pollers.
    pub fn listen(ctx: &P::Context) -> Result<Self, BaselineError> {
        let pd = ctx.alloc_pd()?;
        let counter = ctx.alloc_buffer(8)?;
        let mr = pd.reg_mr(&counter, 0, 8, AccessFlags::REMOTE_READ)?;
        let policy = Arc::new(TargetPolicy::<P> {
            pd,
            cq: ctx.create_cq(16)?,
            qps: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(policy.clone())?;
        Ok(HeartbeatTarget {
            address: ctx.listener_address(&listener),
            counter,
            mr,
            beats: AtomicU64::new(0),
            _policy: policy,
            _listener: listener,
        })
    }

    /// Where pollers connect.
    pub fn address(&self) -> &P::Address {
        &self.address
    }

    /// What a poller needs to READ the counter.
    pub fn descriptor(&self) -> HeartbeatDescriptor<P> {
        HeartbeatDescriptor {
            address: self.address.clone(),
            addr: self.mr.addr(),
            rkey: self.mr.rkey(),
        }
    }

    /// Records progress: increments the counter the poller reads.
    pub fn beat(&self) {
        let v = self.beats.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        // The buffer is 8 bytes and 8-aligned (page-aligned), so this cannot fail.
        let _ = self.counter.store_u64(0, v);
    }

    /// Beats so far.
    pub fn beats(&self) -> u64 {
        self.beats.load(Ordering::SeqCst)
    }
}

/// What the poller reports about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatStats {
    /// Heartbeat READs posted.
    pub reads: u64,
    /// Times a client became suspected.
    pub suspected: u64,
    /// CPU time of the poller thread.
    pub cpu: Duration,
}

/// Called with a client's id when it becomes suspected.
pub type SuspectCallback = Box<dyn FnMut(u32) + Send>;

/// One target as the poller thread sees it.
struct Watch<P: Provider> {
    client: u32,
    qp: P::Qp,
    addr: u64,
    rkey: MemoryKey,
    last_value: Option<u64>,
    last_change: Timestamp,
    in_flight: bool,
    failed: bool,
    suspected: bool,
}

#[derive(Default)]
struct View {
    stats: HeartbeatStats,
    suspected: Vec<u32>,
}

struct Shared {
    stop: AtomicBool,
    view: Mutex<View>,
}

/// The memory node's heartbeat poller.
pub struct HeartbeatPoller<P: Provider> {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    _provider: PhantomData<fn() -> P>,
}

impl<P: Provider> std::fmt::Debug for HeartbeatPoller<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatPoller").finish_non_exhaustive()
    }
}

impl<P: Provider> HeartbeatPoller<P> {
    /// Connects one QP to each `(client id, target)` and starts polling every `interval`;
    /// a client is suspected after `timeout` without change (or when its READ fails).
    pub fn start(
        ctx: P::Context,
        targets: Vec<(u32, HeartbeatDescriptor<P>)>,
        interval: Duration,
        timeout: Duration,
    ) -> Result<Self, BaselineError> {
        Self::start_with_callback(ctx, targets, interval, timeout, None)
    }

    /// As [`HeartbeatPoller::start`]; `on_suspect` runs on the poller thread each time a
    /// client becomes suspected.
    pub fn start_with_callback(
        ctx: P::Context,
        targets: Vec<(u32, HeartbeatDescriptor<P>)>,
        interval: Duration,
        timeout: Duration,
        on_suspect: Option<SuspectCallback>,
    ) -> Result<Self, BaselineError> {
        let n = targets.len().max(1);
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(2 * n as u32 + 16)?;
        let staging = ctx.alloc_buffer(8 * n)?;
        let staging_mr = pd.reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        let clock = ctx.clock();
        let mut watches = Vec::with_capacity(targets.len());
        for (client, t) in targets {
            let qp = pd.create_qp(QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                max_send_wr: 4,
                max_recv_wr: 1,
                access: AccessFlags::empty(),
                timing: QpTiming::default(),
            })?;
            qp.connect(&t.address, PRIVATE_DATA)?;
            watches.push(Watch::<P> {
                client,
                qp,
                addr: t.addr,
                rkey: t.rkey,
                last_value: None,
                last_change: Timestamp::ZERO, // set below, once every QP is connected
                in_flight: false,
                failed: false,
                suspected: false,
            });
        }
        let now = clock.now();
        for w in &mut watches {
            w.last_change = now;
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            view: Mutex::new(View::default()),
        });
        let mut poller = Poller::<P> {
            shared: shared.clone(),
            clock,
            cq,
            staging,
            staging_mr,
            watches,
            interval: interval.max(Duration::from_micros(1)),
            timeout,
            on_suspect,
            stats: HeartbeatStats::default(),
        };
        let thread = std::thread::Builder::new()
            .name("heartbeat-poller".into())
            .spawn(move || poller.run())
            .map_err(|e| BaselineError::Verbs(VerbsError::Io(e)))?;
        Ok(HeartbeatPoller {
            shared,
            thread: Some(thread),
            _provider: PhantomData,
        })
    }

    /// Clients suspected now.
    pub fn suspected(&self) -> Vec<u32> {
        self.shared.view.lock().suspected.clone()
    }

    /// Counters as of the poller's last round.
    pub fn stats(&self) -> HeartbeatStats {
        self.shared.view.lock().stats
    }

    /// Stops the poller thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl<P: Provider> Drop for HeartbeatPoller<P> {
    fn drop(&mut self) {
        self.halt();
    }
}

struct Poller<P: Provider> {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    cq: P::Cq,
    staging: P::Buffer,
    staging_mr: P::Mr,
    watches: Vec<Watch<P>>,
    interval: Duration,
    timeout: Duration,
    on_suspect: Option<SuspectCallback>,
    stats: HeartbeatStats,
}

impl<P: Provider> Poller<P> {
    fn run(&mut self) {
        let mut next = self.clock.now();
        while !self.shared.stop.load(Ordering::SeqCst) {
            let now = self.clock.now();
            if now < next {
                // Waiting for the next period, not for a condition; `stop` unparks.
                std::thread::park_timeout(next.since(now).min(Duration::from_millis(5)));
                continue;
            }
            next = next.plus(self.interval).max(now);
            self.round();
        }
        self.publish();
    }

    /// Posts a READ to every reachable target, then collects completions for up to one
    /// interval, then judges every target.
    fn round(&mut self) {
        let mut expected = 0usize;
        for (i, w) in self.watches.iter_mut().enumerate() {
            if w.in_flight || w.failed {
                continue;
            }
            let wr: SendWr<'_, P::Mw, P::Mr> = SendWr {
                wr_id: i as u64,
                signaled: true,
                op: SendOp::Read {
                    local: Sge {
                        addr: self.staging.addr() + 8 * i as u64,
                        length: 8,
                        lkey: self.staging_mr.lkey(),
                    },
                    remote_addr: w.addr,
                    rkey: w.rkey,
                },
            };
            match w.qp.post_send(std::slice::from_ref(&wr)) {
                Ok(()) => {
                    w.in_flight = true;
                    expected += 1;
                    self.stats.reads += 1;
                }
                Err(_) => w.failed = true,
            }
        }
        let started = self.clock.now();
        let mut wcs = [WorkCompletion::default(); 32];
        let mut got = 0usize;
        while got < expected
            && self.clock.now().since(started) < self.interval
            && !self.shared.stop.load(Ordering::Relaxed)
        {
            let n = self.cq.poll(&mut wcs);
            if n == 0 {
                self.cq.wait(Duration::from_millis(1));
                continue;
            }
            got += n;
            for wc in &wcs[..n] {
                self.on_completion(wc);
            }
        }
        let now = self.clock.now();
        for w in &mut self.watches {
            let stale = now.since(w.last_change) >= self.timeout;
            if (stale || w.failed) && !w.suspected {
                w.suspected = true;
                self.stats.suspected += 1;
                if let Some(cb) = self.on_suspect.as_mut() {
                    cb(w.client);
                }
            }
        }
        self.publish();
    }

    fn on_completion(&mut self, wc: &WorkCompletion) {
        let i = wc.wr_id as usize;
        let now = self.clock.now();
        let Some(w) = self.watches.get_mut(i) else {
            return;
        };
        w.in_flight = false;
        if wc.status != WcStatus::Success {
            w.failed = true;
            return;
        }
        let Ok(v) = self.staging.load_u64(8 * i) else {
            return;
        };
        // The first value read counts as a change: the clock starts at first contact.
        if w.last_value != Some(v) {
            w.last_change = now;
            w.suspected = false;
            w.last_value = Some(v);
        }
    }

    fn publish(&mut self) {
        let mut view = self.shared.view.lock();
        self.stats.cpu = thread_cpu();
        view.stats = self.stats;
        view.suspected = self
            .watches
            .iter()
            .filter(|w| w.suspected)
            .map(|w| w.client)
            .collect();
    }
}
