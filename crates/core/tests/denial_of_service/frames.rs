//! A TCP peer of the memory node that declares a huge frame is cut off before the
//! node buffers it (the length is checked against the largest frame first), and the honest
//! client is not disturbed. (The transport's own tests, `rnic/tests/tcp_hostile.rs`, cover
//! the frame limits before and after the handshake in detail.)

use super::*;
use patronus_core::client::ClientConfig;
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use rnic::soft::{SoftAddress, TcpNode};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

/// Bytes the hostile peer sends at most after its header (the node must close long before).
const FLOOD: usize = 8 << 20;

fn huge_frame(iso: Isolation) {
    let mut b = bed(Link::Tcp, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let SoftAddress::Tcp(addr) = b.cluster.node.address().clone() else {
        panic!("a TCP cluster's node listens on TCP");
    };
    let errors = |b: &Bed| TcpNode::stats(&b.cluster.node_ctx).unwrap().protocol_errors;
    let before = errors(&b);
    for declared in [1u32 << 30, u32::MAX] {
        let mut sock = TcpStream::connect(addr).unwrap();
        // A failure guard only: the node closes the connection long before this.
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut header = declared.to_be_bytes().to_vec();
        header.extend_from_slice(&[1, 2, 0, 0]);
        let garbage = vec![0xa5u8; 64 << 10];
        let mut sent = sock.write_all(&header).map(|()| 0);
        while let Ok(n) = sent
            && n < FLOOD
        {
            sent = sock.write_all(&garbage).map(|()| n + garbage.len());
        }
        // The node closed: reads end (after whatever refusal it sent).
        let mut sink = Vec::new();
        let _ = sock.read_to_end(&mut sink);
        assert!(
            sink.len() < 4096,
            "the node answered with {} bytes",
            sink.len()
        );
        honest_round(&mut b);
    }
    assert!(
        errors(&b) >= before + 2,
        "each hostile connection was a protocol error"
    );
    wait_for(&b, "the node settled", |s| s.held.pending_connections == 0);
    honest_round(&mut b);
    wait_back_to(&b, start, 0);
}

#[test]
fn tcp_shared_pd_huge_frame() {
    huge_frame(Isolation::SharedPd);
}

#[test]
fn tcp_pd_per_client_huge_frame() {
    huge_frame(Isolation::PdPerClient);
}

#[test]
fn tcp_type2_huge_frame() {
    huge_frame(Isolation::Type2);
}
