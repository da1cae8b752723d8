//! Two processes: this test binary re-runs itself as a memory node (the ignored `mn_child`
//! test, enabled by an environment variable), and the parent connects to it over TCP.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::*;
use rnic::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use util::*;

const CHILD_ENV: &str = "RNIC_TCP_MN_CHILD";

/// The memory-node process: listens, prints its address and rkey, serves until its stdin
/// closes, then reports what its memory holds.
#[test]
#[ignore = "run by tcp_two_processes as a child process"]
fn mn_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let s = Server::new();
    s.buf.write(0, b"hello from the memory node").unwrap();
    println!("MN {} {} {}", s.sock, s.buf.addr(), s.mr.rkey().0);
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest); // until the parent closes our stdin
    let mut got = [0u8; 16];
    s.buf.read(4096, &mut got).unwrap();
    println!("MEM {}", String::from_utf8_lossy(&got));
    let cpu = engine_cpu_time(&s.ctx).unwrap();
    println!("CPU {}", cpu.as_nanos());
    std::io::stdout().flush().unwrap();
}

#[test]
fn tcp_two_processes() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "mn_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let (addr, base, rkey) = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        // libtest may print "test mn_child ... " on the same line first.
        if let Some(at) = line.find("MN ") {
            let rest = line[at + 3..].trim();
            let parts: Vec<&str> = rest.split(' ').collect();
            break (
                parts[0].parse::<std::net::SocketAddr>().unwrap(),
                parts[1].parse::<u64>().unwrap(),
                MemoryKey(parts[2].parse::<u32>().unwrap()),
            );
        }
    };

    let c = Client::new();
    c.qp.connect(&SoftAddress::Tcp(addr), b"from another process")
        .unwrap();
    let wc = c.read(0, 26, base, rkey);
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 26];
    c.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"hello from the memory node");
    c.buf.write(100, b"written remotely").unwrap();
    let wc = c.run(
        2,
        SendOp::Write {
            local: c.sge(100, 16),
            remote_addr: base + 4096,
            rkey,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    c.qp.reset().unwrap();

    drop(child.stdin.take()); // the child finishes
    let mut mem = None;
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(at) = line.find("MEM ") {
            mem = Some(line[at + 4..].trim_end().to_string());
        }
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(mem.as_deref(), Some("written remotely"));
}
