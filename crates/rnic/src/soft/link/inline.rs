//! The in-process fast path: transmitting runs the peer QP's packet handler on the caller's
//! thread. Holds the peer weakly, so dropping a QP makes the link go down rather than leak.

use super::{Link, LinkDown, PacketSink};
use crate::soft::wire::Packet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// A link that delivers synchronously to its peer.
#[derive(Debug)]
pub struct InlineLink {
    peer: Weak<dyn PacketSink>,
    /// Shared by both directions of a connection made with [`InlineLink::pair`]: once either
    /// end closes, the connection is down both ways and the other end's later `close` (e.g.
    /// when a QP that already saw the link go down is dropped) notifies nobody — its peer may
    /// have been reset and reconnected since.
    closed: Arc<AtomicBool>,
}

impl InlineLink {
    /// A link delivering to `peer`.
    pub fn new(peer: Weak<dyn PacketSink>) -> Self {
        InlineLink {
            peer,
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The two directions of one connection: the first delivers to `a`, the second to `b`.
    pub fn pair(a: Weak<dyn PacketSink>, b: Weak<dyn PacketSink>) -> (Self, Self) {
        let closed = Arc::new(AtomicBool::new(false));
        (
            InlineLink {
                peer: a,
                closed: closed.clone(),
            },
            InlineLink { peer: b, closed },
        )
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
            peer.link_down(super::LinkEnd::Closed);
        }
    }
}
