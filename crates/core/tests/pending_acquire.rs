//! `acquire` without waiting ([`Client::start_acquire`] / [`Client::poll_acquire`]): several
//! grants in flight at once, each turned into a working permission; a refusal reported as the
//! blocking call reports it; replies to other pipelined requests parked, never lost; an
//! abandoned acquire's reply dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError, PendingAcquire, Perm};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(1);

/// Polls `p` until it ends (bounded by wall time: the engines run on their own threads).
#[allow(clippy::disallowed_methods)] // a bound on a wait for another thread's work
fn until_ended(c: &mut Client<SoftProvider>, p: &mut PendingAcquire) -> Result<Perm, ClientError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(perm) = c.poll_acquire(p)? {
            return Ok(perm);
        }
        assert!(Instant::now() < deadline, "no reply to the acquire");
        std::hint::spin_loop();
    }
}

#[allow(clippy::disallowed_methods)] // bounds on waits for another thread's work
fn several_in_flight(t: Link) {
    let node = NodeConfig {
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
    };
    let mut c =
        EmbeddedCluster::start(t, SoftConfig::default(), node, ClientConfig::default(), 2).unwrap();
    let (a, rest) = c.clients.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut rest[0]);
    let objects: Vec<Perm> = (0..8u8)
        .map(|i| {
            let p = a.allocate(64, LEASE, Mode::Shared).unwrap();
            a.write(&p, 0, &[i; 8]).unwrap();
            p
        })
        .collect();
    let gone = a.allocate(64, LEASE, Mode::Shared).unwrap();
    let gone_addr = gone.addr();
    a.free(gone).unwrap();

    // Eight acquires in flight, a refused one, and an unrelated pipelined request among them.
    let mut pending: Vec<PendingAcquire> = objects
        .iter()
        .map(|o| {
            b.start_acquire(o.addr(), 64, LEASE, Access::Read, Mode::Shared)
                .unwrap()
        })
        .collect();
    let mut refused = b
        .start_acquire(gone_addr, 64, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    let other = b
        .submit(Request::Allocate {
            size: 64,
            lease_us: 1_000_000,
            mode: Mode::Shared,
        })
        .unwrap();
    // Polled in reverse: replies that come first are parked for their own poll.
    for (i, p) in pending.iter_mut().enumerate().rev() {
        assert_eq!(p.addr(), objects[i].addr());
        let perm = until_ended(b, p).unwrap();
        let mut buf = [0u8; 8];
        b.read(&perm, 0, &mut buf).unwrap();
        assert_eq!(buf, [i as u8; 8], "object {i} through its pipelined grant");
        assert!(matches!(
            b.write(&perm, 0, b"x"),
            Err(ClientError::Denied(_))
        ));
        b.revoke(perm).unwrap();
    }
    assert!(
        matches!(until_ended(b, &mut refused), Err(ClientError::NotFound)),
        "a freed object's acquire is refused as the blocking call is"
    );
    assert!(
        matches!(
            b.poll_acquire(&mut refused),
            Err(ClientError::InvalidArgument(_))
        ),
        "an ended acquire is spent"
    );
    // The unrelated reply was parked, not lost.
    let deadline = Instant::now() + Duration::from_secs(20);
    let reply = loop {
        if let Some((id, r)) = b.poll_reply().unwrap() {
            assert_eq!(id, other, "only the unrelated request's reply is left");
            break r;
        }
        assert!(Instant::now() < deadline);
    };
    assert!(matches!(reply, Reply::Granted(_)), "{reply:?}");

    // An abandoned acquire's reply is dropped: the next reply is the next request's.
    let dropped = b
        .start_acquire(objects[0].addr(), 64, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    b.abandon_acquire(dropped);
    let mut next = b
        .start_acquire(objects[1].addr(), 64, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    let perm = until_ended(b, &mut next).unwrap();
    assert_eq!(perm.addr(), objects[1].addr());
    assert_eq!(
        b.poll_reply().unwrap(),
        None,
        "the abandoned reply never shows"
    );
}

#[test]
fn several_in_flight_inproc() {
    several_in_flight(Link::InProc);
}

#[test]
fn several_in_flight_tcp() {
    several_in_flight(Link::Tcp);
}
