//! Links move packets between two connected QPs; they know nothing of verbs.
//!
//! One trait, stackable wrappers (as smoltcp's `phy` devices):
//! - [`inline::InlineLink`]: the in-process fast path — the requester's thread runs the peer's
//!   responder directly (a NIC's parallel engines).
//! - [`queued::QueuedNetwork`]: an in-process network that holds packets until `step(now)`
//!   releases them, with seeded delay, drop, reorder and kill faults, for deterministic tests.
//! - [`tracing::TracingLink`]: records every packet that passes, around any other link.
//! - `tcp`: one TCP connection per QP between processes or hosts.
//!
//! Contract: a link delivers packets reliably and in order, or reports [`LinkDown`]; it never
//! reorders on its own (the fault injector does so on purpose, and the QP treats the gap as a
//! broken connection).

pub mod inline;
pub mod queued;
pub mod tcp;
pub mod tracing;

use crate::soft::wire::Packet;
use std::fmt::Debug;

/// The link can no longer carry packets (peer gone, connection lost, killed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("link down")]
pub struct LinkDown;

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
}

/// The receiving end of a link: a QP.
pub trait PacketSink: Send + Sync + Debug {
    /// Handles a packet from the peer.
    fn deliver(&self, packet: &Packet<&[u8]>);
    /// The link to the peer is gone.
    fn link_down(&self);
}
