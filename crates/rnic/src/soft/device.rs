//! The soft device (`ibv_context`): configuration, the protection table, resource limits, the
//! QP numbers in use, the asynchronous event queue, and the transport that connects its QPs.
//! The live objects of each kind are counted ([`SoftContext::resources`]): a count rises when
//! an object is made and falls when its last handle is dropped.
//!
//! The device sits below the objects made on it (PDs, CQs, QPs hold an `Arc` of it), so it
//! names them only through traits: a transport is a `Transport`, and the QP it connects a
//! `Connecting` endpoint. The transports themselves (`soft::transport`) sit above the QPs.

use super::cross_channel::CrossChannelHub;
use super::link::{Link, PacketSink};
use super::mpt::{KeyPolicy, ProtectionTable};
use super::provider::{SoftAddress, SoftListener, SoftProvider};
use crate::memory::Pinning;
use crate::verbs::{
    AcceptPolicy, AsyncEvent, Clock, DeviceAttr, Psn, QpNumber, RealClock, Resource, VerbsError,
    VerbsResult,
};
use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

/// Configuration of a soft device. A plain struct with defaults (quinn's `TransportConfig`).
#[derive(Clone, Debug)]
pub struct SoftConfig {
    /// Capabilities; tables are sized from them.
    pub attr: DeviceAttr,
    /// How window keys change on bind.
    pub key_policy: KeyPolicy,
    /// How registration pins memory.
    pub pinning: Pinning,
    /// Time source for retry timers.
    pub clock: Arc<dyn Clock>,
    /// Seed for QP numbers and starting PSNs; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// Hand out QP numbers sequentially (predictable, as ReDMArk's V5) instead of randomly.
    pub sequential_qpns: bool,
    /// Ask the kernel to back buffers of at least [`HUGE_PAGE`] bytes with transparent huge
    /// pages (`madvise(MADV_HUGEPAGE)`; fewer TLB misses on a large pool). Where the kernel
    /// has no transparent huge pages the buffer keeps normal pages; the buffer says which
    /// ([`MemoryBlock::huge_pages`](crate::memory::MemoryBlock::huge_pages)).
    pub huge_pages: bool,
    /// Fault injection, for tests of what relies on window bounds: accept an access through a
    /// window anywhere in the window's region, as Soft-RoCE does (`docs/rdma.md`,
    /// `mw-bounds-not-enforced`). Never set outside tests.
    pub unchecked_window_bounds: bool,
}

/// The huge page size buffers are advised for (x86-64's 2 MiB).
pub const HUGE_PAGE: usize = 2 << 20;

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            attr: DeviceAttr::default(),
            key_policy: KeyPolicy::Increment,
            pinning: Pinning::Try,
            clock: RealClock::shared(),
            seed: None,
            sequential_qpns: false,
            huge_pages: false,
            unchecked_window_bounds: false,
        }
    }
}

/// How a device's QPs reach other devices (`soft::transport`: in-process or TCP).
/// `Any` lets a transport's own API (e.g. the TCP engine's CPU time) find it behind a context.
pub(crate) trait Transport: Send + Sync + fmt::Debug + std::any::Any {
    /// Starts accepting connections on this device.
    fn listen(&self, policy: Arc<dyn AcceptPolicy<SoftProvider>>) -> VerbsResult<SoftListener>;
    /// Connects `qp` (in RESET) to a listener: exchanges QP numbers, starting PSNs and private
    /// data with the listener's side and establishes both QPs over a new link.
    fn connect(
        &self,
        qp: &dyn Connecting,
        to: &SoftAddress,
        private_data: &[u8],
    ) -> VerbsResult<()>;
    /// Whether the transport enforces `QpService` (`DeviceAttr::qp_rate_limit`).
    fn enforces_service(&self) -> bool {
        false
    }
}

/// A QP being connected, as a transport sees it (on either side of the handshake).
pub(crate) trait Connecting: Send + Sync {
    /// The QP's number.
    fn qpn(&self) -> QpNumber;
    /// A fresh starting PSN for a connection of this QP.
    fn new_psn(&self) -> Psn;
    /// Where the link delivers the peer's packets.
    fn sink(&self) -> Weak<dyn PacketSink>;
    /// RESET → RTS with the peer's QP number, both PSNs and the link to the peer.
    fn establish(
        &self,
        peer_qp: QpNumber,
        send_psn: Psn,
        recv_psn: Psn,
        link: Arc<dyn Link>,
    ) -> VerbsResult<()>;
}

/// The next soft device's key: devices of a process are told apart even after some closed.
static NEXT_DEVICE_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(crate) struct DeviceInner {
    /// This device's number in the process (`Context::device_key`): never reused.
    pub(crate) key: u64,
    pub(crate) config: SoftConfig,
    pub(crate) mpt: ProtectionTable,
    pub(crate) transport: Arc<dyn Transport>,
    rng: Mutex<StdRng>,
    events: Mutex<VecDeque<AsyncEvent>>,
    /// Events are queued (set and cleared under `events`' lock): a poll of an empty queue,
    /// which a serving thread makes every turn, takes no lock.
    events_queued: AtomicBool,
    next_pd: AtomicU32,
    next_qpn: AtomicU32,
    pub(crate) counts: ResourceCounts,
    /// QP numbers of the live QPs (a number is never handed out twice while in use).
    qps: RwLock<HashSet<QpNumber>>,
    /// CQs and QPs by number, for WAIT, ENABLE and binds for another QP; the chain engine.
    pub(crate) cross: CrossChannelHub,
}

#[derive(Default)]
pub(crate) struct ResourceCounts {
    pub(crate) pds: AtomicU32,
    pub(crate) cqs: AtomicU32,
    pub(crate) srqs: AtomicU32,
}

impl ResourceCounts {
    /// Takes one unit of a counted resource, failing past `max`.
    pub(crate) fn take(counter: &AtomicU32, max: u32, r: Resource) -> VerbsResult<()> {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| VerbsError::Exhausted(r))
    }
    pub(crate) fn give(counter: &AtomicU32) {
        counter.fetch_sub(1, Ordering::SeqCst);
    }
}

impl fmt::Debug for DeviceInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftDevice")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// An opened soft device. Cloning shares it.
#[derive(Clone, Debug)]
pub struct SoftContext {
    pub(crate) inner: Arc<DeviceInner>,
}

impl SoftContext {
    pub(crate) fn with_transport(config: SoftConfig, transport: Arc<dyn Transport>) -> Self {
        let seed = config.seed.unwrap_or_else(|| rand::rng().random());
        let mut rng = StdRng::seed_from_u64(seed);
        let first_qpn = if config.sequential_qpns {
            1
        } else {
            rng.random_range(1..0x00ff_0000)
        };
        SoftContext {
            inner: Arc::new(DeviceInner {
                key: NEXT_DEVICE_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                mpt: ProtectionTable::new(&config.attr, config.key_policy)
                    .with_unchecked_window_bounds(config.unchecked_window_bounds),
                transport,
                rng: Mutex::new(rng),
                events: Mutex::new(VecDeque::new()),
                events_queued: AtomicBool::new(false),
                next_pd: AtomicU32::new(1),
                next_qpn: AtomicU32::new(first_qpn),
                counts: ResourceCounts::default(),
                qps: RwLock::new(HashSet::new()),
                cross: CrossChannelHub::default(),
                config,
            }),
        }
    }

    /// The device's protection table (for diagnostics and tests).
    pub fn protection_table(&self) -> &ProtectionTable {
        &self.inner.mpt
    }

    /// Number of live QPs.
    pub fn qp_count(&self) -> usize {
        self.inner.qps.read().len()
    }

    /// The verbs objects alive on this device now, so a test can check that everything a
    /// connection held was released. Each count is read on its own (a snapshot of a device
    /// in use may mix moments); every one is O(1). A TCP device's connections are counted in
    /// [`TcpStats::live`](super::TcpStats::live).
    pub fn resources(&self) -> DeviceResources {
        let d = &self.inner;
        let count = |c: &AtomicU32| c.load(Ordering::SeqCst) as usize;
        let (mrs, mws) = d.mpt.in_use();
        DeviceResources {
            pds: count(&d.counts.pds),
            cqs: count(&d.counts.cqs),
            srqs: count(&d.counts.srqs),
            qps: self.qp_count(),
            mrs,
            mws,
        }
    }
}

/// Live verbs objects of a soft device, by kind ([`SoftContext::resources`]). The default is
/// a device with nothing alive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceResources {
    /// Protection domains.
    pub pds: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Queue pairs (each holds its QP number until dropped).
    pub qps: usize,
    /// Registered memory regions, including one whose handle was dropped while windows were
    /// bound over it (it stays registered until they are unbound).
    pub mrs: usize,
    /// Allocated memory windows, bound or not.
    pub mws: usize,
}

impl DeviceInner {
    pub(crate) fn push_event(&self, e: AsyncEvent) {
        let mut q = self.events.lock();
        if q.len() < 4096 {
            q.push_back(e);
            self.events_queued.store(true, Ordering::Release);
        }
    }

    pub(crate) fn pop_event(&self) -> Option<AsyncEvent> {
        if !self.events_queued.load(Ordering::Acquire) {
            return None;
        }
        let mut q = self.events.lock();
        let e = q.pop_front();
        if q.is_empty() {
            self.events_queued.store(false, Ordering::Relaxed);
        }
        e
    }

    pub(crate) fn new_pd_id(&self) -> u32 {
        self.next_pd.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a fresh QP number (sequential, or random and unused), failing past `max_qp`.
    /// The number is in use until [`release_qpn`](Self::release_qpn).
    pub(crate) fn take_qpn(&self) -> VerbsResult<QpNumber> {
        let mut qps = self.qps.write();
        if qps.len() >= self.config.attr.max_qp as usize {
            return Err(VerbsError::Exhausted(Resource::QueuePair));
        }
        loop {
            let n = if self.config.sequential_qpns {
                self.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff
            } else {
                self.rng.lock().random_range(1..0x0100_0000)
            };
            if n != 0 && qps.insert(QpNumber(n)) {
                return Ok(QpNumber(n));
            }
        }
    }

    /// The QP numbered `qpn` is gone.
    pub(crate) fn release_qpn(&self, qpn: QpNumber) {
        self.qps.write().remove(&qpn);
    }

    /// A random starting PSN (ReDMArk V6: never fixed).
    pub(crate) fn new_psn(&self) -> Psn {
        Psn::new(self.rng.lock().random())
    }
}
