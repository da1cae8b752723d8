//! Manager core against the fake NIC, deterministic: the protection guarantees of `protection.rs`
//! at the policy level — retries that join their original, failures that stay in their domain,
//! scrubbing ordered after the chain, tenants, atomic renewal, headers for large objects and random
//! key bytes. (The end-to-end versions are in `protection.rs` and `attacks.rs`.)

mod support;

use patronus_core::manager::{ManagerConfig, Scrub, SlabConfig, Techniques};
use patronus_core::proto::header::Header;
use patronus_core::proto::messages::{Access, Mode, Reply, Request, Status};
use support::*;

fn acquire(addr: u64, access: Access, mode: Mode, wait_us: u64) -> Request {
    Request::Acquire {
        addr,
        size: 8,
        lease_us: 5_000,
        access,
        mode,
        wait_us,
    }
}

fn allocate_exclusive(sim: &mut Sim, client: u32) -> patronus_core::proto::messages::Grant {
    expect_grant(sim.call(
        client,
        Request::Allocate {
            size: 64,
            lease_us: 5_000,
            mode: Mode::Exclusive,
        },
    ))
}

#[test]
fn retried_waiting_acquire_joins_the_original_and_both_copies_are_answered() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = allocate_exclusive(&mut sim, 1);
    let req = acquire(g.buffer_addr, Access::ReadWrite, Mode::Exclusive, 1_000_000);
    let id = sim.submit(2, req);
    assert!(reply_to(&sim.run(), id).is_none(), "waits for the holder");
    sim.resubmit(2, id, req); // the client's retry, same id
    assert!(sim.run().is_empty());
    assert_eq!(sim.occupancy().waiters, 1, "the retry joined its original");
    let out = sim.step(&[(
        1,
        Request::Revoke {
            id: g.id,
            free: false,
        },
    )]);
    let granted = out.iter().find(|o| o.req_id == id).expect("granted");
    assert_eq!(granted.copies, 2, "each copy gets the reply");
    let h = expect_grant(granted.reply);
    assert_eq!(sim.revoke(2, h.id, false), Reply::Revoked);
    assert_eq!(sim.occupancy().permissions, 0, "no orphaned permission");
    // A copy that arrives after the answer is a new request with an old id: the driver's reply
    // cache answers it; the core, seeing it, must not revive the waiter.
    assert_eq!(sim.occupancy().waiters, 0);
}

#[test]
fn failed_bind_fails_only_grants_of_its_domain() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    sim.add_client_domain(1, 8);
    sim.add_client_domain(2, 8);
    let alloc = Request::Allocate {
        size: 64,
        lease_us: 5_000,
        mode: Mode::Shared,
    };
    sim.nic.fail_next_binds = 1; // the chain's first bind: client 1's window
    let x = sim.submit(1, alloc);
    let y = sim.submit(2, alloc);
    let out = sim.run();
    assert_eq!(
        reply_to(&out, x),
        Some(Reply::Failed(Status::BindFailed)),
        "the failure is client 1's"
    );
    assert!(
        matches!(reply_to(&out, y), Some(Reply::Granted(_))),
        "client 2's grant is not failed by client 1's broken bind: {out:?}"
    );
}

#[test]
fn failed_bind_in_the_shared_domain_fails_the_chain() {
    // One PD for everyone: a failed bind may leave a shared window where it was, so every
    // grant of the chain fails (a verbs QP would flush the rest of the chain anyway).
    // One shard: the injected fault counts binds of one chain.
    let mut sim = Sim::one_shard(test_config(Techniques::ALL));
    let alloc = Request::Allocate {
        size: 64,
        lease_us: 5_000,
        mode: Mode::Shared,
    };
    sim.nic.fail_next_binds = 1;
    let x = sim.submit(1, alloc);
    let y = sim.submit(2, alloc);
    let out = sim.run();
    for id in [x, y] {
        assert_eq!(reply_to(&out, id), Some(Reply::Failed(Status::BindFailed)));
    }
}

/// One 64-byte object (96 bytes with its header slot).
fn one_object(techniques: Techniques, scrub: Scrub) -> ManagerConfig {
    ManagerConfig {
        buffer_len: 96,
        slab: SlabConfig {
            min_class: 64,
            max_class: 64,
            slab_bytes: 96,
        },
        scrub,
        ..test_config(techniques)
    }
}

#[test]
fn reused_memory_is_scrubbed_after_the_chain_and_before_the_reply() {
    for t in [Techniques::ALL, Techniques::NONE] {
        let mut sim = Sim::new(one_object(t, Scrub::OnGrant));
        let g = sim.allocate(1, 64, 5_000);
        assert!(sim.scrubbed.is_empty(), "fresh memory is clean");
        assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
        // The Sim checks that no window but the new grant's covers the range when it is
        // zeroed (delayed-unbound windows of the first owner die in the same chain).
        let h = sim.allocate(2, 64, 5_000);
        assert_eq!(h.buffer_addr, g.buffer_addr);
        assert_eq!(sim.scrubbed, vec![(h.buffer_addr, 64)], "{t:?}");
    }
}

#[test]
fn idle_scrub_takes_only_memory_no_window_covers() {
    // Delayed unbinding leaves the first owner's window over the freed object: not yet.
    let mut sim = Sim::new(one_object(Techniques::ALL, Scrub::Idle));
    let g = sim.allocate(1, 64, 5_000);
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert!(
        sim.core_mut().scrub_idle(8).is_empty(),
        "a stale window still covers it"
    );
    assert_eq!(sim.occupancy().dirty_objects, 1);
    let h = sim.allocate(2, 64, 5_000);
    assert_eq!(
        sim.scrubbed,
        vec![(h.buffer_addr, 64)],
        "on the grant path instead"
    );
    // Idle time first unbinds the stale window (in a batch without requests), then scrubs.
    assert_eq!(sim.revoke(2, h.id, true), Reply::Revoked);
    assert!(sim.core_mut().scrub_idle(8).is_empty());
    assert!(
        sim.core_mut().unbind_idle(8),
        "the stale window is queued for unbinding"
    );
    assert!(
        sim.core_mut().scrub_idle(8).is_empty(),
        "not before the unbind ran"
    );
    sim.run();
    assert!(
        sim.nic.windows_over(h.buffer_addr, 64).is_empty(),
        "unbound"
    );
    assert_eq!(sim.core_mut().scrub_idle(8), vec![(h.buffer_addr, 64)]);
    let i = sim.allocate(3, 64, 5_000);
    assert_eq!(i.buffer_addr, h.buffer_addr);
    assert_eq!(
        sim.scrubbed.len(),
        1,
        "already clean: nothing on the grant path"
    );
    // Without delayed unbinding the window dies with the free: scrubbed in the background.
    let mut t = Techniques::ALL;
    t.delayed_unbind = false;
    let mut sim = Sim::new(one_object(t, Scrub::Idle));
    let g = sim.allocate(1, 64, 5_000);
    assert_eq!(sim.revoke(1, g.id, true), Reply::Revoked);
    assert_eq!(sim.core_mut().scrub_idle(8), vec![(g.buffer_addr, 64)]);
    assert_eq!(sim.occupancy().dirty_objects, 0);
    sim.allocate(2, 64, 5_000);
    assert!(
        sim.scrubbed.is_empty(),
        "already clean: nothing on the grant path"
    );
}

#[test]
fn another_tenants_object_looks_like_no_object() {
    // One shard: tenants are set on the core.
    let mut sim = Sim::one_shard(test_config(Techniques::ALL));
    sim.core_mut().set_tenant(1, 10);
    sim.core_mut().set_tenant(2, 20);
    sim.core_mut().set_tenant(3, 10);
    let g = sim.allocate(1, 64, 5_000);
    let stranger = sim.acquire(2, g.buffer_addr, 8, 5_000, Access::Read, Mode::Shared);
    let nothing = sim.acquire(
        2,
        g.buffer_addr + 4096,
        8,
        5_000,
        Access::Read,
        Mode::Shared,
    );
    assert_eq!(stranger, Reply::Failed(Status::NotFound));
    assert_eq!(stranger, nothing, "not yours == no object");
    // Only the owner tenant shares.
    let share = |tenant, access| Request::Share {
        addr: g.buffer_addr,
        tenant,
        access,
    };
    assert_eq!(sim.call(2, share(20, Some(Access::ReadWrite))), nothing);
    assert_eq!(sim.call(3, share(20, Some(Access::Read))), Reply::Shared);
    let r = expect_grant(sim.acquire(2, g.buffer_addr, 8, 5_000, Access::Read, Mode::Shared));
    let rw = sim.acquire(2, g.buffer_addr, 8, 5_000, Access::ReadWrite, Mode::Shared);
    assert_eq!(rw, Reply::Failed(Status::NotFound), "only up to the share");
    assert_eq!(
        sim.revoke(2, r.id, true),
        Reply::Failed(Status::NotOwner),
        "a share never frees"
    );
    // The same tenant shares freely, and may free.
    let w = expect_grant(sim.acquire(3, g.buffer_addr, 8, 5_000, Access::ReadWrite, Mode::Shared));
    assert_eq!(sim.revoke(3, w.id, true), Reply::Revoked);
    assert_eq!(sim.occupancy().live_objects, 0);
}

#[test]
fn renewal_replaces_the_permission_without_a_gap() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let g = allocate_exclusive(&mut sim, 1);
    let renew = |id| Request::Renew {
        id,
        lease_us: 5_000,
    };
    let h = expect_grant(sim.call(1, renew(g.id)));
    assert_ne!(h.id, g.id);
    assert_eq!(h.buffer_addr, g.buffer_addr);
    assert!(
        !sim.any_key_alive(&g),
        "the old permission ended in the same chain"
    );
    assert_eq!(sim.occupancy().permissions, 1);
    let other = sim.acquire(2, g.buffer_addr, 8, 5_000, Access::Read, Mode::Shared);
    assert_eq!(
        other,
        Reply::Failed(Status::ConflictTimeout),
        "still exclusive"
    );
    assert_eq!(sim.call(1, renew(g.id)), Reply::Failed(Status::NotFound));
    // With a waiter queued, renewal is refused and the holder keeps its permission.
    let w = sim.submit(
        2,
        acquire(g.buffer_addr, Access::Read, Mode::Shared, 1_000_000),
    );
    assert!(reply_to(&sim.run(), w).is_none());
    assert_eq!(
        sim.call(1, renew(h.id)),
        Reply::Failed(Status::ExtensionRefused)
    );
    assert!(sim.can_read(&h));
}

#[test]
fn objects_of_two_mib_and_more_have_a_header() {
    let cfg = ManagerConfig {
        buffer_len: 32 << 20,
        slab: SlabConfig {
            min_class: 64,
            max_class: 8 << 20,
            slab_bytes: 8 << 20,
        },
        ..test_config(Techniques::ALL)
    };
    // One shard: the object needs the whole buffer pool.
    let mut sim = Sim::one_shard(cfg);
    for size in [2 << 20, 8 << 20] {
        let g = sim.allocate(1, size, 5_000);
        let words = [0, 8, 16, 24].map(|o| sim.nic.word(g.id.header_addr + o));
        let h = Header::decode(words);
        assert_eq!((h.buffer_addr, h.buffer_len), (g.buffer_addr, size));
        assert_eq!(h.lifetime_us, 5_000, "a lifetime word to extend");
    }
    let too_big = sim.call(
        1,
        Request::Allocate {
            size: (8 << 20) + 1,
            lease_us: 5_000,
            mode: Mode::Shared,
        },
    );
    assert_eq!(too_big, Reply::Failed(Status::TooLarge));
}

#[test]
fn random_key_bytes_are_not_a_plus_one_sequence() {
    let cfg = ManagerConfig {
        mw_count: 1,
        key_seed: Some(7),
        ..test_config(Techniques::ALL)
    };
    let mut sim = Sim::new(cfg);
    let g = sim.allocate(1, 64, 5_000);
    assert_eq!(sim.revoke(1, g.id, false), Reply::Revoked);
    let mut keys = Vec::new();
    for _ in 0..64 {
        let p = expect_grant(sim.acquire(
            1,
            g.buffer_addr,
            8,
            5_000,
            Access::ReadWrite,
            Mode::Exclusive,
        ));
        keys.push(p.buffer_rkey.key_byte());
        assert_eq!(sim.revoke(1, p.id, false), Reply::Revoked);
    }
    let plus_one = keys
        .windows(2)
        .filter(|w| w[1] == w[0].wrapping_add(1))
        .count();
    assert!(plus_one < 4, "{keys:?}");
}
