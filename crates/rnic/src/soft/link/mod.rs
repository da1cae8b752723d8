//! Links move packets between two connected QPs; they know nothing of verbs, addresses or
//! handshakes (those are the transports', `soft::transport`).
//!
//! One trait, stackable wrappers (as smoltcp's `phy` devices):
//! - [`inline::InlineLink`]: the in-process fast path — the requester's thread runs the peer's
//!   responder directly (a NIC's parallel engines).
//! - [`queued::QueuedNetwork`]: an in-process network that holds packets until `step(now)`
//!   releases them, with seeded delay, drop, reorder and kill faults, for deterministic tests.
//! - [`tracing::TracingLink`]: records every packet that passes, around any other link.
//! - [`faulty::FaultyLink`]: drops or kills on command, around any other link.
//! - [`retry`]: what a link tells its QP about silence from the peer ([`RetryPolicy`]): the
//!   verbs contract's timers, or a connection's adaptive timeouts and budget (TCP).
//! - The TCP link (`transport::tcp`'s `TcpLink`) carries a QP's packets on its own TCP
//!   connection; it lives with its transport, whose engines and handshake share its socket.
//!
//! A transport wraps every link it makes in its [`LinkStack`], so the tracing and fault
//! wrappers stack on in-process and TCP links alike.
//!
//! Contract: a link delivers packets reliably and in order, or reports [`LinkDown`] (from
//! `transmit`, or through [`PacketSink::link_down`] once the packets the peer sent before the
//! failure are delivered); it never reorders on its own (the fault injector does so on
//! purpose, and the QP treats the gap as a broken connection). A packet that arrives on a QP's link is for that QP
//! ([`check_destination`]).

pub mod faulty;
pub mod inline;
pub mod queued;
pub mod retry;
pub mod tracing;

use crate::soft::wire::{Packet, PayloadLen};
use crate::verbs::QpNumber;
use faulty::{FaultyLink, LinkFaults};
pub use retry::{AdaptiveTimeouts, RetryPolicy};
use std::fmt::Debug;
use std::sync::Arc;
use tracing::{PacketTrace, TracingLink};

/// The link can no longer carry packets (peer gone, connection lost, killed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("link down")]
pub struct LinkDown;

/// A packet arrived on the link of one QP addressed to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packet for QP {} on the connection of QP {}", .to.0, .link_of.0)]
pub struct Misaddressed {
    /// The packet's destination QP.
    pub to: QpNumber,
    /// The QP whose link carried it.
    pub link_of: QpNumber,
}

/// The destination-QP check of every receiving path. Links are point-to-point: a connected
/// QP's link carries only packets for that QP, so a packet for another one is forged or
/// corrupt (the receiving side closes the connection or moves the QP to ERR).
pub fn check_destination<D>(packet: &Packet<D>, link_of: QpNumber) -> Result<(), Misaddressed> {
    let to = packet.dst_qp();
    if to == link_of {
        Ok(())
    } else {
        Err(Misaddressed { to, link_of })
    }
}

/// Carries packets to one peer QP.
pub trait Link: Send + Sync + Debug {
    /// Sends `packet` towards the peer. Inline links may run the peer (and receive its
    /// response) before returning.
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown>;
    /// Tears the link down; later transmits fail and the peer sees the link go down.
    fn close(&self);
    /// Delivers packets that have already arrived, on the calling thread (a CQ poll calls this
    /// for QPs awaiting responses, so a polling application needs no hand-off from an engine
    /// thread). Links that deliver by themselves do nothing.
    fn poll_receive(&self) {}
    /// How the QP treats silence from the peer on this link: the verbs contract's timers
    /// unless the link is a connection that delivers by itself (see [`retry`]). Wrappers pass
    /// their inner link's policy on.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::Verbs
    }
    /// Holds packets transmitted from now on back until the matching [`Link::uncork`]
    /// (calls nest), so a batch of them leaves in one write: a doorbell of several work
    /// requests, the responses to the requests one read delivered. Links without a send
    /// buffer ignore it. Every `cork` must be matched by one `uncork` ([`Corked`] does it).
    fn cork(&self) {}
    /// Ends one [`Link::cork`]; the last one sends what was held back.
    fn uncork(&self) {}
    /// How the link's receiver serves the QP's incoming requests from now on (its weight and
    /// rate limit, [`QpService`](crate::verbs::QpService)). Links whose requests are served
    /// on the requester's thread (in-process, loopback) ignore it.
    fn set_service(&self, _service: &crate::verbs::QpService) {}
    /// What the link's receiver served the QP's incoming requests (see
    /// [`QueuePair::served`](crate::verbs::QueuePair::served)); `None` where requests are
    /// served on the requester's thread and not counted (in-process, loopback).
    fn served(&self) -> Option<crate::verbs::QpServed> {
        None
    }
    /// A receive was posted to the QP after its responder answered receiver-not-ready: a link
    /// that stopped reading the peer's requests meanwhile (TCP: they could only be refused
    /// again, or dropped as beyond the refused one) reads them again now.
    fn receive_posted(&self) {}
}

/// A [`Link::cork`] held until dropped.
#[derive(Debug)]
pub struct Corked<'a, L: Link + ?Sized>(&'a L);

impl<'a, L: Link + ?Sized> Corked<'a, L> {
    /// Corks `link` until the guard is dropped.
    pub fn new(link: &'a L) -> Self {
        link.cork();
        Corked(link)
    }
}

impl<L: Link + ?Sized> Drop for Corked<'_, L> {
    fn drop(&mut self) {
        self.0.uncork();
    }
}

/// The receiving end of a link: a QP.
pub trait PacketSink: Send + Sync + Debug {
    /// Handles a packet from the peer.
    fn deliver(&self, packet: &Packet<&[u8]>);
    /// Decides from a packet's header, before the link buffers its payload, whether the
    /// packet can be legal on this QP now (a NIC checks headers before it places data): a
    /// WRITE within a region its rkey grants, a SEND no longer than the receive it lands in,
    /// READ data as long as the outstanding READ asked for. A link that buffers payloads
    /// (TCP) asks before it grows its buffer for a large one; links that move whole packets
    /// never ask. Whatever a refusal would answer (a NAK, an RNR) the QP answers here, from
    /// the header, exactly as it would have with the payload.
    fn admit(&self, _head: &Packet<PayloadLen>) -> Admission {
        Admission::Deliver
    }
    /// The link to the peer is gone, closed in order or failed.
    fn link_down(&self, end: LinkEnd);
}

/// What a QP decided from a packet's header ([`PacketSink::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// It may be legal: receive the whole packet and deliver it.
    Deliver,
    /// The QP dealt with it from its header (answered a NAK or an RNR NAK, or drops it as a
    /// duplicate or a packet for a QP no longer connected): the link drops the payload as it
    /// arrives, without buffering it, and delivers nothing.
    Discard,
    /// It cannot be legal on this connection: the link fails (the QP goes to ERR).
    Refuse(&'static str),
}

/// How a link ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEnd {
    /// The peer closed it in order, between packets (a TCP FIN at a frame boundary, a local
    /// `close`).
    Closed,
    /// It failed: an error, a reset, a fault injected, a close in the middle of a frame.
    Failed,
}

impl<L: Link + ?Sized> Link for Arc<L> {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        (**self).transmit(packet)
    }
    fn close(&self) {
        (**self).close();
    }
    fn poll_receive(&self) {
        (**self).poll_receive();
    }
    fn retry_policy(&self) -> RetryPolicy {
        (**self).retry_policy()
    }
    fn cork(&self) {
        (**self).cork();
    }
    fn uncork(&self) {
        (**self).uncork();
    }
    fn set_service(&self, service: &crate::verbs::QpService) {
        (**self).set_service(service);
    }
    fn served(&self) -> Option<crate::verbs::QpServed> {
        (**self).served()
    }
    fn receive_posted(&self) {
        (**self).receive_posted();
    }
}

/// One wrapper of a [`LinkStack`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Layer {
    /// Records every transmitted packet ([`TracingLink`]).
    Trace(Arc<PacketTrace>),
    /// Drops or kills on command ([`FaultyLink`]).
    Faults(Arc<LinkFaults>),
}

/// The wrappers a transport puts around every link it makes, innermost first. Empty by
/// default: links are used bare.
#[derive(Clone, Debug, Default)]
pub struct LinkStack {
    layers: Vec<Layer>,
}

impl LinkStack {
    /// No wrappers.
    pub fn new() -> Self {
        LinkStack::default()
    }

    /// Adds a wrapper around those already on the stack.
    pub fn with(mut self, layer: Layer) -> Self {
        self.layers.push(layer);
        self
    }

    /// Adds tracing into `trace`.
    pub fn traced(self, trace: Arc<PacketTrace>) -> Self {
        self.with(Layer::Trace(trace))
    }

    /// Adds the faults of `faults`.
    pub fn faulty(self, faults: Arc<LinkFaults>) -> Self {
        self.with(Layer::Faults(faults))
    }

    /// Whether there are no wrappers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// `link` inside every wrapper of the stack.
    pub fn wrap(&self, link: Arc<dyn Link>) -> Arc<dyn Link> {
        self.layers
            .iter()
            .fold(link, |inner, layer| -> Arc<dyn Link> {
                match layer {
                    Layer::Trace(t) => Arc::new(TracingLink::new(inner, t.clone())),
                    Layer::Faults(f) => FaultyLink::new(inner, f.clone()),
                }
            })
    }
}
