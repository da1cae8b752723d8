//! What a client is told when the memory node ended its session: never "wrong secret" when the
//! secret is right (`proto/refusal.rs`, `manager/node/ids.rs`, `docs/operations.md`).
//!
//! - In-process, on a queued network the test steps: the node ends an idle client's session
//!   while nothing is delivered, so the client's QPs still look up. Its next data op needs a
//!   new data QP; the node refuses the reconnection and says why, and the op reports
//!   `SessionEnded(Idle)` (it was not run). Hand-made connections with the ended session's
//!   id are told the session ended (why only with its secret); a live session's id with
//!   another secret is still a wrong secret; an id the node never issued reads as a restart.
//!   The next control operation opens a new session.
//! - Over TCP: a node restarts at the same address. A hand-made connection with a client's
//!   old id and secret is told the node restarted; the client's data op reports its session
//!   ended, and its next control operation opens a session with the new node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig, NodeLimits};
use patronus_core::proto::connect::{Intent, Role};
use patronus_core::proto::messages::Mode;
use patronus_core::proto::refusal::{Refusal, SessionEnd};
use rnic::soft::{SoftAddress, SoftConfig, SoftContext, SoftProvider, TcpNode};
use rnic::{AccessFlags, Context, ProtectionDomain, QpInit, QpTiming, QueuePair, VerbsError};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use support::queued::{QueuedBed, StopOnDrop};

const LEASE: Duration = Duration::from_millis(50);
/// The node's idle timeout (at least twice its maximum lifetime, 100 ms here).
const IDLE: Duration = Duration::from_secs(1);

fn node_cfg() -> NodeConfig {
    NodeConfig {
        // No domain of the client to retire when its session ends: nothing for the node's
        // own QPs to do while the test holds the network.
        isolation: Isolation::SharedPd,
        max_lifetime_us: 100_000,
        limits: NodeLimits {
            idle_timeout_us: IDLE.as_micros() as u64,
            ..NodeLimits::default()
        },
        ..support::node_config()
    }
}

/// No spare data QP: a broken one is reconnected at the node at once, on the op's path.
fn client_cfg() -> ClientConfig {
    ClientConfig {
        spare_qps: 0,
        background_recovery: false,
        // The clock jumps past the leases: the ops must reach the data path regardless.
        check_local_expiry: false,
        acquire_wait: Duration::ZERO,
        ..ClientConfig::default()
    }
}

/// Spins (yielding) until `cond` holds; bounded in wall time.
#[allow(clippy::disallowed_methods)]
fn until(what: &str, cond: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::yield_now();
    }
}

/// Runs `f` while a thread delivers the network's packets; returns once nothing is in flight
/// and the delivery stopped.
fn pumped<T>(bed: &QueuedBed, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    let hold = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| bed.pump(&stop, &hold));
        let _stop = StopOnDrop(&stop);
        let out = f();
        until("a quiet network", || bed.net.in_flight() == 0);
        out
    })
}

/// Connects a hand-made QP from `ctx` with `intent`; the refusal it gets.
fn refusal(ctx: &SoftContext, node: &SoftAddress, intent: Intent) -> Refusal {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let qp = pd
        .create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: 4,
            max_recv_wr: 1,
            access: AccessFlags::empty(),
            timing: QpTiming::default(),
        })
        .unwrap();
    match qp.connect(node, &intent.encode()) {
        Err(VerbsError::ConnectionRefused(reason)) => Refusal::parse(&reason)
            .unwrap_or_else(|| panic!("{intent:?}: not a refusal of a client: {reason}")),
        other => panic!("{intent:?}: not refused: {other:?}"),
    }
}

fn data(client_id: u32, secret: u64) -> Intent {
    Intent {
        role: Role::Data,
        client_id,
        secret,
        slot: 0,
    }
}

fn said(e: &ClientError) -> String {
    let text = e.to_string();
    assert!(!text.contains("secret"), "{text}");
    text
}

#[test]
fn inproc_a_session_the_node_ended_is_reported_as_ended_never_as_a_wrong_secret() {
    let bed = QueuedBed::new(7);
    // Pumped: the node's NIC self-check sends over the queued network too.
    let node = pumped(&bed, || {
        MemoryNode::<SoftProvider>::start(bed.device(1), node_cfg()).unwrap()
    });
    let at = node.address();
    let device = bed.device(2);
    let (mut c, old) = pumped(&bed, || {
        let mut c = Client::<SoftProvider>::connect(&device, at, client_cfg()).unwrap();
        let p = c.allocate(64, LEASE, Mode::Shared).unwrap();
        c.write(&p, 0, b"old").unwrap();
        // A handle that outlives the permission: the data op below never reaches the node.
        let old = p.forged_copy();
        c.revoke(p).unwrap();
        (c, old)
    });
    let (id, secret) = c.control().credentials();

    // Nothing is delivered now: the node ends the session, the client's QPs still look up.
    bed.clock.advance(IDLE * 2);
    until("the node ended the idle session", || {
        node.fresh_stats().sessions_ended.idle == 1
    });
    c.control().break_data_qp();
    let mut buf = [0u8; 3];
    let r = c.read(&old, 0, &mut buf);
    let Err(e @ ClientError::SessionEnded(SessionEnd::Idle)) = &r else {
        panic!("the reconnection refused for the session's end: {r:?}");
    };
    assert!(
        said(e).contains("silent past the node's idle timeout"),
        "{e}"
    );
    // Said again by the session's next data op, without asking the node.
    let r = c.write(&old, 0, b"new");
    assert!(
        matches!(r, Err(ClientError::SessionEnded(SessionEnd::Idle))),
        "{r:?}"
    );

    // Hand-made connections naming the ended session: why only with its own secret.
    let ended = |why| Refusal::SessionEnded(why);
    assert_eq!(
        refusal(&device, at, data(id, secret)),
        ended(SessionEnd::Idle)
    );
    let join = Intent {
        role: Role::Control,
        ..data(id, secret)
    };
    assert_eq!(refusal(&device, at, join), ended(SessionEnd::Idle));
    assert_eq!(
        refusal(&device, at, data(id, secret ^ 2)),
        ended(SessionEnd::Unknown)
    );

    pumped(&bed, || {
        // The next control operation opens a new session.
        let fresh = c.allocate(64, LEASE, Mode::Shared).unwrap();
        assert_eq!(
            (c.status().session(), c.status().stats().reconnects),
            (1, 1)
        );
        assert_ne!(c.status().id(), id);
        c.write(&fresh, 0, b"new").unwrap();
        c.read(&fresh, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"new");
        let r = c.read(&old, 0, &mut buf);
        assert!(matches!(r, Err(ClientError::SessionLost)), "{r:?}");

        // A live session's id with another secret is refused as a wrong secret; an id this
        // run of the node never issued, as a restart.
        let (live, live_secret) = c.control().credentials();
        assert_eq!(
            refusal(&device, at, data(live, live_secret ^ 2)),
            Refusal::WrongSecret
        );
        assert_eq!(refusal(&device, at, data(live, 0)), Refusal::WrongSecret);
        assert_eq!(
            refusal(&device, at, data(live.wrapping_add(1 << 31), live_secret)),
            ended(SessionEnd::NodeRestarted)
        );
        c.revoke(fresh).unwrap();
    });
}

#[test]
fn tcp_after_a_node_restart_old_credentials_are_told_so_and_the_client_starts_anew() {
    let device = |at: SocketAddr| TcpNode::open(SoftConfig::default(), at).unwrap();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let cfg = || NodeConfig {
        max_lifetime_us: 60_000_000,
        ..support::node_config()
    };
    let first = MemoryNode::<SoftProvider>::start(device(any), cfg()).unwrap();
    let at = first.address().clone();
    let SoftAddress::Tcp(port) = at else {
        panic!("a TCP node's address: {at:?}");
    };
    let client_device = device(any);
    let mut c = Client::<SoftProvider>::connect(&client_device, &at, client_cfg()).unwrap();
    let old = c
        .allocate(64, Duration::from_secs(30), Mode::Shared)
        .unwrap();
    c.write(&old, 0, b"old").unwrap();
    let (id, secret) = c.control().credentials();

    first.shutdown();
    let second = MemoryNode::<SoftProvider>::start(device(port), cfg()).unwrap();
    assert_eq!(second.address(), &at, "the same address");
    assert_eq!(
        refusal(&client_device, &at, data(id, secret)),
        Refusal::SessionEnded(SessionEnd::NodeRestarted)
    );

    // The client's data op fails as a session that ended: whether it saw its control
    // connection close first, or the new node refused its data reconnection.
    let mut buf = [0u8; 3];
    let r = c.read(&old, 0, &mut buf);
    let Err(e @ ClientError::SessionEnded(SessionEnd::NodeRestarted | SessionEnd::ControlLost)) =
        &r
    else {
        panic!("a session that ended with the node: {r:?}");
    };
    said(e);
    // The next control operation opens a session with the new node.
    let fresh = c.allocate(64, LEASE, Mode::Shared).unwrap();
    assert_eq!(
        (c.status().session(), c.status().stats().reconnects),
        (1, 1)
    );
    c.write(&fresh, 0, b"new").unwrap();
    c.read(&fresh, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"new");
    c.revoke(fresh).unwrap();
}
