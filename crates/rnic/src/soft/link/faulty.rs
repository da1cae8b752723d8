//! A wrapper that injects faults into any link, whatever carries its packets (in-process or
//! TCP): drop the next packets, or kill the link. Faults are switched on by the test through a
//! shared [`LinkFaults`], never drawn at random, so a run replays exactly.
//!
//! The queued network ([`super::queued`]) injects delay, reorder and random drops as well, but
//! it *is* the network; this wrapper stacks on a link that already moves packets by itself.

use super::{Link, LinkDown};
use crate::soft::wire::Packet;
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Faults shared by every [`FaultyLink`] made with it.
#[derive(Default)]
pub struct LinkFaults {
    drop_next: AtomicU32,
    killed: AtomicBool,
    dropped: AtomicU64,
    /// Links made so far, so that a kill closes them at once.
    links: Mutex<Vec<Weak<dyn Link>>>,
}

impl fmt::Debug for LinkFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkFaults")
            .field("drop_next", &self.drop_next.load(Ordering::Relaxed))
            .field("killed", &self.is_killed())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl LinkFaults {
    /// No faults yet.
    pub fn new() -> Arc<Self> {
        Arc::new(LinkFaults::default())
    }

    /// Silently drops the next `n` packets transmitted on any of the links.
    pub fn drop_next(&self, n: u32) {
        self.drop_next.store(n, Ordering::SeqCst);
    }

    /// Kills every link, now and for good: each is closed (its peer sees the link go down) and
    /// later transmits fail with [`LinkDown`] (so the sending QP goes to ERR at once). Links
    /// made after the kill are dead from the start.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        let links = std::mem::take(&mut *self.links.lock());
        for link in links.iter().filter_map(Weak::upgrade) {
            link.close();
        }
    }

    /// Whether [`kill`](Self::kill) was called.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Packets dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Whether the next packet goes through (counting it if dropped).
    fn pass(&self) -> Result<bool, LinkDown> {
        if self.is_killed() {
            return Err(LinkDown);
        }
        let take = self
            .drop_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if take.is_ok() {
            self.dropped.fetch_add(1, Ordering::SeqCst);
            return Ok(false);
        }
        Ok(true)
    }
}

/// Applies a [`LinkFaults`] to the packets transmitted on `inner`.
#[derive(Debug)]
pub struct FaultyLink<L> {
    inner: L,
    faults: Arc<LinkFaults>,
}

impl<L: Link + 'static> FaultyLink<L> {
    /// Wraps `inner`; a kill of `faults` closes it.
    pub fn new(inner: L, faults: Arc<LinkFaults>) -> Arc<Self> {
        let link = Arc::new(FaultyLink { inner, faults });
        let weak: Weak<dyn Link> = Arc::downgrade(&link) as Weak<dyn Link>;
        if link.faults.is_killed() {
            link.inner.close();
        } else {
            let mut links = link.faults.links.lock();
            links.retain(|l| l.strong_count() > 0);
            links.push(weak);
        }
        link
    }
}

impl<L: Link> Link for FaultyLink<L> {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        if self.faults.pass()? {
            self.inner.transmit(packet)
        } else {
            Ok(())
        }
    }

    fn close(&self) {
        self.inner.close();
    }

    fn poll_receive(&self) {
        self.inner.poll_receive();
    }
    fn retry_policy(&self) -> super::RetryPolicy {
        self.inner.retry_policy()
    }
    fn cork(&self) {
        self.inner.cork();
    }
    fn uncork(&self) {
        self.inner.uncork();
    }
    fn set_service(&self, service: &crate::verbs::QpService) {
        self.inner.set_service(service);
    }
    fn served(&self) -> Option<crate::verbs::QpServed> {
        self.inner.served()
    }
    fn receive_posted(&self) {
        self.inner.receive_posted();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::wire::{Request, RequestOp};
    use crate::verbs::{Psn, QpNumber};
    use std::sync::atomic::AtomicUsize;

    /// Counts what reaches it and whether it was closed.
    #[derive(Debug, Default)]
    struct Counting {
        sent: AtomicUsize,
        closed: AtomicBool,
    }

    impl Link for Counting {
        fn transmit(&self, _packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
            self.sent.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn close(&self) {
            self.closed.store(true, Ordering::SeqCst);
        }
    }

    fn packet() -> Packet<&'static [u8]> {
        Packet::Request(Request {
            dst_qp: QpNumber(1),
            psn: Psn::new(0),
            op: RequestOp::Send {
                data: &[],
                invalidate: None,
            },
            ack_req: true,
        })
    }

    #[test]
    fn drops_exactly_the_next_packets_then_kills() {
        let inner = Arc::new(Counting::default());
        let faults = LinkFaults::new();
        let link = FaultyLink::new(inner.clone(), faults.clone());
        faults.drop_next(2);
        for _ in 0..5 {
            assert_eq!(link.transmit(&packet()), Ok(()));
        }
        assert_eq!(inner.sent.load(Ordering::SeqCst), 3);
        assert_eq!(faults.dropped(), 2);
        faults.kill();
        assert!(
            inner.closed.load(Ordering::SeqCst),
            "a kill closes the link at once"
        );
        assert_eq!(link.transmit(&packet()), Err(LinkDown));
        assert_eq!(inner.sent.load(Ordering::SeqCst), 3);
    }
}
