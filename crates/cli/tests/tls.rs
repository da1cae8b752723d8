//! `patronus certs`, then `patronus serve` with TLS and `patronus kv` and `probe` as its
//! tenants, each in its own process: clients with a certificate of the node's CA are served;
//! a plaintext client and one whose certificate another CA signed are refused with a one-line
//! reason, and the node serves on.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::{EXE, Served};

fn certs(dir: &Path, tenants: &[&str]) {
    let mut cmd = Command::new(EXE);
    cmd.args(["certs", "--out"]).arg(dir);
    for t in tenants {
        cmd.args(["--tenant", t]);
    }
    let o = cmd.output().expect("certs runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn tls_args(dir: &Path, who: &str) -> Vec<String> {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    vec![
        "--tls-cert".into(),
        p(&format!("{who}.pem")),
        "--tls-key".into(),
        p(&format!("{who}-key.pem")),
        "--tls-ca".into(),
        p("ca.pem"),
    ]
}

/// `patronus serve` with the node certificate, key and CA of `dir` (as `certs` names them),
/// and `more` flags.
fn serve_tls(dir: &Path, more: &[&str]) -> Served {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (p("node.pem"), p("node-key.pem"), p("ca.pem"));
    let mut args = vec![
        "--pool-mib",
        "16",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ];
    args.extend_from_slice(more);
    Served::start(&args)
}

fn kv(addr: &str, tls: &[String], args: &[&str]) -> Output {
    Command::new(EXE)
        .args(["kv", "--connect", addr])
        .args(tls)
        .args(args)
        .output()
        .expect("kv runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn tenants_with_certificates_are_served_and_others_refused() {
    let dir = std::env::temp_dir().join(format!("patronus-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    certs(&dir, &["tenant-1"]);
    let other = dir.join("other");
    certs(&other, &["intruder"]);
    let node = serve_tls(&dir, &[]);
    let ca = dir.join("ca.pem").to_string_lossy().into_owned();
    let addr = node.listen.to_string();
    let tenant = tls_args(&dir, "tenant-1");

    let o = kv(&addr, &tenant, &["create"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kv(&addr, &tenant, &["put", "apple", "red"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kv(&addr, &tenant, &["get", "apple"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "red\n", "{}", text(&o));

    // Plaintext: refused, and told why in one line.
    let o = kv(&addr, &[], &["get", "apple"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("requires TLS"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // A certificate of another CA: refused.
    let mut intruder = tls_args(&other, "intruder");
    intruder[5] = ca.clone(); // it trusts the node, but the node does not trust it
    let o = kv(&addr, &intruder, &["get", "apple"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TLS"),
        "{}",
        text(&o)
    );

    // The node served on throughout; probe through TLS as well.
    let o = Command::new(EXE)
        .args(["probe", "--connect", &addr])
        .args(&tenant)
        .output()
        .expect("probe runs");
    assert!(o.status.success(), "{}", text(&o));
    let o = kv(&addr, &tenant, &["get", "apple"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "red\n", "{}", text(&o));

    // `certs` keeps existing files.
    let again = Command::new(EXE)
        .args(["certs", "--out"])
        .arg(&dir)
        .output()
        .expect("certs runs");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("existing file is kept"));
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_reloads_the_certificates() {
    let root = std::env::temp_dir().join(format!("patronus-tls-hup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (a, b, live) = (root.join("a"), root.join("b"), root.join("live"));
    certs(&a, &["tenant-1"]);
    certs(&b, &["tenant-2"]);
    std::fs::create_dir_all(&live).unwrap();
    let install = |from: &Path| {
        for f in ["node.pem", "node-key.pem", "ca.pem"] {
            std::fs::copy(from.join(f), live.join(f)).unwrap();
        }
    };
    install(&a);
    let mut node = serve_tls(&live, &[]);
    let addr = node.listen.to_string();
    let (old, new) = (tls_args(&a, "tenant-1"), tls_args(&b, "tenant-2"));
    let o = kv(&addr, &old, &["create"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kv(&addr, &old, &["put", "apple", "red"]);
    assert!(o.status.success(), "{}", text(&o));

    // Renewed on disk: B's CA from now on.
    install(&b);
    node.signal("HUP");
    let line = node.next_line();
    assert!(line.contains("reloaded"), "{line}");
    let o = kv(&addr, &new, &["get", "apple"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "red\n", "{}", text(&o));
    let o = kv(&addr, &old, &["get", "apple"]);
    assert!(
        !o.status.success(),
        "A's certificates no longer pass: {}",
        text(&o)
    );

    // A broken file keeps the node on what it has.
    std::fs::write(live.join("node-key.pem"), "not a key").unwrap();
    node.signal("HUP");
    let line = node.next_line();
    assert!(line.contains("kept the current TLS files"), "{line}");
    let o = kv(&addr, &new, &["get", "apple"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "red\n", "{}", text(&o));
    drop(node);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_certificate_names_its_tenant() {
    let dir = std::env::temp_dir().join(format!("patronus-tls-cn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    certs(&dir, &["tenant-1", "tenant-2"]);
    let node = serve_tls(
        &dir,
        &[
            "--tenant",
            "1:11",
            "--tenant",
            "2:22",
            "--tenant-certificate",
            "1:tenant-1",
        ],
    );
    let addr = node.listen.to_string();
    let (one, two) = (tls_args(&dir, "tenant-1"), tls_args(&dir, "tenant-2"));
    let with = |tls: &[String], tenant: &str| {
        let mut v = tls.to_vec();
        v.extend(["--tenant".to_string(), tenant.to_string()]);
        v
    };

    // The certificate alone: tenant 1, no secret.
    let o = kv(&addr, &one, &["create"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kv(&addr, &one, &["put", "apple", "red"]);
    assert!(o.status.success(), "{}", text(&o));
    // Tenant 1 by its secret (inside TLS) sees the same table: the certificate's client
    // acted for tenant 1.
    let o = kv(&addr, &with(&two, "1:11"), &["get", "apple"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "red\n", "{}", text(&o));
    // Tenant 2 by its secret has tables of its own.
    let o = kv(&addr, &with(&two, "2:22"), &["get", "apple"]);
    assert!(!o.status.success(), "{}", text(&o));
    // A certificate no tenant maps, without a secret: not served.
    let o = kv(&addr, &two, &["get", "apple"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("not authenticated"), "{}", text(&o));
    // A certificate of tenant 1 cannot act for tenant 2, even with tenant 2's secret.
    let o = kv(&addr, &with(&one, "2:22"), &["get", "apple"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("refused tenant 2"), "{}", text(&o));
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}
