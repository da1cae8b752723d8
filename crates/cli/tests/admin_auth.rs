//! The admin endpoint with a bearer token (`--admin-token-file`): `/metrics` and `/status`
//! refuse requests without it, `/healthz` stays open, `patronus status` sends it; and what
//! the endpoint shows never holds a tenant's secret or an rkey, while clients hold
//! permissions.

mod support;

use std::process::Command;
use std::time::Duration;
use support::{EXE, Served};

/// `GET path` with an optional bearer token: (status code, body).
fn get(admin: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::get(&format!("http://{admin}{path}")).timeout(Duration::from_secs(10));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

#[test]
fn the_token_guards_metrics_and_status_and_nothing_shows_secrets() {
    let dir = std::env::temp_dir().join(format!("patronus-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    let token = "s3cr3t-admin-token-7f41";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let tf = token_file.to_string_lossy().into_owned();
    let node = Served::start(&[
        "--pool-mib",
        "16",
        "--tenant",
        "1:0x5ec2e7",
        "--admin-token-file",
        &tf,
    ]);

    assert_eq!(get(node.admin, "/healthz", None).0, 200);
    for path in ["/metrics", "/status"] {
        let (code, body) = get(node.admin, path, None);
        assert_eq!(code, 401, "{path}: {body}");
        assert_eq!(get(node.admin, path, Some("wrong")).0, 401, "{path}");
    }

    // A client holding permissions meanwhile: a kv table (its blocks and rights stay).
    let kv = |args: &[&str]| {
        let o = Command::new(EXE)
            .args([
                "kv",
                "--connect",
                &node.listen.to_string(),
                "--tenant",
                "1:0x5ec2e7",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    kv(&["create"]);
    kv(&["put", "k", "v"]);
    for path in ["/metrics", "/status"] {
        let (code, body) = get(node.admin, path, Some(token));
        assert_eq!(code, 200, "{path}");
        let lower = body.to_lowercase();
        for leak in ["5ec2e7", &0x5ec2e7u64.to_string(), "secret", "rkey", token] {
            assert!(!lower.contains(leak), "{path} shows {leak:?}");
        }
    }

    // `patronus status` with the token, and without.
    let status = |extra: &[&str]| {
        Command::new(EXE)
            .args(["status", &node.admin.to_string()])
            .args(extra)
            .env_remove("PATRONUS_ADMIN_TOKEN_FILE")
            .output()
            .unwrap()
    };
    let ok = status(&["--admin-token-file", &tf]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = status(&[]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("admin token"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}
