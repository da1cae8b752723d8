//! Leases under a slow control path, end to end (`docs/architecture.md`, "Leases that fit the
//! control path"): a control path slower than the leases clients ask for. The memory
//! node and a client run on a queued in-process network whose packets spend 2 ms (virtual) on
//! the wire each way, so every round trip takes 4 ms, while the client asks for 500 µs leases.
//! A pump thread is the network's delivery engine: it moves the virtual clock to the next due
//! packet and delivers it, so virtual time passes only while packets are on the wire (how
//! much of it a round trip takes still depends on when the manager's thread runs, so the
//! test asserts bounds, not exact times).
//!
//! Without the client's lease slack (and the manager's floor) every grant is dead on arrival and
//! the client restarts forever (the cliff the slack exists for, shown here so the test can tell the
//! two apart); with it, the client learns the round trip from its first request and every later
//! grant arrives usable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError, ClientStats};
use patronus_core::manager::{MemoryNode, NodeConfig};
use patronus_core::proto::messages::{Access, Mode};
use rnic::Clock;
use rnic::soft::SoftProvider;
use rnic::soft::link::queued::Faults;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::queued::{QueuedBed, StopOnDrop};

/// One-way delay of every packet, µs.
const WIRE_US: u64 = 2_000;
/// The lease the application asks for, µs (an eighth of a round trip).
const LEASE_US: u64 = 500;
const ROUNDS: usize = 20;

/// `ROUNDS` times: acquire the object for `LEASE_US`, read it. Returns the reads that
/// succeeded and the client's counts.
fn acquire_and_read(slack_rtts: u32, floor_turns: u32) -> (usize, ClientStats) {
    let bed = QueuedBed::new(11);
    let (clock, net) = (&bed.clock, &bed.net);
    let device = |seed| bed.device(seed);
    net.set_faults(Faults {
        delay_us: (WIRE_US, WIRE_US),
        ..Faults::default()
    });
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                match net.next_due() {
                    Some(due) => {
                        if due > clock.now() {
                            clock.set(due);
                        }
                        net.step(clock.now());
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
        let _stop = StopOnDrop(&stop);
        let node = MemoryNode::<SoftProvider>::start(
            device(1),
            NodeConfig {
                max_lifetime_us: 10_000_000,
                lease_floor_turns: floor_turns,
                ..crate::support::node_config()
            },
        )
        .unwrap();
        let cfg = ClientConfig {
            acquire_wait: Duration::ZERO,
            spare_qps: 0,
            background_recovery: false,
            lease_slack_rtts: slack_rtts,
            ..ClientConfig::default()
        };
        let mut c = Client::<SoftProvider>::connect(&device(2), node.address(), cfg).unwrap();
        let owner = c
            .allocate(64, Duration::from_secs(5), Mode::Shared)
            .unwrap();
        let addr = owner.addr();
        c.write(&owner, 0, b"steady").unwrap();
        let mut reads = 0;
        for _ in 0..ROUNDS {
            let p = c
                .acquire(
                    addr,
                    64,
                    Duration::from_micros(LEASE_US),
                    Access::Read,
                    Mode::Shared,
                )
                .unwrap();
            let mut buf = [0u8; 6];
            match c.read(&p, 0, &mut buf) {
                Ok(()) => {
                    assert_eq!(&buf, b"steady");
                    reads += 1;
                }
                Err(ClientError::LeaseExpired) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        (reads, c.status().stats())
    })
}

#[test]
fn without_slack_or_floor_every_grant_is_dead_on_arrival() {
    let (reads, stats) = acquire_and_read(0, 0);
    assert_eq!(reads, 0, "{stats:?}");
    assert_eq!(stats.dead_on_arrival, ROUNDS as u64, "{stats:?}");
    // The allocation's lease (5 s) was long enough; every acquisition's was not.
    assert_eq!(stats.wasted, ROUNDS as u64, "{stats:?}");
}

#[test]
fn with_slack_a_slow_control_path_costs_time_not_grants() {
    // The client's policy alone (the manager's floor off), then both (the defaults).
    for floor_turns in [0, 2] {
        slack_saves_every_grant(floor_turns);
    }
}

fn slack_saves_every_grant(floor_turns: u32) {
    let (reads, stats) = acquire_and_read(2, floor_turns);
    // The allocation taught the client the round trip: no grant after it was wasted.
    assert_eq!(reads, ROUNDS, "{stats:?}");
    assert_eq!((stats.wasted, stats.dead_on_arrival), (0, 0), "{stats:?}");
    assert_eq!(stats.grants, ROUNDS as u64 + 1);
    // A round trip crosses the wire at least twice (more when a batch also ends an expired
    // permission: its lifetime CAS loops back through the same wire; and the pump may move
    // the clock for an ACK before the manager's thread replied).
    let rtt = stats.rtt_us.min();
    assert!(
        rtt >= 2 * WIRE_US,
        "control round trip {rtt} µs on a {WIRE_US} µs wire"
    );
    assert!(stats.slack_us >= 2 * 2 * WIRE_US, "{stats:?}");
}
