//! Manager core against the fake NIC: tenant quotas (`docs/threat-model.md`, `tenant_quota`).
//! A tenant that hits
//! its own quota gets `QuotaExceeded`; the others are unaffected; what it frees or revokes
//! gives room back; a renewal at the quota still goes through (it replaces a permission).

mod support;

use patronus_core::manager::{Techniques, TenantQuota};
use patronus_core::proto::messages::{Access, Mode, Reply, Request, Status};
use support::*;

const HOG: u32 = 1;
const HONEST: u32 = 2;

fn sim(quota: TenantQuota) -> Sim {
    let mut sim = Sim::one_shard(patronus_core::manager::ManagerConfig {
        quota,
        ..test_config(Techniques::ALL)
    });
    sim.core_mut().set_tenant(HOG, 10);
    sim.core_mut().set_tenant(HONEST, 20);
    sim
}

fn allocate(size: u64, mode: Mode) -> Request {
    Request::Allocate {
        size,
        lease_us: 5_000,
        mode,
    }
}

#[test]
fn memory_quota_stops_its_tenant_only() {
    // 64-byte objects occupy 96 bytes with their header slot: three fit in 300.
    let mut sim = sim(TenantQuota {
        memory_bytes: 300,
        ..TenantQuota::UNLIMITED
    });
    let held: Vec<_> = (0..3)
        .map(|_| expect_grant(sim.call(HOG, allocate(64, Mode::Shared))))
        .collect();
    assert_eq!(
        expect_failed(sim.call(HOG, allocate(64, Mode::Shared))),
        Status::QuotaExceeded
    );
    for _ in 0..3 {
        expect_grant(sim.call(HONEST, allocate(64, Mode::Shared)));
    }
    assert_eq!(sim.core().usage(10).memory_bytes, 288);
    // Freeing gives room back; revoking without freeing does not (the memory stays owned).
    assert_eq!(sim.revoke(HOG, held[0].id, false), Reply::Revoked);
    assert_eq!(
        expect_failed(sim.call(HOG, allocate(64, Mode::Shared))),
        Status::QuotaExceeded
    );
    assert_eq!(sim.revoke(HOG, held[1].id, true), Reply::Revoked);
    expect_grant(sim.call(HOG, allocate(64, Mode::Shared)));
    assert_eq!(sim.core().usage(10).memory_bytes, 288);
}

#[test]
fn permission_and_exclusive_quotas() {
    let mut sim = sim(TenantQuota {
        permissions: 3,
        exclusive: 1,
        ..TenantQuota::UNLIMITED
    });
    let x = expect_grant(sim.call(HOG, allocate(64, Mode::Exclusive)));
    assert_eq!(
        expect_failed(sim.call(HOG, allocate(64, Mode::Exclusive))),
        Status::QuotaExceeded,
        "one exclusive permission at a time"
    );
    let s = expect_grant(sim.call(HOG, allocate(64, Mode::Shared)));
    // A third permission: a shared acquire of its own object.
    let again = sim.acquire(HOG, s.buffer_addr, 8, 5_000, Access::Read, Mode::Shared);
    assert!(matches!(again, Reply::Granted(_)), "{again:?}");
    let over = sim.acquire(HOG, s.buffer_addr, 8, 5_000, Access::Read, Mode::Shared);
    assert_eq!(over, Reply::Failed(Status::QuotaExceeded));
    // The other tenant has its own quota, untouched by the hog's permissions.
    expect_grant(sim.call(HONEST, allocate(64, Mode::Exclusive)));
    expect_grant(sim.call(HONEST, allocate(64, Mode::Shared)));
    expect_grant(sim.call(HONEST, allocate(64, Mode::Shared)));
    // A renewal at the quota replaces a permission: it goes through.
    let renewed = sim.call(
        HOG,
        Request::Renew {
            id: x.id,
            lease_us: 5_000,
        },
    );
    assert!(matches!(renewed, Reply::Granted(_)), "{renewed:?}");
    assert_eq!(sim.core().usage(10).permissions, 3);
    assert_eq!(sim.core().usage(10).exclusive, 1);
    // Expiry gives room back.
    sim.advance(10_000);
    sim.run();
    assert_eq!(sim.core().usage(10).permissions, 0);
    expect_grant(sim.call(HOG, allocate(64, Mode::Exclusive)));
}
