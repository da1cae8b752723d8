//! What a hostile TCP peer costs the node's process in memory, measured as resident memory
//! (a test binary of its own, so that no other test's allocations run beside it).
//!
//! A frame is judged from its header before it is buffered, and a connection buffers at most
//! the largest message legal on it plus 64 KiB. So: peers that declare frames far beyond any
//! legal message and stream garbage after them leave nothing behind (before this, each one's
//! garbage was buffered as it arrived: 96 MiB for one connection that sent 96 MiB of a declared
//! 512 MiB); peers that start a legal large WRITE and stall hold at most that WRITE each.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::TcpNode;
use rnic::soft::wire::RequestOp;
use rnic::*;
use util::*;

/// Hostile connections of each kind.
const CONNECTIONS: u64 = 24;
/// Garbage each huge-frame peer streams after its header, at most.
const GARBAGE: usize = 4 << 20;
/// Slack per connection: the connection's own state, the engine's buffers, the allocator.
const SLACK: u64 = 1 << 20;

/// Resident memory of this process, bytes (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Streams `bytes` after `header` until done or the node closes the connection.
fn stream(raw: &mut Raw, header: &[u8], bytes: usize) {
    let chunk = vec![0xa5u8; 64 << 10];
    let mut sent = raw.send(header).map(|()| 0);
    while let Ok(n) = sent
        && n < bytes
    {
        sent = raw.send(&chunk).map(|()| n + chunk.len());
    }
}

#[test]
fn tcp_memory_per_hostile_connection_is_bounded() {
    let s = Server::new();
    let c = Client::new();
    c.qp.connect(&s.addr, b"").unwrap();
    let round_trip = || {
        let wc = c.read(0, 64, s.buf.addr(), s.mr.rkey());
        assert_eq!(wc.status, WcStatus::Success);
    };
    round_trip();
    let start = rss_bytes();

    // Huge declared frames, before and after the handshake: each connection is closed at its
    // header, and what it streams after is dropped.
    for i in 0..CONNECTIONS {
        let mut raw = Raw::connect(s.sock);
        if i % 2 == 1 {
            raw.handshake(5000 + i as u32, 0);
        }
        let mut header = (1u32 << 30).to_be_bytes().to_vec();
        header.extend_from_slice(&[1, 2, 0, 0]);
        stream(&mut raw, &header, GARBAGE);
        raw.read_until_closed();
    }
    round_trip();
    let huge = rss_bytes().saturating_sub(start);
    println!(
        "huge declared frames: {:.1} KiB per connection ({CONNECTIONS} connections, {} MiB \
         streamed each at most)",
        huge as f64 / CONNECTIONS as f64 / 1024.0,
        GARBAGE >> 20
    );
    assert!(
        huge <= CONNECTIONS * SLACK,
        "{huge} bytes grown for {CONNECTIONS} closed connections"
    );

    // Legal large WRITEs, stalled halfway: each connection holds at most its WRITE.
    let before = rss_bytes();
    let legal = SERVER_BUF as u64;
    let mut stalled = Vec::new();
    for i in 0..CONNECTIONS {
        let mut raw = Raw::connect(s.sock);
        let (sqpn, _) = raw.handshake(6000 + i as u32, 7);
        let write: RequestOp<&[u8]> = RequestOp::Write {
            addr: s.buf.addr(),
            rkey: s.mr.rkey(),
            data: &[],
        };
        let header = large_header(sqpn, Psn::new(7), write, legal as u32);
        stream(&mut raw, &header, SERVER_BUF / 2);
        stalled.push(raw);
    }
    // The node has read every half WRITE once its largest buffer is that big.
    wait_until("the stalled WRITEs buffered", || {
        TcpNode::stats(&s.ctx).unwrap().rx_buffer_high_water >= legal / 2
    });
    round_trip();
    let held = rss_bytes().saturating_sub(before);
    println!(
        "stalled legal WRITEs of {} KiB: {:.1} KiB per connection",
        legal >> 10,
        held as f64 / CONNECTIONS as f64 / 1024.0
    );
    assert!(
        held <= CONNECTIONS * (legal + SLACK),
        "{held} bytes for {CONNECTIONS} stalled WRITEs of {legal} bytes"
    );
    let high_water = TcpNode::stats(&s.ctx).unwrap().rx_buffer_high_water;
    assert!(
        high_water <= legal + 64 * 1024 + 64,
        "a connection buffered {high_water} bytes"
    );
    drop(stalled);
    round_trip();
}
