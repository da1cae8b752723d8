//! Transports: how soft devices find each other and connect their QPs.
//!
//! - [`inproc`]: devices of one process on a [`SoftFabric`](inproc::SoftFabric), connected by
//!   inline or queued links.
//! - [`tcp`]: devices in different processes or hosts, one TCP connection per RC QP, served
//!   by NIC engine threads; its connection-management exchange is in `tcp/handshake.rs`.
//!
//! A transport implements the device's `Transport` trait: it registers listeners, runs the
//! handshake (QP numbers, starting PSNs and private data both ways; the listener's accept
//! policy decides), makes the link of each side — wrapped in the transport's [`LinkStack`]
//! — and establishes both QPs. What every transport checks the same way is here.
//!
//! [`LinkStack`]: crate::soft::link::LinkStack

pub mod inproc;
pub mod tcp;

use super::device::Connecting;
use super::link::{Link, PacketSink};
use super::provider::SoftProvider;
use super::qp::SoftQp;
use super::wire::MAX_PRIVATE_DATA;
use crate::verbs::{AcceptPolicy, Peer, QpState, QueuePair, VerbsError, VerbsResult};
use std::sync::{Arc, Weak};

/// The accept policy of a listener.
pub(crate) type Policy = Arc<dyn AcceptPolicy<SoftProvider>>;

/// Refuses private data longer than a connect request carries.
pub(crate) fn check_private_data(private_data: &[u8]) -> VerbsResult<()> {
    if private_data.len() > MAX_PRIVATE_DATA {
        return Err(VerbsError::InvalidArgument("private data too long"));
    }
    Ok(())
}

/// Connects `qp` to a QP `policy` accepts without a handshake on the wire (both ends are in
/// this process): `links` makes the two directions from the ends' sinks (server first), as
/// (towards the server, towards the client); then both ends are established and the policy
/// told.
pub(crate) fn connect_in_process(
    qp: &dyn Connecting,
    policy: &Policy,
    private_data: &[u8],
    links: impl FnOnce(Weak<dyn PacketSink>, Weak<dyn PacketSink>) -> (Arc<dyn Link>, Arc<dyn Link>),
) -> VerbsResult<()> {
    let server =
        server_qp(policy, &Peer::LOCAL, private_data).map_err(VerbsError::ConnectionRefused)?;
    let s = &*server.inner;
    let (client_link, server_link) = links(s.sink(), qp.sink());
    let client_psn = qp.new_psn();
    let server_psn = s.new_psn();
    s.establish(qp.qpn(), server_psn, client_psn, server_link)?;
    qp.establish(s.qpn(), client_psn, server_psn, client_link)?;
    policy.established_from(server, &Peer::LOCAL, private_data);
    Ok(())
}

/// The listener side's first step on every transport: a QP from the accept policy, which must
/// be in RESET. `peer`: who the connection comes from. `Err`
/// carries the refusal sent back to the connecting side.
pub(crate) fn server_qp(
    policy: &Policy,
    peer: &Peer,
    private_data: &[u8],
) -> Result<SoftQp, String> {
    let server = policy.create_qp_from(peer, private_data)?;
    if server.state() != QpState::Reset {
        return Err("accept policy returned a QP that is not in RESET".into());
    }
    Ok(server)
}
