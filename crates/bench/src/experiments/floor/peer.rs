//! The far end of the floor measurements, in a process of its own (`patronus-bench` started
//! with [`PEER_ENV`] set) or, where that binary is not at hand, on threads of this one.
//!
//! It serves, on loopback:
//! - a raw TCP echo: each connection's first byte picks how it waits — `B` blocking reads and
//!   writes, `P` non-blocking and spinning — then every [`PAYLOAD`]-byte message is echoed;
//!   `S` answers one line with the soft devices' transport system calls and closes;
//!   `D` opens a soft device whose engine spins, answers its [`SoftEnd`] in one line, and
//!   keeps it until the connection closes (a spinning engine holds its core: it lives only
//!   while it is measured);
//! - a soft TCP device whose engine sleeps when idle (`spin_polls: 0`, as `patronus serve`
//!   runs), with a registered 4 KiB region readable remotely.
//!
//! It announces itself with one line ([`Announce`]) and serves until its standard input
//! closes (the process) or it is dropped (the threads).

use super::PAYLOAD;
use crate::harness::{spin_read, spin_write};
use anyhow::{Context as _, Result, anyhow, bail};
use parking_lot::Mutex;
use rnic::endpoints::OpenResponder;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode, TcpOptions};
use rnic::{AccessFlags, Context as _, MemoryRegion as _, ProtectionDomain as _, Rkey};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

/// Set in the environment of a `patronus-bench` that is to be the peer.
pub const PEER_ENV: &str = "PATRONUS_BENCH_FLOOR_PEER";

/// A soft device of the peer: where it listens, and its readable region's address and rkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftEnd {
    /// The device's listener.
    pub listen: SocketAddr,
    /// The region's address.
    pub addr: u64,
    /// Its rkey.
    pub rkey: Rkey,
}

impl SoftEnd {
    fn text(&self) -> String {
        format!("{},{},{}", self.listen, self.addr, self.rkey.0)
    }

    /// Parses [`SoftEnd::text`].
    pub(super) fn parse(v: &str) -> Option<Self> {
        let mut p = v.trim().split(',');
        Some(SoftEnd {
            listen: p.next()?.parse().ok()?,
            addr: p.next()?.parse().ok()?,
            rkey: rnic::MemoryKey(p.next()?.parse().ok()?),
        })
    }
}

/// What the peer serves, as its announcement line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// The raw echo listener.
    pub raw: SocketAddr,
    /// The soft device whose engine sleeps when idle.
    pub sleeping: SoftEnd,
}

impl Announce {
    /// `floor-peer raw=A sleeping=A,addr,rkey`.
    pub fn line(&self) -> String {
        format!(
            "floor-peer raw={} sleeping={}",
            self.raw,
            self.sleeping.text()
        )
    }

    /// Parses [`Announce::line`].
    pub fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("floor-peer ")?;
        let (mut raw, mut sleeping) = (None, None);
        for field in rest.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            match k {
                "raw" => raw = v.parse().ok(),
                "sleeping" => sleeping = SoftEnd::parse(v),
                _ => return None,
            }
        }
        Some(Announce {
            raw: raw?,
            sleeping: sleeping?,
        })
    }
}

/// A soft device serving one readable region.
struct SoftServer {
    node: OpenResponder<SoftProvider>,
    _mr: rnic::soft::SoftMr,
    end: SoftEnd,
}

impl SoftServer {
    fn open(spin_polls: u32) -> Result<Self> {
        let options = TcpOptions {
            spin_polls,
            ..TcpOptions::default()
        };
        let ctx = TcpNode::open_with(SoftConfig::default(), ([127, 0, 0, 1], 0).into(), options)?;
        let node = OpenResponder::<SoftProvider>::new(ctx, 1024, 4)?;
        let region = node.ctx.alloc_buffer(4096)?;
        let mr = node.pd.reg_mr(&region, 0, 4096, AccessFlags::REMOTE_READ)?;
        let SoftAddress::Tcp(listen) = node.address().clone() else {
            bail!("a TCP device listens on a TCP address");
        };
        let end = SoftEnd {
            listen,
            addr: region.addr(),
            rkey: mr.rkey(),
        };
        Ok(SoftServer { node, _mr: mr, end })
    }
}

/// The soft devices of a peer, for the system-call counts.
type Devices = Arc<Mutex<Vec<rnic::soft::SoftContext>>>;

/// A running peer: its sleeping soft device and the raw listener's thread.
pub struct Peer {
    _sleeping: SoftServer,
    announce: Announce,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("announce", &self.announce)
            .finish()
    }
}

impl Peer {
    /// Starts the raw echo and the sleeping soft device. The listener's thread serves until
    /// the process ends (in-process peers leave it blocked in `accept`).
    pub fn start() -> Result<Self> {
        let sleeping = SoftServer::open(0)?;
        let devices: Devices = Arc::new(Mutex::new(vec![sleeping.node.ctx.clone()]));
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let raw = listener.local_addr()?;
        std::thread::Builder::new()
            .name("floor-accept".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let devices = devices.clone();
                    let _ = std::thread::Builder::new()
                        .name("floor-echo".into())
                        .spawn(move || echo(stream, &devices));
                }
            })?;
        Ok(Peer {
            announce: Announce {
                raw,
                sleeping: sleeping.end,
            },
            _sleeping: sleeping,
        })
    }

    /// What it serves.
    pub fn announce(&self) -> Announce {
        self.announce
    }

    /// The peer process's body: start, announce on standard output, serve until standard
    /// input closes.
    pub fn serve_until_stdin_closes() -> Result<()> {
        let peer = Peer::start()?;
        println!("{}", peer.announce().line());
        std::io::stdout().flush()?;
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        drop(peer);
        Ok(())
    }
}

/// Serves one raw connection as its first byte asks.
fn echo(mut s: TcpStream, devices: &Devices) -> Result<()> {
    s.set_nodelay(true)?;
    let mut mode = [0u8; 1];
    s.read_exact(&mut mode)?;
    let mut buf = [0u8; PAYLOAD];
    match mode[0] {
        b'B' => loop {
            if let Err(e) = s.read_exact(&mut buf) {
                return if e.kind() == ErrorKind::UnexpectedEof {
                    Ok(())
                } else {
                    Err(e.into())
                };
            }
            s.write_all(&buf)?;
        },
        b'P' => {
            s.set_nonblocking(true)?;
            while spin_read(&mut s, &mut buf)? {
                spin_write(&mut s, &buf)?;
            }
            Ok(())
        }
        b'S' => {
            let mut total = rnic::soft::TcpSyscalls::default();
            for d in devices.lock().iter() {
                let c = TcpNode::stats(d).context("a TCP device")?.syscalls;
                total.reads += c.reads;
                total.writes += c.writes;
                total.polls += c.polls;
                total.wakes += c.wakes;
            }
            writeln!(
                s,
                "{} {} {} {}",
                total.reads, total.writes, total.polls, total.wakes
            )?;
            Ok(())
        }
        b'D' => {
            // An engine that never parks while the device lives.
            let spinning = SoftServer::open(u32::MAX)?;
            devices.lock().push(spinning.node.ctx.clone());
            writeln!(s, "{}", spinning.end.text())?;
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            devices.lock().pop();
            Ok(())
        }
        m => Err(anyhow!("unknown mode byte {m}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announcement_reads_back() {
        let a = Announce {
            raw: "127.0.0.1:4000".parse().unwrap(),
            sleeping: SoftEnd {
                listen: "127.0.0.1:4001".parse().unwrap(),
                addr: 4096,
                rkey: rnic::MemoryKey(0x1234_5678),
            },
        };
        assert_eq!(Announce::parse(&a.line()), Some(a));
        assert_eq!(Announce::parse("floor-peer raw=nonsense"), None);
        assert_eq!(Announce::parse("something else"), None);
    }
}
