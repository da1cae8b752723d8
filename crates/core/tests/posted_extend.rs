//! CN-collaborated extensions posted without waiting (`Op::Extend` tickets): they keep a lease alive as a blocking extension does, a batch run
//! while one is in flight files its completion instead of dropping it, concurrent ones from the
//! same value extend once, and a refused one fails once and leaves the client working. On both
//! transports and in every isolation mode.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

#[macro_use]
mod support;

use patronus_core::client::{Client, ClientError, MAX_POSTED, Ticket};
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::Mode;
use rnic::Provider;
use std::time::{Duration, Instant};
use support::bed::{Rdma, Rig, bed, no_wait, node_cfg, wait_for};
use support::client::{poll_extended, post_extend};

/// Polls `posted` until it completed (bounded wall time).
#[allow(clippy::disallowed_methods)]
fn outcome<P: Provider>(c: &mut Client<P>, posted: Ticket) -> Result<bool, ClientError> {
    let t0 = Instant::now();
    loop {
        if let Some(r) = poll_extended(c, posted) {
            return r;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
        std::thread::yield_now();
    }
}

fn posted_extensions_keep_a_lease_and_fail_once<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let clock = b.clock.clone();
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(1), Mode::Exclusive)
        .unwrap();
    let before = p.lifetime_us();
    let posted = post_extend(a, &p, Duration::from_millis(10)).unwrap();
    // A batch while the CAS is in flight: its completion is filed, not dropped.
    let mut word = [0u8; 8];
    a.read(&p, 0, &mut word).unwrap();
    assert!(outcome(a, posted).unwrap());
    assert_eq!(p.lifetime_us(), before + 10_000);

    // Past the original lease, the manager finds the lease extended and the permission lives.
    clock.advance(Duration::from_millis(5));
    wait_for(&b, "the expiry check", |s| {
        s.counters.extended_by_client >= 1
    });
    let a = &mut b.cluster.clients[0];
    a.read(&p, 0, &mut word).unwrap();

    // Two posted from the same value: one extends, the other finds the lifetime moved.
    let x = post_extend(a, &p, Duration::from_millis(1)).unwrap();
    let y = post_extend(a, &p, Duration::from_millis(1)).unwrap();
    assert!(outcome(a, x).unwrap());
    assert!(!outcome(a, y).unwrap());
    assert_eq!(p.lifetime_us(), before + 11_000);

    // An ended permission's posted extension is refused by the NIC, once; the client works on.
    let q = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let stale = q.forged_copy();
    a.revoke(q).unwrap();
    let z = post_extend(a, &stale, Duration::from_millis(1)).unwrap();
    assert!(
        matches!(outcome(a, z), Err(ClientError::Denied(_))),
        "a revoked permission's lifetime window refuses the CAS"
    );
    a.read(&p, 0, &mut word).unwrap();
    let s = a.status().stats();
    assert_eq!(s.cas_extensions, 2, "{s:?}");

    // A forgotten extension still executes; its slot comes back once its completion arrives
    // (here, filed by the next batch); at most MAX_POSTED may be held at once.
    let held: Vec<Ticket> = (0..MAX_POSTED)
        .map(|_| post_extend(a, &p, Duration::from_millis(1)).unwrap())
        .collect();
    assert!(matches!(
        post_extend(a, &p, Duration::from_millis(1)),
        Err(ClientError::TooManyPosted)
    ));
    for x in held {
        a.cancel(x);
    }
    let mut tries = 0;
    while a.status().posted_in_flight() > 0 {
        a.read(&p, 0, &mut word).unwrap();
        tries += 1;
        assert!(tries < 10_000, "forgotten slots never came back");
    }
    assert!(p.lifetime_us() >= before + 11_000);
    let again = post_extend(a, &p, Duration::from_millis(1)).unwrap();
    outcome(a, again).unwrap();
}

every_rig! {
    posted_extensions_keep_a_lease_and_fail_once => super::posted_extensions_keep_a_lease_and_fail_once;
}
