//! TLS on the TCP transport: mutual authentication, a wrong CA on either side refused, a
//! plaintext peer refused (or served, where allowed) with a reason both sides can read, every
//! kind of operation working inside TLS, and relays on the path: one flips a byte of a READ
//! response, one injects a WRITE through an rkey it read off the victim's request. In
//! plaintext both work; inside TLS the link fails closed and nothing lands.
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
}

/// A relay on the path between one client and a node: forwards both ways, and once armed
/// tampers with one chunk as its [`Tamper`] says.
struct Relay {
    addr: SoftAddress,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Copies `from` to `to` until either ends; once `armed`, `edit` changes the next chunk.
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    armed: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    edit: impl Fn(&[u8]) -> Vec<u8>,
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
        let out = if fire {
            edit(&buf[..n])
        } else {
            buf[..n].to_vec()
        };
        if to.write_all(&out).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

impl Relay {
    fn start(node: std::net::SocketAddr, tamper: Tamper) -> Relay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = SoftAddress::Tcp(listener.local_addr().unwrap());
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = armed.clone();
        std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || {
                let (client, _) = listener.accept().unwrap();
                let server = std::net::TcpStream::connect(node).unwrap();
                let (up, down) = match tamper {
                    Tamper::FlipDown => (None, Some(flag)),
                    Tamper::InjectUp(_) => (Some(flag), None),
                };
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::Builder::new()
                    .name("relay-up".into())
                    .spawn(move || {
                        pipe(c, s, up, |chunk| {
                            let Tamper::InjectUp(guess) = tamper else {
                                return chunk.to_vec();
                            };
                            let mut out = chunk.to_vec();
                            out.extend(forged_write_after(chunk, guess));
                            out
                        })
                    })
                    .unwrap();
                pipe(server, client, down, |chunk| {
                    let mut out = chunk.to_vec();
                    if let Some(last) = out.last_mut() {
                        *last ^= 0x01;
                    }
                    out
                });
            })
            .unwrap();
        Relay { addr, armed }
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Reads 64 B through a relay that flips a byte of the response; returns the completion and
/// whether the bytes read differ from the node's.
fn read_through_a_flipping_relay(server: TcpOptions, client: TcpOptions) -> (WorkCompletion, bool) {
    let s = Server::with(SoftConfig::default(), server);
    let relay = Relay::start(s.sock, Tamper::FlipDown);
    let c = Client::with_options(AccessFlags::empty(), client);
    c.qp.connect(&relay.addr, b"victim").unwrap();
    s.wait_qps(1);
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    let pattern: Vec<u8> = (0..64u8).collect();
    s.buf.write(0, &pattern).unwrap();
    // One clean READ first (the relay forwards faithfully until armed).
    let wc = c.read(0, 64, base, rkey);
    assert_eq!(wc.status, WcStatus::Success);
    relay.arm();
    let wc = c.read(128, 64, base, rkey);
    let mut got = [0u8; 64];
    c.buf.read(128, &mut got).unwrap();
    (wc, got[..] != pattern[..])
}

#[test]
fn a_byte_flipped_on_the_path_alters_a_plaintext_read() {
    // Without TLS the path is not defended: the READ succeeds with the relay's byte in it.
    let (wc, altered) = read_through_a_flipping_relay(TcpOptions::default(), TcpOptions::default());
    assert_eq!(wc.status, WcStatus::Success);
    assert!(altered, "the relay's flip reached the application");
}

#[test]
fn a_byte_flipped_on_the_path_fails_a_tls_read_closed() {
    let ca = Ca::new("test CA");
    let (wc, altered) = read_through_a_flipping_relay(
        tls(ca.options("node", &ca)),
        tls(ca.options("tenant-1", &ca)),
    );
    assert_ne!(
        wc.status,
        WcStatus::Success,
        "a READ whose response was altered must not succeed (altered: {altered})"
    );
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
