//! Stray replies (`docs/threat-model.md`, "Denial of service"): replies a client was not
//! waiting for. A late duplicate (the client's own
//! retry: the server answers both copies) or a forged reply (an unknown request id) is dropped
//! and counted, its receive slot is posted again, and the client's next RPC is answered — or
//! times out by its deadline, never later, however many strays keep arriving.
//!
//! The channel tests run the control channel on its own (`core::rpc`) on the in-process soft
//! NIC with a test-controlled server end, single-threaded: the inline link delivers a send on
//! the sender's thread, so each step is deterministic. Deadlines are read from a test clock
//! that moves one millisecond per reading, so a wait that ignored its deadline would show as an
//! unbounded count of readings, never as wall time. The end-to-end test makes the client
//! library's own retry produce the duplicate, on a queued network a test thread delivers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

use parking_lot::Mutex;
use patronus_core::rpc::{RpcClient, RpcError};
use rnic::soft::SoftProvider;
use rnic::{Clock, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::echo::{Echo, EchoPair, EchoServer, echo_pair};

/// The server end: what the test answers (or forges) with.
type ServerEnd = EchoServer;

/// A clock that moves 1 ms each time it is read. It holds the server end, so that while
/// `forging`, each reading also forges a reply under an id nobody used (strays arriving as
/// fast as the client turns).
struct TickingClock {
    reads: AtomicU64,
    forging: AtomicBool,
    end: Mutex<ServerEnd>,
}

/// An id the client never uses.
const FORGED_ID: u64 = 0xdead_beef;

impl std::fmt::Debug for TickingClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TickingClock")
            .field("reads", &self.reads.load(Ordering::SeqCst))
            .finish()
    }
}

impl Clock for TickingClock {
    fn now(&self) -> Timestamp {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if self.forging.load(Ordering::SeqCst) {
            self.end.lock().answer(FORGED_ID, n);
        }
        Timestamp(n * 1_000)
    }
}

impl TickingClock {
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
}

/// Receive slots of the client under test.
const SLOTS: u32 = 4;

struct Pair {
    client: RpcClient<SoftProvider, Echo>,
    /// Deadlines, and the server end.
    clock: Arc<TickingClock>,
    _listener: rnic::soft::SoftListener,
}

impl Pair {
    /// Every request the server received so far, as (id, value).
    fn received(&self) -> Vec<(u64, u64)> {
        self.clock.end.lock().received()
    }

    /// The server sends a reply under `id`, whether or not anything was asked under it.
    fn answer(&self, id: u64, value: u64) {
        self.clock.end.lock().answer(id, value);
    }
}

/// A connected client (`SLOTS` receive slots, deadlines on a ticking clock) and server.
fn pair() -> Pair {
    let EchoPair {
        client,
        server,
        listener,
    } = echo_pair(SLOTS);
    let clock = Arc::new(TickingClock {
        reads: AtomicU64::new(0),
        forging: AtomicBool::new(false),
        end: Mutex::new(server),
    });
    let client = client.with_clock(clock.clone());
    Pair {
        client,
        clock,
        _listener: listener,
    }
}

/// Every receive slot still works: `SLOTS` requests at once are all answered.
fn all_slots_answer(p: &mut Pair) {
    let ids: Vec<u64> = (0..SLOTS as u64)
        .map(|v| p.client.submit(100 + v).unwrap())
        .collect();
    for (id, v) in p.received() {
        p.answer(id, v + 1);
    }
    for (i, id) in ids.into_iter().enumerate() {
        let got = p.client.wait(id, Duration::from_millis(50), false);
        assert_eq!(got.unwrap(), 101 + i as u64, "slot {i} after the strays");
    }
}

#[test]
fn forged_replies_are_dropped_counted_and_their_slots_posted_again() {
    let mut p = pair();
    // As many forged replies as the client has receive slots, while it waits for nothing.
    for k in 0..SLOTS as u64 {
        p.answer(FORGED_ID + k, 7);
    }
    assert_eq!(
        p.client.poll().unwrap(),
        None,
        "nothing owed, nothing delivered"
    );
    assert_eq!(p.client.stray_replies(), SLOTS as u64);
    assert!(p.client.take_orphans().is_empty());
    // Each slot a stray landed in was posted again: all of them take answers.
    all_slots_answer(&mut p);
    // A forged answer under the id of a request answered already is a stray too.
    let id = p.client.submit(1).unwrap();
    p.received();
    p.answer(id, 2);
    p.answer(id, 3);
    assert_eq!(
        p.client.wait(id, Duration::from_millis(50), false).unwrap(),
        2
    );
    assert_eq!(p.client.poll().unwrap(), None);
    assert_eq!(p.client.stray_replies(), SLOTS as u64 + 1);
}

#[test]
fn a_late_duplicate_of_a_retry_is_dropped_and_counted() {
    let mut p = pair();
    // The retry `wait` sends halfway to its deadline: both copies reach the server.
    let first = p.client.submit(1).unwrap();
    p.client.resend(first).unwrap();
    assert_eq!(p.received(), vec![(first, 1), (first, 1)]);
    p.answer(first, 10);
    assert_eq!(
        p.client
            .wait(first, Duration::from_millis(50), false)
            .unwrap(),
        10
    );
    // The retry's answer comes late, while the client waits for its next request.
    let next = p.client.submit(2).unwrap();
    assert_eq!(p.received(), vec![(next, 2)]);
    p.answer(first, 10);
    p.answer(next, 20);
    assert_eq!(
        p.client
            .wait(next, Duration::from_millis(50), false)
            .unwrap(),
        20
    );
    assert_eq!(p.client.stray_replies(), 1, "{:?}", p.client);
    // And once more after the request is long forgotten: a stray, not an answer.
    p.answer(first, 10);
    assert_eq!(p.client.poll().unwrap(), None);
    assert_eq!(p.client.stray_replies(), 2);
    // Nothing is owed any more: every slot takes a request again.
    all_slots_answer(&mut p);
    assert_eq!(p.client.stray_replies(), 2);
}

#[test]
fn a_detached_request_s_answer_is_no_stray_but_its_duplicate_is() {
    let mut p = pair();
    let id = p.client.submit_detached(5).unwrap();
    p.received();
    p.answer(id, 50);
    assert_eq!(p.client.poll().unwrap(), None, "nobody takes it");
    assert_eq!(p.client.stray_replies(), 0, "its one answer was expected");
    p.answer(id, 50);
    assert_eq!(p.client.poll().unwrap(), None);
    assert_eq!(p.client.stray_replies(), 1);
}

#[test]
fn a_call_ends_by_its_deadline_while_strays_keep_arriving() {
    let mut p = pair();
    // From now on every reading of the clock forges a stray: completions arrive on every
    // turn of the wait, and the server never answers the request itself.
    p.clock.forging.store(true, Ordering::SeqCst);
    let before = p.clock.reads();
    let r = p.client.call(3, Duration::from_millis(20), true);
    assert!(matches!(r, Err(RpcError::Timeout)), "{r:?}");
    // 20 ticks to the deadline: one reading per turn (the retry's turn included).
    let reads = p.clock.reads() - before;
    assert!(reads <= 22, "the wait read the clock {reads} times");
    assert!(p.client.stray_replies() >= 15, "{:?}", p.client);
    // `wait_any` too: strays are not answers, and its deadline holds.
    let before = p.clock.reads();
    assert_eq!(p.client.wait_any(Duration::from_millis(10)).unwrap(), None);
    assert!(p.clock.reads() - before <= 12);
    // The forger stops. The channel works on: the request and its retry reached the server,
    // and their answers, when they finally come, are an orphan and a stray.
    p.clock.forging.store(false, Ordering::SeqCst);
    let strays = p.client.stray_replies();
    let got = p.received();
    assert_eq!(got.len(), 2, "{got:?}");
    for (id, v) in got {
        assert_eq!(v, 3);
        p.answer(id, 30);
    }
    p.client.poll_cq().unwrap();
    let orphans = p.client.take_orphans();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].reply, 30);
    assert!(p.client.stray_replies() > strays);
    all_slots_answer(&mut p);
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

/// End to end: the client library's own retry makes the memory node answer twice; the second
/// answer is a stray, counted, and the client's next requests are answered as usual.
#[test]
fn the_library_s_own_retry_leaves_a_stray_and_the_client_works_on() {
    use crate::support::queued::{QueuedBed, StopOnDrop};
    use patronus_core::client::{Client, ClientConfig};
    use patronus_core::manager::{MemoryNode, NodeConfig};
    use patronus_core::proto::messages::Mode;
    use rnic::soft::link::queued::Faults;

    let bed = QueuedBed::new(5);
    let net = &bed.net;
    let stop = AtomicBool::new(false);
    // While set, virtual time stands still and nothing with a delay is delivered.
    let hold = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The network's delivery: the clock moves to the next due packet, which is delivered.
        s.spawn(|| bed.pump(&stop, &hold));
        let _stop = StopOnDrop(&stop);
        let node = MemoryNode::<SoftProvider>::start(
            bed.device(1),
            NodeConfig {
                max_lifetime_us: 60_000_000,
                ..crate::support::node_config()
            },
        )
        .unwrap();
        let cfg = ClientConfig {
            acquire_wait: Duration::ZERO,
            // The retry goes out after 500 ms (wall time) without an answer; the answers then
            // have as long again to arrive.
            rpc_timeout: Duration::from_secs(1),
            ..ClientConfig::default()
        };
        let mut c = Client::<SoftProvider>::connect(&bed.device(2), node.address(), cfg).unwrap();
        let p = c
            .allocate(64, Duration::from_secs(60), Mode::Exclusive)
            .unwrap();
        // The request waits on the wire until the client has sent its retry; then both go.
        hold.store(true, Ordering::SeqCst);
        net.set_faults(Faults {
            delay_us: (1_000, 1_000),
            ..Faults::default()
        });
        let (first, mut c) = std::thread::scope(|t| {
            let h = t.spawn(move || {
                let r = c.allocate(64, Duration::from_secs(60), Mode::Exclusive);
                (r, c)
            });
            until("the request and its retry on the wire", || {
                net.in_flight() == 2
            });
            hold.store(false, Ordering::SeqCst);
            h.join().unwrap()
        });
        let first = first.unwrap();
        net.set_faults(Faults::default());
        // The node answered both copies of the one request; the second answer is dropped
        // and counted whenever it arrives (looked for a bounded number of times).
        for _ in 0..1_000 {
            if c.status().stats().stray_replies > 0 {
                break;
            }
            assert!(!c.wait_any(Duration::from_millis(1)).unwrap());
        }
        let s = c.status().stats();
        assert_eq!((s.rpc_retries, s.stray_replies), (1, 1), "{s:?}");
        assert_eq!(s.grants, 2, "the retried allocation granted once: {s:?}");
        // The next requests are answered as usual.
        let second = c
            .allocate(64, Duration::from_secs(60), Mode::Exclusive)
            .unwrap();
        assert_ne!(first.addr(), second.addr());
        for perm in [p, first, second] {
            c.free(perm).unwrap();
        }
        assert_eq!(c.status().stats().stray_replies, 1);
    });
}
