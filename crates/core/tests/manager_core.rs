//! Manager core against a fake NIC, deterministic: grants, revocation, expiry, forced
//! invalidation, CN-collaborated extension, ABA filtering, conflicts, handover, delayed
//! unbinding, malformed input. Each test is named after the invariant it checks
//! (`docs/architecture.md`, "Invariants and where they are tested"; paper §5.2–§5.6).

mod support;

use patronus_core::manager::{ManagerConfig, NicOp, SlabConfig, Techniques};
use patronus_core::proto::header::HEADER_SIZE;
use patronus_core::proto::messages::{Access, Mode, PermissionId, Reply, Request, Status};
use rnic::{AccessFlags, Timestamp};
use support::*;

/// Every combination of the three §5.4 techniques.
fn all_techniques() -> Vec<Techniques> {
    (0..8)
        .map(|b| Techniques {
            delayed_unbind: b & 1 != 0,
            contiguity: b & 2 != 0,
            handover: b & 4 != 0,
        })
        .collect()
}

/// A pool holding exactly one object (a 128-byte buffer behind its 32-byte header slot), so
/// freed memory is reused by the very next allocation.
fn one_object_config(techniques: Techniques) -> ManagerConfig {
    ManagerConfig {
        buffer_len: 160,
        slab: SlabConfig {
            min_class: 128,
            max_class: 128,
            slab_bytes: 160,
        },
        ..test_config(techniques)
    }
}

fn acquire_req(
    addr: u64,
    size: u64,
    lease_us: u64,
    access: Access,
    mode: Mode,
    wait_us: u64,
) -> Request {
    Request::Acquire {
        addr,
        size,
        lease_us,
        access,
        mode,
        wait_us,
    }
}

// ---------------------------------------------------------------------------- 1. grants

#[test]
fn allocate_grants_one_contiguous_rw_window_and_acquire_read_is_read_only() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 100, 1000);
    let obj = object_of(&g);
    assert!(g.contiguous);
    assert_eq!(
        g.id.header_addr, obj,
        "the header sits right before the buffer"
    );
    assert_eq!(g.buffer_rkey, g.lifetime_rkey, "one window");
    assert_eq!(g.buffer_len, 128, "100 bytes round up to a 128-byte buffer");
    assert_eq!(
        g.buffer_addr,
        obj + HEADER_SIZE as u64,
        "behind a 32-byte slot"
    );
    assert_eq!(sim.last_bind_counts(), (1, 0));
    let t = sim.nic.binding(g.buffer_rkey).expect("bound");
    assert_eq!((t.addr, t.addr + t.len), (obj + LIFETIME, obj + 160));
    assert_eq!(t.access, AccessFlags::REMOTE_ALL);
    // The one rkey reaches the buffer (read, write, atomics) and the lifetime word.
    assert!(sim.can_read(&g) && sim.can_write(&g));
    assert!(sim.nic.can_atomic(g.buffer_rkey, g.buffer_addr));
    assert!(sim.nic.can_atomic(g.lifetime_rkey, g.lifetime_addr()));
    assert_eq!(sim.client_cas_extend(&g, 1000, 1500), Some(1000));
    // ...but not the header metadata in front of the lifetime word, nor past the object.
    assert!(!sim.nic.can_access(g.buffer_rkey, obj, 8, false));
    assert!(!sim.nic.can_access(g.buffer_rkey, obj + 16, 8, false));
    assert!(!sim.nic.can_access(g.buffer_rkey, obj + 16, 16, false));
    assert!(!sim.nic.can_access(g.buffer_rkey, obj + 248, 16, false));

    // acquire(Read) of the same object: read-only buffer window + a separate header window.
    let r = expect_grant(sim.acquire(
        2,
        g.buffer_addr,
        g.buffer_len,
        1000,
        Access::Read,
        Mode::Shared,
    ));
    assert!(!r.contiguous);
    assert_ne!(r.buffer_rkey, r.lifetime_rkey);
    assert_eq!(sim.last_bind_counts(), (2, 0));
    let pool =
        sim.cfg.header_base..sim.cfg.header_base + (sim.cfg.header_count * HEADER_SIZE) as u64;
    assert!(pool.contains(&r.id.header_addr), "a pooled header");
    assert!(sim.can_read(&r));
    assert!(!sim.can_write(&r), "read-only permission must deny writes");
    assert!(
        !sim.nic.can_atomic(r.buffer_rkey, r.buffer_addr),
        "Read grants no atomics"
    );
    let lt = sim.nic.binding(r.lifetime_rkey).expect("bound");
    assert_eq!(
        (lt.addr, lt.len),
        (r.lifetime_addr(), 8),
        "exactly the lifetime word"
    );
    assert!(sim.nic.can_atomic(r.lifetime_rkey, r.lifetime_addr()));
    assert!(
        !sim.nic
            .can_access(r.lifetime_rkey, r.lifetime_addr(), 8, true)
    );
    assert!(
        !sim.nic
            .can_access(r.lifetime_rkey, r.id.header_addr, 8, false)
    );
    assert!(!sim.nic.can_access(r.lifetime_rkey, r.buffer_addr, 8, false));
    assert!(
        !sim.nic
            .can_access(r.buffer_rkey, r.lifetime_addr(), 8, false)
    );
    assert!(
        !sim.nic.can_access(r.buffer_rkey, obj + LIFETIME, 8, false),
        "not the owner's header"
    );
    // Both permissions work side by side.
    assert!(sim.can_write(&g) && sim.can_read(&r));

    // A read-write acquire while the embedded slot is taken: two windows, read-write buffer.
    let w = expect_grant(sim.acquire(3, g.buffer_addr, 8, 1000, Access::ReadWrite, Mode::Shared));
    assert!(!w.contiguous);
    assert!(sim.can_write(&w));
    assert!(
        !sim.nic
            .can_access(w.lifetime_rkey, w.lifetime_addr(), 8, true)
    );
}

#[test]
fn without_contiguity_allocate_binds_buffer_and_header_windows() {
    let mut sim = Sim::new(test_config(Techniques::NONE));
    let g = sim.allocate(1, 64, 1000);
    assert!(!g.contiguous);
    assert_eq!(sim.last_bind_counts(), (2, 0));
    let b = sim.nic.binding(g.buffer_rkey).expect("bound");
    assert_eq!((b.addr, b.len), (g.buffer_addr, g.buffer_len));
    assert!(sim.can_write(&g));
    assert!(!sim.nic.can_access(g.buffer_rkey, object_of(&g), 32, false));
    assert!(sim.nic.can_atomic(g.lifetime_rkey, g.lifetime_addr()));
}

// ------------------------------------------------------------- 2. revoke / expiry / forced

#[test]
fn access_after_revoke_fails() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let g = sim.allocate(1, 64, 1000);
        let r = expect_grant(sim.acquire(2, g.buffer_addr, 64, 1000, Access::Read, Mode::Shared));
        assert_eq!(sim.revoke(1, g.id, false), Reply::Revoked);
        assert!(
            !sim.reaches(&g, g.buffer_addr, g.buffer_len),
            "{t:?}: buffer still reachable"
        );
        if g.contiguous || !t.delayed_unbind {
            assert!(
                !sim.any_key_alive(&g),
                "{t:?}: a window of the revoked grant survived"
            );
        } else {
            // Delayed unbinding of the pooled header's window: it still covers a header that is
            // back in the pool, which nobody owns (a reuse kills it, see
            // `stale_header_window_is_dead_before_the_header_is_reused`).
            assert!(sim.nic.binding(g.buffer_rkey).is_none());
            assert!(
                sim.nic
                    .binding(g.lifetime_rkey)
                    .is_none_or(|b| (b.addr, b.len) == (g.lifetime_addr(), 8))
            );
        }
        assert!(sim.can_read(&r), "{t:?}: the other holder is unaffected");
        assert_eq!(
            sim.revoke(1, g.id, false),
            expect_not_found(),
            "{t:?}: double revoke"
        );
        assert_eq!(sim.revoke(2, r.id, false), Reply::Revoked);
        assert!(!sim.reaches(&r, r.buffer_addr, r.buffer_len));
        assert_eq!(sim.occupancy().permissions, 0);
    }
}

fn expect_not_found() -> Reply {
    Reply::Failed(Status::NotFound)
}

#[test]
fn access_after_expiry_fails() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let g = sim.allocate(1, 64, 500);
        let start = g.id.start_us;
        sim.now = Timestamp(start + 499);
        sim.run();
        assert!(sim.can_write(&g), "{t:?}: alive before its deadline");
        sim.now = Timestamp(start + 500);
        sim.run();
        assert!(
            !sim.reaches(&g, g.buffer_addr, g.buffer_len),
            "{t:?}: alive after expiry"
        );
        assert_eq!(
            sim.nic.word(g.lifetime_addr()),
            0,
            "the expiry CAS committed (lifetime → 0)"
        );
        let c = sim.counters();
        assert_eq!((c.expired, c.forced, c.ended), (1, 0, 1));
        assert_eq!(sim.revoke(1, g.id, false), expect_not_found());
        assert_eq!(sim.occupancy().permissions, 0);
    }
}

#[test]
fn forced_invalidation_at_max_lifetime_despite_client_extensions() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let max = sim.cfg.max_lifetime_us;
        let g = sim.allocate(1, 64, 1000);
        let start = g.id.start_us;
        let mut lifetime = g.lifetime_us;
        let mut k = 1;
        loop {
            sim.now = Timestamp(start + 700 * k);
            k += 1;
            if sim.now.0 >= start + max {
                break;
            }
            // The client keeps extending, well past the maximum lifetime.
            assert_eq!(
                sim.client_cas_extend(&g, lifetime, lifetime + 1000),
                Some(lifetime)
            );
            lifetime += 1000;
            sim.run();
            assert!(
                sim.can_write(&g),
                "{t:?}: ended at {:?} before its maximum lifetime",
                sim.now
            );
        }
        assert!(lifetime > max);
        sim.now = Timestamp(start + max);
        sim.run();
        assert!(
            !sim.reaches(&g, g.buffer_addr, g.buffer_len),
            "{t:?}: survived max lifetime"
        );
        let c = sim.counters();
        assert_eq!(c.forced, 1, "{t:?}");
        assert!(c.extended_by_client >= 1, "{t:?}: {c:?}");
        assert_eq!(sim.occupancy().permissions, 0);
    }
}

// -------------------------------------------------------------- 3. CN-collaborated extension

#[test]
fn cn_collaborated_extension_survives_the_old_deadline() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 1000);
    let s = g.id.start_us;
    sim.now = Timestamp(s + 500);
    assert_eq!(sim.client_cas_extend(&g, 1000, 3000), Some(1000));
    sim.now = Timestamp(s + 1000);
    sim.run();
    assert!(
        sim.last_ops.contains(&NicOp::LifetimeCas {
            addr: g.lifetime_addr(),
            compare: 1000,
            swap: 0
        }),
        "the manager checks the lease with a CAS"
    );
    assert_eq!(sim.counters().extended_by_client, 1);
    assert_eq!(
        sim.nic.word(g.lifetime_addr()),
        3000,
        "the failed CAS changed nothing"
    );
    assert!(
        sim.can_write(&g),
        "the extended permission survives its old deadline"
    );
    // Extend again, twice, before the new deadline.
    sim.now = Timestamp(s + 2500);
    assert_eq!(sim.client_cas_extend(&g, 3000, 4000), Some(3000));
    assert_eq!(sim.client_cas_extend(&g, 4000, 5000), Some(4000));
    sim.now = Timestamp(s + 3000);
    sim.run();
    assert_eq!(sim.counters().extended_by_client, 2);
    sim.now = Timestamp(s + 4999);
    sim.run();
    assert!(sim.can_write(&g));
    sim.now = Timestamp(s + 5000);
    sim.run();
    assert!(!sim.can_read(&g), "ends at the last extended deadline");
    assert_eq!(sim.counters().expired, 1);
}

/// A conflicting exclusive waiter makes the manager zero the lifetime: the holder's next CAS
/// fails, and the holder ends at its current deadline; then the waiter is granted.
#[test]
fn extension_is_refused_once_a_conflicting_waiter_queues() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 1000);
    let s = g.id.start_us;
    // Extensions succeed while nobody waits (the manager has seen the last one at s + 1000).
    assert_eq!(sim.client_cas_extend(&g, 1000, 2000), Some(1000));
    sim.now = Timestamp(s + 1000);
    sim.run();
    assert!(sim.can_write(&g));
    sim.now = Timestamp(s + 1200);
    let w = sim.submit(
        2,
        acquire_req(
            g.buffer_addr,
            64,
            1000,
            Access::ReadWrite,
            Mode::Exclusive,
            50_000,
        ),
    );
    let out = sim.run();
    assert_eq!(reply_to(&out, w), None, "the waiter queues");
    assert_eq!(sim.occupancy().waiters, 1);
    assert!(sim.last_ops.contains(&NicOp::LifetimeCas {
        addr: g.lifetime_addr(),
        compare: 2000,
        swap: 0
    }));
    assert_eq!(
        sim.nic.word(g.lifetime_addr()),
        0,
        "refused: lifetime zeroed"
    );
    assert_eq!(
        sim.client_cas_extend(&g, 2000, 3000),
        Some(0),
        "the client's CAS fails"
    );
    sim.now = Timestamp(s + 1999);
    sim.run();
    assert!(
        sim.can_write(&g),
        "a refused holder keeps its current lease"
    );
    sim.now = Timestamp(s + 2000);
    let out = sim.run();
    assert!(!sim.can_read(&g));
    let h = expect_grant(reply_to(&out, w).expect("waiter granted at the holder's deadline"));
    assert!(sim.can_write(&h));
}

/// The holder extended one-sidedly after the manager's last look, so the refusal CAS misses;
/// the manager must retry with the value it learned, not give up and let the holder extend on.
#[test]
fn refusal_is_retried_when_the_holder_extended_concurrently() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 1000);
    let s = g.id.start_us;
    sim.now = Timestamp(s + 100);
    assert_eq!(sim.client_cas_extend(&g, 1000, 2000), Some(1000));
    sim.now = Timestamp(s + 200);
    let w = sim.submit(
        2,
        acquire_req(
            g.buffer_addr,
            64,
            1000,
            Access::Read,
            Mode::Exclusive,
            50_000,
        ),
    );
    let out = sim.run();
    assert_eq!(reply_to(&out, w), None);
    // At most one more batch for the retry (the runner runs it at once; so does `run`).
    if sim.nic.word(g.lifetime_addr()) != 0 {
        sim.run();
    }
    assert_eq!(
        sim.nic.word(g.lifetime_addr()),
        0,
        "refusal retried after the missed CAS"
    );
    assert_eq!(sim.client_cas_extend(&g, 2000, 9000), Some(0));
    sim.now = Timestamp(s + 2000);
    let out = sim.run();
    assert!(
        !sim.can_read(&g),
        "the holder ends at the deadline it had when refused"
    );
    expect_grant(reply_to(&out, w).expect("waiter granted"));
    // Repeated extensions between batches are refused too.
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 1000);
    let s = g.id.start_us;
    let w = sim.submit(
        2,
        acquire_req(
            g.buffer_addr,
            64,
            1000,
            Access::Read,
            Mode::Exclusive,
            50_000,
        ),
    );
    let mut lifetime = 1000;
    for i in 0..5 {
        // The client races every batch with an extension.
        if sim.client_cas_extend(&g, lifetime, lifetime + 500) == Some(lifetime) {
            lifetime += 500;
        }
        sim.now = Timestamp(s + 10 * i);
        sim.run();
    }
    assert_eq!(
        sim.nic.word(g.lifetime_addr()),
        0,
        "refused despite the racing client"
    );
    sim.now = Timestamp(s + lifetime);
    let out = sim.run();
    assert!(!sim.can_read(&g));
    expect_grant(reply_to(&out, w).expect("waiter granted"));
}

/// A holder granted in the same batch in which a conflicting waiter queued is refused too.
#[test]
fn holder_granted_in_the_waiters_batch_is_refused() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g0 = sim.allocate(1, 64, 1000);
    assert_eq!(sim.revoke(1, g0.id, false), Reply::Revoked);
    let a = sim.submit(
        1,
        acquire_req(
            g0.buffer_addr,
            64,
            1000,
            Access::ReadWrite,
            Mode::Exclusive,
            0,
        ),
    );
    let w = sim.submit(
        2,
        acquire_req(
            g0.buffer_addr,
            64,
            1000,
            Access::ReadWrite,
            Mode::Exclusive,
            50_000,
        ),
    );
    let out = sim.run();
    let g = expect_grant(reply_to(&out, a).expect("holder granted"));
    assert_eq!(reply_to(&out, w), None);
    if sim.nic.word(g.lifetime_addr()) != 0 {
        sim.run();
    }
    assert_eq!(
        sim.nic.word(g.lifetime_addr()),
        0,
        "refused although granted alongside the waiter"
    );
    assert_eq!(sim.client_cas_extend(&g, 1000, 2000), Some(0));
    sim.now = Timestamp(g.id.start_us + 1000);
    let out = sim.run();
    expect_grant(reply_to(&out, w).expect("waiter granted at the holder's deadline"));
}

#[test]
fn rpc_extension_extends_and_respects_the_maximum_and_concurrent_cas() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 1000);
    let s = g.id.start_us;
    assert_eq!(
        sim.call(
            1,
            Request::Extend {
                id: g.id,
                lease_us: 500
            }
        ),
        Reply::Extended { lifetime_us: 1500 }
    );
    assert_eq!(sim.nic.word(g.lifetime_addr()), 1500);
    // The client extends one-sidedly, then asks by RPC: the manager's CAS misses and the
    // one-sided value stands — and must be honoured as the deadline.
    assert_eq!(sim.client_cas_extend(&g, 1500, 4000), Some(1500));
    let r = sim.call(
        1,
        Request::Extend {
            id: g.id,
            lease_us: 100,
        },
    );
    assert_eq!(r, Reply::Extended { lifetime_us: 4000 });
    sim.now = Timestamp(s + 3999);
    sim.run();
    assert!(
        sim.can_write(&g),
        "the lifetime the reply promised is honoured"
    );
    sim.now = Timestamp(s + 4000);
    sim.run();
    assert!(!sim.can_read(&g));
    // The maximum lifetime caps RPC extension.
    let g = sim.allocate(1, 64, 1000);
    let max = sim.cfg.max_lifetime_us;
    assert_eq!(
        sim.call(
            1,
            Request::Extend {
                id: g.id,
                lease_us: u64::MAX
            }
        ),
        Reply::Extended { lifetime_us: max }
    );
    assert_eq!(
        sim.call(
            1,
            Request::Extend {
                id: g.id,
                lease_us: 1
            }
        ),
        Reply::Failed(Status::ExtensionRefused)
    );
}

// ------------------------------------------------------------------------------- 4. ABA

#[test]
fn stale_ids_after_header_reuse_change_nothing() {
    // Pooled headers: one header, reused at once (no delayed unbinding).
    let cfg = ManagerConfig {
        header_count: 1,
        ..test_config(Techniques::NONE)
    };
    let mut sim = Sim::new(cfg);
    let g1 = sim.allocate(1, 64, 1000);
    assert_eq!(sim.revoke(1, g1.id, false), Reply::Revoked);
    let g2 = sim.allocate(1, 64, 1000);
    assert_eq!(
        g2.id.header_addr, g1.id.header_addr,
        "the header was reused"
    );
    assert!(
        g2.id.start_us > g1.id.start_us,
        "same `now`, later start time"
    );
    assert_eq!(sim.revoke(1, g1.id, false), expect_not_found());
    assert_eq!(sim.revoke(1, g1.id, true), expect_not_found());
    assert_eq!(
        sim.call(
            1,
            Request::Extend {
                id: g1.id,
                lease_us: 5000
            }
        ),
        expect_not_found()
    );
    assert_eq!(
        sim.revoke(2, g2.id, false),
        expect_not_found(),
        "another client's permission"
    );
    assert!(sim.can_write(&g2), "the new permission still works");
    assert_eq!(
        sim.nic.word(g2.lifetime_addr()),
        g2.lifetime_us,
        "its lease is untouched"
    );
    assert_eq!(sim.occupancy().permissions, 1);
    assert_eq!(
        sim.occupancy().live_objects,
        2,
        "no stale revoke freed anything"
    );
    assert_eq!(sim.revoke(1, g2.id, false), Reply::Revoked);
}

#[test]
fn stale_ids_after_object_reuse_change_nothing_and_start_times_increase() {
    for t in all_techniques() {
        let mut sim = Sim::new(one_object_config(t));
        let mut prev = sim.allocate(1, 96, 1000);
        let mut stale = Vec::new();
        for i in 0..10u32 {
            // Time never advances; the same object (and embedded header) comes back each time.
            assert_eq!(sim.revoke(1 + i % 2, prev.id, true), Reply::Revoked);
            let next = sim.allocate(2 - i % 2, 96, 1000);
            assert_eq!(object_of(&next), object_of(&prev));
            assert_eq!(next.id.header_addr == prev.id.header_addr, t.contiguity);
            if t.contiguity {
                assert!(next.id.start_us > prev.id.start_us, "{t:?}");
            }
            stale.push((1 + i % 2, prev));
            prev = next;
            for &(c, old) in &stale {
                assert_eq!(sim.revoke(c, old.id, true), expect_not_found(), "{t:?}");
                assert_eq!(
                    sim.call(
                        c,
                        Request::Extend {
                            id: old.id,
                            lease_us: 9
                        }
                    ),
                    expect_not_found()
                );
                assert!(
                    !sim.reaches(&old, prev.buffer_addr, prev.buffer_len),
                    "{t:?}"
                );
            }
            assert!(sim.can_write(&prev), "{t:?}");
            assert_eq!(sim.occupancy().live_objects, 1);
        }
    }
}

// ------------------------------------------------------------------------- 5. conflicts

fn shared_object(sim: &mut Sim) -> (u64, u64) {
    let g = sim.allocate(9, 64, 1000);
    assert_eq!(sim.revoke(9, g.id, false), Reply::Revoked);
    (g.buffer_addr, g.buffer_len)
}

#[test]
fn conflicting_request_waits_until_the_holder_revokes() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let (buf, len) = shared_object(&mut sim);
    let a = expect_grant(sim.acquire(1, buf, len, 5000, Access::ReadWrite, Mode::Exclusive));
    assert_eq!(
        sim.acquire(2, buf, len, 1000, Access::Read, Mode::Shared),
        Reply::Failed(Status::ConflictTimeout),
        "no waiting: fails at once"
    );
    let w = sim.submit(
        2,
        acquire_req(buf, len, 1000, Access::Read, Mode::Shared, 3000),
    );
    assert_eq!(reply_to(&sim.run(), w), None);
    assert_eq!(sim.occupancy().waiters, 1);
    sim.advance(100);
    let r = sim.submit(
        1,
        Request::Revoke {
            id: a.id,
            free: false,
        },
    );
    let out = sim.run();
    assert_eq!(reply_to(&out, r), Some(Reply::Revoked));
    let b = expect_grant(reply_to(&out, w).expect("granted in the revoke's batch"));
    assert!(!sim.can_read(&a) && sim.can_read(&b) && !sim.can_write(&b));
    assert_eq!(sim.occupancy().waiters, 0);
}

#[test]
fn crashed_holder_blocks_others_only_until_its_lease_ends() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let (buf, len) = shared_object(&mut sim);
    let a = expect_grant(sim.acquire(1, buf, len, 1000, Access::ReadWrite, Mode::Exclusive));
    let s = a.id.start_us;
    let w = sim.submit(
        2,
        acquire_req(buf, len, 1000, Access::ReadWrite, Mode::Exclusive, 5000),
    );
    assert_eq!(reply_to(&sim.run(), w), None);
    sim.now = Timestamp(s + 999);
    assert_eq!(reply_to(&sim.run(), w), None);
    sim.now = Timestamp(s + 1000);
    let out = sim.run();
    let b = expect_grant(reply_to(&out, w).expect("granted when the crashed holder's lease ended"));
    assert!(!sim.reaches(&a, buf, len));
    assert!(sim.can_write(&b));
}

#[test]
fn waiter_past_its_deadline_gets_conflict_timeout() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let (buf, len) = shared_object(&mut sim);
    let a = expect_grant(sim.acquire(1, buf, len, 5000, Access::ReadWrite, Mode::Exclusive));
    let w = sim.submit(
        2,
        acquire_req(buf, len, 1000, Access::Read, Mode::Shared, 1000),
    );
    assert_eq!(reply_to(&sim.run(), w), None);
    sim.advance(999);
    assert_eq!(reply_to(&sim.run(), w), None);
    sim.advance(1);
    let out = sim.run();
    assert_eq!(
        reply_to(&out, w),
        Some(Reply::Failed(Status::ConflictTimeout))
    );
    assert_eq!(sim.occupancy().waiters, 0);
    assert!(sim.can_write(&a), "the holder is unaffected");
    assert_eq!(sim.unanswered(), 0);
}

#[test]
fn waiting_exclusive_blocks_later_shared_grants_fifo() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let (buf, len) = shared_object(&mut sim);
    let s1 = expect_grant(sim.acquire(1, buf, len, 5000, Access::Read, Mode::Shared));
    let x = sim.submit(
        2,
        acquire_req(buf, len, 5000, Access::ReadWrite, Mode::Exclusive, 4000),
    );
    assert_eq!(reply_to(&sim.run(), x), None);
    // Compatible with the shared holder, but the exclusive waiter came first.
    assert_eq!(
        sim.acquire(3, buf, len, 5000, Access::Read, Mode::Shared),
        Reply::Failed(Status::ConflictTimeout)
    );
    let s2 = sim.submit(
        3,
        acquire_req(buf, len, 5000, Access::Read, Mode::Shared, 4000),
    );
    assert_eq!(reply_to(&sim.run(), s2), None);
    assert_eq!(sim.occupancy().waiters, 2);
    let out = sim.step(&[(
        1,
        Request::Revoke {
            id: s1.id,
            free: false,
        },
    )]);
    let xg = expect_grant(reply_to(&out, x).expect("exclusive granted first"));
    assert_eq!(
        reply_to(&out, s2),
        None,
        "shared still waits behind the exclusive holder"
    );
    let out = sim.step(&[(
        2,
        Request::Revoke {
            id: xg.id,
            free: false,
        },
    )]);
    let sg = expect_grant(reply_to(&out, s2).expect("then the shared one"));
    assert!(sim.can_read(&sg) && !sim.can_read(&xg));
    assert_eq!(sim.occupancy().waiters, 0);
}

#[test]
fn freeing_an_object_fails_its_waiters_and_grants_nothing_on_freed_memory() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let a = sim.allocate(1, 64, 5000);
        let x = expect_grant(sim.acquire(2, a.buffer_addr, 64, 5000, Access::Read, Mode::Shared));
        let w = sim.submit(
            3,
            acquire_req(
                a.buffer_addr,
                64,
                5000,
                Access::ReadWrite,
                Mode::Exclusive,
                4000,
            ),
        );
        assert_eq!(reply_to(&sim.run(), w), None);
        // The allocator frees: every permission on the object ends, the waiter is not granted
        // memory that is being freed.
        let out = sim.step(&[(
            1,
            Request::Revoke {
                id: a.id,
                free: true,
            },
        )]);
        assert_eq!(
            reply_to(&out, w),
            Some(Reply::Failed(Status::NotFound)),
            "{t:?}"
        );
        assert_eq!(sim.occupancy().permissions, 0, "{t:?}");
        assert_eq!(sim.occupancy().waiters, 0);
        assert_eq!(sim.occupancy().live_objects, 0);
        assert_eq!(sim.revoke(2, x.id, false), expect_not_found());
        assert_eq!(sim.unanswered(), 0);
    }
}

#[test]
fn permission_granted_and_freed_in_one_batch_is_not_left_on_freed_memory() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let a = sim.allocate(1, 64, 5000);
        // In one batch: another client acquires the object, then the owner frees it.
        let acq = sim.submit(
            2,
            acquire_req(a.buffer_addr, 64, 5000, Access::Read, Mode::Shared, 0),
        );
        let rev = sim.submit(
            1,
            Request::Revoke {
                id: a.id,
                free: true,
            },
        );
        let out = sim.run();
        assert_eq!(reply_to(&out, rev), Some(Reply::Revoked));
        assert_eq!(
            reply_to(&out, acq),
            Some(Reply::Failed(Status::NotFound)),
            "{t:?}"
        );
        assert_eq!(sim.occupancy().permissions, 0, "{t:?}");
        let o = sim.occupancy();
        assert_eq!(
            o.mw_free + o.mw_stale,
            o.mw_capacity,
            "{t:?}: a window leaked: {o:?}"
        );
        // Memory reuse: nobody but the new owner reaches it.
        let b = sim.allocate(3, 64, 5000);
        let (obj, len) = sim.object_range(&b);
        assert!(!sim.reaches(&a, obj, len));
    }
}

// -------------------------------------------------------------------------- 6. handover

#[test]
fn handover_never_lets_an_old_rkey_reach_the_new_owner() {
    for t in all_techniques().into_iter().filter(|t| t.handover) {
        // One shard: a handover needs the release and the grant in one shard's batch.
        let mut sim = Sim::one_shard(test_config(t));
        let a = sim.allocate(1, 64, 5000);
        let before = sim.counters().handovers;
        // Revoke A and grant B in the same batch.
        let rb = sim.submit(
            2,
            Request::Allocate {
                size: 64,
                lease_us: 5000,
                mode: Mode::Shared,
            },
        );
        sim.submit(
            1,
            Request::Revoke {
                id: a.id,
                free: false,
            },
        );
        let out = sim.run();
        let b = expect_grant(reply_to(&out, rb).expect("granted"));
        assert!(sim.counters().handovers > before, "{t:?}: handover used");
        assert_eq!(sim.last_bind_counts().1, 0, "{t:?}: no separate unbind");
        let a_windows = [a.buffer_rkey.index(), a.lifetime_rkey.index()];
        assert!(
            a_windows.contains(&b.buffer_rkey.index()),
            "{t:?}: B got A's window"
        );
        assert!(
            !sim.any_key_alive(&a),
            "{t:?}: A's rkeys died with the rebind"
        );
        assert!(!sim.reaches(&a, b.buffer_addr, b.buffer_len));
        assert!(!sim.reaches(&a, b.lifetime_addr(), 8));
        assert!(!sim.reaches(&a, a.buffer_addr, a.buffer_len));
        assert!(sim.can_write(&b));
    }
}

#[test]
fn handover_within_a_batch_to_a_new_owner_of_the_same_object() {
    for t in all_techniques().into_iter().filter(|t| t.handover) {
        let mut sim = Sim::new(test_config(t));
        let a = sim.allocate(1, 64, 5000);
        let rev = sim.submit(
            1,
            Request::Revoke {
                id: a.id,
                free: false,
            },
        );
        let acq = sim.submit(
            2,
            acquire_req(
                a.buffer_addr,
                64,
                5000,
                Access::ReadWrite,
                Mode::Exclusive,
                0,
            ),
        );
        let out = sim.run();
        assert_eq!(reply_to(&out, rev), Some(Reply::Revoked));
        let b = expect_grant(reply_to(&out, acq).expect("granted"));
        assert_eq!(
            sim.last_bind_counts().1,
            0,
            "{t:?}: handed over, not unbound"
        );
        assert!(!sim.any_key_alive(&a), "{t:?}");
        assert!(!sim.reaches(&a, b.buffer_addr, b.buffer_len), "{t:?}");
        assert!(!sim.reaches(&a, b.lifetime_addr(), 8), "{t:?}");
        assert!(sim.can_write(&b));
    }
}

// ------------------------------------------------------------------ 7. delayed unbinding

#[test]
fn delayed_unbinding_only_for_freed_memory_above_the_watermark() {
    let with = Techniques::ALL;
    // Above the watermark: the freed object's window stays (stale) — no unbind in that batch.
    let mut sim = Sim::new(test_config(with));
    let g = sim.allocate(1, 64, 5000);
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert_eq!(sim.last_bind_counts(), (0, 0), "no unbind emitted");
    assert_eq!(sim.occupancy().mw_stale, 1);
    assert_eq!(sim.occupancy().live_objects, 0);
    // The documented exception: a stray access lands only in freed memory nobody owns.
    assert!(sim.can_read(&g));

    // Below the watermark: unbound at once.
    let cfg = ManagerConfig {
        buffer_watermark: u64::MAX,
        ..test_config(with)
    };
    let mut sim = Sim::new(cfg);
    let g = sim.allocate(1, 64, 5000);
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert_eq!(sim.last_bind_counts(), (0, 1));
    assert!(!sim.any_key_alive(&g));
    assert_eq!(sim.occupancy().mw_stale, 0);

    // Non-contiguous permission, below the watermark: the buffer window is unbound; only the
    // pooled header's window (a header back in the pool) is left stale.
    let cfg = ManagerConfig {
        buffer_watermark: u64::MAX,
        ..test_config(Techniques {
            contiguity: false,
            ..with
        })
    };
    let mut sim = Sim::new(cfg);
    let g = sim.allocate(1, 64, 5000);
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert_eq!(sim.last_bind_counts(), (0, 1));
    assert!(!sim.reaches(&g, g.buffer_addr, g.buffer_len));
    assert_eq!(sim.occupancy().mw_stale, 1);
}

#[test]
fn revoke_over_live_data_always_unbinds_in_the_same_batch() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let g = sim.allocate(1, 64, 5000);
        assert_eq!(sim.revoke(1, g.id, false), Reply::Revoked);
        let (_, unbinds) = sim.last_bind_counts();
        assert!(unbinds >= 1, "{t:?}");
        assert!(
            !sim.reaches(&g, g.buffer_addr, g.buffer_len),
            "{t:?}: live data reachable"
        );
        // Expiry of a permission over live data as well.
        let h = sim.allocate(1, 64, 100);
        sim.advance(100);
        sim.run();
        assert!(!sim.reaches(&h, h.buffer_addr, h.buffer_len), "{t:?}");
        if h.contiguous {
            assert!(!sim.any_key_alive(&h), "{t:?}");
        }
    }
}

#[test]
fn stale_window_is_dead_before_the_freed_object_is_granted_again() {
    for t in all_techniques().into_iter().filter(|t| t.delayed_unbind) {
        let mut sim = Sim::new(one_object_config(t));
        let g = sim.allocate(1, 96, 5000);
        assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
        assert!(sim.can_read(&g), "{t:?}: left stale over freed memory");
        let stale_mw = g.buffer_rkey.index();
        let h = sim.allocate(2, 96, 5000);
        assert_eq!(object_of(&h), object_of(&g), "the same memory, a new owner");
        // The stale window was rebound (handover) or unbound in the chain before the reply.
        assert!(
            sim.last_ops
                .iter()
                .any(|o| matches!(o, NicOp::Bind { mw, .. } if *mw == stale_mw)),
            "{t:?}"
        );
        if !t.handover {
            assert!(
                sim.last_ops.contains(&NicOp::Bind {
                    mw: stale_mw,
                    client: 2,
                    target: None,
                    key: None,
                }),
                "{t:?} {g:?} {:?}",
                sim.last_ops
            );
        }
        assert!(sim.nic.binding(g.buffer_rkey).is_none(), "{t:?}");
        if g.contiguous {
            assert!(!sim.any_key_alive(&g), "{t:?}");
        }
        // (A non-contiguous grant's header window may stay stale over its pooled header,
        // which is back in the pool and not the new owner's.)
        assert!(
            !sim.reaches(&g, sim.object_range(&h).0, sim.object_range(&h).1),
            "{t:?}"
        );
        assert!(!sim.reaches(&g, h.lifetime_addr(), 8), "{t:?}");
        assert!(sim.can_write(&h));
    }
}

#[test]
fn stale_header_window_is_dead_before_the_header_is_reused() {
    let cfg = ManagerConfig {
        header_count: 1,
        ..test_config(Techniques {
            contiguity: false,
            ..Techniques::ALL
        })
    };
    let mut sim = Sim::new(cfg);
    let g = sim.allocate(1, 64, 5000);
    assert_eq!(sim.revoke(1, g.id, false), Reply::Revoked);
    // The header is back in the pool; its window is left stale (delayed unbinding).
    assert!(!sim.reaches(&g, g.buffer_addr, g.buffer_len));
    let h = sim.allocate(2, 64, 5000);
    assert_eq!(h.id.header_addr, g.id.header_addr);
    assert!(
        !sim.reaches(&g, h.lifetime_addr(), 8),
        "the old lifetime rkey reaches the new header"
    );
    assert!(!sim.any_key_alive(&g));
    assert!(sim.nic.can_atomic(h.lifetime_rkey, h.lifetime_addr()));
}

// ----------------------------------------------------------------------- malformed input

#[test]
fn malformed_requests_get_clean_failures() {
    for t in all_techniques() {
        let mut sim = Sim::new(test_config(t));
        let alloc = |size, lease_us| Request::Allocate {
            size,
            lease_us,
            mode: Mode::Exclusive,
        };
        let bad = |r: Reply| expect_failed(r);
        assert_eq!(bad(sim.call(1, alloc(0, 1000))), Status::InvalidArgument);
        assert_eq!(bad(sim.call(1, alloc(64, 0))), Status::InvalidArgument);
        // Larger than the largest class: refused as too large, not as a lack of memory.
        for size in [u64::MAX, u64::MAX - 31, 1 << 40, (1 << 16) + 1] {
            assert_eq!(
                bad(sim.call(1, alloc(size, 1000))),
                Status::TooLarge,
                "size {size}"
            );
        }
        let g = sim.allocate(1, 64, 1000);
        let obj = object_of(&g);
        for addr in [
            0,
            31,
            32,
            obj,
            obj + 8,
            g.buffer_addr + 8,
            g.buffer_addr - 1,
            u64::MAX,
            sim.cfg.header_base + 32,
            g.lifetime_addr(),
        ] {
            // No object there: the same answer as another tenant's object (nothing leaks).
            let r = sim.acquire(2, addr, 8, 1000, Access::Read, Mode::Shared);
            assert_eq!(bad(r), Status::NotFound, "acquire at {addr:#x}");
        }
        for (size, lease) in [
            (0, 1000),
            (g.buffer_len + 1, 1000),
            (u64::MAX, 1000),
            (8, 0),
        ] {
            let r = sim.acquire(2, g.buffer_addr, size, lease, Access::Read, Mode::Shared);
            assert_eq!(bad(r), Status::InvalidArgument);
        }
        let garbage = [
            PermissionId {
                header_addr: 0,
                start_us: 0,
            },
            PermissionId {
                header_addr: u64::MAX,
                start_us: u64::MAX,
            },
            PermissionId {
                header_addr: g.id.header_addr,
                start_us: g.id.start_us + 1,
            },
            PermissionId {
                header_addr: g.id.header_addr,
                start_us: g.id.start_us - 1,
            },
            PermissionId {
                header_addr: g.id.header_addr + 8,
                start_us: g.id.start_us,
            },
            PermissionId {
                header_addr: g.buffer_addr,
                start_us: g.id.start_us,
            },
        ];
        for id in garbage {
            assert_eq!(bad(sim.revoke(1, id, true)), Status::NotFound);
            assert_eq!(bad(sim.revoke(1, id, false)), Status::NotFound);
            assert_eq!(
                bad(sim.call(
                    1,
                    Request::Extend {
                        id,
                        lease_us: u64::MAX
                    }
                )),
                Status::NotFound
            );
        }
        assert!(sim.can_write(&g), "{t:?}: garbage changed nothing");
        // A freed object cannot be acquired.
        assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
        let r = sim.acquire(2, g.buffer_addr, 8, 1000, Access::Read, Mode::Shared);
        assert_eq!(bad(r), Status::NotFound);
        // Waiting "forever" is bounded by nothing but the holder; it does not overflow.
        let h = sim.allocate(1, 64, 1000);
        let w = sim.submit(
            2,
            acquire_req(
                h.buffer_addr,
                8,
                u64::MAX,
                Access::Read,
                Mode::Exclusive,
                u64::MAX,
            ),
        );
        assert_eq!(reply_to(&sim.run(), w), None);
        sim.advance(1000);
        let out = sim.run();
        let x = expect_grant(reply_to(&out, w).expect("granted after the holder's lease"));
        assert_eq!(
            x.lifetime_us, sim.cfg.max_lifetime_us,
            "lease capped at the maximum"
        );
        assert_eq!(sim.unanswered(), 0);
    }
}

#[test]
fn exhausted_pools_fail_cleanly_and_leak_nothing() {
    for t in all_techniques() {
        let cfg = ManagerConfig {
            mw_count: 4,
            header_count: 2,
            buffer_len: 1 << 14,
            ..test_config(t)
        };
        let mut sim = Sim::new(cfg);
        let mut granted = Vec::new();
        let mut statuses = Vec::new();
        for _ in 0..8 {
            match sim.call(
                1,
                Request::Allocate {
                    size: 64,
                    lease_us: 1000,
                    mode: Mode::Shared,
                },
            ) {
                Reply::Granted(g) => granted.push(g),
                Reply::Failed(s) => statuses.push(s),
                other => panic!("{other:?}"),
            }
        }
        assert!(!statuses.is_empty(), "{t:?}: pools never ran out");
        assert!(
            statuses.iter().all(|s| *s == Status::PoolExhausted),
            "{t:?}: {statuses:?}"
        );
        assert_eq!(
            sim.occupancy().live_objects,
            granted.len(),
            "{t:?}: failed allocations leaked memory"
        );
        // Memory: a pool of 1 MiB-class requests fails with NoMemory.
        for g in &granted {
            assert!(sim.can_write(g));
        }
        sim.advance(1000);
        sim.run();
        let o = sim.occupancy();
        assert_eq!(o.permissions, 0);
        assert_eq!(o.live_objects, granted.len(), "expiry does not free memory");
        assert_eq!(o.mw_free + o.mw_stale, o.mw_capacity, "{t:?}: {o:?}");
        assert_eq!(o.headers_free, o.headers_capacity, "{t:?}: {o:?}");
        // And the pools work again.
        sim.allocate(1, 64, 1000);
    }
}

// ------------------------------------------------------- permission-key reuse within a batch

/// A refusal CAS issued for a holder that then revokes in the same batch must not be applied
/// to the permission that reuses the holder's record (here: the waiter granted in that batch).
#[test]
fn refusal_of_a_holder_ending_in_the_batch_does_not_hit_its_successor() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let (buf, len) = shared_object(&mut sim);
    let h = expect_grant(sim.acquire(1, buf, len, 5000, Access::ReadWrite, Mode::Exclusive));
    let w = sim.submit(
        2,
        acquire_req(buf, len, 1000, Access::ReadWrite, Mode::Exclusive, 9000),
    );
    sim.submit(
        1,
        Request::Revoke {
            id: h.id,
            free: false,
        },
    );
    let out = sim.run();
    let g = expect_grant(reply_to(&out, w).expect("granted when the holder left"));
    assert_eq!(sim.nic.word(g.lifetime_addr()), 1000);
    // Nobody waits for it: the new holder may extend, and the extension is honoured.
    assert_eq!(sim.client_cas_extend(&g, 1000, 3000), Some(1000));
    sim.now = Timestamp(g.id.start_us + 1000);
    sim.run();
    assert!(
        sim.can_write(&g),
        "the successor inherited the old holder's refusal"
    );
    sim.now = Timestamp(g.id.start_us + 3000);
    sim.run();
    assert!(!sim.can_read(&g));
}

/// An RPC extend for a permission revoked later in the same batch must not extend the
/// permission that reuses its record.
#[test]
fn rpc_extend_of_a_permission_ending_in_the_batch_does_not_extend_its_successor() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let h = sim.allocate(1, 64, 1000);
    let e = sim.submit(
        1,
        Request::Extend {
            id: h.id,
            lease_us: 5000,
        },
    );
    sim.submit(
        1,
        Request::Revoke {
            id: h.id,
            free: false,
        },
    );
    let a = sim.submit(
        2,
        Request::Allocate {
            size: 64,
            lease_us: 1000,
            mode: Mode::Shared,
        },
    );
    let out = sim.run();
    assert_eq!(
        reply_to(&out, e),
        Some(Reply::Failed(Status::ExtensionRefused))
    );
    let g = expect_grant(reply_to(&out, a).expect("granted"));
    sim.now = Timestamp(g.id.start_us + 999);
    sim.run();
    assert!(sim.can_write(&g));
    sim.now = Timestamp(g.id.start_us + 1000);
    sim.run();
    assert!(
        !sim.can_read(&g),
        "the successor got the revoked permission's extension"
    );
}

// ------------------------------------------------------------------------- bind failures

#[test]
fn failed_binds_fail_the_grant_and_return_every_resource() {
    for t in all_techniques() {
        for fail in 1..=2 {
            let mut sim = Sim::new(test_config(t));
            sim.nic.fail_next_binds = fail;
            let r = sim.call(
                1,
                Request::Allocate {
                    size: 64,
                    lease_us: 1000,
                    mode: Mode::Shared,
                },
            );
            let expected_fail = fail == 1 || !t.contiguity;
            if !expected_fail {
                // Contiguous grants need one bind; the second injected failure hits nothing yet.
                sim.nic.fail_next_binds = 0;
                continue;
            }
            assert_eq!(r, Reply::Failed(Status::BindFailed), "{t:?}");
            sim.nic.fail_next_binds = 0;
            sim.run(); // the windows of the failed grant are released in the next batch
            let o = sim.occupancy();
            assert_eq!(o.permissions, 0, "{t:?}");
            assert_eq!(
                o.live_objects, 0,
                "{t:?}: the failed allocation leaked its memory"
            );
            assert_eq!(o.headers_free, o.headers_capacity, "{t:?}");
            assert_eq!(o.mw_free + o.mw_stale, o.mw_capacity, "{t:?}: {o:?}");
            assert_eq!(sim.counters().granted, 0);
            let g = sim.allocate(1, 64, 1000);
            assert!(sim.can_write(&g));
        }
    }
}

/// A stale window over reused memory whose unbind fails must not let the new owner's grant
/// out: the old rkey would still reach the new owner's buffer.
#[test]
fn failed_unbind_of_a_stale_window_fails_the_grant_over_that_memory() {
    for t in all_techniques()
        .into_iter()
        .filter(|t| t.delayed_unbind && !t.handover)
    {
        let mut sim = Sim::new(one_object_config(t));
        let g = sim.allocate(1, 96, 5000);
        assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
        assert!(sim.can_read(&g), "stale over freed memory");
        sim.nic.fail_next_unbinds = 1;
        let r = sim.call(
            2,
            Request::Allocate {
                size: 96,
                lease_us: 5000,
                mode: Mode::Shared,
            },
        );
        // (Sim checks that no granted buffer is reachable by another owner's window.)
        assert_eq!(r, Reply::Failed(Status::BindFailed), "{t:?}");
        sim.run(); // the unbind is retried
        assert!(!sim.reaches(&g, object_of(&g), 128), "{t:?}");
        let h = sim.allocate(2, 96, 5000);
        assert_eq!(object_of(&h), object_of(&g));
        assert!(sim.can_write(&h));
    }
}

/// With verbs semantics (a failed bind flushes the rest of the chain), grants earlier in the
/// chain must not go out while the chain's later unbinds over their memory did not happen.
#[test]
fn flushed_chain_grants_nothing_over_memory_still_reachable_by_others() {
    for t in all_techniques().into_iter().filter(|t| t.delayed_unbind) {
        let cfg = ManagerConfig {
            buffer_len: 320,
            ..one_object_config(t)
        };
        let mut sim = Sim::new(cfg);
        let a = sim.allocate(1, 96, 5000);
        let b = sim.allocate(1, 96, 5000);
        assert_eq!(sim.revoke(1, a.id, true), Reply::Revoked);
        assert_eq!(sim.revoke(1, b.id, true), Reply::Revoked);
        // Both objects are free with stale windows; two allocations reuse them in one batch.
        sim.nic.flush_after_failure = true;
        // The first allocation's binds succeed, the second's first bind fails: the rest of the
        // chain (the unbinds of the stale windows over both objects) is flushed.
        sim.nic.skip_binds = if t.contiguity { 1 } else { 2 };
        sim.nic.fail_next_binds = 1;
        let x = sim.submit(
            2,
            Request::Allocate {
                size: 96,
                lease_us: 5000,
                mode: Mode::Shared,
            },
        );
        let y = sim.submit(
            3,
            Request::Allocate {
                size: 96,
                lease_us: 5000,
                mode: Mode::Shared,
            },
        );
        let out = sim.run();
        // Whatever was granted passed the Sim's check (no other window over its object).
        let granted = [x, y]
            .iter()
            .filter(|&&id| matches!(reply_to(&out, id), Some(Reply::Granted(_))))
            .count();
        assert!(granted < 2, "{t:?}: a failure was injected");
        sim.nic.flush_after_failure = false;
        sim.run();
        let o = sim.occupancy();
        assert_eq!(o.live_objects, granted, "{t:?}");
        assert_eq!(
            o.mw_free + o.mw_stale + granted * (2 - t.contiguity as usize),
            o.mw_capacity,
            "{t:?}: {o:?}"
        );
    }
}

/// An RPC extend that arrives after the lease ran out (the batch's expiry check found a
/// one-sided extension that is itself already past) must not revive the permission.
#[test]
fn rpc_extend_after_the_deadline_does_not_revive_the_permission() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = sim.allocate(1, 64, 100);
    let s = g.id.start_us;
    assert_eq!(sim.client_cas_extend(&g, 100, 200), Some(100));
    sim.now = Timestamp(s + 300);
    let e = sim.submit(
        1,
        Request::Extend {
            id: g.id,
            lease_us: 1000,
        },
    );
    let out = sim.run();
    assert_eq!(
        reply_to(&out, e),
        Some(Reply::Failed(Status::ExtensionRefused))
    );
    assert!(!sim.can_read(&g), "ended at its (client-extended) deadline");
    assert_eq!(sim.occupancy().permissions, 0);
}

/// A grant that passed the window-capacity check keeps its windows even if a later request of
/// the batch moves a stale window to the released ones (its header was reused).
#[test]
fn capacity_checked_grants_get_their_windows() {
    for t in all_techniques() {
        let cfg = ManagerConfig {
            header_count: 2,
            mw_count: 3,
            ..test_config(Techniques {
                contiguity: false,
                ..t
            })
        };
        // One shard: its window pool is the capacity under test.
        let mut sim = Sim::one_shard(cfg);
        let a = sim.allocate(1, 1, 1);
        sim.advance(1);
        // In one batch: A expires (its header window goes stale under delayed unbinding),
        // an allocation passes the capacity check counting that stale window, then an
        // acquire takes A's header (its stale window is released) and fails for windows.
        let x = sim.submit(
            1,
            Request::Allocate {
                size: 1,
                lease_us: 1,
                mode: Mode::Shared,
            },
        );
        let y = sim.submit(
            1,
            acquire_req(a.buffer_addr, 1, 1, Access::Read, Mode::Shared, 0),
        );
        let out = sim.run();
        expect_grant(reply_to(&out, x).expect("answered"));
        assert_eq!(
            reply_to(&out, y),
            Some(Reply::Failed(Status::PoolExhausted)),
            "{t:?}"
        );
    }
}

// ------------------------------------------------------------- revoke completion, free rights

#[test]
fn revoke_reply_waits_until_a_failed_unbind_was_retried() {
    // One shard: it reads the core's pending work.
    let mut sim = Sim::one_shard(test_config(Techniques::NONE));
    let g = sim.allocate(1, 64, 1000);
    sim.nic.fail_next_unbinds = 1;
    let id = sim.submit(
        1,
        Request::Revoke {
            id: g.id,
            free: false,
        },
    );
    let first = sim.run_once();
    assert_eq!(
        reply_to(&first, id),
        None,
        "no Revoked while an unbind of the permission failed"
    );
    assert!(sim.core().has_pending_work());
    let second = sim.run_once();
    assert_eq!(reply_to(&second, id), Some(Reply::Revoked));
    assert!(!sim.reaches(&g, g.buffer_addr, g.buffer_len));
    assert!(!sim.core().has_pending_work());
}

#[test]
fn only_a_writer_may_free_memory() {
    // Without delayed unbinding, so the freed memory's windows die at once.
    let mut sim = Sim::new(test_config(Techniques::NONE));
    let g = sim.allocate(1, 64, 1000);
    let r = expect_grant(sim.acquire(2, g.buffer_addr, 64, 1000, Access::Read, Mode::Shared));
    assert_eq!(
        sim.revoke(2, r.id, true),
        Reply::Failed(Status::InvalidArgument),
        "a read-only holder cannot free"
    );
    assert!(sim.can_read(&r), "the refused free changed nothing");
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert!(!sim.reaches(&r, r.buffer_addr, r.buffer_len));
}

/// Leases under a slow control path (`docs/architecture.md`, "Leases that fit the control
/// path"): the manager never grants a lease shorter than a few of its own turns (a request
/// received now may have waited a turn, its reply leaves after this one), and when even the
/// maximum lifetime is shorter than that it refuses new permissions as overloaded instead of
/// granting leases that end before they arrive; ending and extending stay served.
#[test]
fn leases_stay_above_the_managers_turns_and_a_hopeless_backlog_is_refused() {
    // One shard: the turn is reported to its core.
    let mut sim = Sim::one_shard(test_config(Techniques::ALL)); // max lifetime 10 ms
    let g = sim.allocate(1, 64, 100);
    assert_eq!(g.lifetime_us, 100, "no turn reported: the lease as asked");
    sim.core_mut().note_turn(300);
    let h = sim.allocate(1, 64, 100);
    assert_eq!(h.lifetime_us, 600, "two turns of 300 µs");
    let long = sim.allocate(1, 64, 5_000);
    assert_eq!(long.lifetime_us, 5_000, "longer than the floor: as asked");
    assert_eq!(sim.counters().leases_floored, 1);

    sim.core_mut().note_turn(6_000); // floor 12 ms > maximum lifetime 10 ms
    let alloc = Request::Allocate {
        size: 64,
        lease_us: 100,
        mode: Mode::Shared,
    };
    assert_eq!(sim.call(1, alloc), Reply::Failed(Status::Overloaded));
    let acquire = sim.acquire(1, long.buffer_addr, 8, 100, Access::Read, Mode::Shared);
    assert_eq!(acquire, Reply::Failed(Status::Overloaded));
    assert_eq!(sim.counters().overloaded, 2);
    assert!(matches!(
        sim.call(
            1,
            Request::Extend {
                id: long.id,
                lease_us: 1_000
            }
        ),
        Reply::Extended { .. }
    ));
    assert_eq!(sim.revoke(1, h.id, false), Reply::Revoked);

    sim.core_mut().note_turn(10);
    assert_eq!(sim.allocate(1, 64, 100).lifetime_us, 100, "caught up");
}
