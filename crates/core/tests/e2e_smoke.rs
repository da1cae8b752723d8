#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns
use patronus_core::client::{ClientConfig, ClientError};
use patronus_core::cluster::{EmbeddedCluster, Transport};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode};
use rnic::soft::SoftConfig;

fn lifecycle(t: Transport) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..NodeConfig::default()
    };
    let mut c =
        EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 2).unwrap();
    let (a, rest) = c.clients.split_at_mut(1);
    let a = &mut a[0];
    let b = &mut rest[0];
    let p = a.allocate(100, 1_000_000, Mode::Exclusive).unwrap();
    assert!(p.contiguous());
    a.write(&p, 0, b"hello patronus").unwrap();
    let mut buf = [0u8; 14];
    a.read(&p, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello patronus");
    assert_eq!(a.faa(&p, 16, 5).unwrap(), 0);
    assert_eq!(a.cas(&p, 16, 5, 9).unwrap(), 5);
    a.extend(&p, 1000).unwrap();
    // B cannot get an exclusive conflicting permission immediately.
    let e = b
        .acquire(p.addr(), 14, 1000, Access::Read, Mode::Shared)
        .unwrap_err();
    assert!(matches!(e, ClientError::ConflictTimeout), "{e:?}");
    let addr = p.addr();
    let old_rkey = p.rkey();
    a.revoke(p).unwrap();
    let q = b
        .acquire(addr, 14, 1_000_000, Access::Read, Mode::Shared)
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
    assert_eq!(b.qp_switches().0, 1);
    b.revoke(q).unwrap();
}

#[test]
fn inproc_lifecycle() {
    lifecycle(Transport::InProc);
}

#[test]
fn tcp_lifecycle() {
    lifecycle(Transport::Tcp);
}
