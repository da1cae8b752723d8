//! Dropping a TCP device stops its engine threads. Alone in its test binary so that counting
//! the process's threads is not disturbed by other tests.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::*;
use rnic::*;
use util::*;

/// Engine threads alive in this process (Linux: thread names under /proc).
fn engine_threads() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.starts_with("rnic-tcp-eng"))
        .count()
}

#[test]
fn tcp_dropping_devices_stops_engine_threads() {
    if std::fs::metadata("/proc/self/task").is_err() {
        return; // not Linux: nothing to count
    }
    assert_eq!(engine_threads(), 0);
    let s = Server::with(
        SoftConfig::default(),
        TcpOptions {
            engine_threads: 3,
            ..TcpOptions::default()
        },
    );
    let c = Client::new();
    // A thread names itself once it runs: wait for all four names to appear.
    wait_until("engines named", || engine_threads() == 4);
    c.qp.connect(&s.addr, b"").unwrap();
    assert_eq!(
        c.read(0, 64, s.buf.addr(), s.mr.rkey()).status,
        WcStatus::Success
    );

    // The client device goes first: its QP's connection closes, the server QP sees it.
    let sqp = s.wait_qps(1);
    drop(c);
    assert_eq!(engine_threads(), 3, "client engine joined on drop");
    wait_until("server QP in ERR", || sqp.state() == QpState::Error);
    drop(sqp);

    // The server: the listener holds the policy (which holds the PD, hence the device), so it
    // goes too; the last reference may then be dropped on an engine thread, which exits by
    // itself.
    drop(s);
    wait_until("server engines exited", || engine_threads() == 0);
}
