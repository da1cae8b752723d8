//! NIC engine threads: one `mio` poll loop each, non-blocking sockets, spin-then-park.
//!
//! Service is weighted round robin (`sched`): each loop iteration gives every connection with
//! work one turn, bounded in frames and bytes by its QP's weight; one with more left is
//! visited again in the next iteration. A connection whose QP's rate limit holds a request
//! back (`service`) is not read until its time: the engine keeps it on a timer list and parks
//! no longer than the earliest of them (times are the device clock's), so a throttled
//! connection costs neither a spinning engine nor unread data growing in our buffers.
//!
//! An engine owns its listeners and connections (by token). Other threads talk to it only
//! through its inbox ([`Command`]) and its waker; they may also register sockets with its
//! registry directly (epoll registration is thread-safe), so an engine must service a
//! connection or listener as soon as it learns of it: events that arrived before that were
//! dropped as unknown tokens, and with edge-triggered readiness they will not come again.
//!
//! The engine sits above the connections it drives: it is their [`Owner`], and it hands each
//! accepted connection the [`Accept`] of its listener.

use super::conn::{Accept, Conn, ConnShared, Owner, Phase};
use super::keepalive;
use super::limits::Counters;
use super::tls::TlsState;
use crate::verbs::{ThreadCpuClock, Timestamp};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The token of an engine's waker; sockets get tokens from 1 up, never reused.
const WAKER: Token = Token(0);

/// Empty spin rounds (a few microseconds) before a spinning engine starts yielding its core
/// between polls: right after work it polls flat out, since the next frame of a busy connection
/// is about a round trip away.
const YIELD_AFTER: u32 = 32;

/// Interest every connection is registered with, once: edge-triggered read and write readiness.
pub(super) const CONN_INTEREST: Interest = Interest::READABLE.add(Interest::WRITABLE);

thread_local! {
    static IN_ENGINE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is an engine thread (of any device).
pub(super) fn in_engine() -> bool {
    IN_ENGINE.with(Cell::get)
}

/// A device's engines and what they share.
pub(super) struct EngineSet {
    pub(super) engines: Vec<Arc<EngineShared>>,
    next: AtomicUsize,
    /// What the device's connections share (limits, counters, link stack).
    pub(super) conns: Arc<ConnShared>,
}

impl fmt::Debug for EngineSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineSet")
            .field("engines", &self.engines.len())
            .field("conns", &self.conns)
            .finish_non_exhaustive()
    }
}

impl EngineSet {
    pub(super) fn new(engines: Vec<Arc<EngineShared>>, conns: ConnShared) -> Self {
        EngineSet {
            engines,
            next: AtomicUsize::new(0),
            conns: Arc::new(conns),
        }
    }

    /// The device's connection counters.
    pub(super) fn counters(&self) -> &Counters {
        &self.conns.counters
    }

    /// The engine for the next connection or listener (round robin).
    pub(super) fn pick(&self) -> Option<Arc<EngineShared>> {
        let n = self.engines.len();
        if n == 0 {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
        self.engines.get(i).cloned()
    }

    /// Registers `stream` with `engine` and wraps it in a connection.
    pub(super) fn adopt(
        &self,
        engine: &Arc<EngineShared>,
        mut stream: TcpStream,
        phase: Phase,
        leftover: Vec<u8>,
        tls: Option<TlsState>,
    ) -> io::Result<Arc<Conn>> {
        let limits = &self.conns.limits;
        if limits.keepalive {
            keepalive::arm(&stream, &limits.timeouts)?;
        }
        let token = engine.next_token();
        engine
            .registry
            .register(&mut stream, token, CONN_INTEREST)?;
        Ok(Conn::new(
            stream,
            token,
            engine.clone(),
            self.conns.clone(),
            phase,
            leftover,
            tls,
        ))
    }
}

/// What other threads hand to an engine.
pub(super) enum Command {
    /// Accept connections on `listener`, running the handshake with `acceptor`.
    Listen {
        token: Token,
        listener: Arc<TcpListener>,
        acceptor: Arc<dyn Accept>,
    },
    /// Stop accepting on the listener registered under this token.
    Unlisten(Token),
    /// Serve this connection from now on.
    AddConn(Arc<Conn>),
    /// Look at this connection now (closed, failed, or left with unread bytes).
    Kick(Arc<Conn>),
}

/// The part of an engine other threads can reach.
pub(super) struct EngineShared {
    pub(super) registry: Registry,
    waker: Waker,
    inbox: Mutex<Vec<Command>>,
    stop: AtomicBool,
    /// The engine thread's CPU clock, read by whoever asks (set when the thread starts).
    clock: std::sync::OnceLock<ThreadCpuClock>,
    /// Its CPU time when it exited (its clock is gone then).
    cpu_ns: AtomicU64,
    next_token: AtomicUsize,
    /// Connections the engine currently serves.
    live: AtomicUsize,
    /// The device's counters (its wake-ups are counted).
    counters: Arc<Counters>,
}

impl fmt::Debug for EngineShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineShared")
            .field("cpu_ns", &self.cpu_ns.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EngineShared {
    /// A new engine's shared half and the poll instance its thread will own.
    pub(super) fn new(counters: Arc<Counters>) -> io::Result<(Arc<EngineShared>, Poll)> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok((
            Arc::new(EngineShared {
                registry,
                waker,
                inbox: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
                clock: std::sync::OnceLock::new(),
                cpu_ns: AtomicU64::new(0),
                next_token: AtomicUsize::new(1),
                live: AtomicUsize::new(0),
                counters,
            }),
            poll,
        ))
    }

    pub(super) fn next_token(&self) -> Token {
        Token(self.next_token.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues a command and wakes the engine.
    pub(super) fn push(&self, cmd: Command) {
        self.inbox.lock().push(cmd);
        self.wake();
    }

    fn wake(&self) {
        Counters::bump(&self.counters.wake_calls);
        let _ = self.waker.wake();
    }

    /// Asks the engine thread to exit.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// CPU time the engine thread has used so far (read from its clock: the engine itself
    /// never pays a system call to account for its time).
    pub(super) fn cpu_time(&self) -> Duration {
        self.clock
            .get()
            .and_then(ThreadCpuClock::read)
            .unwrap_or_else(|| Duration::from_nanos(self.cpu_ns.load(Ordering::Relaxed)))
    }

    /// Connections the engine currently serves.
    pub(super) fn live_connections(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Keeps the thread's final CPU time, for after it exits.
    fn publish_cpu(&self) {
        let t = crate::verbs::thread_cpu_time();
        if !t.is_zero() {
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            self.cpu_ns.store(ns, Ordering::Relaxed);
        }
    }
}

impl Owner for EngineShared {
    fn kick(&self, conn: Arc<Conn>) {
        self.push(Command::Kick(conn));
    }

    fn on_engine_thread(&self) -> bool {
        in_engine()
    }
}

/// The thread-local half of an engine.
struct Engine {
    poll: Poll,
    me: Arc<EngineShared>,
    set: Arc<EngineSet>,
    conns: HashMap<Token, Arc<Conn>>,
    listeners: HashMap<Token, (Arc<TcpListener>, Arc<dyn Accept>)>,
    /// Accepted connections still in their handshake, oldest first.
    handshakes: VecDeque<Arc<Conn>>,
    /// Connections that stopped reading at their budget; serviced again without an event.
    again: Vec<Arc<Conn>>,
    /// The tokens in `again`: such a connection gets its next turn there, once per loop
    /// iteration, not also from its readiness events (which would give a connection whose
    /// peer keeps raising them more than its weighted share).
    queued: HashSet<Token>,
    /// Connections whose QP's rate limit holds a request back, and until when.
    timers: HashMap<Token, (Timestamp, Arc<Conn>)>,
}

/// Body of an engine thread.
pub(super) fn run(poll: Poll, me: Arc<EngineShared>, set: Arc<EngineSet>) {
    IN_ENGINE.with(|f| f.set(true));
    let _ = me.clock.set(ThreadCpuClock::of_current_thread());
    let mut engine = Engine {
        poll,
        me,
        set,
        conns: HashMap::new(),
        listeners: HashMap::new(),
        handshakes: VecDeque::new(),
        again: Vec::new(),
        queued: HashSet::new(),
        timers: HashMap::new(),
    };
    engine.run_loop();
    engine.shutdown();
}

impl Engine {
    fn run_loop(&mut self) {
        let mut events = Events::with_capacity(256);
        let mut idle: u32 = 0;
        loop {
            if self.me.stop.load(Ordering::SeqCst) {
                return;
            }
            // Spin with zero-timeout polls while there was recent work, then park in a
            // blocking poll: an idle engine costs no CPU. Rate-limited connections whose time
            // has come are served first; the next one due bounds the park.
            let mut useful = self.serve_due();
            let park = self.again.is_empty() && idle >= self.set.conns.limits.spin_polls;
            let timeout = if park {
                self.next_due()
            } else {
                if idle > YIELD_AFTER {
                    // Spinning without work for a while: let other runnable threads on this
                    // core go first (on an idle core this returns at once).
                    std::thread::yield_now();
                }
                Some(Duration::ZERO)
            };
            Counters::bump(&self.set.counters().poll_calls);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return; // the poll instance is broken; connections are torn down below
            }
            for ev in events.iter() {
                useful |= self.on_event(ev);
            }
            for conn in std::mem::take(&mut self.again) {
                self.queued.remove(&conn.token());
                useful |= self.service(&conn, true, true, true);
            }
            idle = if useful { 0 } else { idle.saturating_add(1) };
        }
    }

    /// Serves the rate-limited connections whose time has come, earliest first (then oldest
    /// connection first); returns whether it did.
    fn serve_due(&mut self) -> bool {
        if self.timers.is_empty() {
            return false;
        }
        let now = self.set.conns.clock.now();
        let mut due: Vec<(Timestamp, usize, Arc<Conn>)> = self
            .timers
            .values()
            .filter(|(t, _)| *t <= now)
            .map(|(t, c)| (*t, c.token().0, c.clone()))
            .collect();
        due.sort_by_key(|(t, token, _)| (*t, *token));
        let mut useful = false;
        for (_, _, conn) in due {
            self.timers.remove(&conn.token());
            useful |= self.service(&conn, true, true, true);
        }
        useful
    }

    /// How long a parking engine may wait: until the earliest rate-limit timer (`None`: no
    /// timer, wait for an event).
    fn next_due(&self) -> Option<Duration> {
        let first = self.timers.values().map(|(t, _)| *t).min()?;
        let now = self.set.conns.clock.now();
        // At least a millisecond: `epoll_wait` counts in them, and a shorter wait would spin.
        Some(first.since(now).max(Duration::from_millis(1)))
    }

    /// Handles one readiness event; returns whether it led to real work.
    fn on_event(&mut self, ev: &mio::event::Event) -> bool {
        let token = ev.token();
        if token == WAKER {
            self.drain_inbox();
            return true;
        }
        if self.listeners.contains_key(&token) {
            self.accept(token);
            return true;
        }
        let Some(conn) = self.conns.get(&token).cloned() else {
            return false; // a connection already removed (or not yet added: it is serviced then)
        };
        // A peer that closed (or failed) while its requests waited for its rate limit's
        // tokens: they are not served (its requester is gone, and nothing it sent was
        // acknowledged), and the connection ends now rather than once the tokens are back —
        // with a standing clock, never.
        if (ev.is_read_closed() || ev.is_error()) && self.timers.contains_key(&token) {
            self.remove(&conn);
            return true;
        }
        let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
        let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
        // A read shorter than the room left drained the socket: anything arriving later
        // raises a new edge. Only an end the event already reports (an EOF or an error
        // behind the last bytes) raises none, so then the read goes on until it would block.
        let full = ev.is_read_closed() || ev.is_error();
        self.service(&conn, readable, writable, full)
    }

    fn drain_inbox(&mut self) {
        let commands = std::mem::take(&mut *self.me.inbox.lock());
        for cmd in commands {
            match cmd {
                Command::Listen {
                    token,
                    listener,
                    acceptor,
                } => {
                    self.listeners.insert(token, (listener, acceptor));
                    self.accept(token);
                }
                Command::Unlisten(token) => {
                    self.listeners.remove(&token);
                }
                Command::AddConn(conn) => self.add(conn),
                Command::Kick(conn) => {
                    self.service(&conn, true, true, true);
                }
            }
        }
    }

    fn add(&mut self, conn: Arc<Conn>) {
        if conn.is_accepting() {
            self.handshakes.push_back(conn.clone());
            self.trim_handshakes();
        }
        self.conns.insert(conn.token(), conn.clone());
        self.me.live.store(self.conns.len(), Ordering::Relaxed);
        self.service(&conn, true, true, true);
    }

    /// Bounds the connections waiting for a `ConnectRequest`: past the limit, the oldest are
    /// closed (a peer that connects and never speaks cannot pin sockets forever).
    fn trim_handshakes(&mut self) {
        // Connections past their handshake (or dead) leave from the front as they are found.
        while self
            .handshakes
            .front()
            .is_some_and(|c| !c.is_accepting() || c.is_dead())
        {
            self.handshakes.pop_front();
        }
        let max = self.set.conns.limits.max_pending_handshakes.max(1);
        if self.handshakes.len() <= max {
            return;
        }
        self.handshakes.retain(|c| c.is_accepting() && !c.is_dead());
        while self.handshakes.len() > max {
            let Some(old) = self.handshakes.pop_front() else {
                break;
            };
            old.abort_handshake("too many connections waiting for their handshake");
            self.remove(&old);
        }
    }

    fn accept(&mut self, token: Token) {
        loop {
            let Some((listener, acceptor)) = self.listeners.get(&token) else {
                return;
            };
            match listener.accept() {
                Ok((stream, _peer)) => {
                    let acceptor = acceptor.clone();
                    self.adopt_accepted(stream, acceptor);
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => continue,
                    // WouldBlock: drained. Anything else (e.g. out of descriptors): stop here;
                    // the next incoming connection raises a new event.
                    _ => return,
                },
            }
        }
    }

    fn adopt_accepted(&mut self, stream: TcpStream, acceptor: Arc<dyn Accept>) {
        let _ = stream.set_nodelay(true);
        let Some(target) = self.set.pick() else {
            return;
        };
        let tls = self
            .set
            .conns
            .tls
            .as_ref()
            .and_then(|t| t.accepting(self.set.conns.limits.out_limit));
        let Ok(conn) = self
            .set
            .adopt(&target, stream, Phase::Accepting(acceptor), Vec::new(), tls)
        else {
            return;
        };
        Counters::bump(&self.set.counters().accepted);
        if Arc::ptr_eq(&target, &self.me) {
            self.add(conn);
        } else {
            target.push(Command::AddConn(conn));
        }
    }

    /// Flushes and reads a connection (`full`: until a read would block); removes it once it
    /// is dead. Returns whether frames were delivered (or the connection was removed).
    fn service(&mut self, conn: &Arc<Conn>, readable: bool, writable: bool, full: bool) -> bool {
        let mut useful = false;
        if writable {
            conn.flush_pending();
        }
        // A connection waiting for its next turn gets it in the `again` pass.
        let readable = readable && !self.queued.contains(&conn.token());
        if readable && !conn.is_dead() {
            let report = conn.try_read(conn.service.turn(), full);
            useful = report.frames > 0;
            if let Some(until) = report.wait {
                self.timers.insert(conn.token(), (until, conn.clone()));
            } else if report.more {
                self.queued.insert(conn.token());
                self.again.push(conn.clone());
            }
        }
        if conn.is_dead() {
            self.remove(conn);
            useful = true;
        }
        useful
    }

    fn remove(&mut self, conn: &Arc<Conn>) {
        self.timers.remove(&conn.token());
        conn.teardown();
        if self.conns.remove(&conn.token()).is_some() {
            Counters::bump(&self.set.counters().closed);
            self.me.live.store(self.conns.len(), Ordering::Relaxed);
        }
    }

    /// The device is gone: close everything this engine holds.
    fn shutdown(&mut self) {
        self.listeners.clear();
        self.handshakes.clear();
        self.again.clear();
        self.queued.clear();
        self.timers.clear();
        let commands = std::mem::take(&mut *self.me.inbox.lock());
        for cmd in commands {
            if let Command::AddConn(c) | Command::Kick(c) = cmd {
                c.teardown();
            }
        }
        for (_, conn) in self.conns.drain() {
            conn.teardown();
        }
        self.me.live.store(0, Ordering::Relaxed);
        self.me.publish_cpu();
    }
}
