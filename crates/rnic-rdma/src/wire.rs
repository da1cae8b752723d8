//! The messages of the connection handshake (the exchange is described in `connect`) and what
//! both of its sides share: framed sends and receives on the TCP stream, random PSNs and the
//! stream's timeouts.
//!
//! Wire format (version 1), big-endian, bounds-checked; a peer's bytes never cause a panic:
//! `magic "PTRD" | version u8 | kind u8 | body length u16 | body` with the bodies
//! `Request/Accept: qpn u32 | psn u32 | lid u16 | mtu u8 | rd_atom u8 | gid [16] | private…`,
//! `Refuse: reason (UTF-8)`, `Ready`/`Established`: empty.

use rnic::{VerbsError, VerbsResult};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MAGIC: [u8; 4] = *b"PTRD";
const VERSION: u8 = 1;
const HEADER: usize = 8;
const PEER_FIXED: usize = 4 + 4 + 2 + 1 + 1 + 16;
/// Largest body: bounds what a peer can make us allocate.
pub const MAX_BODY: usize = 4096;

/// What one side tells the other about its QP and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// QP number.
    pub qpn: u32,
    /// First PSN it sends with.
    pub psn: u32,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// Active MTU (`IBV_MTU_*`).
    pub mtu: u32,
    /// Responder resources (`max_dest_rd_atomic`).
    pub rd_atom: u8,
    /// GID (RoCE, routed InfiniBand).
    pub gid: [u8; 16],
}

/// A handshake message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Client → listener.
    Request(PeerInfo, Vec<u8>),
    /// Listener → client.
    Accept(PeerInfo),
    /// Listener → client: the policy refused.
    Refuse(String),
    /// Client → listener: the client QP is in RTS.
    Ready,
    /// Listener → client: the policy has the QP.
    Established,
}

/// A protocol error of the handshake.
pub(crate) fn proto(msg: &str) -> VerbsError {
    VerbsError::Protocol(format!("RDMA handshake: {msg}"))
}

impl Msg {
    fn kind(&self) -> u8 {
        match self {
            Msg::Request(..) => 1,
            Msg::Accept(_) => 2,
            Msg::Refuse(_) => 3,
            Msg::Ready => 4,
            Msg::Established => 5,
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> VerbsResult<Vec<u8>> {
        let mut body = Vec::new();
        let peer = |body: &mut Vec<u8>, p: &PeerInfo| {
            body.extend_from_slice(&p.qpn.to_be_bytes());
            body.extend_from_slice(&p.psn.to_be_bytes());
            body.extend_from_slice(&p.lid.to_be_bytes());
            body.push(u8::try_from(p.mtu).unwrap_or(0));
            body.push(p.rd_atom);
            body.extend_from_slice(&p.gid);
        };
        match self {
            Msg::Request(p, private) => {
                peer(&mut body, p);
                body.extend_from_slice(private);
            }
            Msg::Accept(p) => peer(&mut body, p),
            Msg::Refuse(reason) => {
                let r = reason.as_bytes();
                body.extend_from_slice(&r[..r.len().min(MAX_BODY)]);
            }
            Msg::Ready | Msg::Established => {}
        }
        if body.len() > MAX_BODY {
            return Err(VerbsError::InvalidArgument("private data too long"));
        }
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind());
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Parses a header: the kind and the body length.
    pub fn parse_header(h: &[u8; HEADER]) -> VerbsResult<(u8, usize)> {
        if h[..4] != MAGIC {
            return Err(proto("not a patronus RDMA handshake"));
        }
        if h[4] != VERSION {
            return Err(proto(&format!("version {} (we speak {VERSION})", h[4])));
        }
        let len = usize::from(u16::from_be_bytes([h[6], h[7]]));
        if len > MAX_BODY {
            return Err(proto("body too long"));
        }
        Ok((h[5], len))
    }

    /// Parses a body of `kind`.
    pub fn parse_body(kind: u8, body: &[u8]) -> VerbsResult<Msg> {
        let peer = || -> VerbsResult<PeerInfo> {
            let b = body
                .get(..PEER_FIXED)
                .ok_or_else(|| proto("truncated QP information"))?;
            let mut gid = [0; 16];
            gid.copy_from_slice(&b[12..28]);
            Ok(PeerInfo {
                qpn: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                psn: u32::from_be_bytes([b[4], b[5], b[6], b[7]]) & 0x00ff_ffff,
                lid: u16::from_be_bytes([b[8], b[9]]),
                mtu: u32::from(b[10]),
                rd_atom: b[11],
                gid,
            })
        };
        match kind {
            1 => Ok(Msg::Request(peer()?, body[PEER_FIXED..].to_vec())),
            2 if body.len() == PEER_FIXED => Ok(Msg::Accept(peer()?)),
            3 => Ok(Msg::Refuse(String::from_utf8_lossy(body).into_owned())),
            4 if body.is_empty() => Ok(Msg::Ready),
            5 if body.is_empty() => Ok(Msg::Established),
            _ => Err(proto(&format!(
                "unexpected message kind {kind} ({} bytes)",
                body.len()
            ))),
        }
    }
}

/// Writes one message.
pub(crate) fn send(stream: &mut TcpStream, msg: &Msg) -> VerbsResult<()> {
    stream.write_all(&msg.encode()?)?;
    Ok(())
}

/// Reads one message (header, then a body of at most [`MAX_BODY`] bytes).
pub(crate) fn recv(stream: &mut TcpStream) -> VerbsResult<Msg> {
    let mut h = [0u8; HEADER];
    stream.read_exact(&mut h)?;
    let (kind, len) = Msg::parse_header(&h)?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Msg::parse_body(kind, &body)
}

/// A random 24-bit PSN.
pub(crate) fn random_psn() -> u32 {
    rand::random::<u32>() & 0x00ff_ffff
}

/// Bounds each read and write on `stream` by `t`, and sends without delay.
pub(crate) fn timeouts(stream: &TcpStream, t: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(t))?;
    stream.set_write_timeout(Some(t))?;
    stream.set_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> PeerInfo {
        PeerInfo {
            qpn: 0x00ab_cdef,
            psn: 0x12_3456,
            lid: 7,
            mtu: 3,
            rd_atom: 16,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        }
    }

    fn round_trip(m: &Msg) -> Msg {
        let bytes = m.encode().unwrap();
        let h: [u8; HEADER] = bytes[..HEADER].try_into().unwrap();
        let (kind, len) = Msg::parse_header(&h).unwrap();
        assert_eq!(len, bytes.len() - HEADER);
        Msg::parse_body(kind, &bytes[HEADER..]).unwrap()
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Msg::Request(info(), b"tenant 3".to_vec()),
            Msg::Accept(info()),
            Msg::Refuse("no room".into()),
            Msg::Ready,
            Msg::Established,
        ] {
            assert_eq!(round_trip(&m), m);
        }
    }

    #[test]
    fn layout_is_fixed() {
        let bytes = Msg::Accept(info()).encode().unwrap();
        assert_eq!(&bytes[..8], b"PTRD\x01\x02\x00\x1c");
        assert_eq!(&bytes[8..12], &[0x00, 0xab, 0xcd, 0xef]);
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        assert!(Msg::parse_header(b"XXXX\x01\x01\x00\x00").is_err());
        assert!(Msg::parse_header(b"PTRD\x09\x01\x00\x00").is_err());
        assert!(Msg::parse_header(b"PTRD\x01\x01\xff\xff").is_err());
        for kind in 0..=255u8 {
            for len in [0usize, 5, PEER_FIXED - 1, PEER_FIXED, PEER_FIXED + 3] {
                let _ = Msg::parse_body(kind, &vec![0xa5; len]);
            }
        }
        assert!(Msg::parse_body(2, &[0; PEER_FIXED - 1]).is_err());
        assert!(Msg::parse_body(4, &[1]).is_err());
        assert!(Msg::Request(info(), vec![0; MAX_BODY]).encode().is_err());
    }
}
