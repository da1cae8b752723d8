//! Priorities (LITE's SW-Pri, `manager::node::priority`): over TCP, the node reads what its
//! NIC served the high-priority tenant's data QPs each period of its (virtual) clock, and
//! throttles the low-priority tenant's data QPs while that load is high — the NIC then
//! serves a burst of the low-priority client's requests and holds the rest, however long
//! the high-priority client works — and lifts the limit once the high-priority load is gone
//! (the held requests are served without waiting for their tokens). Time moves only when
//! the test moves the clock, so every decision is taken on counts the test made.

use super::*;
use patronus_core::client::Client;
use patronus_core::cluster::Link;
use patronus_core::manager::{
    Isolation, NodeConfig, NodeStats, Priority, PriorityPolicy, TenantPriority,
};
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

const HIGH: (u32, u64) = (1, 0x4141);
const LOW: (u32, u64) = (2, 0x1010);
const PERIOD: Duration = Duration::from_millis(10);
/// Requests of the low-priority client's held batch: more than the throttled burst.
const LOW_BATCH: usize = 24;

fn node() -> NodeConfig {
    NodeConfig {
        max_lifetime_us: 60_000_000,
        tenants: serving(&[HIGH, LOW]),
        tenant_priorities: vec![
            TenantPriority {
                tenant: HIGH.0,
                priority: Priority::High,
            },
            TenantPriority {
                tenant: LOW.0,
                priority: Priority::Low,
            },
        ],
        priority_policy: PriorityPolicy {
            period_us: PERIOD.as_micros() as u64,
            // 10 high-priority ops in a 10 ms period are 1000 a second.
            high_load_ops_per_s: 1_000,
            release_ops_per_s: 500,
            release_periods: 1,
            // A burst of 16 (the smallest), then 100 a second: one per 10 ms period.
            throttled_ops_per_s: Some(100),
            throttled_bytes_per_s: None,
        },
        ..node_cfg()
    }
}

fn periods(s: &NodeStats) -> u64 {
    s.priority.periods
}

fn low_priority_is_throttled_while_high_priority_is_busy(iso: Isolation) {
    let mut b = bed(Link::Tcp, iso, 1, node(), as_tenant(LOW));
    let ctx = b.cluster.client_ctxs[0].clone();
    let addr = b.cluster.node.address().clone();
    let mut high = Client::<SoftProvider>::connect(&ctx, &addr, as_tenant(HIGH)).unwrap();
    let lease = Duration::from_secs(10);
    let hp = high.allocate(4096, lease, Mode::Exclusive).unwrap();
    let low = &mut b.cluster.clients[0];
    let lp = low.allocate(4096, lease, Mode::Exclusive).unwrap();
    let page = [7u8; 4096];
    // A quiet period: no high-priority load, nothing throttled (policy 2); the low-priority
    // client is served far past any burst with the clock standing.
    let p0 = periods(&b.cluster.node.fresh_stats());
    b.clock.advance(PERIOD);
    let s = wait_for(&b, "a quiet period", |s| periods(s) > p0);
    assert!(!s.priority.throttled, "{:?}", s.priority);
    let low = &mut b.cluster.clients[0];
    for _ in 0..3 * LOW_BATCH {
        low.write(&lp, 0, &page).unwrap();
    }
    // A busy period: 20 high-priority ops in 10 ms, 2000 a second (policy 1).
    for _ in 0..20 {
        high.write(&hp, 0, &page).unwrap();
    }
    let p1 = periods(&b.cluster.node.fresh_stats());
    b.clock.advance(PERIOD);
    let s = wait_for(&b, "a busy period", |s| periods(s) > p1);
    assert!(s.priority.throttled, "{:?}", s.priority);
    assert!(s.priority.high_ops_per_s >= 2_000, "{:?}", s.priority);
    assert_eq!(s.priority.engaged, 1);
    // Throttled: a burst of the low-priority batch is served, the rest held however much the
    // high-priority client gets served meanwhile (its requests go through the same engine).
    let low = &mut b.cluster.clients[0];
    let mut batch = low.batch();
    for _ in 0..LOW_BATCH {
        batch.write(&lp, 0, &page);
    }
    let mut held = batch.start();
    for _ in 0..50 {
        high.write(&hp, 0, &page).unwrap();
        let low = &mut b.cluster.clients[0];
        assert!(
            held.poll(low).is_none(),
            "the low-priority batch was served in full while throttled"
        );
    }
    // That was another busy period (50 high-priority ops): still throttled.
    let p2 = periods(&b.cluster.node.fresh_stats());
    b.clock.advance(PERIOD);
    let s = wait_for(&b, "another busy period", |s| periods(s) > p2);
    assert!(s.priority.throttled, "{:?}", s.priority);
    // The high-priority client goes quiet: the next period lifts the limit, and the held
    // requests are served (two periods' tokens, 2, would not cover them).
    let p3 = periods(&b.cluster.node.fresh_stats());
    b.clock.advance(PERIOD);
    let s = wait_for(&b, "a quiet period again", |s| periods(s) > p3);
    assert!(!s.priority.throttled, "{:?}", s.priority);
    assert_eq!(s.priority.lifted, 1);
    let low = &mut b.cluster.clients[0];
    let results = held.wait(low);
    assert_eq!(results.len(), LOW_BATCH);
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert_eq!(s.priority.services_failed, 0);
    drop(high);
}

#[test]
fn tcp_shared_pd() {
    low_priority_is_throttled_while_high_priority_is_busy(Isolation::SharedPd);
}

#[test]
fn tcp_pd_per_client() {
    low_priority_is_throttled_while_high_priority_is_busy(Isolation::PdPerClient);
}
