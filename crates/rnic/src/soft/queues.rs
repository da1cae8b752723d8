//! Completion queues and shared receive queues.
//!
//! A CQ also drives the NIC's timers: polling progresses the QPs that asked for it (those with
//! outstanding requests, pending retries or a pending flush), so retransmissions, RNR retries
//! and error flushes happen on the thread that waits for them — no timer thread. The queues sit
//! below the QPs that use them: a CQ knows a QP only as something to `Progress`.

use super::cross_channel::{ChainStep, CompletionCounter, CountedCq};
use super::device::{DeviceInner, ResourceCounts};
use crate::verbs::{
    AsyncEvent, CompletionChannel, CompletionQueue, CqNumber, PdId, RecvWr, Resource,
    SharedReceiveQueue, VerbsError, VerbsResult, WorkCompletion,
};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A completion channel: events of armed CQs, counted, and a condition variable to sleep on.
#[derive(Clone, Default)]
pub struct SoftChannel {
    inner: Arc<ChannelInner>,
}

#[derive(Default)]
struct ChannelInner {
    events: Mutex<u64>,
    raised: Condvar,
}

impl fmt::Debug for SoftChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftChannel")
            .field("events", &*self.inner.events.lock())
            .finish()
    }
}

impl SoftChannel {
    fn raise(&self) {
        *self.inner.events.lock() += 1;
        self.inner.raised.notify_all();
    }
}

impl CompletionChannel for SoftChannel {
    fn wait(&self, timeout: Duration) -> bool {
        let mut events = self.inner.events.lock();
        if *events == 0 {
            self.inner.raised.wait_for(&mut events, timeout);
        }
        std::mem::take(&mut *events) > 0
    }
}

/// A poll that finds more QPs than this to progress leaves reading their links to the
/// transport's engine threads: reading a socket costs a system call even when it is empty,
/// so a server's CQ shared by many connections would pay one per connection per poll, while a
/// client's CQ with a few QPs gains latency by reading its own.
const READ_LINKS_UP_TO: usize = 4;

/// Work a CQ poll runs for those that asked (a QP's timers and flushes).
pub(crate) trait Progress: Send + Sync {
    /// Runs due timers and pending flushes; with `read_link`, first takes what the QP's link
    /// has received (else the transport delivers it). `from` is the CQ whose poll took it off
    /// its watch list.
    fn progress(&self, read_link: bool, from: &CqInner);
}

pub(crate) struct CqInner {
    dev: Arc<DeviceInner>,
    queue: Mutex<VecDeque<WorkCompletion>>,
    /// Signalled when a completion is queued (the completion channel).
    arrived: Condvar,
    capacity: usize,
    /// Completions queued: `queue`'s length, kept beside it (written under its lock) so an
    /// empty poll takes no lock.
    queued: AtomicUsize,
    watch: Mutex<Vec<Weak<dyn Progress>>>,
    /// Whether `watch` may be non-empty (set after a push to it, cleared by the poll that
    /// takes it), so a poll with nothing to progress takes no lock.
    watched: AtomicBool,
    /// The channel the CQ reports to when armed.
    channel: Option<SoftChannel>,
    armed: AtomicBool,
    /// Whether the last poll found nothing: the next one is a spinning poller's, worth a
    /// read of the watched QPs' links (see [`SoftCq::poll`]).
    spinning: AtomicBool,
    /// The number a cross-channel WAIT names this CQ by.
    cqn: CqNumber,
    /// Completions queued so far, and the WAITs waiting for a count.
    counter: CompletionCounter,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        self.dev.cross.unregister_cq(self.cqn);
        ResourceCounts::give(&self.dev.counts.cqs);
    }
}

impl CountedCq for CqInner {
    fn reached_or_notify(&self, count: u64, waiter: Weak<dyn ChainStep>) -> bool {
        self.counter.reached_or_notify(count, waiter, || {
            let _serial = self.queue.lock();
            self.counter.produced()
        })
    }
}

/// A completion queue. Cloning shares it.
#[derive(Clone)]
pub struct SoftCq {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for SoftCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftCq")
            .field("capacity", &self.inner.capacity)
            .field("queued", &self.inner.queue.lock().len())
            .finish()
    }
}

impl SoftCq {
    pub(crate) fn new(
        dev: &Arc<DeviceInner>,
        capacity: u32,
        channel: Option<SoftChannel>,
    ) -> VerbsResult<Self> {
        if capacity == 0 || capacity > dev.config.attr.max_cqe {
            return Err(VerbsError::InvalidArgument("CQ capacity out of range"));
        }
        ResourceCounts::take(
            &dev.counts.cqs,
            dev.config.attr.max_cq,
            Resource::CompletionQueue,
        )?;
        let cqn = dev.cross.unused_cqn();
        let cq = SoftCq {
            inner: Arc::new(CqInner {
                dev: dev.clone(),
                queue: Mutex::new(VecDeque::with_capacity(capacity.min(4096) as usize)),
                arrived: Condvar::new(),
                capacity: capacity as usize,
                queued: AtomicUsize::new(0),
                watch: Mutex::new(Vec::new()),
                watched: AtomicBool::new(false),
                channel,
                armed: AtomicBool::new(false),
                spinning: AtomicBool::new(false),
                cqn,
                counter: CompletionCounter::default(),
            }),
        };
        let counted: Weak<dyn CountedCq> = Arc::downgrade(&cq.inner) as Weak<CqInner>;
        dev.cross.register_cq(cqn, counted);
        Ok(cq)
    }
}

impl CqInner {
    /// Adds a completion; on overflow the completion is lost and `CqOverrun` is raised.
    pub(crate) fn push(&self, wc: WorkCompletion) {
        let mut q = self.queue.lock();
        if q.len() >= self.capacity {
            drop(q);
            self.dev.push_event(AsyncEvent::CqOverrun);
            return;
        }
        q.push_back(wc);
        self.counter.count_locked();
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        self.counter.wake_due(&self.dev.cross);
        self.arrived.notify_one();
        if self.armed.swap(false, Ordering::AcqRel)
            && let Some(channel) = &self.channel
        {
            channel.raise();
        }
    }

    /// Entries on the watch list (tests).
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.watch.lock().len()
    }

    /// Asks the next poll to progress `qp`. A CQ nobody polls (a memory node's CQ of data
    /// QPs, say) still holds no more than its live QPs' entries: the dead ones are dropped
    /// each time the list doubles.
    pub(crate) fn watch(&self, qp: Weak<dyn Progress>) {
        let mut watch = self.watch.lock();
        if watch.len() >= 64 && watch.len().is_power_of_two() {
            watch.retain(|w| w.strong_count() > 0);
        }
        watch.push(qp);
        drop(watch);
        self.watched.store(true, Ordering::Release);
    }
}

impl CompletionQueue for SoftCq {
    fn cq_num(&self) -> CqNumber {
        self.inner.cqn
    }

    fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        // A QP that arms after the swap sets the flag again for the next poll.
        // A poll reads the watched QPs' links (saving the engine's hand-off) only when the
        // previous poll found nothing: a busy-polling thread reads from its second poll on,
        // while a thread that polls once before it sleeps on the CQ leaves the read to the
        // engine, which wakes for the response anyway (its own read would find nothing yet
        // and cost a system call).
        let spinning = self.inner.spinning.load(Ordering::Relaxed);
        if self.inner.watched.swap(false, Ordering::AcqRel) {
            let watched = std::mem::take(&mut *self.inner.watch.lock());
            let read_links = spinning && watched.len() <= READ_LINKS_UP_TO;
            for qp in watched.iter().filter_map(Weak::upgrade) {
                qp.progress(read_links, &self.inner);
            }
        }
        // A completion queued after this load is found by the next poll, as one queued just
        // after the lock would be.
        if self.inner.queued.load(Ordering::Acquire) == 0 {
            self.inner.spinning.store(true, Ordering::Relaxed);
            return 0;
        }
        self.inner.spinning.store(false, Ordering::Relaxed);
        let mut q = self.inner.queue.lock();
        let n = out.len().min(q.len());
        for (slot, wc) in out.iter_mut().zip(q.drain(..n)) {
            *slot = wc;
        }
        self.inner.queued.store(q.len(), Ordering::Release);
        n
    }

    fn wait(&self, timeout: std::time::Duration) -> bool {
        // A thread that sleeps here is not spinning: its next poll takes what the engine
        // delivered meanwhile without reading the links first.
        self.inner.spinning.store(false, Ordering::Relaxed);
        let mut q = self.inner.queue.lock();
        if q.is_empty() {
            self.inner.arrived.wait_for(&mut q, timeout);
        }
        !q.is_empty()
    }

    fn req_notify(&self) {
        self.inner.armed.store(true, Ordering::Release);
    }
}

pub(crate) struct SrqInner {
    dev: Arc<DeviceInner>,
    pub(crate) pd: PdId,
    pub(crate) queue: Mutex<VecDeque<RecvWr>>,
    capacity: usize,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        ResourceCounts::give(&self.dev.counts.srqs);
    }
}

/// A shared receive queue. Cloning shares it.
#[derive(Clone)]
pub struct SoftSrq {
    pub(crate) inner: Arc<SrqInner>,
}

impl fmt::Debug for SoftSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftSrq")
            .field("capacity", &self.inner.capacity)
            .field("posted", &self.inner.queue.lock().len())
            .finish()
    }
}

impl SoftSrq {
    pub(crate) fn new(dev: &Arc<DeviceInner>, pd: PdId, capacity: u32) -> VerbsResult<Self> {
        if capacity == 0 || capacity > dev.config.attr.max_qp_wr {
            return Err(VerbsError::InvalidArgument("SRQ capacity out of range"));
        }
        ResourceCounts::take(
            &dev.counts.srqs,
            dev.config.attr.max_srq,
            Resource::SharedReceiveQueue,
        )?;
        Ok(SoftSrq {
            inner: Arc::new(SrqInner {
                dev: dev.clone(),
                pd,
                queue: Mutex::new(VecDeque::new()),
                capacity: capacity as usize,
            }),
        })
    }

    /// Receives currently posted.
    pub fn posted(&self) -> usize {
        self.inner.queue.lock().len()
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()> {
        let mut q = self.inner.queue.lock();
        if q.len() + wrs.len() > self.inner.capacity {
            return Err(VerbsError::Exhausted(Resource::QueueSlot));
        }
        q.extend(wrs.iter().copied());
        Ok(())
    }
}
