//! Connections that close or go silent leave nothing behind. Clients connect, work
//! and disconnect (cleanly, by crashing, or by going silent past the idle timeout); the
//! node's footprint returns to where it was, and the honest client is served throughout.

use super::*;
use patronus_core::client::{Client, ClientConfig};
use patronus_core::cluster::Link;
use patronus_core::manager::Isolation;
use patronus_core::proto::messages::Mode;
use std::time::Duration;
use support::bed::{TlsTcp, bed, node_cfg, wait_for};

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

fn churn(t: Link, iso: Isolation, sessions: usize) {
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
    // Memory allocated and not freed stays its tenant's: one 64-byte object (with its header
    // slot) per unfreed session.
    wait_back_to(&b, start, (sessions as u64 / 2) * 96);
    assert_eq!(
        b.cluster.node.fresh_stats().sessions_ended.closed,
        sessions as u64
    );
}

/// A node whose clients are cut off after 5 s (virtual) of silence, 1 s without a `Hello`.
fn short_timeouts() -> patronus_core::manager::NodeConfig {
    patronus_core::manager::NodeConfig {
        limits: patronus_core::manager::NodeLimits {
            idle_timeout_us: 5_000_000,
            hello_timeout_us: 1_000_000,
            ..Default::default()
        },
        ..node_cfg()
    }
}

/// A client that goes silent (it neither closes nor talks) is cut off after the idle
/// timeout, while the honest client, which keeps talking, is not.
fn silent_client(t: Link, iso: Isolation) {
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
    wait_back_to(&b, start, 96);
    // The node broke its control connection off. Once the client has seen that (its link
    // delivers the close), its next operation opens a new session first. Before, a request
    // sent into the dying connection would end as `ControlLost` (outcome unknown, never run
    // again): that race is not what this test is about.
    let mut silent = silent;
    seen_lost(&mut silent);
    let p = silent
        .allocate(64, Duration::from_millis(100), Mode::Shared)
        .unwrap();
    assert_eq!(silent.status().stats().reconnects, 1);
    silent.free(p).unwrap();
    drop(silent);
    honest_round(&mut b);
}

/// Waits (bounded, wall time) until `c` has seen its control connection broken off.
#[allow(clippy::disallowed_methods)] // a bounded wait for another thread's delivery
fn seen_lost(c: &mut Client<SoftProvider>) {
    let t0 = std::time::Instant::now();
    while !matches!(
        c.wait_any(Duration::from_millis(1)),
        Err(patronus_core::client::ClientError::ControlLost(_))
    ) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the client never saw its control connection closed"
        );
        std::thread::yield_now();
    }
}

/// A connection that never authenticates costs nothing after the hello timeout.
fn no_hello(t: Link, iso: Isolation) {
    use patronus_core::testing::RawControl;
    let mut b = bed(t, iso, 1, short_timeouts(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let lurkers: Vec<_> = (0..8)
        .map(|_| {
            RawControl::<SoftProvider>::connect(
                &b.cluster.client_ctxs[0],
                b.cluster.node.address(),
                None,
                4,
            )
            .unwrap()
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
    wait_back_to(&b, start, 0);
    drop(lurkers);
    honest_round(&mut b);
}

/// Connections closed as soon as they are set up — often before the node took them up —
/// end their sessions: a control QP that broke before its shard adopted it was once kept as a
/// live session until the next sweep (the QP's event came while no session had it), and a
/// node whose clock stands still made none without requests.
fn closed_at_once(t: Link, iso: Isolation) {
    use patronus_core::testing::RawControl;
    const CONNECTIONS: u64 = 32;
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    for _ in 0..CONNECTIONS {
        let c = RawControl::<SoftProvider>::connect(
            &b.cluster.client_ctxs[0],
            b.cluster.node.address(),
            None,
            4,
        )
        .unwrap();
        drop(c);
    }
    // No honest round before this: its batch would make the node sweep, hiding a session
    // left behind.
    wait_back_to(&b, start, 0);
    let s = b.cluster.node.fresh_stats();
    assert_eq!(s.sessions_ended.closed, CONNECTIONS, "{s:?}");
    honest_round(&mut b);
}

every_mode! {
    connect_work_disconnect_leaves_nothing_behind => |t, iso| churn(t, iso, 48);
    connections_closed_at_once_leave_nothing_behind => closed_at_once;
    a_silent_client_is_cut_off_after_the_idle_timeout => silent_client;
    a_connection_without_hello_is_cut_off => no_hello;
}

/// Connections a TCP device serves (`None`: not a TCP device).
fn tcp_links(ctx: &rnic::soft::SoftContext) -> Option<u64> {
    rnic::soft::TcpNode::stats(ctx).map(|s| s.live)
}

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The soak: `sessions` connect/work/disconnect cycles against one node (a third of them
/// leave a permission held, a third go without freeing). Prints the node's counts and the
/// process's memory every tenth of the way; asserts they stay flat after the warm-up.
fn soak<R: support::bed::Rig<P = SoftProvider>>(t: R, iso: Isolation, sessions: usize) {
    let mut b = bed(t, iso, 1, node_cfg(), ClientConfig::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let cfg = ClientConfig::default();
    let step = (sessions / 10).max(1);
    let mut warm: Option<(u64, u64)> = None;
    println!("{t:?} {iso:?}: {sessions} sessions");
    println!(
        "  sessions   node sessions  data QPs  domains  windows  device QPs  metadata B   RSS MiB"
    );
    for i in 1..=sessions {
        let c = session(&b, &cfg, i % 3 != 0);
        drop(c);
        if i % 64 == 0 {
            honest_round(&mut b);
        }
        if i % step == 0 {
            let s = wait_for(&b, "the churned sessions ended", |s| {
                s.held.sessions == start.held.sessions
            });
            let rss = rss_bytes();
            println!(
                "  {i:>8}   {:>13}  {:>8}  {:>7}  {:>7}  {:>10}  {:>25}  {:>10}   {:>7.1}",
                s.held.sessions,
                s.held.data_qps,
                s.held.client_domains,
                s.held.windows,
                b.cluster.node_ctx.resources().qps,
                format!(
                    "{:?}, {:?}",
                    tcp_links(&b.cluster.node_ctx),
                    tcp_links(&b.cluster.client_ctxs[0])
                ),
                s.metadata_bytes,
                rss as f64 / (1 << 20) as f64
            );
            match warm {
                None => warm = Some((rss, s.metadata_bytes)),
                Some((rss0, meta0)) => {
                    // The process's memory is only this test's in the soak (one test
                    // thread); the short version shares the process with other tests.
                    assert!(
                        sessions < 10_000 || rss < rss0 + (16 << 20),
                        "memory grows with sessions: {rss0} → {rss} bytes after {i}"
                    );
                    // The unfreed objects' bookkeeping grows (they stay their tenant's);
                    // nothing per session beyond that.
                    assert!(
                        s.metadata_bytes < meta0 * 2 + (1 << 20),
                        "metadata grows with sessions: {meta0} → {}",
                        s.metadata_bytes
                    );
                }
            }
        }
    }
    // Only the unfreed objects stay.
    wait_back_to(&b, start, (sessions as u64 / 3) * 96);
}

#[test]
#[ignore = "soak: 20,000 sessions (minutes); run by the README's soak command"]
fn soak_tcp_pd_per_client() {
    soak(Link::Tcp, Isolation::PdPerClient, soak_sessions());
}

#[test]
#[ignore = "soak: 20,000 sessions (minutes); run by the README's soak command"]
fn soak_tcp_tls_pd_per_client() {
    soak(TlsTcp, Isolation::PdPerClient, soak_sessions());
}

#[test]
fn short_soak_over_tls() {
    soak(TlsTcp, Isolation::PdPerClient, 200);
}

#[test]
#[ignore = "soak: 20,000 sessions (minutes); run by the README's soak command"]
fn soak_inproc_type2() {
    soak(Link::InProc, Isolation::Type2, soak_sessions());
}

/// 20,000 sessions, or as many as `SOAK_SESSIONS` says.
fn soak_sessions() -> usize {
    std::env::var("SOAK_SESSIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn short_soak_in_shared_pd() {
    soak(Link::InProc, Isolation::SharedPd, 300);
}
