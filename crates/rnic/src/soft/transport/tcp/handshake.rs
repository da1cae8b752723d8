//! The TCP transport's connection-management exchange: one `ConnectRequest` (wire version,
//! QP number, starting PSN, private data) from the connecting side, answered by a
//! `ConnectReply` (QP number, starting PSN) or a `ConnectReject` (reason), each one frame.
//!
//! - **Client half** ([`client_handshake`]): on the connecting thread, blocking with timeouts
//!   measured on the device clock; bytes the server sends after its reply are kept for the
//!   connection's reader.
//! - **Server half** ([`Acceptor`]): on the engine thread that reads an accepted connection's
//!   first frame. It checks the version, asks the listener's accept policy for a QP (which
//!   must be in RESET), connects it, tells the application (`AcceptPolicy::established`)
//!   before the client learns, then replies. A malformed or refused request is answered with
//!   a `ConnectReject`, and the connection closed.

use super::conn::{Accept, Conn, Phase, Stop};
use super::limits::Counters;
use super::tls::{TLS_HANDSHAKE_RECORD, TlsOptions};
use crate::soft::device::Connecting;
use crate::soft::link::LinkDown;
use crate::soft::transport::{Policy, server_qp};
use crate::soft::wire::codec::MAX_CM_FRAME_LEN;
use crate::soft::wire::{CmMessage, Frame, WIRE_VERSION, decode_frame, encode_frame, frame_len};
use crate::verbs::{Clock, Psn, QpNumber, Timestamp, VerbsError, VerbsResult};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The server half of the handshake for one listener.
pub(super) struct Acceptor {
    policy: Policy,
}

impl Acceptor {
    pub(super) fn new(policy: Policy) -> Arc<Self> {
        Arc::new(Acceptor { policy })
    }
}

impl Accept for Acceptor {
    fn accept(
        self: Arc<Self>,
        conn: &Arc<Conn>,
        phase: &mut Phase,
        frame: Frame<&[u8]>,
    ) -> Result<(), Stop> {
        let Frame::Cm(CmMessage::ConnectRequest {
            version,
            qp: peer_qp,
            start_psn: peer_psn,
            private_data,
        }) = frame
        else {
            return Err(Stop::Protocol(
                "the first frame must be a ConnectRequest".into(),
            ));
        };
        if version != WIRE_VERSION {
            return Err(Stop::Protocol(format!(
                "unsupported wire version {version} (this node speaks {WIRE_VERSION})"
            )));
        }
        let peer = conn.peer();
        let server = server_qp(&self.policy, &peer, &private_data).map_err(Stop::Refused)?;
        let qp = server.inner.clone();
        conn.claim(qp.qpn());
        let psn = qp.new_psn();
        *phase = Phase::Established {
            sink: qp.sink(),
            qpn: qp.qpn(),
        };
        conn.end_handshake();
        if let Err(e) = qp.establish(peer_qp, psn, peer_psn, conn.link()) {
            *phase = Phase::Accepting(self);
            return Err(Stop::Refused(format!("could not connect the QP: {e}")));
        }
        let reply = Frame::<&[u8]>::Cm(CmMessage::ConnectReply {
            qp: qp.qpn(),
            start_psn: psn,
        });
        // The application learns of the QP before the client does (as in-process), so a
        // client that uses the connection right after `connect` returns finds it registered.
        Counters::bump(&conn.counters().established);
        self.policy.established_from(server, &peer, &private_data);
        conn.send(&reply).map_err(|LinkDown| Stop::Lost)?;
        Ok(())
    }

    fn reject(&self, conn: &Conn, reason: String) {
        let _ = conn.send(&Frame::<&[u8]>::Cm(CmMessage::ConnectReject { reason }));
    }
}

/// A TCP connection to `addr`, from `source` (any port) if given.
fn open_stream(
    addr: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<std::net::TcpStream> {
    let Some(source) = source else {
        return std::net::TcpStream::connect_timeout(&addr, timeout);
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&addr.into(), timeout)?;
    Ok(socket.into())
}

/// The handshake's time bound, on the device clock.
pub(super) struct Deadline {
    clock: Arc<dyn Clock>,
    start: Timestamp,
    limit: Duration,
}

impl Deadline {
    /// `limit` from now.
    pub(super) fn after(clock: Arc<dyn Clock>, limit: Duration) -> Self {
        let start = clock.now();
        Deadline {
            clock,
            start,
            limit,
        }
    }

    /// Time left, or a timeout error.
    fn left(&self) -> io::Result<Duration> {
        let left = self
            .limit
            .saturating_sub(self.clock.now().since(self.start));
        if left.is_zero() {
            return Err(timed_out());
        }
        Ok(left)
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "TCP handshake timed out")
}

/// The client's side of a completed handshake.
pub(super) struct Handshake {
    pub(super) stream: std::net::TcpStream,
    /// TLS over `stream`, if the device's connections speak it.
    pub(super) tls: Option<rustls::ClientConnection>,
    pub(super) peer_qp: QpNumber,
    pub(super) peer_psn: Psn,
    /// Bytes the server sent after its reply (early packets), for the connection's reader.
    pub(super) leftover: Vec<u8>,
}

/// The client half of the handshake, blocking (with timeouts) on the connecting thread;
/// from `source` if given (else the system picks the source address); inside TLS if `tls`
/// is given (the frames are the same).
pub(super) fn client_handshake(
    addr: SocketAddr,
    source: Option<IpAddr>,
    qpn: QpNumber,
    psn: Psn,
    private_data: &[u8],
    deadline: &Deadline,
    tls: Option<&TlsOptions>,
) -> VerbsResult<Handshake> {
    let stream = open_stream(addr, source, deadline.left()?).map_err(|e| {
        if e.kind() == io::ErrorKind::ConnectionRefused {
            VerbsError::ConnectionRefused(format!("{addr}: {e}"))
        } else {
            VerbsError::Io(e)
        }
    })?;
    stream.set_nodelay(true)?;
    let tls = tls.map(TlsOptions::current);
    let tls = match tls.and_then(|t| t.client.clone().map(|c| (c, t.name_for(addr.ip())))) {
        Some((config, name)) => Some(
            rustls::ClientConnection::new(config, name)
                .map_err(|e| VerbsError::ConnectionRefused(format!("TLS with {addr}: {e}")))?,
        ),
        None => None,
    };
    let mut wire = Wire {
        stream,
        tls,
        addr,
        answered: false,
    };
    let mut out = Vec::with_capacity(MAX_CM_FRAME_LEN);
    let request = Frame::<&[u8]>::Cm(CmMessage::ConnectRequest {
        version: WIRE_VERSION,
        qp: qpn,
        start_psn: psn,
        private_data: private_data.to_vec(),
    });
    encode_frame(&request, &mut out);
    wire.send(&out, deadline)?;

    let mut buf = vec![0u8; 2 * MAX_CM_FRAME_LEN];
    let mut have = 0usize;
    let len = loop {
        let got = buf.get(..have).unwrap_or_default();
        match frame_len(got, MAX_CM_FRAME_LEN) {
            Err(e) => return Err(VerbsError::Protocol(format!("handshake reply: {e}"))),
            Ok(Some(len)) if have >= len => break len,
            Ok(_) => {}
        }
        let Some(space) = buf.get_mut(have..).filter(|s| !s.is_empty()) else {
            return Err(VerbsError::Protocol("handshake reply too long".into()));
        };
        have += wire.recv(space, deadline)?;
    };
    let frame = buf
        .get(..len)
        .ok_or_else(|| VerbsError::Protocol("handshake reply truncated".into()))?;
    let (peer_qp, peer_psn) = match decode_frame(frame) {
        Ok(Frame::Cm(CmMessage::ConnectReply { qp, start_psn })) => (qp, start_psn),
        Ok(Frame::Cm(CmMessage::ConnectReject { reason })) => {
            return Err(VerbsError::ConnectionRefused(reason));
        }
        Ok(_) => {
            return Err(VerbsError::Protocol(
                "expected ConnectReply or ConnectReject".into(),
            ));
        }
        Err(e) => return Err(VerbsError::Protocol(format!("handshake reply: {e}"))),
    };
    let leftover = buf.get(len..have).unwrap_or_default().to_vec();
    let Wire { stream, tls, .. } = wire;
    Ok(Handshake {
        stream,
        tls,
        peer_qp,
        peer_psn,
        leftover,
    })
}

fn handshake_io(e: io::Error) -> VerbsError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => VerbsError::Io(timed_out()),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            VerbsError::ConnectionRefused(format!("connection lost during the handshake: {e}"))
        }
        _ => VerbsError::Io(e),
    }
}

/// The client handshake's byte stream: the socket, or TLS over it (blocking, each call
/// bounded by the deadline).
struct Wire {
    stream: std::net::TcpStream,
    tls: Option<rustls::ClientConnection>,
    addr: SocketAddr,
    /// Bytes came back from the listener (a plaintext answer is recognised before that).
    answered: bool,
}

impl Wire {
    fn send(&mut self, bytes: &[u8], deadline: &Deadline) -> VerbsResult<()> {
        let Some(c) = self.tls.as_mut() else {
            self.stream.set_write_timeout(Some(deadline.left()?))?;
            return self.stream.write_all(bytes).map_err(handshake_io);
        };
        c.writer().write_all(bytes)?;
        self.flush_tls(deadline)
    }

    fn flush_tls(&mut self, deadline: &Deadline) -> VerbsResult<()> {
        let Some(c) = self.tls.as_mut() else {
            return Ok(());
        };
        while c.wants_write() {
            self.stream.set_write_timeout(Some(deadline.left()?))?;
            match c.write_tls(&mut self.stream) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(handshake_io(e)),
            }
        }
        Ok(())
    }

    /// Reads some bytes of the listener's answer into `space` (at least one).
    fn recv(&mut self, space: &mut [u8], deadline: &Deadline) -> VerbsResult<usize> {
        let addr = self.addr;
        let closed = || {
            VerbsError::ConnectionRefused(format!(
                "{addr} closed the connection during the handshake"
            ))
        };
        if self.tls.is_none() {
            loop {
                self.stream.set_read_timeout(Some(deadline.left()?))?;
                match self.stream.read(space) {
                    Ok(0) => return Err(closed()),
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(handshake_io(e)),
                }
            }
        }
        let mut raw = vec![0u8; 16 * 1024];
        loop {
            if let Some(c) = self.tls.as_mut() {
                match c.reader().read(space) {
                    Ok(0) => return Err(closed()),
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(handshake_io(e)),
                }
            }
            self.stream.set_read_timeout(Some(deadline.left()?))?;
            let n = match self.stream.read(&mut raw) {
                Ok(0) => return Err(closed()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(handshake_io(e)),
            };
            let got = raw.get(..n).unwrap_or_default();
            if !std::mem::replace(&mut self.answered, true)
                && got.first().is_some_and(|b| *b != TLS_HANDSHAKE_RECORD)
            {
                return Err(self.plaintext_answer(got.to_vec(), deadline));
            }
            let Some(c) = self.tls.as_mut() else {
                return Err(closed());
            };
            let mut rest = got;
            while !rest.is_empty() {
                c.read_tls(&mut rest).map_err(handshake_io)?;
                if let Err(e) = c.process_new_packets() {
                    let _ = self.flush_tls(deadline); // the alert tells the listener why
                    return Err(VerbsError::ConnectionRefused(format!(
                        "TLS with {addr}: {e}"
                    )));
                }
            }
            self.flush_tls(deadline)?;
        }
    }

    /// The listener answered a TLS hello in plaintext: it speaks no TLS. Its refusal (a
    /// `ConnectReject`) is read for the reason it gives.
    fn plaintext_answer(&mut self, mut got: Vec<u8>, deadline: &Deadline) -> VerbsError {
        let addr = self.addr;
        let mut chunk = [0u8; 1024];
        let reason = loop {
            match frame_len(&got, MAX_CM_FRAME_LEN) {
                Ok(Some(len)) if got.len() >= len => {
                    break match got.get(..len).map(decode_frame) {
                        Some(Ok(Frame::Cm(CmMessage::ConnectReject { reason }))) => reason,
                        _ => "an unexpected frame".into(),
                    };
                }
                Ok(_) => {}
                Err(e) => break format!("a malformed answer ({e})"),
            }
            let more = deadline
                .left()
                .and_then(|left| self.stream.set_read_timeout(Some(left)))
                .and_then(|()| self.stream.read(&mut chunk));
            match more {
                Ok(n) if n > 0 => got.extend_from_slice(chunk.get(..n).unwrap_or_default()),
                _ => break "no reason given".into(),
            }
        };
        VerbsError::ConnectionRefused(format!(
            "{addr} does not speak TLS (it answered in plaintext: {reason})"
        ))
    }
}
