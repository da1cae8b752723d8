//! A wrapper that records every packet crossing a link (for tests and debugging).

use super::{Link, LinkDown};
use crate::soft::wire::Packet;
use parking_lot::Mutex;
use std::sync::Arc;

/// A shared, append-only record of packets.
#[derive(Debug, Default)]
pub struct PacketTrace {
    packets: Mutex<Vec<Packet<Vec<u8>>>>,
}

impl PacketTrace {
    /// An empty trace.
    pub fn new() -> Arc<Self> {
        Arc::new(PacketTrace::default())
    }
    /// Everything recorded so far.
    pub fn snapshot(&self) -> Vec<Packet<Vec<u8>>> {
        self.packets.lock().clone()
    }
    /// Number of packets recorded.
    pub fn len(&self) -> usize {
        self.packets.lock().len()
    }
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Records each transmitted packet, then passes it to the inner link.
#[derive(Debug)]
pub struct TracingLink<L> {
    inner: L,
    trace: Arc<PacketTrace>,
}

impl<L: Link> TracingLink<L> {
    /// Wraps `inner`, recording into `trace`.
    pub fn new(inner: L, trace: Arc<PacketTrace>) -> Self {
        TracingLink { inner, trace }
    }
}

impl<L: Link> Link for TracingLink<L> {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        self.trace.packets.lock().push(packet.to_owned_packet());
        self.inner.transmit(packet)
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
