//! The link wrappers stack on TCP links as on in-process ones: a tracing link records what a
//! TCP connection carries, and a fault wrapper kills a TCP link's traffic deterministically.
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

#[path = "tcp_util.rs"]
mod util;

use rnic::soft::link::faulty::LinkFaults;
use rnic::soft::link::tracing::PacketTrace;
use rnic::soft::wire::{Packet, RequestOp, ResponseKind};
use rnic::soft::*;
use rnic::*;
use util::*;

fn with_links(links: LinkStack) -> TcpOptions {
    TcpOptions {
        links,
        ..TcpOptions::default()
    }
}

#[test]
fn a_tracing_link_records_what_a_tcp_link_carries() {
    let trace = PacketTrace::new();
    let s = Server::with(
        SoftConfig::default(),
        with_links(LinkStack::new().traced(trace.clone())),
    );
    let c = Client::with_options(
        AccessFlags::empty(),
        with_links(LinkStack::new().traced(trace.clone())),
    );
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    assert!(trace.is_empty(), "the handshake is not a packet");

    s.buf.write(64, b"traced!!").unwrap();
    let wc = c.read(0, 8, s.buf.addr() + 64, s.mr.rkey());
    assert_eq!(wc.status, WcStatus::Success);

    // The server recorded its response before transmitting it, hence before the completion.
    let packets = trace.snapshot();
    assert_eq!(packets.len(), 2, "{packets:?}");
    let Packet::Request(req) = &packets[0] else {
        panic!("first packet is not the request: {packets:?}");
    };
    assert_eq!(req.dst_qp, sqp.qp_num());
    assert!(matches!(req.op, RequestOp::Read { len: 8, .. }), "{req:?}");
    let Packet::Response(resp) = &packets[1] else {
        panic!("second packet is not the response: {packets:?}");
    };
    assert_eq!(resp.dst_qp, c.qp.qp_num());
    assert_eq!(resp.psn, req.psn);
    assert!(
        matches!(&resp.kind, ResponseKind::ReadData(d) if d.as_slice() == b"traced!!"),
        "{resp:?}"
    );
}

#[test]
fn a_fault_wrapper_kills_a_tcp_link() {
    let faults = LinkFaults::new();
    let s = Server::new();
    let c = Client::with_options(
        AccessFlags::empty(),
        with_links(LinkStack::new().faulty(faults.clone())),
    );
    c.qp.connect(&s.addr, b"").unwrap();
    let sqp = s.wait_qps(1);
    let wc = c.read(0, 8, s.buf.addr(), s.mr.rkey());
    assert_eq!(wc.status, WcStatus::Success);

    faults.kill();
    // The next request cannot leave: the QP fails it and enters ERR on the posting thread,
    // so its completion is there at the first poll.
    c.qp.post_send(&[SendWr {
        wr_id: 7,
        signaled: true,
        op: SendOp::Read {
            local: c.sge(0, 8),
            remote_addr: s.buf.addr(),
            rkey: s.mr.rkey(),
        },
    }])
    .unwrap();
    let mut wc = [empty_wc(); 4];
    assert_eq!(c.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::RetryExceeded));
    assert_eq!(c.qp.state(), QpState::Error);
    assert_eq!(faults.dropped(), 0);

    // The kill closed the TCP connection: the server's QP sees its link go down.
    wait_until("server QP in ERR", || sqp.state() == QpState::Error);
}

#[test]
fn links_made_after_a_kill_are_dead() {
    let faults = LinkFaults::new();
    faults.kill();
    let s = Server::new();
    let c = Client::with_options(
        AccessFlags::empty(),
        with_links(LinkStack::new().faulty(faults.clone())),
    );
    c.qp.connect(&s.addr, b"").unwrap();
    c.qp.post_send(&[SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Read {
            local: c.sge(0, 8),
            remote_addr: s.buf.addr(),
            rkey: s.mr.rkey(),
        },
    }])
    .unwrap();
    let mut wc = [empty_wc(); 4];
    assert_eq!(c.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::RetryExceeded);
}
