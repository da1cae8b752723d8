//! One tenant cannot take everything. With tenants configured, each has a quota (by
//! default an equal share of the pool, of the permissions the node can hold and of the
//! connections); a tenant that hits its own quota gets `QuotaExceeded`, and the honest tenant
//! gets its whole share whatever the hoarder does.

use super::*;
use patronus_core::client::{Client, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;
use support::bed::{bed, node_cfg};

const HOG: (u32, u64) = (1, 0x1111);
const HONEST: (u32, u64) = (2, 0x2222);
const BIG: u64 = 16 << 10;

fn hoard(t: Link, iso: Isolation) {
    let node = NodeConfig {
        pool_bytes: 16 << 20,
        // Slabs small against the pool (and each shard's slice of it), so that slab rounding
        // stays within the quarter of the pool the default quotas leave for it.
        slab: patronus_core::manager::SlabConfig {
            slab_bytes: 256 << 10,
            ..Default::default()
        },
        header_count: 1024,
        mw_count: 1024,
        tenants: serving(&[HOG, HONEST]),
        limits: NodeLimits {
            sessions_per_tenant: Some(3),
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, iso, 1, node, as_tenant(HONEST));
    honest_round(&mut b);
    let start = footprint(&b);
    let ctx = b.cluster.client_ctxs[0].clone();
    let addr = b.cluster.node.address().clone();
    // Connections: the hog gets its share (the honest client holds one of its own tenant's).
    let mut hogs: Vec<Client<SoftProvider>> = (0..3)
        .map(|_| Client::connect(&ctx, &addr, as_tenant(HOG)).unwrap())
        .collect();
    let refused = Client::<SoftProvider>::connect(&ctx, &addr, as_tenant(HOG)).unwrap_err();
    assert!(
        matches!(refused, ClientError::QuotaExceeded),
        "a fourth connection of the hog: {refused:?}"
    );
    honest_round(&mut b);
    // Memory: the hog allocates until its quota stops it (a share of the pool). It keeps the
    // memory and lets the permissions go, so that only the memory quota stops it.
    let lease = Duration::from_secs(1);
    let mut hog_objects = Vec::new();
    let err = loop {
        match hogs[0].allocate(BIG, lease, Mode::Shared) {
            Ok(p) => {
                hog_objects.push(p.addr());
                hogs[0].revoke(p).unwrap();
            }
            Err(e) => break e,
        }
        assert!(hog_objects.len() < 1024, "no quota stopped the hog");
    };
    assert!(matches!(err, ClientError::QuotaExceeded), "{err:?}");
    // The honest tenant still gets as much as the hog got.
    let honest = &mut b.cluster.clients[0];
    let mine: Vec<u64> = (0..hog_objects.len())
        .map(|_| {
            let p = honest.allocate(BIG, lease, Mode::Shared).unwrap();
            let addr = p.addr();
            honest.revoke(p).unwrap();
            addr
        })
        .collect();
    // Permissions: the hog hoards shared permissions on its own object until its quota stops
    // it; the honest client still acquires.
    let mut hoarded = Vec::new();
    let err = loop {
        match hogs[1].acquire(hog_objects[0], 8, lease, Access::Read, Mode::Shared) {
            Ok(p) => hoarded.push(p),
            Err(e) => break e,
        }
        assert!(hoarded.len() < 2048, "no quota stopped the hoarding");
    };
    assert!(matches!(err, ClientError::QuotaExceeded), "{err:?}");
    free_all(&mut b.cluster.clients[0], &mine, lease);
    honest_round(&mut b);
    // The hog gives everything back and leaves.
    for p in hoarded {
        hogs[1].revoke(p).unwrap();
    }
    free_all(&mut hogs[0], &hog_objects, lease);
    hogs.clear();
    honest_round(&mut b);
    wait_back_to(&b, start, 0);
}

/// Frees objects the client's tenant owns (acquiring each again to free it).
fn free_all(c: &mut Client<SoftProvider>, objects: &[u64], lease: Duration) {
    for &addr in objects {
        let p = c
            .acquire(addr, BIG, lease, Access::ReadWrite, Mode::Exclusive)
            .unwrap();
        c.free(p).unwrap();
    }
}

every_mode! {
    a_hoarding_tenant_is_stopped_by_its_own_quota => hoard;
}
