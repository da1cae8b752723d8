//! TLS 1.3 on the TCP transport's connections: rustls with the `ring` provider, mutually
//! authenticated (the listening side presents its certificate and verifies the connecting
//! side's against a CA, and the other way round).
//!
//! A device has one [`TlsOptions`]: its listeners use the server half, its connections the
//! client half. A connection's TLS state lives beside its socket ([`TlsState`]) and is taken
//! by whichever thread reads or writes the socket, innermost of the connection's locks (see
//! `conn.rs`); the frames inside are the plaintext transport's, unchanged.
//!
//! An accepted connection's first byte says what its peer speaks: a TLS record starts with
//! `0x16` (handshake), a frame of ours with the high byte of its length, `0x00`. A listener
//! that requires TLS refuses a plaintext peer with a plaintext `ConnectReject` whose reason
//! says so; a TLS client that reaches a plaintext-only listener gets that listener's
//! plaintext refusal and reports that the node does not speak TLS.

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first byte of a TLS handshake record (a ClientHello's).
pub(super) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The common name in `certificate`'s subject (the first, if it has several); `None` when
/// it has none or does not parse (it was verified already: a name is all this reads).
pub(super) fn certificate_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    Some(name.to_owned())
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate, key or CA file could not be read or holds no PEM item of its kind.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// rustls refused the configuration (a key that does not match the certificate, …).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// TLS for a TCP device (see the module docs). Cloning shares it: [`TlsOptions::reload`] on
/// any clone changes what every clone uses for the connections made from then on.
#[derive(Clone)]
pub struct TlsOptions {
    current: Arc<ArcSwap<Configs>>,
}

/// One generation of a device's TLS.
pub(super) struct Configs {
    pub(super) server: Option<Arc<ServerConfig>>,
    pub(super) client: Option<Arc<ClientConfig>>,
    /// The name a connection verifies in the listener's certificate (`None`: the IP address
    /// it dials).
    pub(super) server_name: Option<ServerName<'static>>,
    /// Listeners also serve peers that speak plaintext.
    pub(super) allow_plaintext: bool,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.current.load();
        f.debug_struct("TlsOptions")
            .field("server", &c.server.is_some())
            .field("client", &c.client.is_some())
            .field("server_name", &c.server_name)
            .field("allow_plaintext", &c.allow_plaintext)
            .finish()
    }
}

/// PEM certificates from `path` (at least one).
pub fn certificates_from_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_err = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The PEM private key in `path`.
pub fn private_key_from_pem(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config_err(e: impl fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

impl TlsOptions {
    /// Mutual TLS: this device presents `chain` (its certificate first) with `key`, on its
    /// listeners and on its connections, and accepts only peers whose certificate `ca` signed.
    /// Plaintext peers are refused.
    pub fn mutual(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        ca: Vec<CertificateDer<'static>>,
    ) -> Result<Self, TlsError> {
        let mut roots = RootCertStore::empty();
        for c in ca {
            roots.add(c).map_err(config_err)?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(config_err)?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config_err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(config_err)?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config_err)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(config_err)?;
        Ok(TlsOptions::of(Configs {
            server: Some(Arc::new(server)),
            client: Some(Arc::new(client)),
            server_name: None,
            allow_plaintext: false,
        }))
    }

    fn of(c: Configs) -> Self {
        TlsOptions {
            current: Arc::new(ArcSwap::from_pointee(c)),
        }
    }

    /// The configurations in use now.
    pub(super) fn current(&self) -> Arc<Configs> {
        self.current.load_full()
    }

    /// From now on, new connections of every clone of these options use `next`'s
    /// certificates, keys, CA and settings (a certificate renewed on disk, say). Connections
    /// already made keep theirs: nothing is dropped.
    pub fn reload(&self, next: &TlsOptions) {
        self.current.store(next.current.load_full());
    }

    /// [`TlsOptions::mutual`] from PEM files: the certificate chain, its key, the CA.
    pub fn mutual_from_pem(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        Self::mutual(
            certificates_from_pem(cert)?,
            private_key_from_pem(key)?,
            certificates_from_pem(ca)?,
        )
    }

    /// Connections verify `name` in the listener's certificate instead of the IP address
    /// they dial (a DNS name the node's certificate carries).
    pub fn with_server_name(self, name: &str) -> Result<Self, TlsError> {
        let name = ServerName::try_from(name.to_owned()).map_err(config_err)?;
        let c = self.current();
        Ok(TlsOptions::of(Configs {
            server: c.server.clone(),
            client: c.client.clone(),
            server_name: Some(name),
            allow_plaintext: c.allow_plaintext,
        }))
    }

    /// Listeners also serve peers that speak plaintext (a migration aid; off by default).
    pub fn allowing_plaintext(self, allow: bool) -> Self {
        let c = self.current();
        TlsOptions::of(Configs {
            server: c.server.clone(),
            client: c.client.clone(),
            server_name: c.server_name.clone(),
            allow_plaintext: allow,
        })
    }

    /// Mutual TLS from a CA made now: one certificate it signed, valid for 127.0.0.1 and
    /// `localhost` with `name` as its common name, which every device with these options
    /// presents and checks its peers' against. For tests and benchmarks on one machine.
    #[cfg(feature = "ephemeral-certificates")]
    pub fn ephemeral(name: &str) -> Result<Self, TlsError> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
        use rustls::pki_types::PrivatePkcs8KeyDer;
        let ca_key = KeyPair::generate().map_err(config_err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(config_err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let ca = ca.self_signed(&ca_key).map_err(config_err)?;
        let key = KeyPair::generate().map_err(config_err)?;
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).map_err(config_err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(config_err)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Self::mutual(vec![cert.der().clone()], key, vec![ca.der().clone()])
    }

    /// The TLS state of a connection a listener accepted (`None`: listeners speak plaintext
    /// only); TLS buffers at most `limit` bytes the socket has not taken.
    pub(super) fn accepting(&self, limit: usize) -> Option<TlsState> {
        let c = self.current();
        let config = c.server.clone()?;
        // Cannot fail for a configuration that built (it only allocates the state).
        let mut tls = rustls::ServerConnection::new(config).ok()?;
        tls.set_buffer_limit(Some(limit));
        Some(TlsState::Undecided {
            tls: Box::new(tls),
            allow_plaintext: c.allow_plaintext,
        })
    }
}

impl Configs {
    /// The name a connection to `ip` verifies.
    pub(super) fn name_for(&self, ip: std::net::IpAddr) -> ServerName<'static> {
        self.server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(ip.into()))
    }
}

/// A connection's TLS, as its reader and writer see it.
pub(super) enum TlsState {
    /// An accepted connection whose first byte has not been read yet.
    Undecided {
        tls: Box<rustls::ServerConnection>,
        allow_plaintext: bool,
    },
    /// TLS: frames are read from and written through it.
    On(Box<rustls::Connection>),
    /// An accepted plaintext peer (allowed, or being refused).
    Plain,
}
