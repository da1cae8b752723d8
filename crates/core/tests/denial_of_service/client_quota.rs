//! One client of a tenant cannot take everything: with a per-client quota (what `patronus
//! serve` sets without tenants, where everyone is the default tenant and objects outlive
//! their clients), a client that reaches it gets `QuotaExceeded` while another client of the
//! same tenant still allocates; when it leaves, its objects stay the tenant's and count
//! against no client, and a newcomer gets a whole share of its own.

use super::*;
use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits, TenantQuota};
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{bed, node_cfg};

const SIZE: u64 = 4096;
/// Objects one client may hold.
const SHARE: u64 = 4;

/// Allocates `SIZE` objects (keeping the memory, letting the permissions go) until refused;
/// returns the objects and the refusal.
fn allocate_until_refused(c: &mut Client<SoftProvider>) -> (Vec<u64>, ClientError) {
    let mut objects = Vec::new();
    loop {
        match c.allocate(SIZE, Duration::from_secs(1), Mode::Shared) {
            Ok(p) => {
                objects.push(p.addr());
                c.revoke(p).unwrap();
            }
            Err(e) => return (objects, e),
        }
        assert!(objects.len() as u64 <= SHARE, "more than its share");
    }
}

fn one_client_cannot_take_everything(t: Link, iso: Isolation) {
    let node = NodeConfig {
        limits: NodeLimits {
            client_quota: Some(TenantQuota {
                // Room for the objects' headers and slab rounding, not for one more object.
                memory_bytes: SHARE * SIZE + SIZE / 2,
                permissions: 64,
                exclusive: 64,
            }),
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    let mut b = bed(t, iso, 1, node, ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let (ctx, addr) = (
        b.cluster.client_ctxs[0].clone(),
        b.cluster.node.address().clone(),
    );
    let mut hog = Client::<SoftProvider>::connect(&ctx, &addr, ClientConfig::default()).unwrap();
    let (kept, refused) = allocate_until_refused(&mut hog);
    assert_eq!(kept.len() as u64, SHARE);
    assert!(matches!(refused, ClientError::QuotaExceeded), "{refused:?}");
    // The honest client, of the same (default) tenant, is not held to the hog's usage.
    honest_round(&mut b);
    drop(hog);
    // A newcomer has a whole share, though the hog's objects are still allocated.
    let mut next = Client::<SoftProvider>::connect(&ctx, &addr, ClientConfig::default()).unwrap();
    let (theirs, refused) = allocate_until_refused(&mut next);
    assert_eq!(theirs.len() as u64, SHARE);
    assert!(matches!(refused, ClientError::QuotaExceeded), "{refused:?}");
    // Everything is freed (by any client of the tenant: the objects are the tenant's).
    for addr in kept.into_iter().chain(theirs) {
        let p = next
            .acquire(
                addr,
                SIZE,
                Duration::from_secs(1),
                patronus_core::proto::messages::Access::ReadWrite,
                Mode::Exclusive,
            )
            .unwrap();
        next.free(p).unwrap();
    }
    drop(next);
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

every_mode! {
    one_client_of_a_tenant_cannot_take_everything => one_client_cannot_take_everything;
}
