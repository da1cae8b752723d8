//! Round-trip latency of a 64-byte READ over the TCP transport, against a busy-polling TCP
//! ping-pong of the same size on the same machine. A measurement, not a check: run with
//!
//! ```sh
//! cargo test --release -p rnic --test tcp_latency -- --ignored --nocapture
//! ```
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::*;
use rnic::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use util::*;

const WARMUP: usize = 2_000;
const ROUNDS: usize = 20_000;
const SIZE: usize = 64;

/// Reads exactly `buf.len()` bytes from a non-blocking socket, spinning.
fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// Mean round trip of a busy-polling 64-byte TCP ping-pong over loopback, in µs.
fn tcp_ping_pong_us() -> f64 {
    let l = TcpListener::bind(loopback()).unwrap();
    let addr = l.local_addr().unwrap();
    let echo = std::thread::Builder::new()
        .name("pong".into())
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
            let mut buf = [0u8; SIZE];
            while spin_read(&mut s, &mut buf) {
                if s.write_all(&buf).is_err() {
                    return;
                }
            }
        })
        .unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut buf = [7u8; SIZE];
    let clock = RealClock::new();
    let mut start = clock.now();
    for i in 0..WARMUP + ROUNDS {
        if i == WARMUP {
            start = clock.now();
        }
        s.write_all(&buf).unwrap();
        assert!(spin_read(&mut s, &mut buf));
    }
    let us = clock.now().since(start).as_secs_f64() * 1e6 / ROUNDS as f64;
    drop(s);
    echo.join().unwrap();
    us
}

/// Mean round trip of a signalled 64-byte READ over the TCP transport, in µs, with the given
/// engine spin budgets of the memory node and the client, and the MN engine CPU time spent.
fn tcp_read_us(mn_spin: u32, cn_spin: u32) -> (f64, std::time::Duration) {
    let s = Server::with(
        SoftConfig::default(),
        TcpOptions {
            spin_polls: mn_spin,
            ..TcpOptions::default()
        },
    );
    let c = Client::with_options(
        AccessFlags::empty(),
        TcpOptions {
            spin_polls: cn_spin,
            ..TcpOptions::default()
        },
    );
    c.qp.connect(&s.addr, b"").unwrap();
    let wr = [SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Read {
            local: c.sge(0, SIZE as u32),
            remote_addr: s.buf.addr(),
            rkey: s.mr.rkey(),
        },
    }];
    let mut wc = [empty_wc(); 4];
    let clock = RealClock::new();
    let mut start = clock.now();
    let mut cpu0 = std::time::Duration::ZERO;
    for i in 0..WARMUP + ROUNDS {
        if i == WARMUP {
            start = clock.now();
            cpu0 = engine_cpu_time(&s.ctx).unwrap();
        }
        c.qp.post_send(&wr).unwrap();
        loop {
            let n = c.cq.poll(&mut wc);
            if n > 0 {
                assert_eq!(wc[0].status, WcStatus::Success);
                break;
            }
            std::hint::spin_loop();
        }
    }
    let us = clock.now().since(start).as_secs_f64() * 1e6 / ROUNDS as f64;
    let cpu = engine_cpu_time(&s.ctx).unwrap().saturating_sub(cpu0);
    (us, cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement; run explicitly with --ignored --nocapture"]
fn tcp_read_latency_vs_ping_pong() {
    let spin = TcpOptions::default().spin_polls;
    let configs = [
        ("MN spins, CN spins (defaults)", spin, spin),
        ("MN spins, CN engine parks", spin, 0),
        ("no engine spins", 0, 0),
    ];
    let mut pp = Vec::new();
    let mut reads: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut cpu = Vec::new();
    for _ in 0..3 {
        pp.push(tcp_ping_pong_us());
        for (i, (_, mn, cn)) in configs.iter().enumerate() {
            let (us, c) = tcp_read_us(*mn, *cn);
            reads[i].push(us);
            if i == 0 {
                cpu.push(c.as_secs_f64() * 1e6 / ROUNDS as f64);
            }
        }
    }
    let pp = median(pp);
    println!("64 B busy-polling TCP ping-pong RTT: {pp:.2} us (median of 3 x {ROUNDS})");
    for ((name, _, _), r) in configs.iter().zip(reads) {
        let r = median(r);
        println!("64 B READ, {name:<30} {r:.2} us ({:.2}x)", r / pp);
    }
    println!(
        "MN engine CPU per READ (defaults): {:.2} us (a spinning engine is busy all the time)",
        median(cpu)
    );
}
