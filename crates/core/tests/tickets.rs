//! The ticket API ([`Client::start`] / [`Client::poll`] / [`Client::poll_any`] /
//! [`Client::cancel`]): several acquires in flight at once, each turned into a working
//! permission; a refusal reported as the blocking call reports it; an unrelated request's reply
//! kept for its own ticket, never lost; a spent ticket refused; a cancelled acquire's grant
//! handed back.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError, Op, Perm, Ticket};
use patronus_core::cluster::{EmbeddedCluster, Link};
use patronus_core::manager::NodeConfig;
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use rnic::soft::{SoftConfig, SoftProvider};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(1);

/// Polls `t` until it ends (bounded by wall time: the engines run on their own threads).
#[allow(clippy::disallowed_methods)] // a bound on a wait for another thread's work
fn until_ended(c: &mut Client<SoftProvider>, t: Ticket) -> Result<Perm, ClientError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(done) = c.poll(t)? {
            return Ok(done.into_perm().expect("an acquire ends with a permission"));
        }
        assert!(Instant::now() < deadline, "no reply to the acquire");
        std::hint::spin_loop();
    }
}

fn acquire(addr: u64) -> Op<'static> {
    Op::Acquire {
        addr,
        size: 64,
        lease: LEASE,
        access: Access::Read,
        mode: Mode::Shared,
        wait: true,
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
    let pending: Vec<Ticket> = objects
        .iter()
        .map(|o| b.start(acquire(o.addr())).unwrap())
        .collect();
    let refused = b.start(acquire(gone_addr)).unwrap();
    let other = b
        .start(Op::Request(Request::Allocate {
            size: 64,
            lease_us: 1_000_000,
            mode: Mode::Shared,
        }))
        .unwrap();
    // Polled in reverse: replies that come first are kept for their own poll.
    for (i, &t) in pending.iter().enumerate().rev() {
        let perm = until_ended(b, t).unwrap();
        assert_eq!(perm.addr(), objects[i].addr());
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
        matches!(until_ended(b, refused), Err(ClientError::NotFound)),
        "a freed object's acquire is refused as the blocking call is"
    );
    assert!(
        matches!(b.poll(refused), Err(ClientError::InvalidArgument(_))),
        "an ended ticket is spent"
    );
    // The unrelated reply was kept for its ticket, not lost: the only one left.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (t, reply) = loop {
        if let Some((t, r)) = b.poll_any() {
            break (t, r.unwrap().into_reply().unwrap());
        }
        assert!(Instant::now() < deadline);
    };
    assert_eq!(t, other, "only the unrelated request's reply is left");
    assert!(matches!(reply, Reply::Granted(_)), "{reply:?}");

    // A cancelled acquire's outcome never shows, and its grant is handed back.
    let before = b.status().rpcs();
    let dropped = b.start(acquire(objects[0].addr())).unwrap();
    b.cancel(dropped);
    let next = b.start(acquire(objects[1].addr())).unwrap();
    let perm = until_ended(b, next).unwrap();
    assert_eq!(perm.addr(), objects[1].addr());
    while b.status().rpcs() < before + 3 {
        // The cancelled grant's hand-back (a revoke) goes out when its reply is filed.
        assert!(
            Instant::now() < deadline,
            "the cancelled grant was not handed back"
        );
        b.wait_any(Duration::from_millis(1)).unwrap();
    }
    assert!(b.poll_any().is_none(), "the cancelled outcome never shows");
    assert!(matches!(
        b.poll(dropped),
        Err(ClientError::InvalidArgument(_))
    ));
}

#[test]
fn several_in_flight_inproc() {
    several_in_flight(Link::InProc);
}

#[test]
fn several_in_flight_tcp() {
    several_in_flight(Link::Tcp);
}
