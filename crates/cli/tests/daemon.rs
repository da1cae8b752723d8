//! `patronus serve --config FILE` as a daemon: its Prometheus counters move with a client's
//! work, `patronus status` shows the client's permission while it lives, SIGTERM drains it
//! and it exits 0; bad configurations are one-line errors naming the problem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use patronus_core::client::{Client, ClientConfig};
use patronus_core::proto::messages::Mode;
use rnic::soft::{SoftAddress, SoftConfig, SoftProvider, TcpNode};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_patronus");

/// A file in a directory of this test run's own.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("patronus-daemon-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The daemon: killed on drop if a test fails before it stopped.
struct Daemon {
    child: Child,
    out: BufReader<ChildStdout>,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl Daemon {
    fn start(config: &PathBuf) -> Daemon {
        let mut child = Command::new(EXE)
            .args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn serve");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let listen = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("`listening ADDR`, got {line:?}"))
            .parse()
            .unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        let admin = line
            .trim()
            .strip_prefix("admin http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("`admin http://ADDR/metrics ...`, got {line:?}"))
            .parse()
            .unwrap();
        Daemon {
            child,
            out,
            listen,
            admin,
        }
    }

    fn get(&self, path: &str) -> String {
        ureq::get(&format!("http://{}{path}", self.admin))
            .timeout(Duration::from_secs(10))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    }

    /// SIGTERM; the rest of its output once it exited (successfully).
    fn terminate(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut rest = String::new();
        for l in (&mut self.out).lines() {
            rest.push_str(&l.unwrap());
            rest.push('\n');
        }
        assert!(self.child.wait().unwrap().success(), "exit 0: {rest}");
        rest
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample `name` (without labels) in a Prometheus text exposition.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
}

#[test]
fn metrics_move_and_status_shows_the_live_permission() {
    let config = temp_file(
        "mn.toml",
        "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\npool_mib = 8\nmax_lease_ms = 60000\n\
         shutdown_grace_ms = 5000\n[limits]\nidle_timeout_ms = 120000\n",
    );
    let daemon = Daemon::start(&config);
    let before = daemon.get("/metrics");
    assert_eq!(sample(&before, "patronus_live_permissions"), 0.0);
    let grants0 = sample(&before, "patronus_grants_total");

    let ctx = TcpNode::open(SoftConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let mut c = Client::<SoftProvider>::connect(
        &ctx,
        &SoftAddress::Tcp(daemon.listen),
        ClientConfig::default(),
    )
    .unwrap();
    let p = c
        .allocate(4096, Duration::from_secs(30), Mode::Exclusive)
        .unwrap();
    c.write(&p, 0, b"watched").unwrap();

    let during = daemon.get("/metrics");
    assert!(sample(&during, "patronus_grants_total") > grants0);
    assert_eq!(sample(&during, "patronus_live_permissions"), 1.0);
    assert!(sample(&during, "patronus_rpc_service_seconds_count") >= 1.0);
    assert!(during.contains("patronus_mw_binds_total"));

    let table = Command::new(EXE)
        .args(["status", &daemon.admin.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{text}");
    let addr = format!("{:#x}", p.addr());
    assert!(
        text.contains(&addr),
        "the permission's address is listed:\n{text}"
    );
    assert!(
        text.contains("exclusive") && text.contains("1 live"),
        "{text}"
    );
    assert!(text.contains("RTS"), "the QPs' states are shown:\n{text}");

    let json = Command::new(EXE)
        .args(["status", &daemon.admin.to_string(), "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["node"]["live_permissions"], 1);
    assert_eq!(v["permissions"][0]["addr"], addr.as_str());
    assert_eq!(v["permissions"][0]["mode"], "exclusive");
    let rkey = u64::from(p.rkey().0);
    let rkey_text = rkey.to_string();
    assert!(
        v["permissions"][0]
            .as_object()
            .unwrap()
            .values()
            .all(|f| f.as_u64() != Some(rkey) && f.as_str() != Some(rkey_text.as_str())),
        "no rkey in the status"
    );

    c.revoke(p).unwrap();
    let after = daemon.get("/metrics");
    assert_eq!(sample(&after, "patronus_live_permissions"), 0.0);
    assert!(sample(&after, "patronus_revokes_total") >= 1.0);
    drop(c);
    let report = daemon.terminate();
    // The client disconnected in order: a closed session, not a QP error.
    assert!(report.contains("ended 1 closed, 0 broken"), "{report}");
    assert!(report.contains("SIGTERM: draining"), "{report}");
    assert!(report.contains("shutdown: every lease ended"), "{report}");
}

/// Runs `patronus serve` with `args`; its exit status and stderr.
fn serve_fails(args: &[&str]) -> String {
    let out = Command::new(EXE)
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} must fail");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_configs_are_one_line_errors_naming_the_problem() {
    let cases = [
        ("unknown.toml", "pool_mb = 8\n", "unknown field `pool_mb`"),
        ("negative.toml", "pool_mib = -8\n", "key `pool_mib`"),
        (
            "lease.toml",
            "max_lease_ms = 100\nmin_lease_us = 200000\n",
            "min_lease_us: 200000 µs is above max_lease_ms (100 ms)",
        ),
        ("broken.toml", "[limits\n", "line 1"),
    ];
    for (name, text, expect) in cases {
        let path = temp_file(name, text);
        let err = serve_fails(&["--config", path.to_str().unwrap()]);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(err.contains(expect) && err.contains(name), "{name}: {err}");
    }
    let err = serve_fails(&["--config", "/nonexistent/patronus/mn.toml"]);
    assert!(
        err.contains("/nonexistent/patronus/mn.toml") && err.contains("cannot read"),
        "{err}"
    );
    // A flag is checked as the file's setting is.
    let err = serve_fails(&["--pool-mib", "0"]);
    assert!(err.contains("pool_mib"), "{err}");
}

#[test]
fn the_printed_default_config_starts_a_node() {
    let out = Command::new(EXE)
        .args(["serve", "--print-default-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Free ports instead of the documented ones (tests run side by side).
    let text = text
        .replace("127.0.0.1:7471", "127.0.0.1:0")
        .replace("127.0.0.1:9471", "127.0.0.1:0");
    let daemon = Daemon::start(&temp_file("default.toml", &text));
    assert!(daemon.get("/healthz").contains("ok"));
    let report = daemon.terminate();
    assert!(report.contains("shutdown: every lease ended"), "{report}");
}
