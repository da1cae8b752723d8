//! The in-process fast path: transmitting runs the peer QP's packet handler on the caller's
//! thread. Holds the peer weakly, so dropping a QP makes the link go down rather than leak.

use super::{Link, LinkDown, PacketSink};
use crate::soft::wire::Packet;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};

/// A link that delivers synchronously to its peer.
#[derive(Debug)]
pub struct InlineLink {
    peer: Weak<dyn PacketSink>,
    closed: AtomicBool,
}

impl InlineLink {
    /// A link delivering to `peer`.
    pub fn new(peer: Weak<dyn PacketSink>) -> Self {
        InlineLink {
            peer,
            closed: AtomicBool::new(false),
        }
    }
}

impl Link for InlineLink {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LinkDown);
        }
        let peer = self.peer.upgrade().ok_or(LinkDown)?;
        peer.deliver(packet);
        Ok(())
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel)
            && let Some(peer) = self.peer.upgrade()
        {
            peer.link_down();
        }
    }
}
