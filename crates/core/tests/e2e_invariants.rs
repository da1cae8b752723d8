//! The design's invariants, end to end on the software RNIC, on both transports. Lease logic
//! runs on a virtual clock that the tests advance; waiting for the manager thread to act is a
//! bounded spin on its published state, never a sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

#[macro_use]
mod support;

use patronus_core::client::{ClientConfig, ClientError, LongLease};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig};
use patronus_core::proto::messages::{Access, Mode};
use rnic::WcStatus;
use std::time::{Duration, Instant};
use support::bed::{Rdma, Rig, bed, late_client, no_wait, node_cfg, two, wait_for};

fn access_after_expiry_is_rejected<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), late_client());
    let clock = b.clock.clone();
    let p = {
        let a = &mut b.cluster.clients[0];
        let p = a
            .allocate(64, Duration::from_millis(1), Mode::Exclusive)
            .unwrap();
        a.write(&p, 0, b"original").unwrap();
        p
    };
    let addr = p.addr();
    clock.advance(Duration::from_micros(2_000));
    wait_for(&b, "expiry", |s| s.counters.expired >= 1);
    let (a, other) = two(&mut b);
    let e = a.write(&p, 0, b"too late").unwrap_err();
    assert!(
        matches!(e, ClientError::Denied(WcStatus::RemoteAccessError)),
        "{e:?}"
    );
    let q = other
        .acquire(
            addr,
            8,
            Duration::from_millis(10),
            Access::Read,
            Mode::Shared,
        )
        .unwrap();
    let mut buf = [0u8; 8];
    other.read(&q, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"original", "a rejected write never touches memory");
}

fn access_after_revoke_is_rejected<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    a.write(&p, 0, b"kept").unwrap();
    // A copy of the permission's identity survives the revoke; its rkey must not.
    let stale = a.acquire(
        addr,
        8,
        Duration::from_millis(100),
        Access::Read,
        Mode::Shared,
    );
    assert!(matches!(stale, Err(ClientError::ConflictTimeout)));
    let forged = p.forged_copy();
    a.revoke(p).unwrap();
    let e = a.write(&forged, 0, b"late").unwrap_err();
    assert!(
        matches!(e, ClientError::Denied(_)),
        "old rkey dead after revoke: {e:?}"
    );
    let q = a
        .acquire(
            addr,
            8,
            Duration::from_millis(100),
            Access::Read,
            Mode::Shared,
        )
        .unwrap();
    let mut buf = [0u8; 4];
    a.read(&q, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"kept");
}

fn forced_invalidation_at_max_lifetime<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        max_lifetime_us: 5_000,
        ..crate::support::node_config()
    };
    let mut b = bed(t, iso, 1, node, late_client());
    let clock = b.clock.clone();
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(1), Mode::Exclusive)
        .unwrap();
    // Keep extending one-sidedly until the client library stops at the maximum
    // (1000 + 2 x 2000 reaches it); the manager ends the permission there regardless.
    let mut extensions = 0;
    while a.extend(&p, Duration::from_millis(2)).is_ok() {
        extensions += 1;
        clock.advance(Duration::from_micros(900));
    }
    assert_eq!(extensions, 2);
    assert!(
        p.lifetime_us() >= 5_000,
        "the lifetime field reached the maximum"
    );
    clock.advance(Duration::from_micros(5_000));
    let s = wait_for(&b, "forced invalidation", |s| s.counters.forced >= 1);
    assert_eq!(s.counters.ended, 1);
    let a = &mut b.cluster.clients[0];
    assert!(matches!(
        a.read(&p, 0, &mut [0u8; 8]),
        Err(ClientError::Denied(_))
    ));
}

fn extension_refused_when_others_wait_then_waiter_granted<R: Rig>(t: R, iso: Isolation) {
    let client = ClientConfig {
        acquire_wait: Duration::from_secs(5),
        ..ClientConfig::default()
    };
    let node = NodeConfig {
        max_wait_us: 10_000_000,
        ..node_cfg()
    };
    let mut b = bed(t, iso, 2, node, client);
    let clock = b.clock.clone();
    let (a, w) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_millis(10), Mode::Exclusive)
        .unwrap();
    #[allow(clippy::disallowed_methods)] // a wall-time bound on a test that must not hang
    let t0 = Instant::now();
    a.extend(&p, Duration::from_millis(1)).unwrap();
    let addr = p.addr();
    std::thread::scope(|s| {
        let waiter = s.spawn(move || {
            w.acquire(
                addr,
                8,
                Duration::from_millis(10),
                Access::Read,
                Mode::Shared,
            )
        });
        // The waiter's queueing zeroes the holder's lifetime: the next CAS extension fails.
        loop {
            match a.extend(&p, Duration::from_millis(1)) {
                Err(ClientError::ExtensionRefused) => break,
                Ok(()) => assert!(t0.elapsed() < Duration::from_secs(10), "never refused"),
                Err(e) => panic!("{e:?}"),
            }
        }
        // The holder's lease ends by its deadline (at the latest its maximum lifetime, however
        // often it extended before the refusal landed); then the waiter is granted.
        clock.advance(Duration::from_micros(1_100_000));
        let q = waiter.join().unwrap().unwrap();
        assert_eq!(q.addr(), addr);
    });
}

fn crashed_exclusive_holder_blocks_only_until_lease_end<R: Rig>(t: R, iso: Isolation) {
    let client = ClientConfig {
        acquire_wait: Duration::from_secs(1),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 2, node_cfg(), client);
    let clock = b.clock.clone();
    let crashed = b.cluster.clients.remove(0);
    let mut crashed = crashed;
    let p = crashed
        .allocate(64, Duration::from_millis(5), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    drop(crashed); // stops without revoking
    let w = &mut b.cluster.clients[0];
    let granted = std::thread::scope(|s| {
        let h = s.spawn(move || {
            w.acquire(
                addr,
                8,
                Duration::from_millis(10),
                Access::ReadWrite,
                Mode::Exclusive,
            )
        });
        clock.advance(Duration::from_micros(6_000));
        h.join().unwrap()
    });
    assert!(granted.is_ok(), "{granted:?}");
}

fn stale_revoke_after_header_reuse_changes_nothing<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), ClientConfig::default());
    let (a, c) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Shared)
        .unwrap();
    let addr = p.addr();
    let old_id = p.id();
    let forged = p.forged_copy();
    a.revoke(p).unwrap();
    // The object's embedded header is reused by the next read-write grant.
    let q = c
        .acquire(
            addr,
            8,
            Duration::from_millis(100),
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    assert_eq!(q.id().header_addr, old_id.header_addr);
    assert!(q.id().start_us > old_id.start_us);
    assert!(matches!(a.revoke(forged), Err(ClientError::NotFound)));
    c.write(&q, 0, b"still mine").unwrap();
    c.revoke(q).unwrap();
}

fn qp_fault_hidden_by_spare<R: Rig>(t: R, iso: Isolation, spares: usize) {
    let client = ClientConfig {
        spare_qps: spares,
        ..no_wait()
    };
    let mut b = bed(t, iso, 1, node_cfg(), client);
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let r = a
        .acquire(
            p.addr(),
            8,
            Duration::from_millis(100),
            Access::Read,
            Mode::Shared,
        )
        .unwrap_err();
    assert!(matches!(r, ClientError::ConflictTimeout));
    // An out-of-bounds access through a forged rkey faults the QP.
    let mut forged = p.forged_copy();
    forged.corrupt_rkey();
    let e = a.write(&forged, 0, b"x").unwrap_err();
    assert!(matches!(e, ClientError::Denied(_)), "{e:?}");
    // The same permission keeps working on the promoted (or recovered) QP.
    a.write(&p, 0, b"after fault").unwrap();
    let mut buf = [0u8; 11];
    a.read(&p, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"after fault");
    let qps = a.status().qps();
    assert_eq!(qps.switches(), 1, "{qps:?}");
    if spares > 0 {
        // A promotion, not a reconnection on the client's path; the worker then recovers
        // the broken QP in the background and returns it as a spare.
        assert_eq!((qps.promotions, qps.reconnects), (1, 0), "{qps:?}");
        let after = a.status().wait_recoveries(1, Duration::from_secs(30));
        assert_eq!(
            (after.recovered, after.recovery_failures),
            (1, 0),
            "{after:?}"
        );
        assert_eq!(after.spares_ready, spares, "the spare came back: {after:?}");
    } else {
        assert_eq!((qps.promotions, qps.reconnects), (0, 1), "{qps:?}");
    }
    a.revoke(p).unwrap();
}

fn storm_returns_everything_to_pools<R: Rig>(t: R, iso: Isolation) {
    use rand::{Rng, SeedableRng};
    let mut b = bed(t, iso, 4, node_cfg(), ClientConfig::default());
    let clock = b.clock.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut held: Vec<Vec<patronus_core::client::Perm>> = (0..4).map(|_| Vec::new()).collect();
    let mut objects: Vec<u64> = Vec::new();
    for _ in 0..400 {
        let i = rng.random_range(0..4);
        let c = &mut b.cluster.clients[i];
        match rng.random_range(0..6) {
            0 | 1 => {
                if let Ok(p) = c.allocate(
                    rng.random_range(1..2000),
                    Duration::from_millis(5),
                    Mode::Shared,
                ) {
                    objects.push(p.addr());
                    held[i].push(p);
                }
            }
            2 if !objects.is_empty() => {
                let addr = objects[rng.random_range(0..objects.len())];
                let access = if rng.random_bool(0.5) {
                    Access::Read
                } else {
                    Access::ReadWrite
                };
                if let Ok(p) = c.acquire(addr, 1, Duration::from_millis(5), access, Mode::Shared) {
                    held[i].push(p);
                }
            }
            3 if !held[i].is_empty() => {
                let k = rng.random_range(0..held[i].len());
                let p = held[i].swap_remove(k);
                let _ = c.revoke(p);
            }
            4 if !held[i].is_empty() => {
                let k = rng.random_range(0..held[i].len());
                let p = held[i].swap_remove(k);
                let addr = p.addr();
                if c.free(p).is_ok() {
                    objects.retain(|&a| a != addr);
                }
            }
            _ => clock.advance(Duration::from_micros(300)),
        }
    }
    clock.advance(Duration::from_secs(10));
    let s = wait_for(&b, "every lease to end", |s| {
        s.occupancy.is_some_and(|o| o.permissions == 0)
    });
    let o = s.occupancy.unwrap();
    assert_eq!(o.headers_free, o.headers_capacity);
    assert_eq!(
        o.mw_free + o.mw_stale,
        o.mw_capacity,
        "no window bound to live data"
    );
    assert_eq!(o.waiters, 0);
    assert_eq!(s.counters.granted, s.counters.ended);
}

fn long_lease_renews_past_max_lifetime<R: Rig>(t: R, iso: Isolation, mode: Mode) {
    let node = NodeConfig {
        max_lifetime_us: 2_000,
        ..crate::support::node_config()
    };
    let mut b = bed(t, iso, 1, node, ClientConfig::default());
    let clock = b.clock.clone();
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(1), Mode::Shared)
        .unwrap();
    let addr = p.addr();
    a.revoke(p).unwrap();
    let mut l = LongLease::acquire(
        a,
        addr,
        8,
        Duration::from_micros(600),
        Access::ReadWrite,
        mode,
        Duration::from_micros(300),
    )
    .unwrap();
    let first = l.perm().unwrap().id();
    for i in 0u64..40 {
        clock.advance(Duration::from_micros(200));
        let p = l.renew(a).unwrap();
        a.write(p, 0, &i.to_le_bytes()).unwrap();
        let mut buf = [0u8; 8];
        a.read(p, 0, &mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), i);
    }
    assert_ne!(
        l.perm().unwrap().id(),
        first,
        "renewed past the maximum lifetime"
    );
    assert!(l.reacquired >= 3, "{l:?}");
    assert!(l.extended >= 1, "{l:?}");
    assert_eq!(a.status().qps().switches(), 0, "no access ever failed");
}

/// In the stronger isolation mode, a window's rkey is useless on another client's QPs even
/// with the right key byte; in the paper's shared-PD mode it works (the key byte is the only
/// barrier, which is why the stronger mode exists).
fn foreign_rkey_on_another_clients_qp<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), ClientConfig::default());
    let (a, m) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    a.write(&p, 0, b"secret!!").unwrap();
    let stolen = p.forged_copy();
    let mut buf = [0u8; 8];
    let r = m.read(&stolen, 0, &mut buf);
    match iso {
        Isolation::SharedPd => {
            r.unwrap();
            assert_eq!(&buf, b"secret!!");
        }
        Isolation::PdPerClient | Isolation::Type2 => {
            assert!(matches!(r, Err(ClientError::Denied(_))), "{r:?}");
            assert_eq!(buf, [0u8; 8]);
        }
    }
}

/// Type-1 windows survive a QP switch unchanged; type-2 windows are bound to one QP, so after
/// the switch the permission is rebound (new rkeys, refreshed in place) and a copy of the old
/// rkey is dead.
fn windows_after_a_qp_switch<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let before = p.forged_copy();
    let mut bad = p.forged_copy();
    bad.corrupt_rkey();
    assert!(a.write(&bad, 0, b"x").is_err());
    a.write(&p, 0, b"mine").unwrap();
    let old = a.write(&before, 0, b"old!");
    match iso {
        Isolation::Type2 => {
            assert_ne!(p.rkey(), before.rkey(), "rkeys refreshed in place");
            assert!(matches!(old, Err(ClientError::Denied(_))), "{old:?}");
        }
        _ => {
            assert_eq!(p.rkey(), before.rkey());
            old.unwrap();
        }
    }
}

every_rig! {
    access_after_expiry_is_rejected => super::access_after_expiry_is_rejected;
    access_after_revoke_is_rejected => super::access_after_revoke_is_rejected;
    forced_invalidation_at_max_lifetime => super::forced_invalidation_at_max_lifetime;
    extension_refused_when_others_wait_then_waiter_granted => super::extension_refused_when_others_wait_then_waiter_granted;
    crashed_exclusive_holder_blocks_only_until_lease_end => super::crashed_exclusive_holder_blocks_only_until_lease_end;
    stale_revoke_after_header_reuse_changes_nothing => super::stale_revoke_after_header_reuse_changes_nothing;
    qp_fault_hidden_by_spare => |t, iso| super::qp_fault_hidden_by_spare(t, iso, 2);
    qp_fault_recovered_without_spare => |t, iso| super::qp_fault_hidden_by_spare(t, iso, 0);
    storm_returns_everything_to_pools => super::storm_returns_everything_to_pools;
    long_lease_renews_past_max_lifetime_shared => |t, iso| super::long_lease_renews_past_max_lifetime(t, iso, Mode::Shared);
    long_lease_renews_past_max_lifetime_exclusive => |t, iso| super::long_lease_renews_past_max_lifetime(t, iso, Mode::Exclusive);
    foreign_rkey_on_another_clients_qp => super::foreign_rkey_on_another_clients_qp;
    windows_after_a_qp_switch => super::windows_after_a_qp_switch;
}
