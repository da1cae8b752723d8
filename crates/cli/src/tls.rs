//! TLS for the command line: the flags every client command takes (`--tls-cert`, `--tls-key`,
//! `--tls-ca`), and `patronus certs`, which makes a test CA, a node certificate and tenant
//! certificates for a quick start (`docs/operations.md`, "TLS").

use anyhow::{Context as _, Result, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rnic::soft::{TcpOptions, TlsOptions};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A client's TLS: its certificate and key, and the CA that signed the node's.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// This client's certificate (PEM; signed by a CA the node trusts). With --tls-key and
    /// --tls-ca: every connection to the node is mutually authenticated TLS 1.3.
    #[arg(long, env = "PATRONUS_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, env = "PATRONUS_TLS_KEY", requires_all = ["tls_cert", "tls_ca"])]
    pub tls_key: Option<PathBuf>,
    /// The CA that signed the node's certificate (PEM).
    #[arg(long, env = "PATRONUS_TLS_CA", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// The name to verify in the node's certificate (default: the IP address dialled).
    #[arg(long, env = "PATRONUS_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// The TLS options these flags give (`None`: plaintext).
    pub fn options(&self) -> Result<Option<TlsOptions>> {
        let (Some(cert), Some(key), Some(ca)) = (&self.tls_cert, &self.tls_key, &self.tls_ca)
        else {
            return Ok(None);
        };
        let mut t = TlsOptions::mutual_from_pem(cert, key, ca).context("TLS")?;
        if let Some(name) = &self.tls_server_name {
            t = t.with_server_name(name).context("--tls-server-name")?;
        }
        Ok(Some(t))
    }

    /// TCP options for a client device with these flags' TLS.
    pub fn tcp(&self) -> Result<TcpOptions> {
        Ok(TcpOptions {
            tls: self.options()?,
            ..TcpOptions::default()
        })
    }
}

/// `patronus certs`: what to make.
#[derive(clap::Args, Debug, Clone)]
pub struct CertsArgs {
    /// Folder to write into (created if missing; existing files are not overwritten).
    #[arg(long, default_value = "patronus-certs")]
    pub out: PathBuf,
    /// Names and addresses the node's certificate is valid for (repeatable).
    #[arg(long = "node-name", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    pub node_names: Vec<String>,
    /// A tenant certificate to make, by name (repeatable); its subject's common name is the
    /// name.
    #[arg(long = "tenant", default_values_t = ["tenant-1".to_string()])]
    pub tenants: Vec<String>,
}

/// Makes a CA (`ca.pem`, `ca-key.pem`), a node certificate (`node.pem`, `node-key.pem`) and a
/// certificate per tenant (`<name>.pem`, `<name>-key.pem`) in `args.out`.
pub fn certs(args: &CertsArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "patronus test CA");
    let ca = ca.self_signed(&ca_key)?;
    let mut files = vec![
        ("ca.pem".to_string(), ca.pem()),
        ("ca-key.pem".to_string(), ca_key.serialize_pem()),
    ];
    let mut leaf = |name: &str, sans: &[String], purpose: ExtendedKeyUsagePurpose| -> Result<()> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        for s in sans {
            p.subject_alt_names.push(match s.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(s.clone().try_into()?),
            });
        }
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![purpose];
        let cert = p.signed_by(&key, &ca, &ca_key)?;
        files.push((format!("{name}.pem"), cert.pem()));
        files.push((format!("{name}-key.pem"), key.serialize_pem()));
        Ok(())
    };
    leaf(
        "node",
        &args.node_names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    for t in &args.tenants {
        if t == "node" || t == "ca" || t.contains(['/', '\\']) || t.is_empty() {
            bail!("tenant name {t:?}: not a file name of its own");
        }
        leaf(
            t,
            std::slice::from_ref(t),
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
    }
    for (name, pem) in &files {
        write_new(&args.out.join(name), pem, name.ends_with("-key.pem"))?;
    }
    println!(
        "wrote a test CA, a node certificate ({}) and {} tenant certificate(s) to {}",
        args.node_names.join(", "),
        args.tenants.len(),
        args.out.display()
    );
    Ok(())
}

/// Writes `text` to a file that must not exist yet (a key readable by its owner only).
fn write_new(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("writing {} (an existing file is kept)", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}
