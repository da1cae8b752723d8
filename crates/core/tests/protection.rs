//! Regression tests for protection under reuse, retries and hostile clients. Each
//! test is named after the guarantee it checks and runs on both transports, in every isolation
//! mode where the guarantee applies.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

#[macro_use]
mod support;

use patronus_core::client::{ClientConfig, ClientError, LongLease};
use patronus_core::cluster::Link;
use patronus_core::manager::RECENT_KEYS as RECENT;
use patronus_core::manager::{Isolation, NodeConfig, NodeStats, SlabConfig};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;
use support::bed::{Rdma, Rig, bed, no_wait, node_cfg, two, wait_for, wait_node};
use support::client::{extend_rpc, try_acquire};

/// Small slabs: a freed object comes back after a few allocations of its class.
fn small_slabs() -> NodeConfig {
    NodeConfig {
        slab: SlabConfig {
            slab_bytes: 4096,
            ..SlabConfig::default()
        },
        ..node_cfg()
    }
}

/// Whatever `allocate` returns holds no byte of an earlier tenant.
fn allocated_memory_never_holds_earlier_bytes<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, small_slabs(), no_wait());
    let (a, c) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let len = p.len() as usize;
    a.write(&p, 0, &vec![0xA5; len]).unwrap();
    a.free(p).unwrap();
    let mut held = Vec::new();
    for _ in 0..256 {
        let q = c
            .allocate(64, Duration::from_millis(100), Mode::Exclusive)
            .unwrap();
        let mut buf = vec![0u8; q.len() as usize];
        c.read(&q, 0, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&x| x == 0),
            "allocation at {:#x} holds earlier bytes",
            q.addr()
        );
        let reused = q.addr() == addr;
        held.push(q);
        if reused {
            return;
        }
    }
    panic!("the freed object was never reused");
}

/// An automatic retry of an acquire that is still waiting is the same request, not a
/// second waiter that outlives both holders.
fn retried_waiting_acquire_leaves_no_orphan<R: Rig>(t: R, iso: Isolation) {
    let waiting = ClientConfig {
        rpc_timeout: Duration::from_millis(600),
        acquire_wait: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 3, node_cfg(), waiting);
    let p = b.cluster.clients[0]
        .allocate(64, Duration::from_secs(10), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let rpcs = b.cluster.node.fresh_stats().counters.rpcs;
    let node = &b.cluster.node;
    let (a, rest) = b.cluster.clients.split_at_mut(1);
    let (a, w) = (&mut a[0], &mut rest[0]);
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            let q = w.acquire(
                addr,
                8,
                Duration::from_secs(10),
                Access::ReadWrite,
                Mode::Exclusive,
            )?;
            w.revoke(q)
        });
        // The original and its retry (sent halfway to the RPC deadline) both reached the core.
        wait_node(node, "the retry", |s| s.counters.rpcs >= rpcs + 2);
        a.revoke(p).unwrap();
        h.join().unwrap().unwrap();
    });
    let s = wait_for(&b, "all ended", |s| {
        s.occupancy
            .is_some_and(|o| o.permissions == 0 && o.waiters == 0)
    });
    assert_eq!(s.counters.granted, s.counters.ended);
    let late = b.cluster.clients[2].acquire(
        addr,
        8,
        Duration::from_millis(1),
        Access::ReadWrite,
        Mode::Exclusive,
    );
    assert!(
        late.is_ok(),
        "an orphaned permission blocks the object: {late:?}"
    );
}

/// A retried acquire, the client's side: a grant that arrives after the client gave up on its
/// request (RPC timeout) is handed back at once, so it does not block the object until its lease
/// ends.
fn grant_after_a_client_timeout_is_handed_back<R: Rig>(t: R, iso: Isolation) {
    let impatient = ClientConfig {
        rpc_timeout: Duration::from_millis(300) * t.patience(),
        acquire_wait: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 2, node_cfg(), impatient);
    let (a, w) = two(&mut b);
    let p = a
        .allocate(64, Duration::from_secs(10), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let r = w.acquire(
        addr,
        8,
        Duration::from_secs(10),
        Access::ReadWrite,
        Mode::Exclusive,
    );
    assert!(matches!(r, Err(ClientError::RpcTimeout)), "{r:?}");
    // The waiter is still queued at the node; the holder leaves and it is granted.
    a.revoke(p).unwrap();
    // The client's next use of its control path sees the late grant and hands it back. With
    // one manager shard that is the next call (replies on one channel arrive in order); with
    // several, the grant may arrive on its shard's channel after that call returned, and a
    // later call (here: looking for replies) hands it back.
    let q = w
        .allocate(64, Duration::from_secs(10), Mode::Shared)
        .unwrap();
    let handed_back = |s: &NodeStats| {
        s.occupancy
            .is_some_and(|o| o.permissions == 1 && o.waiters == 0)
    };
    if b.cluster.node.shard_map().shards > 1 {
        let (node, w) = (&b.cluster.node, &mut b.cluster.clients[1]);
        for _ in 0..1000 {
            assert!(!w.wait_any(Duration::from_millis(5)).unwrap());
            if handed_back(&node.fresh_stats()) {
                break;
            }
        }
    }
    let s = wait_for(&b, "the late grant handed back", handed_back);
    assert_eq!(s.counters.granted, s.counters.ended + 1);
    let (a, w) = two(&mut b);
    let again = a.acquire(
        addr,
        8,
        Duration::from_millis(1),
        Access::ReadWrite,
        Mode::Exclusive,
    );
    assert!(again.is_ok(), "the object is free again: {again:?}");
    w.revoke(q).unwrap();
}

/// A 4 KiB allocation costs at most 4 KiB + 64 B of pool.
fn four_kib_allocation_costs_at_most_64_bytes_more<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let a = &mut b.cluster.clients[0];
    // Allocations go round the manager's shards: one more than there are shards puts two in
    // the same slab, next to each other.
    let n = a.status().shard_map().shards as usize + 1;
    let perms: Vec<_> = (0..n)
        .map(|_| {
            a.allocate(4096, Duration::from_millis(100), Mode::Exclusive)
                .unwrap()
        })
        .collect();
    assert!(perms.iter().all(|p| p.len() >= 4096));
    let mut addrs: Vec<u64> = perms.iter().map(|p| p.addr()).collect();
    addrs.sort_unstable();
    let stride = addrs.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(stride <= 4096 + 64, "a 4 KiB object takes {stride} bytes");
}

/// Objects of 2 MiB and more have a header like any other: one-sided extension works.
fn large_objects_have_a_lifetime_word<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        pool_bytes: 16 << 20,
        slab: SlabConfig {
            max_class: 4 << 20,
            slab_bytes: 4 << 20,
            ..SlabConfig::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, iso, 1, node, no_wait());
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(2 << 20, Duration::from_millis(10), Mode::Exclusive)
        .unwrap();
    a.extend(&p, Duration::from_millis(10)).unwrap();
    assert_eq!(p.lifetime_us(), 20_000);
    a.write(&p, (2 << 20) - 8, &7u64.to_le_bytes()).unwrap();
}

/// Renewing an exclusive long lease never hands the object to a waiter in between; if
/// it cannot renew (others wait), it says so and the current permission stays valid.
fn exclusive_renewal_never_hands_the_object_away<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        max_lifetime_us: 2_000,
        ..crate::support::node_config()
    };
    let waiting = ClientConfig {
        acquire_wait: Duration::from_secs(1),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 2, node, waiting);
    let clock = b.clock.clone();
    let addr = {
        let a = &mut b.cluster.clients[0];
        let p = a
            .allocate(64, Duration::from_millis(1), Mode::Shared)
            .unwrap();
        let addr = p.addr();
        a.revoke(p).unwrap();
        addr
    };
    let node = &b.cluster.node;
    let (a, rest) = b.cluster.clients.split_at_mut(1);
    let (a, w) = (&mut a[0], &mut rest[0]);
    let mut l = LongLease::acquire(
        a,
        addr,
        8,
        Duration::from_micros(600),
        Access::ReadWrite,
        Mode::Exclusive,
        Duration::from_micros(300),
    )
    .unwrap();
    // Renewals past the maximum lifetime, with nobody waiting: always the same holder.
    for i in 0u64..12 {
        clock.advance(Duration::from_micros(200));
        let p = l.renew(a).unwrap();
        a.write(p, 0, &i.to_le_bytes()).unwrap();
    }
    assert!(l.reacquired >= 1, "{l:?}");
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            w.acquire(
                addr,
                8,
                Duration::from_millis(1),
                Access::ReadWrite,
                Mode::Exclusive,
            )
        });
        wait_node(node, "the waiter", |s| {
            s.occupancy.is_some_and(|o| o.waiters == 1)
        });
        // Push the lease to where it must be renewed; with a waiter queued it is refused.
        let mut refused = false;
        for _ in 0..12 {
            clock.advance(Duration::from_micros(100));
            match l.renew(a) {
                Ok(_) => {}
                Err(e) => {
                    assert!(matches!(e, ClientError::ExtensionRefused), "{e:?}");
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "renewal with a waiter queued must be refused");
        // The holder still holds: its permission works until its own deadline.
        let p = l.perm().unwrap();
        let mut buf = [0u8; 8];
        a.read(p, 0, &mut buf).unwrap();
        clock.advance(Duration::from_micros(3_000));
        h.join().unwrap().unwrap();
    });
}

/// `try_acquire` of a held exclusive object fails at once and leaves its holder alone: the
/// holder extends (one-sided and by RPC) as if nobody had asked, where a waiting acquire gets
/// its extensions refused (above). Once the holder lets go, the try gets the object.
fn a_try_acquire_leaves_the_holder_alone<R: Rig>(t: R, iso: Isolation) {
    let waiting = ClientConfig {
        acquire_wait: Duration::from_secs(1),
        ..ClientConfig::default()
    };
    let mut b = bed(t, iso, 2, node_cfg(), waiting);
    let (a, rest) = b.cluster.clients.split_at_mut(1);
    let (a, w) = (&mut a[0], &mut rest[0]);
    let p = a
        .allocate(64, Duration::from_millis(5), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    for _ in 0..3 {
        let e = try_acquire(
            w,
            addr,
            8,
            Duration::from_millis(1),
            Access::ReadWrite,
            Mode::Exclusive,
        )
        .unwrap_err();
        assert!(matches!(e, ClientError::ConflictTimeout), "{e:?}");
        a.extend(&p, Duration::from_millis(5)).unwrap();
        extend_rpc(a, &p, Duration::from_millis(5)).unwrap();
    }
    assert_eq!(a.status().stats().extension_refusals, 0);
    a.revoke(p).unwrap();
    let q = try_acquire(
        w,
        addr,
        8,
        Duration::from_millis(1),
        Access::ReadWrite,
        Mode::Exclusive,
    )
    .unwrap();
    assert_eq!(q.addr(), addr);
}

/// A conflicting acquire waits by default (bounded), then gets the object.
fn conflicting_acquire_waits_by_default<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 2, node_cfg(), ClientConfig::default());
    let clock = b.clock.clone();
    let p = b.cluster.clients[0]
        .allocate(64, Duration::from_millis(5), Mode::Exclusive)
        .unwrap();
    let addr = p.addr();
    let node = &b.cluster.node;
    let w = &mut b.cluster.clients[1];
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            w.acquire(
                addr,
                8,
                Duration::from_millis(1),
                Access::Read,
                Mode::Shared,
            )
        });
        wait_node(node, "the waiter", |s| {
            s.occupancy.is_some_and(|o| o.waiters == 1)
        });
        clock.advance(Duration::from_micros(6_000));
        let q = h.join().unwrap().unwrap();
        assert_eq!(q.addr(), addr);
    });
}

/// In the shared-PD mode a window's previous holder cannot predict the key its next
/// holder gets. With MW handover the window is rebound straight from one holder to the next
/// (a waiter is granted in the batch of the revoke); the NIC's +1 per bind made the new key the
/// old one + 1. Now the key byte is drawn at random and never repeats one of the window's last
/// [`RECENT`].
fn shared_pd_key_bytes_are_unpredictable(t: Link) {
    let node = NodeConfig {
        mw_count: 1, // one window: every grant is a handover of it
        shards: 1,   // (one window cannot be split between shards)
        max_wait_us: 10_000_000,
        ..node_cfg()
    };
    let waiting = ClientConfig {
        acquire_wait: Duration::from_secs(10),
        rpc_timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    };
    let mut b = bed(t, Isolation::SharedPd, 2, node, waiting);
    let first = b.cluster.clients[0]
        .allocate(64, Duration::from_secs(10), Mode::Exclusive)
        .unwrap();
    let addr = first.addr();
    let mut held = Some((0usize, first));
    let mut keys = vec![held.as_ref().unwrap().1.rkey()];
    const ROUNDS: usize = 40;
    for _ in 0..ROUNDS {
        let (holder, p) = held.take().unwrap();
        let waiter = 1 - holder;
        let node = &b.cluster.node;
        let (x, y) = b.cluster.clients.split_at_mut(1);
        let (h, w) = if holder == 0 {
            (&mut x[0], &mut y[0])
        } else {
            (&mut y[0], &mut x[0])
        };
        let q = std::thread::scope(|s| {
            let join = s.spawn(|| {
                w.acquire(
                    addr,
                    8,
                    Duration::from_secs(10),
                    Access::ReadWrite,
                    Mode::Exclusive,
                )
            });
            wait_node(node, "the waiter", |s| {
                s.occupancy.is_some_and(|o| o.waiters == 1)
            });
            h.revoke(p).unwrap();
            join.join().unwrap().unwrap()
        });
        keys.push(q.rkey());
        held = Some((waiter, q));
    }
    let s = b.cluster.node.fresh_stats();
    assert!(
        s.counters.handovers >= ROUNDS as u64,
        "every grant took the window its holder released: {:?}",
        s.counters
    );
    let mut predictable = 0;
    for (i, k) in keys.iter().enumerate().skip(1) {
        assert_eq!(k.index(), keys[0].index(), "one window");
        predictable += usize::from(k.key_byte() == keys[i - 1].key_byte().wrapping_add(1));
        let recent: Vec<u8> = keys[i.saturating_sub(RECENT)..i]
            .iter()
            .map(|k| k.key_byte())
            .collect();
        assert!(
            !recent.contains(&k.key_byte()),
            "key byte {} repeats within {RECENT} binds",
            k.key_byte()
        );
    }
    assert!(
        predictable <= 2,
        "{predictable} of {ROUNDS} handovers gave the next holder its predecessor's key + 1"
    );
}

/// The ops flushed behind an access the NIC refused never executed, so they are run
/// again on the promoted QP — once: an FAA after the fault adds exactly once.
fn flushed_ops_behind_a_refused_access_run_exactly_once<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let mut bad = p.forged_copy();
    bad.corrupt_rkey();
    let results = {
        let mut batch = a.batch();
        batch
            .write(&bad, 0, b"x")
            .faa(&p, 8, 1)
            .faa(&p, 8, 1)
            .read(&p, 8, 8);
        batch.execute()
    };
    assert!(
        matches!(results[0], Err(ClientError::Denied(_))),
        "{results:?}"
    );
    for r in &results[1..] {
        assert!(r.is_ok(), "{results:?}");
    }
    let mut word = [0u8; 8];
    a.read(&p, 8, &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), 2, "each FAA ran exactly once");
}

/// Two refused accesses in one batch: the ops flushed behind the first are retried, the
/// second refusal flushes the rest again, and those are retried once more. Every op that
/// never ran runs exactly once; only the two forged accesses fail.
fn ops_flushed_behind_two_refusals_run_exactly_once<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), no_wait());
    let a = &mut b.cluster.clients[0];
    let p = a
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    let mut bad = p.forged_copy();
    bad.corrupt_rkey();
    let results = {
        let mut batch = a.batch();
        batch
            .write(&bad, 0, b"x")
            .faa(&p, 8, 1)
            .write(&bad, 0, b"y")
            .faa(&p, 8, 1)
            .read(&p, 8, 8);
        batch.execute()
    };
    for i in [0, 2] {
        assert!(
            matches!(results[i], Err(ClientError::Denied(_))),
            "{results:?}"
        );
    }
    for i in [1, 3, 4] {
        assert!(results[i].is_ok(), "{results:?}");
    }
    let mut word = [0u8; 8];
    a.read(&p, 8, &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), 2, "each FAA ran exactly once");
}

/// An object belongs to its tenant. Another tenant gets the answer it would get for
/// no object at all, may acquire only what the owner shared, never frees it; a disconnect frees
/// nothing.
fn objects_belong_to_their_tenant<R: Rig>(t: R, iso: Isolation) {
    use patronus_core::client::Client;
    use patronus_core::manager::TenantSecret;
    let node = NodeConfig {
        tenants: vec![
            TenantSecret {
                tenant: 1,
                secret: 0x1111,
            },
            TenantSecret {
                tenant: 2,
                secret: 0x2222,
            },
        ],
        ..node_cfg()
    };
    let as_tenant = |tenant, tenant_secret| ClientConfig {
        tenant,
        tenant_secret,
        ..no_wait()
    };
    let b = bed(t, iso, 0, node, no_wait());
    let ctx = b.cluster.node_ctx.clone();
    let addr = b.cluster.node.address().clone();
    // Clients on the node's own device (the cluster's tenant-0 clients would be refused).
    let connect = |cfg| Client::<R::P>::connect(&ctx, &addr, cfg);
    assert!(matches!(
        connect(as_tenant(1, 0x2222)),
        Err(ClientError::Unauthorized)
    ));
    assert!(matches!(connect(no_wait()), Err(ClientError::Unauthorized)));
    let mut owner = connect(as_tenant(1, 0x1111)).unwrap();
    let mut stranger = connect(as_tenant(2, 0x2222)).unwrap();
    let p = owner
        .allocate(64, Duration::from_millis(100), Mode::Shared)
        .unwrap();
    owner.write(&p, 0, b"tenant 1").unwrap();
    let foreign = stranger.acquire(
        p.addr(),
        8,
        Duration::from_millis(100),
        Access::Read,
        Mode::Shared,
    );
    let nothing = stranger.acquire(
        p.addr() + (1 << 20),
        8,
        Duration::from_millis(100),
        Access::Read,
        Mode::Shared,
    );
    assert!(matches!(foreign, Err(ClientError::NotFound)), "{foreign:?}");
    assert!(matches!(nothing, Err(ClientError::NotFound)), "{nothing:?}");
    owner
        .control()
        .share(p.addr(), 2, Some(Access::Read))
        .unwrap();
    let q = stranger
        .acquire(
            p.addr(),
            8,
            Duration::from_millis(100),
            Access::Read,
            Mode::Shared,
        )
        .unwrap();
    let mut buf = [0u8; 8];
    stranger.read(&q, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"tenant 1");
    let rw = stranger.acquire(
        p.addr(),
        8,
        Duration::from_millis(100),
        Access::ReadWrite,
        Mode::Shared,
    );
    assert!(
        matches!(rw, Err(ClientError::NotFound)),
        "only up to the share"
    );
    // Freeing is the owner's: refused, and the refused permission does not outlive its handle.
    let before = b.cluster.node.fresh_stats().counters.ended;
    assert!(matches!(stranger.free(q), Err(ClientError::NotOwner)));
    let s = wait_for(&b, "the refused permission ended", |s| {
        s.counters.ended > before
    });
    assert_eq!(s.occupancy.unwrap().permissions, 1, "only the owner's");
    // A client of the same tenant shares freely; the owner's disconnect frees nothing.
    let addr_p = p.addr();
    drop(p);
    drop(owner);
    let mut colleague = connect(as_tenant(1, 0x1111)).unwrap();
    let r = colleague
        .acquire(
            addr_p,
            8,
            Duration::from_millis(100),
            Access::ReadWrite,
            Mode::Shared,
        )
        .unwrap();
    colleague.read(&r, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"tenant 1", "still tenant 1's after its client left");
    colleague.free(r).unwrap();
}

/// A served or embedded node isolates clients by PD unless told otherwise.
#[test]
fn default_isolation_is_pd_per_client() {
    assert_eq!(
        crate::support::node_config().isolation,
        Isolation::PdPerClient
    );
}

every_rig! {
    allocated_memory_never_holds_earlier_bytes => super::allocated_memory_never_holds_earlier_bytes;
    retried_waiting_acquire_leaves_no_orphan => super::retried_waiting_acquire_leaves_no_orphan;
    grant_after_a_client_timeout_is_handed_back => super::grant_after_a_client_timeout_is_handed_back;
    four_kib_allocation_costs_at_most_64_bytes_more => super::four_kib_allocation_costs_at_most_64_bytes_more;
    large_objects_have_a_lifetime_word => super::large_objects_have_a_lifetime_word;
    exclusive_renewal_never_hands_the_object_away => super::exclusive_renewal_never_hands_the_object_away;
    conflicting_acquire_waits_by_default => super::conflicting_acquire_waits_by_default;
    a_try_acquire_leaves_the_holder_alone => super::a_try_acquire_leaves_the_holder_alone;
    flushed_ops_behind_a_refused_access_run_exactly_once => super::flushed_ops_behind_a_refused_access_run_exactly_once;
    ops_flushed_behind_two_refusals_run_exactly_once => super::ops_flushed_behind_two_refusals_run_exactly_once;
    objects_belong_to_their_tenant => super::objects_belong_to_their_tenant;
}

#[test]
fn inproc_shared_pd_key_bytes_are_unpredictable() {
    shared_pd_key_bytes_are_unpredictable(Link::InProc);
}

#[test]
fn tcp_shared_pd_key_bytes_are_unpredictable() {
    shared_pd_key_bytes_are_unpredictable(Link::Tcp);
}
