//! TLS on the TCP transport: mutual authentication, a wrong CA on either side refused, a
//! plaintext peer refused (or served, where allowed) with a reason both sides can read, the
//! listener told the client certificate's name, every kind of operation working inside TLS,
//! and relays on the path. One flips a byte of a READ response, one injects a WRITE through
//! an rkey it read off the victim's request, one replays an earlier response: in plaintext
//! each works; inside TLS the link fails closed, nothing lands and no READ succeeds with
//! bytes the node did not send. A truncated response fails its READ either way; one held on
//! the path (until the test lets it go) arrives intact either way.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rnic::soft::*;
use rnic::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, Ipv4Addr};
use util::*;

/// A test CA that signs certificates.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// TLS options for a device whose certificate this CA signs (valid for 127.0.0.1), that
    /// trusts `trusts`.
    fn options(&self, name: &str, trusts: &Ca) -> TlsOptions {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let ca: CertificateDer<'static> = trusts.cert.der().clone();
        TlsOptions::mutual(vec![cert.der().clone()], key, vec![ca]).unwrap()
    }
}

fn tls(t: TlsOptions) -> TcpOptions {
    TcpOptions {
        tls: Some(t),
        ..TcpOptions::default()
    }
}

#[test]
fn every_operation_works_inside_mutual_tls() {
    let ca = Ca::new("test CA");
    let s = Server::with(SoftConfig::default(), tls(ca.options("node", &ca)));
    let c = Client::with_options(AccessFlags::empty(), tls(ca.options("tenant-1", &ca)));
    c.qp.connect(&s.addr, b"hello").unwrap();
    s.wait_qps(1);
    assert_eq!(s.policy.private.lock()[0], b"hello");
    // The listener learns who the client is from its verified certificate.
    let peer = s.policy.peers.lock()[0].clone();
    assert_eq!(peer.certificate_name.as_deref(), Some("tenant-1"));
    assert_eq!(peer.addr, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    one_sided_ops(&s, &c);
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    // A forged rkey still breaks the QP inside TLS, as outside.
    let wc = c.read(0, 8, base, MemoryKey(rkey.0 ^ 0xff));
    assert_eq!(wc.status, WcStatus::RemoteAccessError);
}

#[test]
fn a_plaintext_client_is_refused_with_a_reason() {
    let ca = Ca::new("test CA");
    let s = Server::with(SoftConfig::default(), tls(ca.options("node", &ca)));
    let c = Client::new();
    let err = c.qp.connect(&s.addr, b"plain").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("requires TLS"), "{text}");
    assert_eq!(s.policy.count(), 0);
    assert_eq!(
        c.qp.state(),
        QpState::Reset,
        "refused: it may connect again"
    );
}

#[test]
fn a_tls_client_hears_that_the_node_speaks_no_tls() {
    let ca = Ca::new("test CA");
    let s = Server::new();
    let c = Client::with_options(AccessFlags::empty(), tls(ca.options("tenant-1", &ca)));
    let err = c.qp.connect(&s.addr, b"tls").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("does not speak TLS"), "{text}");
    assert_eq!(s.policy.count(), 0);
}

#[test]
fn a_client_certificate_of_another_ca_is_refused() {
    let (ca, other) = (Ca::new("test CA"), Ca::new("another CA"));
    let s = Server::with(SoftConfig::default(), tls(ca.options("node", &ca)));
    // Trusts the node's CA, but its own certificate comes from another.
    let c = Client::with_options(AccessFlags::empty(), tls(other.options("intruder", &ca)));
    let err = c.qp.connect(&s.addr, b"x").unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    assert_eq!(s.policy.count(), 0, "no QP for an unknown client");
}

#[test]
fn a_node_certificate_of_another_ca_is_refused() {
    let (ca, other) = (Ca::new("test CA"), Ca::new("another CA"));
    // A node impersonated with a certificate the clients' CA did not sign.
    let s = Server::with(SoftConfig::default(), tls(other.options("node", &ca)));
    let c = Client::with_options(AccessFlags::empty(), tls(ca.options("tenant-1", &ca)));
    let err = c.qp.connect(&s.addr, b"x").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("TLS") && text.contains("certificate"),
        "{text}"
    );
    assert_eq!(s.policy.count(), 0);
}

#[test]
fn a_listener_that_allows_plaintext_serves_both() {
    let ca = Ca::new("test CA");
    let opts = tls(ca.options("node", &ca).allowing_plaintext(true));
    let s = Server::with(SoftConfig::default(), opts);
    let plain = Client::new();
    plain.qp.connect(&s.addr, b"plain").unwrap();
    let secure = Client::with_options(AccessFlags::empty(), tls(ca.options("tenant-1", &ca)));
    secure.qp.connect(&s.addr, b"tls").unwrap();
    s.wait_qps(2);
    // Only the TLS peer has a certificate name.
    let names: Vec<_> = s
        .policy
        .peers
        .lock()
        .iter()
        .map(|p| p.certificate_name.clone())
        .collect();
    assert_eq!(names, [None, Some("tenant-1".to_string())]);
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    s.buf.store_u64(0, 77).unwrap();
    for c in [&plain, &secure] {
        let wc = c.read(0, 8, base, rkey);
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(c.buf.load_u64(0).unwrap(), 77);
    }
}

/// What a relay on the path does to the next chunk once armed.
#[derive(Clone, Copy)]
enum Tamper {
    /// Flips the last byte of the next chunk the node sends (the end of a READ response: in
    /// plaintext its data's last byte, inside TLS its record's authentication tag).
    FlipDown,
    /// Forwards the victim's next chunk to the node with a forged WRITE right behind it, on
    /// the victim's own connection ([`forged_write_after`], with this guess).
    InjectUp((QpNumber, Psn, Rkey, u64)),
    /// Sends, in place of the node's next chunk, the chunk it sent before: in plaintext the
    /// earlier response renumbered to answer the current request ([`replayed`]), inside TLS
    /// the earlier record as it was.
    ReplayDown,
    /// Forwards the first half of the node's next chunk, then cuts the connection both ways.
    TruncateDown,
    /// Holds the node's next chunk until the test releases it ([`Relay::release`]), then
    /// forwards it unchanged.
    HoldDown,
}

/// What the relay does with one chunk.
enum Step {
    /// Forward these bytes.
    Send(Vec<u8>),
    /// Forward these bytes, then cut the connection.
    Cut(Vec<u8>),
}

/// A relay on the path between one client and a node: forwards both ways, and once armed
/// tampers with one chunk as its [`Tamper`] says.
struct Relay {
    addr: SoftAddress,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set while it holds a chunk ([`Tamper::HoldDown`]).
    holding: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Lets a held chunk go.
    release: std::sync::mpsc::Sender<()>,
}

/// Copies `from` to `to` until either ends; `edit` sees every chunk, told whether it is the
/// one to tamper with (the first once `armed`).
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    armed: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    mut edit: impl FnMut(&[u8], bool) -> Step,
) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 65536];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        let fire = armed
            .as_ref()
            .is_some_and(|a| a.swap(false, std::sync::atomic::Ordering::SeqCst));
        match edit(&buf[..n], fire) {
            Step::Send(out) => {
                if to.write_all(&out).is_err() {
                    break;
                }
            }
            Step::Cut(out) => {
                let _ = to.write_all(&out);
                let _ = from.shutdown(std::net::Shutdown::Both);
                let _ = to.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The node's chunks as `tamper` changes them (`previous`: the chunk the node sent before;
/// `hold`: returns once the test lets a held chunk go).
fn tamper_down(
    tamper: Tamper,
    chunk: &[u8],
    fire: bool,
    previous: &mut Vec<u8>,
    hold: &mut dyn FnMut(),
) -> Step {
    let step = match tamper {
        _ if !fire => Step::Send(chunk.to_vec()),
        Tamper::FlipDown => {
            let mut out = chunk.to_vec();
            if let Some(last) = out.last_mut() {
                *last ^= 0x01;
            }
            Step::Send(out)
        }
        Tamper::ReplayDown => Step::Send(replayed(previous, chunk)),
        Tamper::TruncateDown => Step::Cut(chunk[..chunk.len() / 2].to_vec()),
        Tamper::HoldDown => {
            hold();
            Step::Send(chunk.to_vec())
        }
        Tamper::InjectUp(_) => Step::Send(chunk.to_vec()),
    };
    *previous = chunk.to_vec();
    step
}

impl Relay {
    fn start(node: std::net::SocketAddr, tamper: Tamper) -> Relay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = SoftAddress::Tcp(listener.local_addr().unwrap());
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = armed.clone();
        let holding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = holding.clone();
        let (release, released) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || {
                let (client, _) = listener.accept().unwrap();
                let server = std::net::TcpStream::connect(node).unwrap();
                let (up, down) = match tamper {
                    Tamper::InjectUp(_) => (Some(flag), None),
                    _ => (None, Some(flag)),
                };
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::Builder::new()
                    .name("relay-up".into())
                    .spawn(move || {
                        pipe(c, s, up, |chunk, fire| {
                            let mut out = chunk.to_vec();
                            if let (true, Tamper::InjectUp(guess)) = (fire, tamper) {
                                out.extend(forged_write_after(chunk, guess));
                            }
                            Step::Send(out)
                        })
                    })
                    .unwrap();
                let mut previous = Vec::new();
                let mut hold = || {
                    use std::sync::atomic::Ordering::SeqCst;
                    held.store(true, SeqCst);
                    let _ = released.recv();
                    held.store(false, SeqCst);
                };
                pipe(server, client, down, |chunk, fire| {
                    tamper_down(tamper, chunk, fire, &mut previous, &mut hold)
                });
            })
            .unwrap();
        Relay {
            addr,
            armed,
            holding,
            release,
        }
    }

    /// Whether it holds a chunk now.
    fn holding(&self) -> bool {
        self.holding.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Lets the held chunk go.
    fn release(&self) {
        let _ = self.release.send(());
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `earlier` sent again in place of `now`: when both read as responses (plaintext), the
/// earlier one renumbered with the PSN `now` answers, so the requester takes it for the
/// answer to its current request; otherwise (inside TLS) `earlier` as it was.
fn replayed(earlier: &[u8], now: &[u8]) -> Vec<u8> {
    use rnic::soft::wire::{Frame, Packet, decode_frame, encode_frame, frame_len};
    fn frame(b: &[u8]) -> Option<rnic::soft::wire::Response<&[u8]>> {
        let n = frame_len(b, 1 << 20).ok().flatten()?;
        match decode_frame(b.get(..n)?).ok()? {
            Frame::Packet(Packet::Response(r)) => Some(r),
            _ => None,
        }
    }
    let (Some(old), Some(current)) = (frame(earlier), frame(now)) else {
        return earlier.to_vec();
    };
    let renumbered = Frame::Packet(Packet::Response(rnic::soft::wire::Response {
        psn: current.psn,
        ..old
    }));
    let mut out = Vec::new();
    encode_frame(&renumbered, &mut out);
    out
}

/// What a READ through a tampering relay came to.
struct Tampered {
    /// The READ the relay tampered with.
    wc: WorkCompletion,
    /// What it read.
    got: [u8; 64],
    /// What the node held at its first, untouched READ, and at this one.
    before: [u8; 64],
    now: [u8; 64],
}

/// Reads 64 B once through a faithful relay, changes them on the node, and reads them again
/// with the relay armed to `tamper` with the response.
fn read_through(tamper: Tamper, server: TcpOptions, client: TcpOptions) -> Tampered {
    let s = Server::with(SoftConfig::default(), server);
    let relay = Relay::start(s.sock, tamper);
    let c = Client::with_options(AccessFlags::empty(), client);
    c.qp.connect(&relay.addr, b"victim").unwrap();
    s.wait_qps(1);
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    let before: [u8; 64] = std::array::from_fn(|i| i as u8);
    let now: [u8; 64] = std::array::from_fn(|i| 0x80 | i as u8);
    s.buf.write(0, &before).unwrap();
    // One clean READ first (the relay forwards faithfully until armed).
    let wc = c.read(0, 64, base, rkey);
    assert_eq!(wc.status, WcStatus::Success);
    s.buf.write(0, &now).unwrap();
    relay.arm();
    let wc = c.read(128, 64, base, rkey);
    let mut got = [0u8; 64];
    c.buf.read(128, &mut got).unwrap();
    Tampered {
        wc,
        got,
        before,
        now,
    }
}

fn tls_pair() -> (TcpOptions, TcpOptions) {
    let ca = Ca::new("test CA");
    (
        tls(ca.options("node", &ca)),
        tls(ca.options("tenant-1", &ca)),
    )
}

fn plain_pair() -> (TcpOptions, TcpOptions) {
    (TcpOptions::default(), TcpOptions::default())
}

#[test]
fn a_byte_flipped_on_the_path_alters_a_plaintext_read() {
    // Without TLS the path is not defended: the READ succeeds with the relay's byte in it.
    let (server, client) = plain_pair();
    let t = read_through(Tamper::FlipDown, server, client);
    assert_eq!(t.wc.status, WcStatus::Success);
    assert_ne!(t.got, t.now, "the relay's flip reached the application");
}

#[test]
fn a_byte_flipped_on_the_path_fails_a_tls_read_closed() {
    let (server, client) = tls_pair();
    let t = read_through(Tamper::FlipDown, server, client);
    assert_ne!(
        t.wc.status,
        WcStatus::Success,
        "a READ whose response was altered must not succeed"
    );
}

#[test]
fn a_replayed_response_answers_a_plaintext_read_with_stale_bytes() {
    // Without TLS the path is not defended: the earlier response, renumbered, is taken for
    // the answer to the new READ.
    let (server, client) = plain_pair();
    let t = read_through(Tamper::ReplayDown, server, client);
    assert_eq!(t.wc.status, WcStatus::Success);
    assert_eq!(
        t.got, t.before,
        "the replayed bytes reached the application"
    );
}

#[test]
fn a_replayed_record_fails_a_tls_read_closed() {
    let (server, client) = tls_pair();
    let t = read_through(Tamper::ReplayDown, server, client);
    assert_ne!(
        t.wc.status,
        WcStatus::Success,
        "a READ answered by a replayed record must not succeed (got the old bytes: {})",
        t.got == t.before
    );
}

#[test]
fn a_truncated_response_fails_the_read_with_or_without_tls() {
    for (name, (server, client)) in [("plaintext", plain_pair()), ("TLS", tls_pair())] {
        let t = read_through(Tamper::TruncateDown, server, client);
        // The link is gone mid-response: the READ is flushed, never completed with part of
        // its bytes.
        assert_ne!(t.wc.status, WcStatus::Success, "{name}");
        assert_ne!(t.got, t.now, "{name}: no READ completed");
    }
}

#[test]
fn a_held_response_arrives_intact_with_or_without_tls() {
    for (name, (server, client)) in [("plaintext", plain_pair()), ("TLS", tls_pair())] {
        let s = Server::with(SoftConfig::default(), server);
        let relay = Relay::start(s.sock, Tamper::HoldDown);
        let c = Client::with_options(AccessFlags::empty(), client);
        c.qp.connect(&relay.addr, b"victim").unwrap();
        s.wait_qps(1);
        let (base, rkey) = (s.buf.addr(), s.mr.rkey());
        let now: [u8; 64] = std::array::from_fn(|i| 0x40 | i as u8);
        s.buf.write(0, &now).unwrap();
        relay.arm();
        c.post(
            7,
            SendOp::Read {
                local: c.sge(0, 64),
                remote_addr: base,
                rkey,
            },
        );
        wait_until("the relay holds the response", || relay.holding());
        // Held on the path: nothing completes, and nothing fails either.
        assert!(drain_cq(&c.cq).is_empty(), "{name}: a READ completed early");
        relay.release();
        let wc = wait_wcs(&c.cq, 1).remove(0);
        // Late, but neither lost nor altered.
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success), "{name}");
        let mut got = [0u8; 64];
        c.buf.read(0, &mut got).unwrap();
        assert_eq!(got, now, "{name}");
    }
}

#[test]
fn a_reload_changes_new_connections_and_keeps_the_old_ones() {
    let (a, b) = (Ca::new("CA A"), Ca::new("CA B"));
    let node_tls = a.options("node", &a);
    let s = Server::with(SoftConfig::default(), tls(node_tls.clone()));
    let old = Client::with_options(AccessFlags::empty(), tls(a.options("tenant-a", &a)));
    old.qp.connect(&s.addr, b"old").unwrap();
    s.wait_qps(1);
    // The node's certificate and client CA are now B's (renewed on disk, say).
    node_tls.reload(&b.options("node", &b));
    let stale = Client::with_options(AccessFlags::empty(), tls(a.options("tenant-a", &a)));
    let err = stale.qp.connect(&s.addr, b"stale").unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    let fresh = Client::with_options(AccessFlags::empty(), tls(b.options("tenant-b", &b)));
    fresh.qp.connect(&s.addr, b"fresh").unwrap();
    s.wait_qps(2);
    // The connection made before the reload is still served.
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    s.buf.store_u64(0, 42).unwrap();
    for c in [&old, &fresh] {
        let wc = c.read(0, 8, base, rkey);
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(c.buf.load_u64(0).unwrap(), 42);
    }
}

/// The attacker's WRITE of `PWNED!!!`, to follow `chunk` into the node: addressed as the
/// victim's READ in `chunk` was (its QP, its next PSN, the rkey and address it carried) when
/// the chunk can be read; otherwise as `guess` says (inside TLS nothing can be read).
fn forged_write_after(chunk: &[u8], guess: (QpNumber, Psn, Rkey, u64)) -> Vec<u8> {
    use rnic::soft::wire::{Packet, Request, RequestOp, decode_frame, encode_frame, frame_len};
    let sniffed = frame_len(chunk, 1 << 20)
        .ok()
        .flatten()
        .and_then(|n| chunk.get(..n))
        .and_then(|f| decode_frame(f).ok());
    let (dst_qp, psn, rkey, addr) = match sniffed {
        Some(rnic::soft::wire::Frame::Packet(Packet::Request(Request {
            dst_qp,
            psn,
            op: RequestOp::Read { addr, rkey, .. },
            ..
        }))) => (dst_qp, psn, rkey, addr),
        _ => guess,
    };
    let forged = rnic::soft::wire::Frame::Packet(Packet::Request(Request {
        dst_qp,
        psn: psn.next(),
        op: RequestOp::Write {
            addr,
            rkey,
            data: &b"PWNED!!!"[..],
        },
        ack_req: true,
    }));
    let mut out = Vec::new();
    encode_frame(&forged, &mut out);
    out
}

/// Reads through an injecting relay; returns the server (to look at its memory and QP).
fn victim_read_through_an_injector(server: TcpOptions, client: TcpOptions) -> (Server, Client) {
    let s = Server::with(SoftConfig::default(), server);
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    // What an attacker inside TLS would have to guess: here it is even given the truth but
    // the PSN.
    let relay = Relay::start(
        s.sock,
        Tamper::InjectUp((QpNumber(0), Psn::new(0), rkey, base)),
    );
    let c = Client::with_options(AccessFlags::empty(), client);
    c.qp.connect(&relay.addr, b"victim").unwrap();
    s.wait_qps(1);
    s.buf.write(0, b"original").unwrap();
    relay.arm();
    let _ = c.read(0, 8, base, rkey);
    (s, c)
}

#[test]
fn a_write_injected_into_a_plaintext_connection_with_a_sniffed_rkey_lands() {
    // Without TLS the path is not defended: the relay reads the victim's rkey off its READ
    // and writes through it, on the victim's own connection (whatever the isolation: the
    // rkey is valid there).
    let (s, _c) = victim_read_through_an_injector(TcpOptions::default(), TcpOptions::default());
    wait_until("the forged WRITE lands", || {
        let mut got = [0u8; 8];
        s.buf.read(0, &mut got).unwrap();
        &got == b"PWNED!!!"
    });
}

#[test]
fn a_write_injected_into_a_tls_connection_fails_it_and_lands_nowhere() {
    let ca = Ca::new("test CA");
    let (s, _c) = victim_read_through_an_injector(
        tls(ca.options("node", &ca)),
        tls(ca.options("tenant-1", &ca)),
    );
    let qp = s.wait_qps(1);
    wait_until("the node's end of the victim's connection fails", || {
        qp.state() == QpState::Error
    });
    let mut got = [0u8; 8];
    s.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"original", "nothing of the injection reached memory");
}
