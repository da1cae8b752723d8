//! The four §7 baseline mechanisms (Unprot, MR, QP, RPC) and the heartbeat poller, on
//! in-process soft devices (and once over TCP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use patronus_bench::baseline::proto::MAX_PAYLOAD;
use patronus_bench::baseline::{
    BaselineClient, BaselineConfig, BaselineError, BaselineNode, BaselineReply, BaselineRequest,
    FailCode, HeartbeatPoller, HeartbeatTarget, Scheme,
};
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftMr, SoftMw, SoftProvider, TcpNode};
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QpTiming,
    QueuePair, SendOp, SendWr, Sge, WcStatus,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

type Node = BaselineNode<SoftProvider>;
type Client = BaselineClient<SoftProvider>;

fn small() -> BaselineConfig {
    BaselineConfig {
        pool_bytes: 1 << 20,
        srq_depth: 64,
        ..BaselineConfig::default()
    }
}

fn cluster() -> (SoftFabric, Node, SoftContext) {
    let fabric = SoftFabric::new();
    let node = Node::start(fabric.open_device(SoftConfig::default()), small()).unwrap();
    let client_dev = fabric.open_device(SoftConfig::default());
    (fabric, node, client_dev)
}

/// Polls `cond` until it holds, for at most `limit` (wall time); returns whether it held.
#[allow(clippy::disallowed_methods)] // a test's patience is wall time
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
    cond()
}

fn is_rejected(r: Result<(), BaselineError>) -> bool {
    matches!(
        r,
        Err(BaselineError::Remote(
            WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError
        ))
    )
}

#[test]
fn unprot_reads_and_writes_through_the_pool_rkey() {
    let (_f, node, dev) = cluster();
    let mut c = Client::connect(&dev, node.address(), Scheme::Unprot).unwrap();
    assert_eq!(c.pool_addr(), node.pool_addr());
    assert_eq!(c.pool_len(), node.pool_len());
    let rkey = c.rkey().expect("unprot clients get the pool rkey");
    let addr = c.pool_addr() + 4096;
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect(); // two staging chunks
    c.write(rkey, addr, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(rkey, addr, &mut back).unwrap();
    assert_eq!(back, data);
    // The RPC path sees the same bytes.
    let mut head = [0u8; 100];
    c.rpc_read(addr, &mut head).unwrap();
    assert_eq!(&head[..], &data[..100]);
}

#[test]
fn mr_registration_gates_one_sided_access() {
    let (_f, node, dev) = cluster();
    let mut c = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    assert_eq!(c.rkey(), None, "MR clients never see the whole-pool rkey");
    let addr = c.pool_addr() + 8192;
    let rkey = c.register_mr(addr, 256).unwrap();
    c.write(rkey, addr + 8, b"registered").unwrap();
    let mut back = [0u8; 10];
    c.read(rkey, addr + 8, &mut back).unwrap();
    assert_eq!(&back, b"registered");
    // Outside the registered range: rejected.
    let mut other = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    let rkey2 = other.register_mr(addr, 64).unwrap();
    assert!(is_rejected(other.read(rkey2, addr + 64, &mut back)));

    c.deregister_mr(rkey).unwrap();
    assert!(is_rejected(c.read(rkey, addr + 8, &mut back)));
    // The QP broke with the access error; a new connection carries on.
    let mut c = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    assert!(matches!(
        c.deregister_mr(rkey),
        Err(BaselineError::Failed(FailCode::UnknownRkey))
    ));
    assert!(matches!(
        c.register_mr(addr, 0),
        Err(BaselineError::Failed(FailCode::OutOfRange))
    ));
    assert!(matches!(
        c.register_mr(c.pool_addr() + c.pool_len() - 8, 16),
        Err(BaselineError::Failed(FailCode::OutOfRange))
    ));
    assert!(matches!(
        c.open_qp(),
        Err(BaselineError::Failed(FailCode::WrongScheme))
    ));

    let s = node.stats();
    assert_eq!(s.mrs_registered, 2);
    // One on request, one with `other`'s broken connection (reaped once its QP is in ERR).
    assert!(eventually(Duration::from_secs(10), || node
        .stats()
        .mrs_deregistered
        == 2));
    assert!(s.requests >= 10, "{s:?}");
    assert!(s.thread_cpu >= s.busy_cpu);
}

#[test]
fn mr_client_cannot_deregister_anothers_region() {
    let (_f, node, dev) = cluster();
    let mut a = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    let mut b = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    let rkey = a.register_mr(a.pool_addr(), 64).unwrap();
    assert!(matches!(
        b.deregister_mr(rkey),
        Err(BaselineError::Failed(FailCode::UnknownRkey))
    ));
    a.write(rkey, a.pool_addr(), b"still mine").unwrap();
}

#[test]
fn qp_flags_gate_one_sided_access() {
    let (_f, node, dev) = cluster();
    let mut closed = Client::connect(&dev, node.address(), Scheme::Qp).unwrap();
    let rkey = closed.rkey().expect("QP clients get the pool rkey");
    let addr = closed.pool_addr() + 64;
    let mut buf = [0u8; 16];
    assert!(is_rejected(closed.read(rkey, addr, &mut buf)));

    let mut c = Client::connect(&dev, node.address(), Scheme::Qp).unwrap();
    c.open_qp().unwrap();
    c.write(rkey, addr, b"open sesame!!!!!").unwrap();
    c.read(rkey, addr, &mut buf).unwrap();
    assert_eq!(&buf, b"open sesame!!!!!");
    c.close_qp().unwrap();
    assert!(is_rejected(c.read(rkey, addr, &mut buf)));

    let s = node.stats();
    assert_eq!(s.qp_flag_changes, 2);
    assert_eq!(s.mrs_registered, 0);
}

#[test]
fn rpc_copies_through_the_server_and_checks_ranges() {
    let (_f, node, dev) = cluster();
    let mut c = Client::connect(&dev, node.address(), Scheme::Rpc).unwrap();
    assert_eq!(c.rkey(), None);
    let addr = c.pool_addr() + 1000;
    let data: Vec<u8> = (0..150u32).map(|i| (i * 7) as u8).collect();
    c.rpc_write(addr, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    c.rpc_read(addr, &mut back).unwrap();
    assert_eq!(back, data);

    let end = c.pool_addr() + c.pool_len();
    let mut b = [0u8; 8];
    assert!(matches!(
        c.rpc_read(end - 4, &mut b),
        Err(BaselineError::Failed(FailCode::OutOfRange))
    ));
    assert!(matches!(
        c.rpc_write(c.pool_addr() - 8, &b),
        Err(BaselineError::Failed(FailCode::OutOfRange))
    ));
    assert!(matches!(
        c.rpc_read(u64::MAX - 2, &mut b),
        Err(BaselineError::Failed(FailCode::OutOfRange))
    ));
    assert_eq!(
        c.call(BaselineRequest::Read {
            addr,
            len: MAX_PAYLOAD as u32 + 1
        })
        .unwrap(),
        BaselineReply::Failed(FailCode::TooLong)
    );
    assert!(matches!(
        c.register_mr(addr, 8),
        Err(BaselineError::Failed(FailCode::WrongScheme))
    ));
    // No one-sided access at all, even with the right rkey.
    let mut unprot = Client::connect(&dev, node.address(), Scheme::Unprot).unwrap();
    let rkey = unprot.rkey().unwrap();
    assert!(is_rejected(c.read(rkey, addr, &mut b)));
    unprot.read(rkey, addr, &mut b).unwrap();
    assert_eq!(&b, &data[..8]);

    let s = node.stats();
    assert_eq!(s.rpc_bytes_copied, 2 * 150);
}

#[test]
fn pipelined_requests_are_answered_by_id() {
    let (_f, node, dev) = cluster();
    let mut c = Client::connect(&dev, node.address(), Scheme::Rpc).unwrap();
    let base = c.pool_addr();
    let mut ids = Vec::new();
    for i in 0..16u64 {
        let req = BaselineRequest::Write {
            addr: base + 64 * i,
            bytes: vec![i as u8],
        };
        ids.push(c.submit(req).unwrap());
    }
    assert!(matches!(
        c.submit(BaselineRequest::Hello),
        Err(BaselineError::InvalidUse(_))
    ));
    let mut answered = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        while let Some((id, reply)) = c.poll().unwrap() {
            assert_eq!(reply, BaselineReply::Done);
            answered.push(id);
        }
        answered.len() == ids.len()
    }));
    answered.sort_unstable();
    assert_eq!(answered, ids);
    let mut b = [0u8; 1];
    c.rpc_read(base + 64 * 5, &mut b).unwrap();
    assert_eq!(b[0], 5);
}

/// Sends raw bytes over a QP connected by hand, as a misbehaving client would.
fn send_raw(dev: &SoftContext, node: &Node, scheme_data: &[u8], payloads: &[&[u8]]) {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd
        .create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 4,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    let buf = dev.alloc_buffer(4096).unwrap();
    let mr = pd
        .reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    if qp.connect(node.address(), scheme_data).is_err() {
        return; // refused: fine, nothing reached the server thread
    }
    for (i, p) in payloads.iter().enumerate() {
        buf.write(0, p).unwrap();
        let wr: SendWr<'_, SoftMw, SoftMr> = SendWr {
            wr_id: i as u64,
            signaled: true,
            op: SendOp::Send {
                local: (!p.is_empty()).then(|| Sge {
                    addr: buf.addr(),
                    length: p.len() as u32,
                    lkey: mr.lkey(),
                }),
            },
        };
        let _ = qp.post_send(std::slice::from_ref(&wr));
        // Wait for this SEND to land (or fail) before the next one.
        let mut wcs = [rnic::WorkCompletion::default(); 4];
        assert!(eventually(Duration::from_secs(10), || cq.poll(&mut wcs) > 0));
    }
}

#[test]
fn malformed_messages_do_not_kill_the_server() {
    let (_f, node, dev) = cluster();
    let mut garbage = [0xA5u8; 128];
    garbage[0] = 0xEE; // unknown kind
    let short = [0x02u8; 10];
    let too_long = [0x01u8; 1000];
    let mut failed_code = [0u8; 128];
    failed_code[0] = 0x06; // a Read with absurd fields
    failed_code[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    failed_code[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut oversized = [0u8; 64];
    oversized[0] = 0x07; // a Write claiming more than a page behind its 64 bytes
    oversized[24..28].copy_from_slice(&5000u32.to_le_bytes());
    send_raw(
        &dev,
        &node,
        &Scheme::Rpc.private_data(),
        &[&garbage, &short, &[], &failed_code, &too_long, &oversized],
    );
    send_raw(&dev, &node, b"not a scheme", &[&garbage]);
    send_raw(&dev, &node, &[b'P', b'B', b'L', b'1', 9], &[&garbage]);
    let mut c = Client::connect(&dev, node.address(), Scheme::Rpc).unwrap();
    c.rpc_write(c.pool_addr(), b"alive").unwrap();
    let mut b = [0u8; 5];
    c.rpc_read(c.pool_addr(), &mut b).unwrap();
    assert_eq!(&b, b"alive");
}

#[test]
fn works_over_tcp() {
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let node = Node::start(
        TcpNode::open(SoftConfig::default(), local).unwrap(),
        small(),
    )
    .unwrap();
    let dev = TcpNode::open(SoftConfig::default(), local).unwrap();
    let mut u = Client::connect(&dev, node.address(), Scheme::Unprot).unwrap();
    let rkey = u.rkey().unwrap();
    u.write(rkey, u.pool_addr(), b"over tcp").unwrap();
    let mut r = Client::connect(&dev, node.address(), Scheme::Rpc).unwrap();
    let mut b = [0u8; 8];
    r.rpc_read(r.pool_addr(), &mut b).unwrap();
    assert_eq!(&b, b"over tcp");
    let mut m = Client::connect(&dev, node.address(), Scheme::Mr).unwrap();
    let k = m.register_mr(m.pool_addr(), 8).unwrap();
    m.read(k, m.pool_addr(), &mut b).unwrap();
    m.deregister_mr(k).unwrap();
    assert!(is_rejected(m.read(k, m.pool_addr(), &mut b)));
    node.shutdown();
}

#[test]
fn heartbeat_poller_suspects_only_a_stalled_target() {
    let fabric = SoftFabric::new();
    let mn = fabric.open_device(SoftConfig::default());
    let beating =
        HeartbeatTarget::<SoftProvider>::listen(&fabric.open_device(SoftConfig::default()))
            .unwrap();
    let stalling =
        HeartbeatTarget::<SoftProvider>::listen(&fabric.open_device(SoftConfig::default()))
            .unwrap();
    let suspects = Arc::new(AtomicU32::new(u32::MAX));
    let seen = suspects.clone();
    let poller = HeartbeatPoller::<SoftProvider>::start_with_callback(
        mn,
        vec![(1, beating.descriptor()), (2, stalling.descriptor())],
        Duration::from_millis(2),
        Duration::from_secs(1),
        Some(Box::new(move |id| seen.store(id, Ordering::SeqCst))),
    )
    .unwrap();
    // Both beat until the poller has read them several times.
    assert!(eventually(Duration::from_secs(20), || {
        beating.beat();
        stalling.beat();
        poller.stats().reads >= 20
    }));
    assert!(poller.suspected().is_empty(), "{:?}", poller.suspected());
    // Target 2 hangs; target 1 keeps beating until 2 is suspected.
    assert!(eventually(Duration::from_secs(30), || {
        beating.beat();
        poller.suspected() == vec![2]
    }));
    assert_eq!(suspects.load(Ordering::SeqCst), 2);
    // Target 1 still is not suspected after more than one timeout of beating.
    let reads = poller.stats().reads;
    assert!(eventually(Duration::from_secs(30), || {
        beating.beat();
        poller.stats().reads >= reads + 1200
    }));
    assert_eq!(poller.suspected(), vec![2]);
    // Resuming clears the suspicion.
    assert!(eventually(Duration::from_secs(30), || {
        stalling.beat();
        beating.beat();
        poller.suspected().is_empty()
    }));
    let s = poller.stats();
    assert_eq!(s.suspected, 1);
    assert!(s.cpu > Duration::ZERO);
    poller.stop();
}

#[test]
fn heartbeat_poller_suspects_an_unreachable_target() {
    let fabric = SoftFabric::new();
    let target =
        HeartbeatTarget::<SoftProvider>::listen(&fabric.open_device(SoftConfig::default()))
            .unwrap();
    let mut d = target.descriptor();
    d.rkey = rnic::MemoryKey(d.rkey.0 ^ 0xff); // a READ with a bad rkey fails at once
    let poller = HeartbeatPoller::<SoftProvider>::start(
        fabric.open_device(SoftConfig::default()),
        vec![(7, d)],
        Duration::from_millis(1),
        Duration::from_secs(3600),
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(20), || poller.suspected() == vec![7]));
    assert_eq!(poller.stats().suspected, 1);
}
