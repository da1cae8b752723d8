//! A client whose control connection dies opens a new session with the memory node
//! (`docs/architecture.md`, "Sessions"). The connection breaks for real under a request in flight:
//! in-process, the queued network kills the connection with the request on the wire; over TCP, the
//! client's links drop the request and its retransmissions until the QP gives up (retry exceeded).
//!
//! Then: the request in flight reports its outcome unknown (`ControlLost`, never sent again);
//! the next allocation succeeds in a new session (a new `Hello`: a new client id; new data QPs
//! that carry data); the old session's permission is refused (`SessionLost`) by revoke, RPC
//! and CAS extension and the data path; its memory, the tenant's, is freed through the new
//! session; and the client counted one reconnect.
//!
//! A memory node played by the test covers the other way a session ends: the node forgets the
//! client while its QPs stay up, and refuses its requests as unauthenticated.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers, not #[test] fns

mod support;

use patronus_core::client::{Client, ClientConfig, ClientError, Perm};
use patronus_core::manager::{Isolation, MemoryNode, NodeConfig};
use patronus_core::proto::messages::{Access, Mode};
use rnic::VirtualClock;
use rnic::soft::link::LinkStack;
use rnic::soft::link::faulty::LinkFaults;
use rnic::soft::link::queued::{Faults, QueuedNetwork};
use rnic::soft::{AdaptiveTimeouts, SoftConfig, SoftProvider, TcpNode, TcpOptions};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::client::{extend_rpc, poll_extended, post_extend};
use support::queued::{QueuedBed, StopOnDrop};

const LEASE: Duration = Duration::from_secs(60);
/// A lease that extensions can add to (the node's maximum lifetime is `LEASE`).
const SHORT: Duration = Duration::from_secs(1);

fn node_cfg(isolation: Isolation) -> NodeConfig {
    NodeConfig {
        isolation,
        max_lifetime_us: 60_000_000,
        ..crate::support::node_config()
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

/// What the client does once its control connection broke under an allocation (`lost`'s
/// outcome); `old` is a permission of the session that ended (shared, so that a memory node
/// that keeps an ended session's permissions until their leases end lets the new session
/// acquire the object too).
fn recovers(c: &mut Client<SoftProvider>, old: Perm, lost: Result<Perm, ClientError>) {
    assert!(
        matches!(lost, Err(ClientError::ControlLost(_))),
        "the request in flight has an unknown outcome: {lost:?}"
    );
    assert_eq!(
        (c.status().session(), c.status().stats().reconnects),
        (0, 0)
    );
    // Nothing of the lost session is left in flight: its operations ended as unknown.
    assert!(
        c.poll_any().is_none(),
        "nothing in flight on a lost session"
    );
    let first_id = c.status().id();

    // The next control operation opens a new session.
    let fresh = c.allocate(64, LEASE, Mode::Exclusive).unwrap();
    assert_eq!((c.status().session(), fresh.session()), (1, 1));
    assert_ne!(c.status().id(), first_id, "a new Hello, a new client id");
    assert_eq!(c.status().stats().reconnects, 1);
    // Its data QPs carry data.
    c.write(&fresh, 0, b"fresh").unwrap();
    let mut buf = [0u8; 5];
    c.read(&fresh, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"fresh");

    // The old session's permission ended with it.
    assert_eq!(old.session(), 0);
    let r = c.read(&old, 0, &mut buf);
    assert!(matches!(r, Err(ClientError::SessionLost)), "read: {r:?}");
    let r = c.extend(&old, LEASE);
    assert!(matches!(r, Err(ClientError::SessionLost)), "extend: {r:?}");
    let r = extend_rpc(c, &old, LEASE);
    assert!(
        matches!(r, Err(ClientError::SessionLost)),
        "extend_rpc: {r:?}"
    );
    let r = c.revoke(old.forged_copy());
    assert!(matches!(r, Err(ClientError::SessionLost)), "revoke: {r:?}");
    // Its memory is the tenant's: freed by acquiring it again in the new session.
    let addr = old.addr();
    c.free(old).unwrap();
    let r = c.acquire(addr, 8, LEASE, Access::Read, Mode::Shared);
    assert!(matches!(r, Err(ClientError::NotFound)), "freed: {r:?}");

    c.free(fresh).unwrap();
    assert_eq!(
        (c.status().session(), c.status().stats().reconnects),
        (1, 1)
    );
}

/// Runs `body` with a client of a memory node on a queued network: a pump thread moves the
/// virtual clock to the next due packet and delivers it, unless `hold` is set (then time
/// stands still and nothing with a delay is delivered).
fn on_a_queued_network(
    iso: Isolation,
    body: impl FnOnce(Client<SoftProvider>, &QueuedNetwork, &AtomicBool) + Send,
) {
    let bed = QueuedBed::new(3);
    let net = &bed.net;
    let stop = AtomicBool::new(false);
    let hold = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| bed.pump(&stop, &hold));
        let _stop = StopOnDrop(&stop);
        let node = MemoryNode::<SoftProvider>::start(bed.device(1), node_cfg(iso)).unwrap();
        let cfg = ClientConfig {
            acquire_wait: Duration::ZERO,
            ..ClientConfig::default()
        };
        let c = Client::<SoftProvider>::connect(&bed.device(2), node.address(), cfg).unwrap();
        body(c, net, &hold);
    });
}

/// Holds the network, lets `before` put packets on the wire, starts an allocation, and
/// kills every connection with a packet in flight (`conns` of them) while the allocation's
/// request is on the wire; returns the allocation's outcome.
fn allocation_under_a_kill(
    c: Client<SoftProvider>,
    net: &QueuedNetwork,
    hold: &AtomicBool,
    packets_before: usize,
    conns: usize,
) -> (Result<Perm, ClientError>, Client<SoftProvider>) {
    std::thread::scope(|t| {
        let h = t.spawn(move || {
            let mut c = c;
            (c.allocate(64, LEASE, Mode::Exclusive), c)
        });
        until("the allocation on the wire", || {
            net.in_flight() == packets_before + 1
        });
        assert_eq!(net.kill_in_flight(), conns);
        net.set_faults(Faults::default());
        hold.store(false, Ordering::SeqCst);
        h.join().unwrap()
    })
}

/// Holds the network and delays its packets by 1 ms (virtual).
fn hold_the_wire(net: &QueuedNetwork, hold: &AtomicBool) {
    hold.store(true, Ordering::SeqCst);
    net.set_faults(Faults {
        delay_us: (1_000, 1_000),
        ..Faults::default()
    });
}

/// In-process: the queued network kills the control connection while the request is on the
/// wire (both ends see the link go down).
fn inproc_a_killed_control_connection_is_re_established(iso: Isolation) {
    on_a_queued_network(iso, |mut c, net, hold| {
        let old = c.allocate(64, LEASE, Mode::Shared).unwrap();
        c.write(&old, 0, b"old").unwrap();
        hold_the_wire(net, hold);
        // Only the control connection has a packet in flight: only it dies.
        let (lost, mut c) = allocation_under_a_kill(c, net, hold, 0, 1);
        recovers(&mut c, old, lost);
    });
}

/// Posted extensions in flight when the session ends (their data connection killed with the
/// control connection): the one polled reports its outcome unknown, once; the forgotten one's
/// slot is free again; nothing of the old session holds a slot.
fn inproc_posted_extensions_of_an_ended_session(iso: Isolation) {
    on_a_queued_network(iso, |mut c, net, hold| {
        let old = c.allocate(64, SHORT, Mode::Shared).unwrap();
        hold_the_wire(net, hold);
        let polled = post_extend(&mut c, &old, SHORT).unwrap();
        let forgotten = post_extend(&mut c, &old, SHORT).unwrap();
        c.cancel(forgotten);
        assert_eq!(c.status().posted_in_flight(), 2);
        until("both CASes on the wire", || net.in_flight() == 2);
        let (lost, mut c) = allocation_under_a_kill(c, net, hold, 2, 2);
        assert!(matches!(lost, Err(ClientError::ControlLost(_))), "{lost:?}");
        let fresh = c.allocate(64, SHORT, Mode::Exclusive).unwrap();
        assert_eq!(c.status().stats().reconnects, 1);
        let r = poll_extended(&mut c, polled);
        assert!(
            matches!(r, Some(Err(ClientError::OutcomeUnknown(_)))),
            "{r:?}"
        );
        assert_eq!(
            c.status().posted_in_flight(),
            0,
            "no slot held by the old session"
        );
        assert!(matches!(
            post_extend(&mut c, &old, SHORT),
            Err(ClientError::SessionLost)
        ));
        let next = post_extend(&mut c, &fresh, SHORT).unwrap();
        let mut outcome = None;
        for _ in 0..100_000 {
            outcome = poll_extended(&mut c, next);
            if outcome.is_some() {
                break;
            }
            std::thread::yield_now();
        }
        assert!(matches!(outcome, Some(Ok(true))), "{outcome:?}");
        c.free(old).unwrap();
        c.free(fresh).unwrap();
    });
}

/// Over TCP: the client's links drop the request, its probes and everything else they send
/// until its control QP gives up (retry exceeded) when its budget runs out. (Everything: the
/// probes may be of an earlier control request, which as an unsignaled SEND went without
/// AckReq and waits for a later acknowledgement; counting on exactly the request and two
/// probes let a probe of the earlier one through, whose answer restarted the budget.) A TCP QP probes on its RTO and gives up after a
/// time budget without any response (`TcpOptions::timeouts`), not after `QpTiming`'s retry
/// count: the client's device has a fixed 1 ms RTO and a 3 ms budget, so the request goes out
/// at 0, 1 and 2 ms and the QP fails at 3 ms. Timers run on a virtual clock the test moves.
fn tcp_a_control_qp_that_gave_up_is_re_established(iso: Isolation) {
    let clock = VirtualClock::new();
    let device = |seed: u64, options: TcpOptions| {
        let cfg = SoftConfig {
            clock: clock.clone(),
            seed: Some(seed),
            ..SoftConfig::default()
        };
        TcpNode::open_with(cfg, SocketAddr::from(([127, 0, 0, 1], 0)), options).unwrap()
    };
    let node =
        MemoryNode::<SoftProvider>::start(device(1, TcpOptions::default()), node_cfg(iso)).unwrap();
    let faults = LinkFaults::new();
    let rto = Duration::from_millis(1);
    let transmissions: u32 = 3;
    let client_device = device(
        2,
        TcpOptions {
            links: LinkStack::new().faulty(faults.clone()),
            timeouts: AdaptiveTimeouts {
                initial_rto: rto,
                min_rto: rto,
                max_rto: rto,
                budget: rto * transmissions,
            },
            ..TcpOptions::default()
        },
    );
    let cfg = ClientConfig {
        acquire_wait: Duration::ZERO,
        ..ClientConfig::default()
    };
    let mut c = Client::<SoftProvider>::connect(&client_device, node.address(), cfg).unwrap();
    let old = c.allocate(64, LEASE, Mode::Shared).unwrap();
    c.write(&old, 0, b"old").unwrap();

    // From the request on, everything is lost: the budget runs out at the third timeout.
    faults.drop_next(u32::MAX);
    let lost_packets = u64::from(transmissions);
    let (lost, mut c) = std::thread::scope(|t| {
        let h = t.spawn(move || (c.allocate(64, LEASE, Mode::Exclusive), c));
        // The clock moves one RTO at a time, and only once the client has taken the last
        // one (one more packet lost): a client thread the scheduler leaves waiting must not
        // find its RPC deadline passed before its QP gave up. Past the last loss it moves
        // freely, so the wait ends whatever happens.
        let mut advanced_at = 0;
        for _ in 0..1_000_000 {
            if h.is_finished() {
                break;
            }
            let dropped = faults.dropped();
            if dropped > advanced_at || dropped >= lost_packets {
                advanced_at = dropped;
                clock.advance(rto);
            }
            std::thread::yield_now();
        }
        while !h.is_finished() {
            clock.advance(rto);
            std::thread::yield_now();
        }
        faults.drop_next(0);
        h.join().unwrap()
    });
    assert!(
        faults.dropped() >= lost_packets,
        "the request and its probes were lost: {} packets",
        faults.dropped()
    );
    recovers(&mut c, old, lost);
}

#[test]
fn inproc_a_killed_control_connection_is_re_established_shared_pd() {
    inproc_a_killed_control_connection_is_re_established(Isolation::SharedPd);
}

#[test]
fn inproc_a_killed_control_connection_is_re_established_pd_per_client() {
    inproc_a_killed_control_connection_is_re_established(Isolation::PdPerClient);
}

#[test]
fn inproc_a_killed_control_connection_is_re_established_type2() {
    inproc_a_killed_control_connection_is_re_established(Isolation::Type2);
}

#[test]
fn inproc_posted_extensions_of_an_ended_session_shared_pd() {
    inproc_posted_extensions_of_an_ended_session(Isolation::SharedPd);
}

#[test]
fn inproc_posted_extensions_of_an_ended_session_type2() {
    inproc_posted_extensions_of_an_ended_session(Isolation::Type2);
}

#[test]
fn tcp_a_control_qp_that_gave_up_is_re_established_shared_pd() {
    tcp_a_control_qp_that_gave_up_is_re_established(Isolation::SharedPd);
}

#[test]
fn tcp_a_control_qp_that_gave_up_is_re_established_pd_per_client() {
    tcp_a_control_qp_that_gave_up_is_re_established(Isolation::PdPerClient);
}

#[test]
fn tcp_a_control_qp_that_gave_up_is_re_established_type2() {
    tcp_a_control_qp_that_gave_up_is_re_established(Isolation::Type2);
}

/// A memory node played by the test: it welcomes every `Hello` with a new client id, grants
/// allocations, revokes — and while `forgotten` is set, refuses everything but a `Hello` as
/// unauthenticated, as a node that ended a client's session without closing its QPs would.
mod forgetful {
    use parking_lot::Mutex;
    use patronus_core::proto::connect::{Intent, Role};
    use patronus_core::proto::messages::{
        ControlProtocol, Grant, PermissionId, Reply, Request, Status,
    };
    use patronus_core::proto::shards::ShardMap;
    use patronus_core::rpc::{Incoming, RpcServer};
    use rnic::soft::{SoftContext, SoftCq, SoftPd, SoftProvider, SoftQp, SoftSrq};
    use rnic::{
        AcceptPolicy, AccessFlags, Context, MemoryKey, ProtectionDomain, QpInit, QpTiming,
        QueuePair,
    };
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// What the node saw.
    #[derive(Debug, Default)]
    pub struct Seen {
        pub hellos: u32,
        pub allocations: u32,
        pub refused: u32,
    }

    pub struct Accept {
        pd: SoftPd,
        srq: SoftSrq,
        ctrl_cq: SoftCq,
        data_cq: SoftCq,
        qps: Mutex<HashMap<rnic::QpNumber, SoftQp>>,
    }

    impl AcceptPolicy<SoftProvider> for Accept {
        fn create_qp(&self, private_data: &[u8]) -> Result<SoftQp, String> {
            let intent = Intent::decode(private_data).ok_or("no intent")?;
            let control = intent.role == Role::Control;
            let (cq, srq) = if control {
                (&self.ctrl_cq, Some(&self.srq))
            } else {
                (&self.data_cq, None)
            };
            self.pd
                .create_qp(QpInit {
                    send_cq: cq,
                    recv_cq: cq,
                    srq,
                    max_send_wr: 64,
                    max_recv_wr: 1,
                    access: AccessFlags::REMOTE_ALL,
                    timing: QpTiming::default(),
                })
                .map_err(|e| e.to_string())
        }
        fn established(&self, qp: SoftQp, _: &[u8]) {
            self.qps.lock().insert(qp.qp_num(), qp);
        }
    }

    /// Runs the node on `ctx` until `stop`; returns its address through `address`.
    pub fn serve(
        ctx: &SoftContext,
        forgotten: &AtomicBool,
        stop: &AtomicBool,
        address: &Mutex<Option<rnic::soft::SoftAddress>>,
    ) -> Seen {
        let pd = ctx.alloc_pd().unwrap();
        let mut server = RpcServer::<SoftProvider, ControlProtocol>::new(ctx, &pd, 64, 16).unwrap();
        let accept = Arc::new(Accept {
            pd: pd.clone(),
            srq: server.srq().unwrap().clone(),
            ctrl_cq: server.recv_cq().clone(),
            data_cq: ctx.create_cq(64).unwrap(),
            qps: Mutex::new(HashMap::new()),
        });
        let listener = ctx.listen(accept.clone()).unwrap();
        *address.lock() = Some(ctx.listener_address(&listener));
        let mut seen = Seen::default();
        let mut next_client = 1;
        let mut incoming: Vec<Incoming<Request>> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            server.receive(&mut incoming, |_| None);
            for m in incoming.drain(..) {
                let Ok((id, req)) = m.message else { continue };
                let reply = match req {
                    Request::Hello { .. } => {
                        seen.hellos += 1;
                        forgotten.store(false, Ordering::SeqCst);
                        next_client += 1;
                        Reply::Welcome {
                            client_id: next_client - 1,
                            secret: 7,
                            type2: false,
                            shards: ShardMap {
                                shards: 1,
                                header_base: 0,
                                headers_per_shard: u32::MAX,
                                buffer_base: 0,
                                buffer_span: u64::MAX,
                            },
                            max_lifetime_us: 1_000_000,
                        }
                    }
                    _ if forgotten.load(Ordering::SeqCst) => {
                        seen.refused += 1;
                        Reply::Failed(Status::Unauthorized)
                    }
                    Request::Allocate { size, .. } => {
                        seen.allocations += 1;
                        Reply::Granted(Grant {
                            id: PermissionId {
                                header_addr: 64 * u64::from(seen.allocations),
                                start_us: 1,
                            },
                            buffer_addr: 4096 * u64::from(seen.allocations),
                            buffer_len: size,
                            buffer_rkey: MemoryKey(1),
                            lifetime_rkey: MemoryKey(1),
                            lifetime_us: 60_000_000,
                            contiguous: false,
                            max_lifetime_us: 60_000_000,
                        })
                    }
                    Request::Revoke { .. } => Reply::Revoked,
                    _ => Reply::Failed(Status::InvalidArgument),
                };
                let qp = accept.qps.lock().get(&m.qp_num).cloned();
                if let Some(qp) = qp {
                    let _ = server.reply(&qp, id, &reply);
                }
            }
            std::thread::yield_now();
        }
        seen
    }
}

/// A memory node that ended the client's session but left its QPs up refuses its requests
/// as unauthenticated: the client opens a new session and sends the refused request again
/// (it never ran), unless it names a permission of the session that ended.
#[test]
fn a_node_that_forgot_the_client_gets_a_new_session() {
    let fabric = rnic::soft::SoftFabric::new();
    let (mn, cn) = (
        fabric.open_device(SoftConfig::default()),
        fabric.open_device(SoftConfig::default()),
    );
    let (forgotten, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let address = parking_lot::Mutex::new(None);
    let seen = std::thread::scope(|s| {
        let node = s.spawn(|| forgetful::serve(&mn, &forgotten, &stop, &address));
        let _stop = StopOnDrop(&stop);
        until("the node listens", || address.lock().is_some());
        let at = address.lock().clone().unwrap();
        let cfg = ClientConfig {
            spare_qps: 0,
            background_recovery: false,
            ..ClientConfig::default()
        };
        let mut c = Client::<SoftProvider>::connect(&cn, &at, cfg).unwrap();
        let first = c.allocate(64, LEASE, Mode::Exclusive).unwrap();
        assert_eq!((c.status().id(), c.status().session()), (1, 0));

        // Refused as unauthenticated: a new session, and the allocation sent again there.
        forgotten.store(true, Ordering::SeqCst);
        let again = c.allocate(64, LEASE, Mode::Exclusive).unwrap();
        assert_eq!(
            (c.status().id(), c.status().session(), again.session()),
            (2, 1, 1)
        );
        assert_eq!(c.status().stats().reconnects, 1);
        assert!(matches!(c.revoke(first), Err(ClientError::SessionLost)));

        // A request naming a permission is not sent again: the permission ended.
        forgotten.store(true, Ordering::SeqCst);
        let r = c.revoke(again);
        assert!(matches!(r, Err(ClientError::SessionLost)), "{r:?}");
        assert_eq!(
            (
                c.status().id(),
                c.status().session(),
                c.status().stats().reconnects
            ),
            (3, 2, 2)
        );
        stop.store(true, Ordering::SeqCst);
        node.join().unwrap()
    });
    assert_eq!(
        (seen.hellos, seen.allocations, seen.refused),
        (3, 2, 2),
        "{seen:?}"
    );
}
