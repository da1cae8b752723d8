//! The TCP transport: soft devices in different processes or hosts, one TCP connection per RC
//! QP, served by NIC engine threads. Design and rules: `docs/tcp-transport.md`.
//!
//! ```no_run
//! use rnic::soft::{SoftConfig, TcpNode};
//! # fn main() -> rnic::VerbsResult<()> {
//! let node = TcpNode::open(SoftConfig::default(), "127.0.0.1:0".parse().unwrap())?;
//! // node.listen(policy)? on the memory node; qp.connect(&SoftAddress::Tcp(addr), data)? on a client.
//! # Ok(()) }
//! ```
//!
//! - **Engines** (`engine`): `engine_threads` threads per device, each a `mio` poll loop over
//!   non-blocking sockets. They accept, run the server half of the handshake (the accept
//!   policy runs there), read frames and deliver them to QPs — so a memory node's responder
//!   runs on engine threads, never on application threads. They spin on zero-timeout polls
//!   for `spin_polls` idle rounds after work, then park in a blocking poll.
//! - **Connections** (`conn`, the TCP link): one reader at a time per connection, parsing from one
//!   per-connection buffer (frames are delivered in order whoever reads); the length prefix is
//!   checked against the maximum frame before anything is buffered for the frame, and a large
//!   frame's header by its QP (`PacketSink::admit`) before its payload is. Writes from
//!   application threads (requests) and engines (responses) share the socket under a leaf
//!   mutex; what the socket does not take waits in a bounded backlog that the engine flushes.
//! - **Handshake** (`handshake`): the client half on the connecting thread, blocking with
//!   timeouts; the server half on the engine that reads the connection's first frame.
//! - **Link stack**: every connection's link is wrapped in [`TcpOptions::links`] (tracing,
//!   faults), as the in-process fabric's are.
//! - **Loopback**: a QP that connects to a listener of its own device (a memory node's manager
//!   reaching its own memory) gets an inline link to the accepted QP, no socket: an RNIC
//!   serves such a connection inside the NIC, without the wire, and so does this one (the
//!   responder runs on the requester's thread, as on the in-process fabric).
//! - **Errors**: a malformed or out-of-place frame, a lost connection or an overflowing
//!   backlog close the connection and move the QP to ERR (`PacketSink::link_down`).
//! - **Timeouts**: a connection never loses a packet, so its link's retry policy is
//!   `RetryPolicy::Stream` with [`TcpOptions::timeouts`]: a QP probes on an RTO fitted to the
//!   measured round trip and fails only after the budget without any response; a QP that
//!   enters ERR closes its connection. The kernel's keepalive and user timeout (`keepalive`)
//!   cover a vanished host on idle connections and on the responding side.

mod bucket;
mod buffer;
mod conn;
mod engine;
mod handshake;
mod keepalive;
mod limits;
mod sched;
mod service;
mod tls;

use super::{Policy, check_private_data, connect_in_process};
use crate::soft::device::{Connecting, SoftConfig, SoftContext, Transport};
use crate::soft::link::inline::InlineLink;
use crate::soft::link::{AdaptiveTimeouts, LinkStack};
use crate::soft::provider::{SoftAddress, SoftListener};
use crate::soft::wire::codec::{MAX_CM_FRAME_LEN, MAX_PAYLOAD_OVERHEAD};
use crate::verbs::{Clock, VerbsError, VerbsResult};
use conn::{ConnShared, Phase};
use engine::{Command, EngineSet, EngineShared};
use handshake::{Acceptor, Deadline, client_handshake};
use limits::{Counters, Limits};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use tls::TlsState;
pub use tls::{TlsError, TlsOptions, certificates_from_pem, private_key_from_pem};

/// Tuning of a TCP device. A plain struct with defaults.
#[derive(Clone, Debug)]
pub struct TcpOptions {
    /// Engine threads of the device (at least one).
    pub engine_threads: usize,
    /// Zero-timeout polls an engine makes without work before it parks in a blocking poll
    /// (it yields the CPU between them). `0` parks at once: lowest CPU use, a wake-up per burst
    /// of frames — a good choice for a client-only device whose threads busy-poll their CQs.
    pub spin_polls: u32,
    /// Unsent bytes a connection may queue: once its backlog exceeds this, the next frame
    /// closes the connection (the peer is not reading) and the QP goes to ERR. A single frame
    /// is always accepted onto a backlog below the bound, so large messages still pass.
    pub out_buffer_limit: usize,
    /// Bound on connecting and on the whole client handshake (measured with the device clock;
    /// each blocking socket call is bounded by it as well).
    pub connect_timeout: Duration,
    /// Accepted connections per engine that may wait for their `ConnectRequest`; past this the
    /// oldest waiting one is refused and closed.
    pub max_pending_handshakes: usize,
    /// The address this device's connections come from (a multi-homed host picks its
    /// interface; `None`: the system picks by route).
    pub source: Option<IpAddr>,
    /// Wrappers put around every link the device makes (e.g. tracing, fault injection).
    pub links: LinkStack,
    /// How long the device's QPs wait for a slow peer and when they probe it: an RTO fitted
    /// to the measured round trip within `[min_rto, max_rto]`, and the `budget` of time
    /// without any response after which a QP fails with `RetryExceeded`. `QpTiming`'s ack
    /// timeout and retry count do not apply over TCP (they do on loopback connections, which
    /// have no socket). See `docs/tcp-transport.md`, "Timeouts".
    pub timeouts: AdaptiveTimeouts,
    /// Kernel keepalive and `TCP_USER_TIMEOUT` on every connection, derived from
    /// `timeouts.budget`, so that a vanished host is noticed within about the budget on idle
    /// connections and on the responding side too.
    pub keepalive: bool,
    /// TLS 1.3 on every connection (`None`: plaintext). With it, listeners require TLS from
    /// their peers (unless it allows plaintext) and connections speak only TLS; loopback
    /// connections to the device's own listeners have no socket and need none.
    pub tls: Option<TlsOptions>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            engine_threads: 1,
            spin_polls: 1000,
            out_buffer_limit: 4 << 20,
            connect_timeout: Duration::from_secs(5),
            max_pending_handshakes: 256,
            source: None,
            links: LinkStack::default(),
            timeouts: AdaptiveTimeouts::default(),
            keepalive: true,
            tls: None,
        }
    }
}

/// Counters of a TCP device since it was opened (see [`TcpNode::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpStats {
    /// Connections accepted by the device's listeners.
    pub accepted: u64,
    /// Connections this device's QPs made (client handshakes completed).
    pub connected: u64,
    /// Server handshakes completed (QP connected and `established` called).
    pub established: u64,
    /// Handshakes refused (by the policy, or for a malformed request).
    pub rejected: u64,
    /// Connections closed for a protocol error (malformed, oversized or out-of-place frame,
    /// packet for the wrong QP).
    pub protocol_errors: u64,
    /// Connections closed because their outgoing backlog exceeded the bound.
    pub overflow_closes: u64,
    /// Connections lost (EOF, reset, socket error).
    pub lost: u64,
    /// Connections the engines dropped, for any reason.
    pub closed: u64,
    /// Connections the engines serve now.
    pub live: u64,
    /// The largest receive buffer any connection has had, in bytes: the most a peer made the
    /// device buffer for one frame. A frame longer than 64 KiB is buffered only after its QP
    /// found it legal from its header (a WRITE within its region, a SEND within its receive,
    /// READ data as asked for), so this stays below the largest legal message plus 64 KiB.
    pub rx_buffer_high_water: u64,
    /// Large frames their QP decided on from the header alone (answered with a NAK or an RNR
    /// NAK, or dropped as duplicates), whose payload was dropped as it arrived.
    pub discarded_frames: u64,
    /// System calls the transport made on established connections and in its engines, so
    /// a benchmark can count them per operation: `read`s (engines and polling threads),
    /// `write`s, the engines' `epoll_wait`s, and wake-ups of an engine by another thread.
    pub syscalls: TcpSyscalls,
}

/// What the engines served one QP's connection (see [`TcpNode::qp_stats`]): the requests it
/// received, counted as they were delivered to its responder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpQpStats {
    /// Requests delivered (duplicates included: each was served).
    pub served_ops: u64,
    /// Their frame bytes.
    pub served_bytes: u64,
    /// Times a request had to wait for the QP's rate limit.
    pub throttled: u64,
    /// Where this QP's latest request stands in the order the device served requests: the
    /// device's count of served requests (all QPs) when it was served. Once a run is over,
    /// `served_ops / last_served_at` is the QP's share of everything served up to its last
    /// request, whatever the timing of whoever reads the counters.
    pub last_served_at: u64,
}

/// System calls of a TCP device's transport (see [`TcpStats::syscalls`]); handshakes, accepts
/// and socket set-up are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSyscalls {
    /// `read` calls on connections.
    pub reads: u64,
    /// `write` calls on connections.
    pub writes: u64,
    /// The engines' `epoll_wait` calls (parking or not).
    pub polls: u64,
    /// Wake-ups of an engine by another thread (eventfd writes).
    pub wakes: u64,
}

impl TcpSyscalls {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.polls + self.wakes
    }

    /// The calls made since `earlier` (a snapshot of the same device).
    pub fn since(&self, earlier: &TcpSyscalls) -> TcpSyscalls {
        TcpSyscalls {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            polls: self.polls.saturating_sub(earlier.polls),
            wakes: self.wakes.saturating_sub(earlier.wakes),
        }
    }
}

/// Opens soft devices whose QPs connect over TCP.
#[derive(Debug)]
pub struct TcpNode;

impl TcpNode {
    /// A device whose listeners bind `bind` (port 0 picks a free port per listener) and whose
    /// QPs connect to `SoftAddress::Tcp` addresses. Starts the engine threads.
    pub fn open(config: SoftConfig, bind: SocketAddr) -> VerbsResult<SoftContext> {
        Self::open_with(config, bind, TcpOptions::default())
    }

    /// As [`TcpNode::open`], with explicit options.
    pub fn open_with(
        config: SoftConfig,
        bind: SocketAddr,
        options: TcpOptions,
    ) -> VerbsResult<SoftContext> {
        options
            .timeouts
            .validate()
            .map_err(|e| VerbsError::InvalidArgument(e.reason()))?;
        let max_msg = usize::try_from(config.attr.max_msg_size).unwrap_or(usize::MAX);
        let max_frame = max_msg
            .saturating_add(MAX_PAYLOAD_OVERHEAD)
            .max(MAX_CM_FRAME_LEN);
        let limits = Limits {
            max_frame,
            out_limit: options.out_buffer_limit,
            spin_polls: options.spin_polls,
            max_pending_handshakes: options.max_pending_handshakes,
            timeouts: options.timeouts,
            keepalive: options.keepalive,
        };
        let counters = Arc::new(Counters::default());
        let mut engines = Vec::new();
        let mut polls = Vec::new();
        for _ in 0..options.engine_threads.max(1) {
            let (shared, poll) = EngineShared::new(counters.clone())?;
            engines.push(shared);
            polls.push(poll);
        }
        let set = Arc::new(EngineSet::new(
            engines,
            ConnShared::new(
                limits,
                options.links,
                counters,
                options.tls,
                config.clock.clone(),
            ),
        ));
        let transport = Arc::new(TcpTransport {
            bind,
            set: set.clone(),
            threads: Mutex::new(Vec::new()),
            connect_timeout: options.connect_timeout,
            source: options.source,
            clock: config.clock.clone(),
            own: OwnListeners::default(),
        });
        for (i, (shared, poll)) in set.engines.iter().zip(polls).enumerate() {
            let (shared, set) = (shared.clone(), set.clone());
            let handle = std::thread::Builder::new()
                .name(format!("rnic-tcp-eng-{i}"))
                .spawn(move || engine::run(poll, shared, set))?;
            transport.threads.lock().push(handle);
        }
        Ok(SoftContext::with_transport(config, transport))
    }

    /// Total CPU time used by the device's engine threads, or `None` if `ctx` is not a TCP
    /// device. See [`engine_cpu_time`].
    pub fn engine_cpu_time(ctx: &SoftContext) -> Option<Duration> {
        engine_cpu_time(ctx)
    }

    /// CPU time of each engine thread of the device, or `None` if `ctx` is not a TCP device.
    pub fn engine_cpu_times(ctx: &SoftContext) -> Option<Vec<Duration>> {
        let t = TcpTransport::of(ctx)?;
        Some(t.set.engines.iter().map(|e| e.cpu_time()).collect())
    }

    /// What the device served the current connection of its QP `qpn` (`None` if `ctx` is not
    /// a TCP device or the QP has no connection of it; a loopback connection has none).
    pub fn qp_stats(ctx: &SoftContext, qpn: crate::verbs::QpNumber) -> Option<TcpQpStats> {
        let t = TcpTransport::of(ctx)?;
        let conn = t.set.conns.connection_of(qpn)?;
        let s = &conn.service.served;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Some(TcpQpStats {
            served_ops: get(&s.ops),
            served_bytes: get(&s.bytes),
            throttled: get(&s.throttled),
            last_served_at: get(&s.last_at),
        })
    }

    /// The device's connection counters, or `None` if `ctx` is not a TCP device.
    pub fn stats(ctx: &SoftContext) -> Option<TcpStats> {
        let t = TcpTransport::of(ctx)?;
        let c = t.set.counters();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Some(TcpStats {
            accepted: get(&c.accepted),
            connected: get(&c.connected),
            established: get(&c.established),
            rejected: get(&c.rejected),
            protocol_errors: get(&c.protocol_errors),
            overflow_closes: get(&c.overflow_closes),
            lost: get(&c.lost),
            closed: get(&c.closed),
            rx_buffer_high_water: get(&c.rx_high_water),
            discarded_frames: get(&c.discarded_frames),
            syscalls: TcpSyscalls {
                reads: get(&c.read_calls),
                writes: get(&c.write_calls),
                polls: get(&c.poll_calls),
                wakes: get(&c.wake_calls),
            },
            live: t
                .set
                .engines
                .iter()
                .map(|e| e.live_connections() as u64)
                .sum(),
        })
    }
}

/// Total CPU time used so far by the engine threads of a TCP device (`None` for other
/// devices): the sum of each engine thread's CPU clock, read by the caller
/// ([`ThreadCpuClock`](crate::verbs::ThreadCpuClock)), exact whether the engines run or park;
/// an engine that exited counts with its final time. Application threads' time (client
/// handshakes, `poll_receive` on CQ polls) is not included.
pub fn engine_cpu_time(ctx: &SoftContext) -> Option<Duration> {
    TcpNode::engine_cpu_times(ctx).map(|v| v.iter().sum())
}

/// A device's TCP transport: its engines and the client side of the handshake.
struct TcpTransport {
    bind: SocketAddr,
    set: Arc<EngineSet>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    connect_timeout: Duration,
    /// Where this device's connections come from (`None`: the system picks).
    source: Option<IpAddr>,
    /// The device clock, which bounds the client handshake.
    clock: Arc<dyn Clock>,
    /// This device's listeners, for loopback connections (entries leave with their listener).
    own: OwnListeners,
}

/// A device's own listeners by address.
type OwnListeners = Arc<Mutex<HashMap<SocketAddr, Policy>>>;

impl fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpTransport")
            .field("bind", &self.bind)
            .field("engines", &self.set.engines.len())
            .finish_non_exhaustive()
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        for e in &self.set.engines {
            e.stop();
        }
        // The last device reference can be dropped on an engine thread (e.g. with a listener's
        // policy); that thread, and any other engine, must not wait for itself or its peers.
        if engine::in_engine() {
            return;
        }
        for h in self.threads.get_mut().drain(..) {
            let _ = h.join();
        }
    }
}

impl TcpTransport {
    /// The policy of this device's listener at `addr` (one bound to an unspecified address
    /// answers on every local one, at its port).
    fn own_listener(&self, addr: SocketAddr) -> Option<Policy> {
        let own = self.own.lock();
        own.get(&addr).cloned().or_else(|| {
            own.iter()
                .find(|(a, _)| {
                    a.ip().is_unspecified() && a.port() == addr.port() && addr.ip().is_loopback()
                })
                .map(|(_, p)| p.clone())
        })
    }

    /// Connects `qp` to a QP the device's own listener accepts, through an inline link pair.
    fn connect_loopback(
        &self,
        qp: &dyn Connecting,
        policy: &Policy,
        private_data: &[u8],
    ) -> VerbsResult<()> {
        let links = &self.set.conns.links;
        connect_in_process(qp, policy, private_data, |server, client| {
            let (to_server, to_client) = InlineLink::pair(server, client);
            (
                links.wrap(Arc::new(to_server)),
                links.wrap(Arc::new(to_client)),
            )
        })
    }

    fn of(ctx: &SoftContext) -> Option<&TcpTransport> {
        let t: &dyn Any = &*ctx.inner.transport;
        t.downcast_ref::<TcpTransport>()
    }
}

/// Stops a listener when the `SoftListener` is dropped.
struct ListenGuard {
    engine: Weak<EngineShared>,
    token: mio::Token,
    address: SocketAddr,
    listener: Arc<mio::net::TcpListener>,
    own: OwnListeners,
}

impl fmt::Debug for ListenGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcpListener({})", self.address)
    }
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        self.own.lock().remove(&self.address);
        // Stop accepting now, not when the engine gets to it: shutting a listening socket down
        // refuses new connections and resets those waiting in its backlog.
        let _ = socket2::SockRef::from(&*self.listener).shutdown(std::net::Shutdown::Both);
        if let Some(e) = self.engine.upgrade() {
            e.push(Command::Unlisten(self.token));
        }
    }
}

fn no_engine() -> VerbsError {
    VerbsError::Io(io::Error::other("the device has no engine thread"))
}

impl Transport for TcpTransport {
    fn enforces_service(&self) -> bool {
        true
    }

    fn listen(&self, policy: Policy) -> VerbsResult<SoftListener> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(
            Domain::for_address(self.bind),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&self.bind.into())?;
        socket.listen(1024)?;
        let listener: std::net::TcpListener = socket.into();
        let address = listener.local_addr()?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let engine = self.set.pick().ok_or_else(no_engine)?;
        let token = engine.next_token();
        engine
            .registry
            .register(&mut listener, token, mio::Interest::READABLE)?;
        let listener = Arc::new(listener);
        self.own.lock().insert(address, policy.clone());
        engine.push(Command::Listen {
            token,
            listener: listener.clone(),
            acceptor: Acceptor::new(policy),
        });
        Ok(SoftListener {
            address: SoftAddress::Tcp(address),
            _registration: Box::new(ListenGuard {
                engine: Arc::downgrade(&engine),
                token,
                address,
                listener,
                own: self.own.clone(),
            }),
        })
    }

    fn connect(
        &self,
        qp: &dyn Connecting,
        to: &SoftAddress,
        private_data: &[u8],
    ) -> VerbsResult<()> {
        let SoftAddress::Tcp(addr) = to else {
            return Err(VerbsError::InvalidArgument(
                "a TCP device connects to TCP addresses only",
            ));
        };
        check_private_data(private_data)?;
        if let Some(policy) = self.own_listener(*addr) {
            return self.connect_loopback(qp, &policy, private_data);
        }
        let deadline = Deadline::after(self.clock.clone(), self.connect_timeout);
        let my_psn = qp.new_psn();
        let hs = client_handshake(
            *addr,
            self.source,
            qp.qpn(),
            my_psn,
            private_data,
            &deadline,
            self.set.conns.tls.as_ref(),
        )?;
        hs.stream.set_read_timeout(None)?;
        hs.stream.set_write_timeout(None)?;
        hs.stream.set_nonblocking(true)?;
        let stream = mio::net::TcpStream::from_std(hs.stream);
        let engine = self.set.pick().ok_or_else(no_engine)?;
        let phase = Phase::Established {
            sink: qp.sink(),
            qpn: qp.qpn(),
        };
        let tls = hs.tls.map(|mut c| {
            c.set_buffer_limit(Some(self.set.conns.limits.out_limit));
            TlsState::On(Box::new(rustls::Connection::Client(c)))
        });
        let conn = self.set.adopt(&engine, stream, phase, hs.leftover, tls)?;
        conn.claim(qp.qpn());
        if let Err(e) = qp.establish(hs.peer_qp, my_psn, hs.peer_psn, conn.link()) {
            conn.close_local();
            return Err(e);
        }
        Counters::bump(&self.set.counters().connected);
        engine.push(Command::AddConn(conn));
        Ok(())
    }
}
