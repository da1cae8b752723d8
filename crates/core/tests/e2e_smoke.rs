#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns
mod support;

use patronus_core::client::{ClientConfig, ClientError, Op};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::SoftConfig;
use std::time::Duration;

fn lifecycle(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    // A conflicting acquire waits 10 ms (real time) for the holder, then gives up.
    let client = ClientConfig {
        acquire_wait: Duration::from_millis(10),
        ..ClientConfig::default()
    };
    let mut c = EmbeddedCluster::start(t, SoftConfig::default(), node, client, 2).unwrap();
    let (a, rest) = c.clients.split_at_mut(1);
    let a = &mut a[0];
    let b = &mut rest[0];
    let p = a
        .allocate(100, Duration::from_secs(1), Mode::Exclusive)
        .unwrap();
    assert!(p.contiguous());
    a.write(&p, 0, b"hello patronus").unwrap();
    let mut buf = [0u8; 14];
    a.read(&p, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello patronus");
    assert_eq!(a.faa(&p, 16, 5).unwrap(), 0);
    assert_eq!(a.cas(&p, 16, 5, 9).unwrap(), 5);
    a.extend(&p, Duration::from_millis(1)).unwrap();
    // B cannot get an exclusive conflicting permission immediately.
    let e = b
        .acquire(
            p.addr(),
            14,
            Duration::from_millis(1),
            Access::Read,
            Mode::Shared,
        )
        .unwrap_err();
    assert!(matches!(e, ClientError::ConflictTimeout), "{e:?}");
    let addr = p.addr();
    let old_rkey = p.rkey();
    a.revoke(p).unwrap();
    let q = b
        .acquire(addr, 14, Duration::from_secs(1), Access::Read, Mode::Shared)
        .unwrap();
    assert_ne!(q.rkey(), old_rkey);
    let mut buf2 = [0u8; 14];
    b.read(&q, 0, &mut buf2).unwrap();
    assert_eq!(&buf2, b"hello patronus");
    // read-only: write rejected by the NIC, memory unchanged, QP fault hidden by a spare.
    let e = b.write(&q, 0, b"X").unwrap_err();
    assert!(matches!(e, ClientError::Denied(_)), "{e:?}");
    b.read(&q, 0, &mut buf2).unwrap();
    assert_eq!(&buf2, b"hello patronus");
    assert_eq!(b.status().qps().switches(), 1);
    b.revoke(q).unwrap();
}

#[test]
fn inproc_lifecycle() {
    lifecycle(Link::InProc);
}

#[test]
fn tcp_lifecycle() {
    lifecycle(Link::Tcp);
}

/// Request ids make retries idempotent: a retried (or replayed) request gets the reply the
/// original got, and changes nothing more.
fn retries_are_idempotent(t: Link) {
    use patronus_core::proto::messages::{Reply, Request};
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    let mut c =
        EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 1).unwrap();
    let a = &mut c.clients[0];
    let alloc = Request::Allocate {
        size: 64,
        lease_us: 1_000_000,
        mode: Mode::Exclusive,
    };
    let t = a.start(Op::Request(alloc)).unwrap();
    let first = a.wait(t).unwrap().into_reply().unwrap();
    let Reply::Granted(g) = first else {
        panic!("{first:?}")
    };
    assert_eq!(
        a.control().replay(t.id(), alloc).unwrap(),
        first,
        "same grant, no second allocation"
    );
    assert_eq!(c.node.fresh_stats().counters.granted, 1);
    let a = &mut c.clients[0];
    let revoke = Request::Revoke {
        id: g.id,
        free: true,
    };
    let t = a.start(Op::Request(revoke)).unwrap();
    a.wait(t).unwrap();
    assert_eq!(
        a.control().replay(t.id(), revoke).unwrap(),
        Reply::Revoked,
        "not NotFound"
    );
}

#[test]
fn inproc_retries_are_idempotent() {
    retries_are_idempotent(Link::InProc);
}

#[test]
fn tcp_retries_are_idempotent() {
    retries_are_idempotent(Link::Tcp);
}

/// A device without type-2 windows refuses the type-2 isolation mode at start, with a clear
/// error, instead of failing each client later (or falling back to a weaker isolation).
#[test]
fn type2_isolation_needs_type2_windows() {
    use patronus_core::manager::{Isolation, MemoryNode, NodeError};
    use rnic::soft::{SoftFabric, SoftProvider};
    let mut device = SoftConfig::default();
    device.attr.mw_type2 = false;
    let ctx = SoftFabric::new().open_device(device);
    let node = NodeConfig {
        isolation: Isolation::Type2,
        ..crate::support::node_config()
    };
    match MemoryNode::<SoftProvider>::start(ctx.clone(), node) {
        Err(NodeError::Config(why)) => assert!(why.contains("type-2"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let shared = NodeConfig {
        isolation: Isolation::PdPerClient,
        ..crate::support::node_config()
    };
    assert!(MemoryNode::<SoftProvider>::start(ctx, shared).is_ok());
}

/// Tenant rate limits are enforced by the NIC: a device that cannot (the in-process soft NIC)
/// refuses them at start, instead of dropping them silently; over TCP the node starts.
#[test]
fn tenant_rates_need_a_device_that_enforces_them() {
    use patronus_core::manager::{MemoryNode, NodeError, TenantRate, TenantSecret};
    use rnic::soft::{SoftFabric, SoftProvider, TcpNode};
    let node = || NodeConfig {
        tenants: vec![TenantSecret {
            tenant: 1,
            secret: 1,
        }],
        tenant_rates: vec![TenantRate {
            tenant: 1,
            ops_per_s: Some(1000),
            bytes_per_s: None,
        }],
        ..crate::support::node_config()
    };
    let inproc = SoftFabric::new().open_device(SoftConfig::default());
    match MemoryNode::<SoftProvider>::start(inproc, node()) {
        Err(NodeError::Config(why)) => assert!(why.contains("rate limits"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let tcp = TcpNode::open(SoftConfig::default(), ([127, 0, 0, 1], 0).into()).unwrap();
    assert!(MemoryNode::<SoftProvider>::start(tcp, node()).is_ok());
}

/// Tenant priorities are enforced by the NIC's rate limits and decided on its per-QP served
/// counters: a device without them (the in-process soft NIC) refuses them at start, as do a
/// priority for a tenant that is not configured and a policy without a throttled rate; over
/// TCP the node starts.
#[test]
fn tenant_priorities_need_a_device_that_enforces_them() {
    use patronus_core::manager::{
        MemoryNode, NodeError, Priority, PriorityPolicy, TenantPriority, TenantSecret,
    };
    use rnic::soft::{SoftFabric, SoftProvider, TcpNode};
    let node = |tenant: u32, policy: PriorityPolicy| NodeConfig {
        tenants: vec![TenantSecret {
            tenant: 1,
            secret: 1,
        }],
        tenant_priorities: vec![TenantPriority {
            tenant,
            priority: Priority::Low,
        }],
        priority_policy: policy,
        ..crate::support::node_config()
    };
    let ok = PriorityPolicy::default();
    let inproc = SoftFabric::new().open_device(SoftConfig::default());
    match MemoryNode::<SoftProvider>::start(inproc, node(1, ok)) {
        Err(NodeError::Config(why)) => assert!(why.contains("priorities need"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let tcp = || TcpNode::open(SoftConfig::default(), ([127, 0, 0, 1], 0).into()).unwrap();
    match MemoryNode::<SoftProvider>::start(tcp(), node(2, ok)) {
        Err(NodeError::Config(why)) => assert!(why.contains("not configured"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let unthrottled = PriorityPolicy {
        throttled_ops_per_s: None,
        ..ok
    };
    match MemoryNode::<SoftProvider>::start(tcp(), node(1, unthrottled)) {
        Err(NodeError::Config(why)) => assert!(why.contains("throttled rate"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert!(MemoryNode::<SoftProvider>::start(tcp(), node(1, ok)).is_ok());
}
