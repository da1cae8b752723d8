//! TLS on the TCP transport: mutual authentication, a wrong CA on either side refused, a
//! plaintext peer refused (or served, where allowed) with a reason both sides can read, and
//! every kind of operation working inside TLS.
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
    let (base, rkey) = (s.buf.addr(), s.mr.rkey());
    c.buf.write(0, b"0123456789abcdef").unwrap();
    let wc = c.run(
        1,
        SendOp::Write {
            local: c.sge(0, 16),
            remote_addr: base + 100,
            rkey,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 16];
    s.buf.read(100, &mut got).unwrap();
    assert_eq!(&got, b"0123456789abcdef");
    // A READ larger than TLS records and socket buffers.
    let pattern: Vec<u8> = (0..256 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    s.buf.write(4096, &pattern).unwrap();
    let wc = c.read(8192, pattern.len() as u32, base + 4096, rkey);
    assert_eq!(wc.status, WcStatus::Success);
    let mut back = vec![0u8; pattern.len()];
    c.buf.read(8192, &mut back).unwrap();
    assert!(back == pattern, "large READ corrupted");
    s.buf.store_u64(512, 5).unwrap();
    let wc = c.run(
        2,
        SendOp::CompareSwap {
            local: c.sge(64, 8),
            remote_addr: base + 512,
            rkey,
            compare: 5,
            swap: 9,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(s.buf.load_u64(512).unwrap(), 9);
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
