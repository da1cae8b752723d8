//! Batches posted without waiting (`Batch::start`, `PostedBatch::poll`/`wait`), on both
//! transports: several clients' batches in flight at once from one thread, each taken whole
//! and in order; a client has one batch in flight at a time (a second, or a blocking batch
//! meanwhile, is refused without being posted, and the first is unharmed); an access the NIC
//! refuses in a posted batch fails alone, the others run (on the lane's next QP), as in a
//! blocking batch; a batch dropped untaken is finished before the client's next.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{ClientConfig, ClientError, OpResult, PostedBatch};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::Mode;
use rnic::soft::SoftConfig;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

fn cluster(t: Link, clients: usize) -> EmbeddedCluster {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    EmbeddedCluster::start(
        t,
        SoftConfig::default(),
        node,
        ClientConfig::default(),
        clients,
    )
    .unwrap()
}

/// Polls every batch once (none blocks), then waits for those not done; their results, in
/// the clients' order.
fn take_all(
    cl: &mut EmbeddedCluster,
    posted: Vec<PostedBatch>,
) -> Vec<Vec<Result<OpResult, ClientError>>> {
    let mut slots: Vec<(PostedBatch, Option<Vec<_>>)> =
        posted.into_iter().map(|b| (b, None)).collect();
    for (i, (b, out)) in slots.iter_mut().enumerate() {
        *out = b.poll(&mut cl.clients[i]);
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, (b, out))| out.unwrap_or_else(|| b.wait(&mut cl.clients[i])))
        .collect()
}

fn several_clients_batches_in_flight_together(t: Link) {
    let mut cl = cluster(t, 3);
    let perms: Vec<_> = (0..3)
        .map(|i| {
            let c = &mut cl.clients[i];
            let p = c.allocate(64, LEASE, Mode::Shared).unwrap();
            c.write(&p, 0, &[i as u8 + 1; 16]).unwrap();
            p
        })
        .collect();
    let posted: Vec<PostedBatch> = (0..3)
        .map(|i| {
            let mut b = cl.clients[i].batch();
            b.read(&perms[i], 0, 16)
                .cas(&perms[i], 16, 0, 7)
                .write(&perms[i], 24, b"posted!!")
                .read(&perms[i], 16, 16);
            b.start()
        })
        .collect();
    let results = take_all(&mut cl, posted);
    for (i, r) in results.into_iter().enumerate() {
        let mut want = 7u64.to_le_bytes().to_vec();
        want.extend_from_slice(b"posted!!");
        assert_eq!(
            r.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [
                OpResult::Read(vec![i as u8 + 1; 16]),
                OpResult::Atomic(0),
                OpResult::Written,
                OpResult::Read(want),
            ],
            "client {i}"
        );
    }
}

fn one_batch_in_flight_per_client(t: Link) {
    let mut cl = cluster(t, 1);
    let c = &mut cl.clients[0];
    let p = c.allocate(64, LEASE, Mode::Shared).unwrap();
    c.write(&p, 0, b"first").unwrap();
    let mut b = c.batch();
    b.read(&p, 0, 5);
    let first = b.start();
    // A second batch, and a blocking one, while the first is in flight: refused, not posted.
    let mut b = c.batch();
    b.write(&p, 0, b"XXXXX");
    let second = b.start();
    assert!(second.is_done(), "refused at once");
    let refused = second.wait(c);
    assert!(matches!(refused[0], Err(ClientError::InvalidArgument(_))));
    let blocking = c.write(&p, 0, b"YYYYY");
    assert!(matches!(blocking, Err(ClientError::InvalidArgument(_))));
    // The first is unharmed; afterwards the client takes batches again.
    assert_eq!(
        first.wait(c).pop().unwrap().unwrap(),
        OpResult::Read(b"first".to_vec())
    );
    c.write(&p, 0, b"later").unwrap();
    let mut b = c.batch();
    b.read(&p, 0, 5);
    assert_eq!(
        b.start().wait(c).pop().unwrap().unwrap(),
        OpResult::Read(b"later".to_vec())
    );
}

fn a_refused_access_fails_alone(t: Link) {
    let mut cl = cluster(t, 1);
    let c = &mut cl.clients[0];
    let p = c.allocate(64, LEASE, Mode::Shared).unwrap();
    let gone = c.allocate(64, LEASE, Mode::Shared).unwrap();
    // A copy of `gone`'s grant, used after the permission was revoked: its rkey is refused.
    let now = c.status().clock().now();
    let stale = c.control().adopt(
        gone.grant(),
        patronus_core::proto::messages::Access::ReadWrite,
        Mode::Shared,
        now,
    );
    c.write(&p, 0, b"kept").unwrap();
    c.revoke(gone).unwrap();
    let mut b = c.batch();
    b.read(&p, 0, 4).read(&stale, 0, 4).write(&p, 8, b"after");
    let posted = b.start();
    let results = take_all(&mut cl, vec![posted]).pop().unwrap();
    assert_eq!(
        results[0].as_ref().unwrap(),
        &OpResult::Read(b"kept".to_vec())
    );
    assert!(
        matches!(results[1], Err(ClientError::Denied(_))),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2].as_ref().unwrap(), &OpResult::Written);
    let c = &mut cl.clients[0];
    let mut buf = [0u8; 5];
    c.read(&p, 8, &mut buf).unwrap();
    assert_eq!(&buf, b"after");
}

fn a_dropped_batch_is_finished_before_the_next(t: Link) {
    let mut cl = cluster(t, 1);
    let c = &mut cl.clients[0];
    let p = c.allocate(64, LEASE, Mode::Shared).unwrap();
    let mut b = c.batch();
    b.write(&p, 0, b"dropped").faa(&p, 8, 5);
    drop(b.start());
    // The next batch runs after the dropped one ended: its WRITE and FAA are there.
    let mut buf = [0u8; 16];
    c.read(&p, 0, &mut buf).unwrap();
    assert_eq!(&buf[..7], b"dropped");
    assert_eq!(u64::from_le_bytes(buf[8..].try_into().unwrap()), 5);
}

patronus_core::both_transports!(
    several_clients_batches_in_flight_together,
    one_batch_in_flight_per_client,
    a_refused_access_fails_alone,
    a_dropped_batch_is_finished_before_the_next,
);
