//! Denial of service (`docs/threat-model.md`, "Denial of service"): what one client —
//! careless or hostile — can do to the memory node and to the other clients, one abuse per
//! module. Each test runs on both transports and in every isolation mode where the abuse
//! applies; it asserts that the honest client keeps
//! making progress during the abuse and is fully served after, and that the node's resource
//! counts (sessions, QPs, windows, protection domains, pool bytes) return to their starting
//! values. Loops are bounded in count; the tens of thousands of cycles live in the `#[ignore]`d
//! soak test (`churn::soak`), run by the README's soak command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

#[path = "denial_of_service/addresses.rs"]
mod addresses;
#[path = "denial_of_service/churn.rs"]
mod churn;
#[path = "denial_of_service/client_quota.rs"]
mod client_quota;
#[path = "denial_of_service/fair_shares.rs"]
mod fair_shares;
#[path = "denial_of_service/faults.rs"]
mod faults;
#[path = "denial_of_service/flood.rs"]
mod flood;
#[path = "denial_of_service/frames.rs"]
mod frames;
#[path = "denial_of_service/hoard.rs"]
mod hoard;
#[path = "denial_of_service/priority.rs"]
mod priority;
#[path = "denial_of_service/session_rate.rs"]
mod session_rate;
#[path = "denial_of_service/storm.rs"]
mod storm;
#[path = "denial_of_service/stray_replies.rs"]
mod stray_replies;
#[path = "denial_of_service/unauthenticated.rs"]
mod unauthenticated;

use patronus_core::manager::{Held, MemoryNode, NodeStats};
use rnic::soft::{DeviceResources, SoftContext, SoftProvider};
use support::bed::{Bed, wait_node};

/// What the node holds, counted where it is kept: the node's own tables, its pool and the
/// device's verbs objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub held: Held,
    pub pool_bytes_in_use: u64,
    pub device: DeviceResources,
}

impl Footprint {
    /// The live sessions' reply caches are not compared (the honest client's grows with its
    /// requests, up to its bound), only checked against that bound.
    pub fn of(stats: &NodeStats, ctx: &SoftContext) -> Self {
        assert!(
            stats.held.recent_requests <= 128 * stats.held.sessions,
            "reply caches are bounded per session: {stats:?}"
        );
        Footprint {
            held: Held {
                recent_requests: 0,
                ..stats.held
            },
            pool_bytes_in_use: stats.pool_bytes_in_use,
            device: ctx.resources(),
        }
    }
}

/// The node's footprint once it settled (every accepted connection taken up by its shard).
pub fn footprint(b: &Bed) -> Footprint {
    let s = wait_node(&b.cluster.node, "connections taken up", |s| {
        s.held.pending_connections == 0
    });
    Footprint::of(&s, &b.cluster.node_ctx)
}

/// Waits (bounded) until the node's footprint is back to `start` (plus `extra_pool_bytes`:
/// objects left allocated, which stay their tenant's).
pub fn wait_back_to(b: &Bed, start: Footprint, extra_pool_bytes: u64) {
    let (node, ctx) = (&b.cluster.node, &b.cluster.node_ctx);
    let start = Footprint {
        pool_bytes_in_use: start.pool_bytes_in_use + extra_pool_bytes,
        ..start
    };
    let mut last = None;
    let settled = wait_node_or(node, |s| {
        let now = Footprint::of(s, ctx);
        last = Some(now);
        now == start
    });
    assert!(
        settled,
        "the node's footprint did not return to its start:\n start {start:?}\n now   {last:?}"
    );
}

/// `wait_node` that reports instead of panicking on its bounded wait.
fn wait_node_or(node: &MemoryNode<SoftProvider>, mut cond: impl FnMut(&NodeStats) -> bool) -> bool {
    let cell = std::cell::RefCell::new(&mut cond);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_node(node, "footprint", |s| (cell.borrow_mut())(s))
    }))
    .is_ok()
}

/// The honest client does a round of work (it must never fail).
pub fn honest_round(b: &mut Bed) {
    use patronus_core::proto::messages::Mode;
    let c = &mut b.cluster.clients[0];
    let p = c
        .allocate(128, std::time::Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    c.write(&p, 0, b"honest").unwrap();
    c.free(p).unwrap();
}

/// A client of `tenant` (id, secret).
pub fn as_tenant((tenant, secret): (u32, u64)) -> patronus_core::client::ClientConfig {
    patronus_core::client::ClientConfig {
        tenant,
        tenant_secret: secret,
        ..Default::default()
    }
}

/// The tenants a node serves, as (id, secret).
pub fn serving(tenants: &[(u32, u64)]) -> Vec<patronus_core::manager::TenantSecret> {
    tenants
        .iter()
        .map(|&(tenant, secret)| patronus_core::manager::TenantSecret { tenant, secret })
        .collect()
}
