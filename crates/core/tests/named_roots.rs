//! Named roots: a client publishes an object under a name, another client of the same tenant
//! finds it and acquires it; other tenants see nothing; bad names and duplicates get clear
//! errors. Run with one shard and (CI) four: names live on the shard their hash picks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NAMES_PER_TENANT, NodeConfig, TenantSecret};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;
use support::bed::{Rdma, Rig, bed, node_cfg};

const LEASE: Duration = Duration::from_millis(500);

fn tenant(tenant: u32) -> ClientConfig {
    ClientConfig {
        tenant,
        tenant_secret: 0x5ec0 + u64::from(tenant),
        ..ClientConfig::default()
    }
}

fn publish_lookup_acquire<R: Rig>(t: R, iso: Isolation) {
    let node = NodeConfig {
        tenants: [1, 2]
            .map(|t| TenantSecret {
                tenant: t,
                secret: 0x5ec0 + u64::from(t),
            })
            .to_vec(),
        ..node_cfg()
    };
    let mut b = bed(t, iso, 2, node, tenant(1));
    let ctx = b.cluster.client_ctxs[0].clone();
    let addr = b.cluster.node.address().clone();
    let (first, rest) = b.cluster.clients.split_at_mut(1);
    let (owner, peer) = (&mut first[0], &mut rest[0]);
    let root = owner.allocate(256, LEASE, Mode::Shared).unwrap();
    owner.write(&root, 0, b"the table's metadata").unwrap();
    owner
        .control()
        .publish("orders", root.addr(), root.len())
        .unwrap();
    assert!(matches!(
        owner.control().publish("orders", root.addr(), 8),
        Err(ClientError::NameTaken)
    ));
    // Another client of the tenant finds it by name and acquires it.
    let (at, len) = peer.control().lookup("orders").unwrap();
    assert_eq!((at, len), (root.addr(), root.len()));
    let seen = peer
        .acquire(at, len, LEASE, Access::Read, Mode::Shared)
        .unwrap();
    let mut buf = [0u8; 20];
    peer.read(&seen, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"the table's metadata");
    // Another tenant sees nothing under that name, and may publish its own.
    let mut stranger = Client::<R::P>::connect(&ctx, &addr, tenant(2)).unwrap();
    assert!(matches!(
        stranger.control().lookup("orders"),
        Err(ClientError::NotFound)
    ));
    assert!(matches!(
        stranger.control().unpublish("orders"),
        Err(ClientError::NotFound)
    ));
    stranger.control().publish("orders", 4096, 64).unwrap();
    assert_eq!(
        peer.control().lookup("orders").unwrap(),
        (root.addr(), root.len())
    );
    // Bad names are refused before anything is sent.
    for bad in ["", &"x".repeat(33), "nul\0inside"] {
        assert!(
            matches!(
                owner.control().publish(bad, root.addr(), 8),
                Err(ClientError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
        assert!(matches!(
            peer.control().lookup(bad),
            Err(ClientError::InvalidArgument(_))
        ));
    }
    // Withdrawn, the name is gone for every client of the tenant; the object stays.
    peer.control().unpublish("orders").unwrap();
    assert!(matches!(
        owner.control().lookup("orders"),
        Err(ClientError::NotFound)
    ));
    owner.read(&root, 0, &mut buf).unwrap();
    let occupancy = b.cluster.node.fresh_stats().occupancy.unwrap();
    assert_eq!(occupancy.names, 1, "the stranger's");
    owner.free(root).unwrap();
}

/// A tenant cannot grow the name table without bound: past its share, `QuotaExceeded`.
fn names_are_bounded_per_tenant<R: Rig>(t: R, iso: Isolation) {
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    let c = &mut b.cluster.clients[0];
    let shards = c.status().shard_map().shards as usize;
    let mut published = 0;
    let err = loop {
        match c.control().publish(&format!("n{published}"), 4096, 64) {
            Ok(()) => published += 1,
            Err(e) => break e,
        }
        assert!(published <= NAMES_PER_TENANT * shards, "no bound");
    };
    assert!(matches!(err, ClientError::QuotaExceeded), "{err:?}");
    assert!(published >= NAMES_PER_TENANT, "{published}");
    c.control().unpublish("n0").unwrap();
}

every_rig! {
    a_name_leads_clients_of_its_tenant_only_to_the_object => publish_lookup_acquire;
    a_tenant_keeps_a_bounded_number_of_names => names_are_bounded_per_tenant;
}
