//! Connection set-up over an out-of-band TCP handshake (the rdma_cm model of the contract:
//! a listener with an accept policy, a client connecting a QP in RESET).
//!
//! Handshake, one TCP connection per QP, every message a [`Msg`]:
//! ```text
//! client                                   listener
//!   INIT, random PSN
//!   Request{qpn, psn, lid, mtu, rd_atom, gid, private} ─►
//!                                            policy.create_qp_from(peer, private) ─► Refuse or
//!                                            INIT → RTR → RTS, random PSN
//!                     ◄─ Accept{qpn, psn, lid, mtu, rd_atom, gid}
//!   RTR → RTS
//!   Ready ─►
//!                                            policy.established_from(qp, peer, private)
//!                     ◄─ Established
//! ```
//! `connect` returns after `Established`, so the server's `established` hook (which posts the
//! first receives) has run. PSNs are drawn at random (ReDMArk V6). Path MTU is the smaller of
//! the two ports' active MTUs; each side's initiator depth is bounded by the other's responder
//! resources.
//!
//! The messages and their wire format are in `wire.rs`, both sides of the exchange in
//! `qp/handshake.rs` (the client side is `QueuePair::connect`); this module runs listeners.

pub use crate::wire::{MAX_BODY, Msg, PeerInfo};

use crate::context::RdmaContext;
use crate::provider::RdmaProvider;
use crate::qp::handshake;
use rnic::{AcceptPolicy, VerbsResult};
use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A listening endpoint; dropping it stops accepting (and joins its thread).
pub struct RdmaListener {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RdmaListener({})", self.address)
    }
}

impl RdmaListener {
    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop with one connection of our own.
        let mut wake = self.address;
        if wake.ip().is_unspecified() {
            wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts accepting handshakes on the context's configured address.
pub(crate) fn listen(
    ctx: &RdmaContext,
    policy: Arc<dyn AcceptPolicy<RdmaProvider>>,
) -> VerbsResult<RdmaListener> {
    let listener = TcpListener::bind(ctx.inner.config.listen)?;
    let address = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = std::thread::Builder::new()
        .name(format!("rdma-listen-{}", address.port()))
        .spawn({
            let stop = stop.clone();
            let t = ctx.inner.config.handshake_timeout;
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut stream) = stream else { continue };
                    // One handshake at a time, each step bounded by the timeout: a silent
                    // peer delays others by at most a few timeouts and never blocks forever.
                    if let Err(e) = handshake::serve_one(&mut stream, policy.as_ref(), t) {
                        let peer = stream
                            .peer_addr()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        eprintln!("rnic-rdma: handshake from {peer} failed: {e}");
                    }
                }
            }
        })?;
    Ok(RdmaListener {
        address,
        stop,
        thread: Some(thread),
    })
}
