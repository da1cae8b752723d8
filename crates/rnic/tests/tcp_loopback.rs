//! A QP that connects to a listener of its own TCP device is served inside the device (an
//! inline link, as an RNIC serves loopback without the wire): no socket is opened, and the
//! verbs behave as on any connection — including a window's protection.
#![allow(clippy::unwrap_used)]

use rnic::endpoints::{OpenResponder, Requester, wait_completions};
use rnic::soft::{SoftConfig, SoftProvider, TcpNode};
use rnic::{AccessFlags, Context, MemoryRegion, ProtectionDomain, QueuePair, RealClock, WcStatus};
use std::time::Duration;

#[test]
fn a_connection_to_the_devices_own_listener_opens_no_socket() {
    let ctx = TcpNode::open(SoftConfig::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let node = OpenResponder::<SoftProvider>::new(ctx.clone(), 64, 4).unwrap();
    let buf = ctx.alloc_buffer(64).unwrap();
    buf.write(0, b"loopback").unwrap();
    let mr = node
        .pd
        .reg_mr(
            &buf,
            0,
            64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let req = Requester::<SoftProvider>::connect(&ctx, &node.pd, node.address(), b"me").unwrap();
    assert!(node.last_accepted().is_some(), "the policy accepted the QP");
    let read = |rkey| req.read_wr(1, 8, buf.addr(), rkey);
    req.qp.post_send(&[read(mr.rkey())]).unwrap();
    let clock = RealClock::new();
    wait_completions::<SoftProvider>(&req.cq, 1, &clock, Duration::from_secs(5)).unwrap();
    let mut got = [0u8; 8];
    req.buf.read(0, &mut got).unwrap();
    assert_eq!(&got, b"loopback");
    // A forged key is refused as on the wire: the QP breaks.
    req.qp.post_send(&[read(mr.rkey().incremented())]).unwrap();
    let err = wait_completions::<SoftProvider>(&req.cq, 1, &clock, Duration::from_secs(5));
    assert!(
        matches!(
            err,
            Err(rnic::endpoints::EndpointError::Failed {
                status: WcStatus::RemoteAccessError,
                ..
            })
        ),
        "{err:?}"
    );
    let stats = TcpNode::stats(&ctx).unwrap();
    assert_eq!((stats.accepted, stats.connected), (0, 0), "{stats:?}");
}
