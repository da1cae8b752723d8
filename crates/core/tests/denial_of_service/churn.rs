//! Hole 1: connections that close or go silent leave nothing behind. Clients connect, work
//! and disconnect (cleanly, by crashing, or by going silent past the idle timeout); the
//! node's footprint returns to where it was, and the honest client is served throughout.

use super::*;
use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::Transport;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{bed, node_cfg, wait_for};

/// One short session: connect, allocate, write, read back, free, disconnect.
fn session(b: &Bed, cfg: &ClientConfig, free: bool) -> Client<SoftProvider> {
    let ctx = &b.cluster.client_ctxs[0];
    let mut c = Client::connect(ctx, b.cluster.node.address(), cfg.clone()).unwrap();
    let p = c
        .allocate(64, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    c.write(&p, 0, b"churn").unwrap();
    let mut back = [0u8; 5];
    c.read(&p, 0, &mut back).unwrap();
    assert_eq!(&back, b"churn");
    if free {
        c.free(p).unwrap();
    }
    c
}

/// The honest client does a round of work (it must never fail).
fn honest_round(b: &mut Bed) {
    let c = &mut b.cluster.clients[0];
    let p = c
        .allocate(128, Duration::from_millis(100), Mode::Exclusive)
        .unwrap();
    c.write(&p, 0, b"honest").unwrap();
    c.free(p).unwrap();
}

fn churn(t: Transport, iso: Isolation, sessions: usize) {
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let cfg = ClientConfig::default();
    for i in 0..sessions {
        // Clean disconnects, with a permission still held at the end of every other one.
        let c = session(&b, &cfg, i % 2 == 0);
        drop(c);
        if i % 16 == 0 {
            honest_round(&mut b);
        }
    }
    honest_round(&mut b);
    // Memory allocated and not freed stays its tenant's: free it through a new session.
    let leftover = b.cluster.node.fresh_stats().pool_bytes_in_use - start.pool_bytes_in_use;
    assert_eq!(
        leftover,
        (sessions as u64 / 2) * 96,
        "one 64-byte object (with its header slot) per unfreed session"
    );
    wait_for(&b, "every churned session ended", |s| {
        s.sessions_ended.closed >= sessions as u64
    });
    let live = b.cluster.node.fresh_stats();
    assert_eq!(live.held.sessions, start.held.sessions, "{live:?}");
    assert_eq!(live.held.data_qps, start.held.data_qps, "{live:?}");
    assert_eq!(
        live.held.client_domains, start.held.client_domains,
        "{live:?}"
    );
    assert_eq!(live.held.windows, start.held.windows, "{live:?}");
    assert_eq!(
        live.held.client_records, start.held.client_records,
        "{live:?}"
    );
    assert_eq!(b.cluster.node_ctx.qp_count(), start.device_qps);
}

/// A node whose clients are cut off after 5 s (virtual) of silence, 1 s without a `Hello`.
fn short_timeouts() -> patronus_core::manager::NodeConfig {
    patronus_core::manager::NodeConfig {
        limits: patronus_core::manager::NodeLimits {
            idle_timeout_us: 5_000_000,
            hello_timeout_us: 1_000_000,
        },
        ..node_cfg()
    }
}

/// A client that goes silent (it neither closes nor talks) is cut off after the idle
/// timeout, while the honest client, which keeps talking, is not.
fn silent_client(t: Transport, iso: Isolation) {
    let mut b = bed(t, iso, 1, short_timeouts(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let silent = session(&b, &ClientConfig::default(), false);
    let during = b.cluster.node.fresh_stats();
    assert_eq!(during.held.sessions, start.held.sessions + during.shards);
    for _ in 0..4 {
        b.clock.advance(Duration::from_millis(1_500));
        honest_round(&mut b);
    }
    let s = wait_for(&b, "the silent client's session ended", |s| {
        s.sessions_ended.idle == 1
    });
    assert_eq!(s.sessions_ended.closed, 0, "{s:?}");
    // Its unfreed object stays its tenant's; everything else it held is back.
    let end = footprint(&b);
    assert_eq!(end.held, start.held);
    assert_eq!(end.device_qps, start.device_qps);
    assert_eq!(end.pool_bytes_in_use, start.pool_bytes_in_use + 96);
    drop(silent);
    honest_round(&mut b);
}

/// A connection that never authenticates costs nothing after the hello timeout.
fn no_hello(t: Transport, iso: Isolation) {
    use patronus_core::proto::connect::{Intent, Role};
    use rnic::{AccessFlags, Context, ProtectionDomain, QpInit, QpTiming, QueuePair};
    let mut b = bed(t, iso, 1, short_timeouts(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let ctx = &b.cluster.client_ctxs[0];
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let lurkers: Vec<_> = (0..8)
        .map(|_| {
            let qp = pd
                .create_qp(QpInit {
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    access: AccessFlags::empty(),
                    timing: QpTiming::default(),
                })
                .unwrap();
            let intent = Intent {
                role: Role::Control,
                client_id: 0,
                secret: 0,
                slot: 0,
            };
            qp.connect(b.cluster.node.address(), &intent.encode())
                .unwrap();
            qp
        })
        .collect();
    wait_for(&b, "the lurkers' sessions", |s| {
        s.held.sessions == start.held.sessions + 8
    });
    b.clock.advance(Duration::from_millis(1_100));
    honest_round(&mut b);
    let s = wait_for(&b, "the lurkers were cut off", |s| {
        s.sessions_ended.no_hello == 8
    });
    assert_eq!(s.sessions_ended.idle, 0, "{s:?}");
    assert_eq!(footprint(&b), start);
    drop(lurkers);
    honest_round(&mut b);
}

every_mode! {
    connect_work_disconnect_leaves_nothing_behind => |t, iso| churn(t, iso, 48);
    a_silent_client_is_cut_off_after_the_idle_timeout => silent_client;
    a_connection_without_hello_is_cut_off => no_hello;
}
