//! Exactly-once data ops, end to end (`docs/threat-model.md`, "Exactly-once data retries"): a data
//! op whose outcome the NIC cannot report is never run again. The memory node and a client run on a
//! queued in-process network (a pump thread is its delivery engine, timed by a virtual clock); the
//! link dies under the responses of two FAAs after both executed. The client must report both as
//! `OutcomeUnknown` (the first timed out, the second was flushed), not retry the flushed one on its
//! spare QP (the counter must read 2, not 3), and keep working on the spare. This test has no TCP
//! variant (though the TCP transport takes the same fault wrappers,
//! `rnic::soft::TcpOptions::links`); the rule itself is unit-tested in `client/data.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig};
use patronus_core::proto::messages::Mode;
use rnic::soft::SoftProvider;
use rnic::soft::link::queued::Faults;
use rnic::{Clock, WcStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::queued::{QueuedBed, StopOnDrop};

/// Spins (yielding) until `cond` holds; bounded in wall time.
#[allow(clippy::disallowed_methods)]
fn until(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::yield_now();
    }
}

fn lost_response_of_an_faa_is_reported_not_rerun(iso: Isolation) {
    let bed = QueuedBed::new(5);
    let (clock, net) = (&bed.clock, &bed.net);
    let device = |seed| bed.device(seed);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                net.step(clock.now());
                std::thread::yield_now();
            }
        });
        let _stop = StopOnDrop(&stop);
        let node = MemoryNode::<SoftProvider>::start(
            device(1),
            NodeConfig {
                isolation: iso,
                max_lifetime_us: 60_000_000,
                ..crate::support::node_config()
            },
        )
        .unwrap();
        let cfg = ClientConfig {
            acquire_wait: Duration::ZERO,
            ..ClientConfig::default()
        };
        let mut c = Client::<SoftProvider>::connect(&device(2), node.address(), cfg).unwrap();
        let p = c
            .allocate(64, Duration::from_secs(60), Mode::Exclusive)
            .unwrap();
        // From now on packets wait 1 ms (virtual) on the wire.
        net.set_faults(Faults {
            delay_us: (1_000, 1_000),
            ..Faults::default()
        });
        let r = std::thread::scope(|t| {
            // Two FAAs behind one doorbell: the first will time out, the second be flushed.
            let h = t.spawn(|| {
                let mut b = c.batch();
                b.faa(&p, 0, 1).faa(&p, 0, 1);
                b.execute()
            });
            until("both FAAs on the wire", || net.in_flight() == 2);
            let delivered = net.counters().0;
            clock.advance(Duration::from_micros(1_000));
            // The requests arrive and execute; their responses are on the wire.
            until("the responses on the wire", || {
                net.counters().0 >= delivered + 2 && net.in_flight() == 2
            });
            assert_eq!(net.kill_in_flight(), 1, "only the data QP's link dies");
            net.set_faults(Faults::default());
            h.join().unwrap()
        });
        assert!(
            matches!(
                r[..],
                [
                    Err(ClientError::OutcomeUnknown(WcStatus::RetryExceeded)),
                    Err(ClientError::OutcomeUnknown(WcStatus::WrFlushError))
                ]
            ),
            "{r:?}"
        );
        // Both FAAs ran once at the memory node; neither was run again on the spare QP.
        let mut word = [0u8; 8];
        c.read(&p, 0, &mut word).unwrap();
        assert_eq!(u64::from_le_bytes(word), 2, "each FAA ran exactly once");
        let after = c.faa(&p, 0, 1).unwrap();
        assert_eq!(after, 2, "the client works on after the fault");
        c.revoke(p).unwrap();
    });
}

#[test]
fn inproc_lost_response_of_an_faa_is_reported_not_rerun() {
    lost_response_of_an_faa_is_reported_not_rerun(Isolation::SharedPd);
}

#[test]
fn inproc_pd_per_client_lost_response_of_an_faa_is_reported_not_rerun() {
    lost_response_of_an_faa_is_reported_not_rerun(Isolation::PdPerClient);
}

#[test]
fn inproc_type2_lost_response_of_an_faa_is_reported_not_rerun() {
    lost_response_of_an_faa_is_reported_not_rerun(Isolation::Type2);
}
