//! A memory node in one process, a client in another, over TCP; the node runs on when its
//! stdin closes and stops gracefully on SIGTERM.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// Sends SIGTERM to process `pid`.
fn terminate(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
}

#[test]
fn memory_node_and_client_in_separate_processes() {
    let exe = env!("CARGO_BIN_EXE_patronus");
    let mut server = Command::new(exe)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "",
            "--pool-mib",
            "8",
            "--tenant",
            "7:0x5ec2e7",
            // Limits from flags (docs/threat-model.md lists them).
            "--idle-timeout-ms",
            "60000",
            "--control-credits",
            "32",
            "--quota-memory-mib",
            "4",
            "--sessions-per-tenant",
            "2",
            "--fault-burst",
            "2048",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut out = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("server prints its address");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .expect("`listening <addr>`")
        .to_string();

    // A client without the tenant's secret is refused and changes nothing.
    let intruder = Command::new(exe)
        .args(["probe", "--connect", &addr, "--tenant", "7:0x1"])
        .output()
        .expect("run probe");
    assert!(!intruder.status.success(), "a wrong secret must be refused");
    let err = String::from_utf8_lossy(&intruder.stderr);
    assert!(err.contains("not authenticated"), "{err}");

    let probe = Command::new(exe)
        .args(["probe", "--connect", &addr, "--tenant", "7:0x5ec2e7"])
        .output()
        .expect("run probe");
    let stdout = String::from_utf8_lossy(&probe.stdout);
    assert!(
        probe.status.success(),
        "probe failed: {stdout} {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    assert!(stdout.contains("probe ok: across processes"), "{stdout}");

    // Closing stdin does not stop the daemon (systemd and CI run it without one)...
    let mut stdin = server.stdin.take().expect("stdin");
    stdin.flush().expect("flush");
    drop(stdin);
    let again = Command::new(exe)
        .args(["probe", "--connect", &addr, "--tenant", "7:0x5ec2e7"])
        .output()
        .expect("run probe");
    assert!(again.status.success(), "still serving after stdin closed");
    // ...SIGTERM does: it drains and reports what it served.
    terminate(server.id());
    let mut rest = String::new();
    for l in out.lines() {
        rest.push_str(&l.expect("line"));
        rest.push('\n');
    }
    assert!(server.wait().expect("server exits").success());
    assert!(rest.contains("SIGTERM: draining"), "{rest}");
    assert!(rest.contains("shutdown: every lease ended"), "{rest}");
    assert!(rest.contains("served: granted 4 ended 4"), "{rest}");
    // Each probe freed the object it made: nothing is left in the pool.
    assert!(rest.contains("pool: 0 bytes in use"), "{rest}");
    // Both probes' sessions ended when their processes closed their connections (the
    // intruder's never authenticated: it is closed too, at once or by the hello timeout).
    assert!(rest.contains("sessions: 0 connected now"), "{rest}");
}

/// Quotas that add up to more than the node has are refused with the reason.
#[test]
fn overcommitted_quotas_are_refused() {
    let exe = env!("CARGO_BIN_EXE_patronus");
    let out = Command::new(exe)
        .args([
            "serve",
            "--pool-mib",
            "8",
            "--tenant",
            "1:0x11",
            "--tenant",
            "2:0x22",
            "--quota-memory-mib",
            "6",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("memory quotas add up to more than the pool"),
        "{err}"
    );
}
