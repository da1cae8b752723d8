//! TLS for a benchmark run (`--tls`): a CA made for the run and one certificate it signed,
//! which every device of the run presents and checks its peers' against (mutual TLS, as a
//! node and its tenants run it; one certificate for all is enough to measure what TLS costs).

use anyhow::{Context as _, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rnic::soft::TlsOptions;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, Ipv4Addr};

/// Mutual-TLS options valid for devices on 127.0.0.1, from a CA made now.
pub fn ephemeral() -> Result<TlsOptions> {
    let ca_key = KeyPair::generate().context("a CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "patronus-bench CA");
    let ca = ca.self_signed(&ca_key).context("the CA's certificate")?;
    let key = KeyPair::generate().context("a device key")?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params
        .distinguished_name
        .push(DnType::CommonName, "patronus-bench device");
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .context("the device's certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    TlsOptions::mutual(vec![cert.der().clone()], key, vec![ca.der().clone()])
        .context("TLS options for the run")
}
