//! Manager core against the fake NIC: what a departed client (closed or silent connection)
//! held is given back — its permissions end and their windows are unbound before anyone else
//! is served the memory, its queued requests go, and its protection domain's windows retire
//! and are reused whole by later clients, so tables do not grow with churn.

mod support;

use patronus_core::manager::{Scrub, Techniques};
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use support::*;

fn acquire_waiting(addr: u64, mode: Mode) -> Request {
    Request::Acquire {
        addr,
        size: 8,
        lease_us: 5_000,
        access: Access::ReadWrite,
        mode,
        wait_us: 50_000,
    }
}

fn allocate(mode: Mode) -> Request {
    Request::Allocate {
        size: 64,
        lease_us: 5_000,
        mode,
    }
}

#[test]
fn a_departed_holder_makes_way_for_the_waiter_after_its_keys_died() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    sim.add_client_domain(1, 8);
    sim.add_client_domain(2, 8);
    let held = expect_grant(sim.call(1, allocate(Mode::Exclusive)));
    let waiting = sim.submit(2, acquire_waiting(held.buffer_addr, Mode::Exclusive));
    assert!(reply_to(&sim.run(), waiting).is_none(), "queued behind 1");
    let (out, retired) = sim.depart(1);
    let granted = expect_grant(reply_to(&out, waiting).expect("granted in the departure batch"));
    assert!(
        !sim.any_key_alive(&held),
        "the departed holder's keys are dead"
    );
    assert!(sim.can_write(&granted));
    assert_eq!(sim.occupancy().permissions, 1);
    assert_eq!(
        retired.iter().flatten().map(|r| r.len()).sum::<usize>(),
        8 * retired.len(),
        "client 1's domain retired in every shard: {retired:?}"
    );
    assert_eq!(
        sim.occupancy().live_objects,
        1,
        "its memory stays its tenant's"
    );
}

#[test]
fn departed_domains_unbind_stale_windows_and_are_reused_whole() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    sim.add_client_domain(1, 8);
    let before = sim.occupancy();
    // Freed memory keeps its window bound (delayed unbinding) and a live grant keeps two.
    let live = expect_grant(sim.call(1, allocate(Mode::Shared)));
    let freed = expect_grant(sim.call(1, allocate(Mode::Shared)));
    assert_eq!(sim.revoke(1, freed.id, true), Reply::Revoked);
    assert!(sim.occupancy().mw_stale > 0, "{:?}", sim.occupancy());
    let (_, retired) = sim.depart(1);
    assert!(retired.iter().all(|r| r.len() == 1), "{retired:?}");
    assert!(!sim.any_key_alive(&live) && !sim.any_key_alive(&freed));
    let after = sim.occupancy();
    assert_eq!(
        (after.mw_free, after.mw_stale, after.mw_capacity),
        (
            before.mw_free - 8 * retired.len(),
            0,
            before.mw_capacity - 8 * retired.len()
        ),
        "the retired windows are counted nowhere"
    );
    // Many clients come and go: the window tables stay the size of one domain.
    for client in 2..200 {
        sim.add_client_domain(client, 8);
        let g = expect_grant(sim.call(client, allocate(Mode::Shared)));
        assert!(sim.can_write(&g));
        sim.depart(client);
    }
    let end = sim.occupancy();
    assert_eq!((end.mw_capacity, end.permissions), (after.mw_capacity, 0));
    assert_eq!(
        sim.nic.window_count() as usize,
        test_config(Techniques::ALL).mw_count as usize + 8 * retired.len(),
        "no window was added after the first domain"
    );
}

#[test]
fn a_departed_waiter_is_dropped_unanswered() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let held = expect_grant(sim.call(1, allocate(Mode::Exclusive)));
    let waiting = sim.submit(2, acquire_waiting(held.buffer_addr, Mode::Exclusive));
    sim.run();
    assert_eq!(sim.occupancy().waiters, 1);
    let (out, retired) = sim.depart(2);
    assert!(
        out.is_empty() && retired.iter().all(Vec::is_empty),
        "{out:?}"
    );
    assert_eq!(sim.occupancy().waiters, 0);
    assert!(sim.can_write(&held), "the holder is untouched");
    // Its request id is gone: a late revoke by the holder grants nobody.
    assert_eq!(sim.revoke(1, held.id, false), Reply::Revoked);
    assert!(reply_to(&sim.run(), waiting).is_none());
}

#[test]
fn a_departed_client_in_the_shared_domain_gives_its_windows_back() {
    let mut sim = Sim::new(test_config(Techniques::ALL));
    let before = sim.occupancy();
    let grants: Vec<_> = (0..5)
        .map(|_| expect_grant(sim.call(1, allocate(Mode::Shared))))
        .collect();
    sim.depart(1);
    assert!(grants.iter().all(|g| !sim.any_key_alive(g)));
    let after = sim.occupancy();
    assert_eq!(after.permissions, 0);
    assert_eq!(
        after.mw_free + after.mw_stale,
        before.mw_free,
        "every window is back"
    );
    assert_eq!(
        after.live_objects, 5,
        "memory stays its tenant's until freed"
    );
}

#[test]
fn departure_with_scrubbing_off_and_no_techniques() {
    let cfg = patronus_core::manager::ManagerConfig {
        scrub: Scrub::Off,
        ..test_config(Techniques::NONE)
    };
    let mut sim = Sim::new(cfg);
    sim.add_client_domain(1, 8);
    let g = expect_grant(sim.call(1, allocate(Mode::Shared)));
    let (_, retired) = sim.depart(1);
    assert!(!sim.any_key_alive(&g));
    assert!(retired.iter().all(|r| r.len() == 1));
}
