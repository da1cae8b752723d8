//! Both sides of the connection handshake (`connect` describes the exchange): the client side
//! is `QueuePair::connect`, the listener side runs on a listener's thread for each connection.

use super::RdmaQp;
use crate::provider::RdmaProvider;
use crate::wire::{Msg, proto, random_psn, recv, send, timeouts};
use rnic::{AcceptPolicy, Peer, QpState, QueuePair, VerbsError, VerbsResult};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The client side: connects `qp` (in RESET) to the listener at `to`.
pub(super) fn client(qp: &RdmaQp, to: SocketAddr, private: &[u8]) -> VerbsResult<()> {
    let t = qp.inner.pd.ctx.inner.config.handshake_timeout;
    let mut stream = TcpStream::connect_timeout(&to, t)?;
    timeouts(&stream, t)?;
    qp.to_init()?;
    let psn = random_psn();
    send(
        &mut stream,
        &Msg::Request(qp.local_info(psn), private.to_vec()),
    )?;
    let peer = match recv(&mut stream)? {
        Msg::Accept(peer) => peer,
        Msg::Refuse(reason) => return Err(VerbsError::ConnectionRefused(reason)),
        other => return Err(proto(&format!("expected Accept, got {other:?}"))),
    };
    qp.to_rtr(&peer)?;
    qp.to_rts(psn, peer.rd_atom)?;
    send(&mut stream, &Msg::Ready)?;
    match recv(&mut stream)? {
        Msg::Established => Ok(()),
        other => Err(proto(&format!("expected Established, got {other:?}"))),
    }
}

/// The listener side, for one connection: the policy makes the QP and brings it up.
pub(crate) fn serve_one(
    stream: &mut TcpStream,
    policy: &dyn AcceptPolicy<RdmaProvider>,
    t: Duration,
) -> VerbsResult<()> {
    timeouts(stream, t)?;
    let (peer, private) = match recv(stream)? {
        Msg::Request(peer, private) => (peer, private),
        other => return Err(proto(&format!("expected Request, got {other:?}"))),
    };
    // The address the handshake comes from is the client host's (RDMA traffic follows it).
    // The out-of-band exchange is plaintext TCP: no certificate names the peer.
    let from = Peer {
        addr: stream.peer_addr().ok().map(|a| a.ip()),
        certificate_name: None,
    };
    let qp = match policy.create_qp_from(&from, &private) {
        Ok(qp) => qp,
        Err(reason) => return send(stream, &Msg::Refuse(reason)),
    };
    if qp.state() != QpState::Reset {
        return send(stream, &Msg::Refuse("server QP is not in RESET".into()));
    }
    let psn = random_psn();
    let up = qp
        .to_init()
        .and_then(|()| qp.to_rtr(&peer))
        .and_then(|()| qp.to_rts(psn, peer.rd_atom));
    if let Err(e) = up {
        return send(
            stream,
            &Msg::Refuse(format!("server QP set-up failed: {e}")),
        );
    }
    send(stream, &Msg::Accept(qp.local_info(psn)))?;
    match recv(stream)? {
        Msg::Ready => {}
        other => return Err(proto(&format!("expected Ready, got {other:?}"))),
    }
    policy.established_from(qp, &from, &private);
    send(stream, &Msg::Established)
}
