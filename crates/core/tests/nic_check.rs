//! The NIC protection self-check on the software RNIC: every check passes, on both transports;
//! a device made to skip the window-bounds check fails that check, and a node on it refuses
//! to serve in every isolation mode unless told to allow it, and then says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use patronus_core::manager::{Isolation, MemoryNode, NodeError};
use patronus_core::nic_check::{self, Check, Outcome};
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use std::net::SocketAddr;

fn inproc(cfg: SoftConfig) -> (SoftFabric, SoftContext) {
    let f = SoftFabric::new();
    let ctx = f.open_device(cfg);
    (f, ctx)
}

fn unbounded() -> SoftConfig {
    SoftConfig {
        unchecked_window_bounds: true,
        ..SoftConfig::default()
    }
}

#[test]
fn the_soft_nic_enforces_everything() {
    let (_f, ctx) = inproc(SoftConfig::default());
    let report = nic_check::check::<SoftProvider>(&ctx);
    println!("{report}");
    for (check, outcome) in &report.checks {
        assert_eq!(outcome, &Outcome::Enforced, "{check:?}");
    }
    assert!(report.refusal(true, false).is_none());
    assert!(report.refusal(false, false).is_none());
}

/// Once per device per process: a second check of the device (through a clone of its context)
/// returns the first one's report; another device gets its own.
#[test]
fn each_device_is_checked_once() {
    let (_f, ctx) = inproc(SoftConfig::default());
    let first = nic_check::check::<SoftProvider>(&ctx);
    let again = nic_check::check::<SoftProvider>(&ctx.clone());
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    let (_g, other) = inproc(SoftConfig::default());
    assert!(!std::sync::Arc::ptr_eq(
        &first,
        &nic_check::check::<SoftProvider>(&other)
    ));
}

#[test]
fn the_soft_nic_over_tcp_enforces_everything() {
    let ctx = TcpNode::open(SoftConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let report = nic_check::check::<SoftProvider>(&ctx);
    println!("{report}");
    assert!(Check::ALL.iter().all(|&c| report.enforces(c)), "{report}");
}

#[test]
fn unchecked_window_bounds_fail_only_that_check() {
    let (_f, ctx) = inproc(unbounded());
    let report = nic_check::check::<SoftProvider>(&ctx);
    println!("{report}");
    assert!(
        matches!(report.outcome(Check::WindowBounds), Some(Outcome::NotEnforced(w)) if w.contains("below a window")),
        "{report}"
    );
    for c in &Check::ALL[1..] {
        assert!(report.enforces(*c), "{c:?}: {report}");
    }
    for type2 in [false, true] {
        let why = report.refusal(type2, false).expect("refused");
        assert!(!why.contains('\n'), "one line: {why}");
        assert!(why.contains("window-bounds") && why.contains("--allow-unenforced-window-bounds"));
        assert!(report.refusal(type2, true).is_none());
    }
}

#[test]
fn a_node_refuses_to_serve_on_unbounded_windows_in_every_mode() {
    for iso in [
        Isolation::SharedPd,
        Isolation::PdPerClient,
        Isolation::Type2,
    ] {
        let (_f, ctx) = inproc(unbounded());
        let cfg = patronus_core::manager::NodeConfig {
            isolation: iso,
            ..support::node_config()
        };
        match MemoryNode::<SoftProvider>::start(ctx, cfg) {
            Err(NodeError::UnsafeNic(why)) => {
                println!("{iso:?}: {why}");
                assert!(why.contains("window-bounds"), "{why}");
            }
            other => panic!("{iso:?}: {other:?}"),
        }
    }
}

#[test]
fn a_node_allowed_to_serves_and_says_so() {
    let (_f, ctx) = inproc(unbounded());
    let cfg = patronus_core::manager::NodeConfig {
        allow_unenforced_window_bounds: true,
        ..support::node_config()
    };
    let node = MemoryNode::<SoftProvider>::start(ctx, cfg).unwrap();
    assert!(node.unenforced_window_bounds());
    assert!(!node.nic_check().enforces(Check::WindowBounds));
    let (_f, ctx) = inproc(SoftConfig::default());
    let node = MemoryNode::<SoftProvider>::start(ctx, support::node_config()).unwrap();
    assert!(!node.unenforced_window_bounds());
}

/// A client connecting to the node's address again and again while the check runs (as the
/// clients of a restarted node do) is refused and does not break the check: every check
/// passes. (The check once took such a connection for one of its loopback QPs and failed
/// with a flushed bind: a restarted `serve` then refused to start.)
#[test]
fn clients_knocking_during_the_check_do_not_break_it() {
    use rnic::{AccessFlags, Context, ProtectionDomain, QpInit, QpTiming, QueuePair};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // A free port for the node, known before it listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let node = TcpNode::open(SoftConfig::default(), port).unwrap();
    let address = rnic::soft::SoftAddress::Tcp(port);
    let client =
        TcpNode::open(SoftConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let knocking = stop.clone();
    let knocker = std::thread::Builder::new()
        .name("knocker".into())
        .spawn(move || {
            let pd = client.alloc_pd().unwrap();
            let cq = client.create_cq(16).unwrap();
            let mut knocks = 0u64;
            while !knocking.load(Ordering::SeqCst) {
                let qp = pd
                    .create_qp(QpInit {
                        send_cq: &cq,
                        recv_cq: &cq,
                        srq: None,
                        max_send_wr: 4,
                        max_recv_wr: 4,
                        access: AccessFlags::REMOTE_READ,
                        timing: QpTiming::default(),
                    })
                    .unwrap();
                let _ = qp.connect(&address, b"a client's hello");
                knocks += 1;
            }
            knocks
        });
    let knocker = knocker.unwrap();
    let report = nic_check::check_uncached::<SoftProvider>(&node);
    stop.store(true, Ordering::SeqCst);
    let knocks = knocker.join().unwrap();
    println!("{report}\n{knocks} connections knocked meanwhile");
    assert!(Check::ALL.iter().all(|&c| report.enforces(c)), "{report}");
}
