//! One TCP connection (one RC QP) — the TCP link proper: its read side (a shared buffer
//! parsed by one reader at a time), its write side (encode, write, bounded backlog), and
//! [`TcpLink`], the [`Link`] a QP transmits through.
//!
//! A connection knows neither its engine nor the accept policy: it asks its [`Owner`] (the
//! engine that serves it) to look at it, and hands an accepted connection's first frame to an
//! [`Accept`] (the server half of the handshake, in `handshake.rs`).
//!
//! Locks, innermost last: `reader` (held while frames are delivered, i.e. around QP locks),
//! then the QP's locks, then `writer` (nothing is called while holding it but socket I/O),
//! then `tls` (a leaf: the connection's TLS state, taken around each socket read or write of
//! a TLS connection, never while frames are delivered). `Link::close` takes only `writer` and
//! `tls`, so a QP may close its link from any context, including from inside a delivery on
//! this very connection.

use super::buffer::{KEEP_BUF, RecvBuffer};
use super::limits::{Counters, Limits};
use super::sched::TurnBudget;
use super::service::ConnService;
use super::tls::{TLS_HANDSHAKE_RECORD, TlsState, certificate_name};
use crate::soft::link::{
    Admission, Link, LinkDown, LinkEnd, LinkStack, PacketSink, RetryPolicy, check_destination,
};
use crate::soft::wire::codec::MAX_CM_FRAME_LEN;
use crate::soft::wire::{
    Frame, NakCode, Packet, ResponseKind, WireError, decode_frame, decode_head, encode_frame,
    frame_len,
};
use crate::verbs::{Clock, Peer, QpNumber, QpService, Timestamp};
use arc_swap::ArcSwapOption;
use mio::Token;
use mio::net::TcpStream;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Frames up to this length are buffered without asking their QP first: no larger than a
/// resting buffer or two, they cost no more than the buffer every connection has. A longer
/// one is decided from its header ([`PacketSink::admit`]) before the buffer grows for it.
pub(super) const ADMIT_FREE: usize = 64 * 1024;

/// Bytes an application thread reads in one `poll_receive` before leaving the rest to the engine.
pub(super) const APP_READ_BUDGET: usize = 256 * 1024;

/// Frames still delivered after the write side failed. What a peer sent before it reset
/// (responses to our outstanding requests, the NAK that explains the reset) is bounded by a
/// QP's send queue; a peer that is alive and keeps sending while it does not read (a flood
/// cut off for overflow) is not drained for ever: past this, the reader stops the connection.
const FRAMES_AFTER_WRITE_FAILURE: usize = 4096;

/// Bytes a cork holds back at most: past this, frames are written while corked (a pass that
/// delivers a megabyte of READ requests must not pile up their responses).
const CORKED_BYTES: usize = 64 * 1024;

/// `read_pending` bits: someone found the reader busy and left the socket to its holder.
const PENDING: u8 = 1;
/// ... and asked for a full read (until the socket would block): an engine, which has no
/// further readiness event to come back on. The holder then reads in full whatever it was
/// going to do: a short read could stop before an EOF that came right after the last bytes,
/// and nobody would ever read it (the QP would never learn that its peer is gone).
const FULL: u8 = 2;

/// The engine serving a connection, as the connection sees it.
pub(super) trait Owner: Send + Sync {
    /// Asks the engine to look at `conn` now (closed, failed, or left with unread bytes).
    fn kick(&self, conn: Arc<Conn>);
    /// Whether the calling thread is an engine thread (which drops dead connections itself).
    fn on_engine_thread(&self) -> bool;
}

/// The server half of the handshake, run on an accepted connection's first frame.
pub(super) trait Accept: Send + Sync {
    /// Handles the connection's first frame on the reader (under its lock): on success the
    /// QP is established and `phase` is [`Phase::Established`].
    fn accept(
        self: Arc<Self>,
        conn: &Arc<Conn>,
        phase: &mut Phase,
        frame: Frame<&[u8]>,
    ) -> Result<(), Stop>;
    /// Tells the connecting side that it was refused, and why.
    fn reject(&self, conn: &Conn, reason: String);
}

/// What every connection of a device shares.
pub(super) struct ConnShared {
    pub(super) limits: Limits,
    pub(super) counters: Arc<Counters>,
    /// Wrappers put around each connection's link (tracing, faults).
    pub(super) links: LinkStack,
    /// TLS on the device's connections (`None`: plaintext).
    pub(super) tls: Option<super::tls::TlsOptions>,
    /// The device clock: rate limits are measured with it.
    pub(super) clock: Arc<dyn Clock>,
    /// The latest connection of each QP, so a reconnect can wait out a delivery still running
    /// on the previous connection (see [`ConnShared::replace_connection`]).
    latest: Mutex<HashMap<QpNumber, Weak<Conn>>>,
}

impl fmt::Debug for ConnShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnShared")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ConnShared {
    pub(super) fn new(
        limits: Limits,
        links: LinkStack,
        counters: Arc<Counters>,
        tls: Option<super::tls::TlsOptions>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        ConnShared {
            limits,
            counters,
            links,
            tls,
            clock,
            latest: Mutex::new(HashMap::new()),
        }
    }

    /// The connection `qpn` has now, if any.
    pub(super) fn connection_of(&self, qpn: QpNumber) -> Option<Arc<Conn>> {
        self.latest.lock().get(&qpn).and_then(Weak::upgrade)
    }

    /// Records `next` as the connection of `qpn` and waits until no frame of its previous
    /// connection is being delivered. The previous connection was closed (a QP is reset before
    /// it reconnects, and reset closes the link), and a reader checks that flag under its lock
    /// before each delivery; taking the lock once therefore guarantees that no stale packet or
    /// `link_down` from the old connection reaches the QP once it is connected again.
    ///
    /// Called holding no QP lock.
    pub(super) fn replace_connection(&self, qpn: QpNumber, next: &Arc<Conn>) {
        let previous = {
            let mut latest = self.latest.lock();
            latest.retain(|_, c| c.strong_count() > 0);
            latest.insert(qpn, Arc::downgrade(next))
        };
        if let Some(old) = previous.and_then(|w| w.upgrade())
            && !Arc::ptr_eq(&old, next)
        {
            old.quiesce();
        }
    }
}

/// Where a connection is in its life, as seen by its reader.
pub(super) enum Phase {
    /// Accepted; the next frame must be a `ConnectRequest`, handled by this acceptor.
    Accepting(Arc<dyn Accept>),
    /// Set up: packets go to `sink`, and must be addressed to `qpn`.
    Established {
        sink: Weak<dyn PacketSink>,
        qpn: QpNumber,
    },
    /// Closed; nothing more is read or delivered.
    Dead,
}

impl Phase {
    fn max_frame(&self, established_max: usize) -> usize {
        match self {
            Phase::Established { .. } => established_max,
            Phase::Accepting(_) | Phase::Dead => MAX_CM_FRAME_LEN,
        }
    }
}

/// Why reading stopped for good.
pub(super) enum Stop {
    /// The peer broke the protocol (malformed or out-of-place frame).
    Protocol(String),
    /// The accept policy (or the listener) refused the connection.
    Refused(String),
    /// The peer closed the connection between frames (EOF with nothing half-read).
    Closed,
    /// EOF in the middle of a frame, reset or another socket error.
    Lost,
    /// The QP behind the connection is gone.
    Orphan,
}

impl From<WireError> for Stop {
    fn from(e: WireError) -> Self {
        Stop::Protocol(e.to_string())
    }
}

struct Reader {
    rx: RecvBuffer,
    phase: Phase,
    down_reported: bool,
    /// The frame at `rx.start` passed its header check: its buffer may grow to its length.
    admitted: bool,
    /// Bytes still to drop of a frame the QP decided on from its header.
    discard: usize,
}

impl Reader {
    /// How far the buffer may grow for the frame being received: its declared length once
    /// admitted (within the phase's maximum), a small frame's otherwise.
    fn growth_limit(&self, established_max: usize) -> usize {
        let max = self.phase.max_frame(established_max);
        if self.admitted {
            max
        } else {
            max.min(ADMIT_FREE)
        }
    }
}

struct Writer {
    /// `out[sent..]` is encoded but not yet written to the socket.
    out: Vec<u8>,
    sent: usize,
    shut: bool,
    /// Corks held (`Link::cork`, a delivery pass): frames are only encoded until the last
    /// one is released, then leave in one write.
    corks: u32,
}

/// What one read attempt did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ReadReport {
    /// Frames handled.
    pub(super) frames: usize,
    /// Stopped at the budget with the socket possibly still readable.
    pub(super) more: bool,
    /// Stopped at a request its QP's rate limit holds back until this time (the socket is
    /// not read meanwhile).
    pub(super) wait: Option<Timestamp>,
}

/// A TCP connection carrying one QP's frames.
pub(crate) struct Conn {
    /// Taken away (and the descriptor closed, resetting a peer whose data is still unread) when
    /// the engine drops the connection, even while a QP still holds its link.
    stream: ArcSwapOption<TcpStream>,
    token: Token,
    owner: Arc<dyn Owner>,
    shared: Arc<ConnShared>,
    this: Weak<Conn>,
    reader: Mutex<Reader>,
    read_pending: AtomicU8,
    writer: Mutex<Writer>,
    /// TLS on this connection (`None`: plaintext from the start).
    tls: Option<Mutex<TlsState>>,
    accepting: AtomicBool,
    /// Closed locally (`Link::close`): the QP knows; no `link_down`.
    closed: AtomicBool,
    /// Broken (protocol error, overflow, I/O error, EOF): the QP is told once.
    failed: AtomicBool,
    /// The write side failed (a reset peer, a backlog past its bound). The connection is
    /// not dead yet: what the peer sent before it went is read and delivered first (a NAK
    /// that explains why the peer closed must reach the QP), then the reader stops the
    /// connection at the first read that would block, or after [`FRAMES_AFTER_WRITE_FAILURE`].
    write_failed: AtomicBool,
    /// Frames delivered since the write side failed.
    frames_after_failure: AtomicUsize,
    /// The QP's weight and rate limit, and what it was served.
    pub(super) service: ConnService,
    /// Until when (device clock, µs; 0: not held) the peer's requests are left unread: the QP
    /// answered one receiver-not-ready and has had no receive posted since (see
    /// [`RNR_HOLD_US`]).
    rnr_hold_until: AtomicU64,
}

/// How long, µs, a connection leaves the peer's requests unread after its QP answered one
/// receiver-not-ready, unless a receive is posted sooner. Until then every request would be
/// refused again (the refused one) or dropped (those after it: the peer goes back to the
/// refused one); a peer that keeps a deep window in flight past its credits would have the
/// engine read and drop its whole window again and again. Unread, its bytes wait in the
/// socket and TCP's flow control pushes back on it, as for a rate limit. To the peer it looks
/// like a slower network: its receiver-not-ready retries are spent no faster than one per
/// hold. A millisecond: ten times the verbs default RNR timer.
pub(super) const RNR_HOLD_US: u64 = 1_000;

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpConn")
            .field("token", &self.token.0)
            .field("peer", &self.with_stream(|s| s.peer_addr().ok()).flatten())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .field("failed", &self.failed.load(Ordering::Relaxed))
            .field("write_failed", &self.write_failed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Conn {
    pub(super) fn new(
        stream: TcpStream,
        token: Token,
        owner: Arc<dyn Owner>,
        shared: Arc<ConnShared>,
        phase: Phase,
        leftover: Vec<u8>,
        tls: Option<TlsState>,
    ) -> Arc<Conn> {
        let accepting = matches!(phase, Phase::Accepting(_));
        Arc::new_cyclic(|this| Conn {
            stream: ArcSwapOption::from_pointee(stream),
            token,
            owner,
            shared,
            this: this.clone(),
            reader: Mutex::new(Reader {
                rx: RecvBuffer::with_leftover(leftover),
                phase,
                down_reported: false,
                admitted: false,
                discard: 0,
            }),
            read_pending: AtomicU8::new(0),
            writer: Mutex::new(Writer {
                out: Vec::with_capacity(4096),
                sent: 0,
                shut: false,
                corks: 0,
            }),
            tls: tls.map(Mutex::new),
            accepting: AtomicBool::new(accepting),
            closed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            write_failed: AtomicBool::new(false),
            frames_after_failure: AtomicUsize::new(0),
            service: ConnService::default(),
            rnr_hold_until: AtomicU64::new(0),
        })
    }

    /// Who the other end is: its IP address, while the connection has its socket, and the
    /// common name of the certificate it presented, once TLS verified it.
    pub(super) fn peer(&self) -> Peer {
        let addr = self
            .with_stream(|s| s.peer_addr().ok())
            .flatten()
            .map(|a| a.ip());
        let certificate_name = self.tls.as_ref().and_then(|tls| match &*tls.lock() {
            TlsState::On(c) => c
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| certificate_name(leaf)),
            _ => None,
        });
        Peer {
            addr,
            certificate_name,
        }
    }

    /// Runs `f` on the socket, unless the connection was already dropped by its engine.
    fn with_stream<R>(&self, f: impl FnOnce(&TcpStream) -> R) -> Option<R> {
        let guard = self.stream.load();
        guard.as_deref().map(f)
    }

    fn shutdown_stream(&self) {
        // A TLS peer learns that the end is clean (a truncation would lack this).
        if let Some(tls) = &self.tls
            && let TlsState::On(c) = &mut *tls.lock()
        {
            c.send_close_notify();
            let _ = self.write_tls(c);
        }
        let _ = self.with_stream(|s| s.shutdown(Shutdown::Both));
    }

    pub(super) fn token(&self) -> Token {
        self.token
    }

    pub(super) fn is_accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Closed locally or broken: the engine drops it.
    pub(super) fn is_dead(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.failed.load(Ordering::SeqCst)
    }

    /// Asks the owning engine to look at this connection.
    pub(super) fn kick(&self) {
        if let Some(me) = self.this.upgrade() {
            self.owner.kick(me);
        }
    }

    /// The device's connection counters.
    pub(super) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Makes this the connection of `qpn` (see [`ConnShared::replace_connection`]).
    pub(super) fn claim(self: &Arc<Self>, qpn: QpNumber) {
        self.shared.replace_connection(qpn, self);
    }

    /// The link a QP transmits through: a [`TcpLink`] on this connection, wrapped in the
    /// device's link stack.
    pub(super) fn link(self: &Arc<Self>) -> Arc<dyn Link> {
        self.shared
            .links
            .wrap(Arc::new(TcpLink { conn: self.clone() }))
    }

    /// Applies the QP's service to this connection; a request held back by the previous
    /// rate limit is looked at again at once.
    /// The QP answered receiver-not-ready: the peer's requests are left unread for a while
    /// ([`RNR_HOLD_US`]).
    fn hold_requests(&self) {
        let until = self.shared.clock.now().0 + RNR_HOLD_US;
        self.rnr_hold_until.store(until, Ordering::SeqCst);
    }

    /// A receive was posted: a hold on the peer's requests ends, and the engine reads on.
    fn release_requests(&self) {
        if self.rnr_hold_until.swap(0, Ordering::SeqCst) != 0 {
            self.kick();
        }
    }

    /// Whether the peer's requests are held, and until when.
    fn requests_held(&self) -> Option<Timestamp> {
        let until = self.rnr_hold_until.load(Ordering::SeqCst);
        if until == 0 {
            return None;
        }
        if self.shared.clock.now().0 < until {
            return Some(Timestamp(until));
        }
        let _ = self
            .rnr_hold_until
            .compare_exchange(until, 0, Ordering::SeqCst, Ordering::SeqCst);
        None
    }

    pub(super) fn set_service(&self, service: &QpService) {
        if self.service.set(service, self.shared.clock.now()) {
            self.kick();
        }
    }

    /// No longer waiting for a handshake (the engine stops counting it as one).
    pub(super) fn end_handshake(&self) {
        self.accepting.store(false, Ordering::SeqCst);
    }

    // ---- read side ----

    /// Reads and delivers whatever has arrived, on the calling thread, unless another thread
    /// is reading this connection (then that thread is left to pick up what arrived: it
    /// re-checks `read_pending` after releasing the reader). One reader at a time and one
    /// buffer per connection keep frames in order whichever thread delivers them.
    ///
    /// `full`: read until the socket would block. Otherwise a short read ends the pass (an
    /// application thread polls again anyway; an engine always passes `true`) — unless a
    /// full read was asked for by a thread that found the reader busy.
    pub(super) fn try_read(&self, budget: TurnBudget, full: bool) -> ReadReport {
        let mut report = ReadReport::default();
        self.ask_read(full);
        let mut full = full;
        loop {
            let Some(mut r) = self.reader.try_lock() else {
                return report;
            };
            // Every request made before this point is ours now, the way it was asked: an
            // engine that asked between its event and its failed `try_lock` (ours won) does not
            // come back.
            if self.read_pending.swap(0, Ordering::SeqCst) & FULL != 0 {
                full = true;
            }
            let step = self.drain_locked(&mut r, budget, full);
            drop(r);
            report.frames += step.frames;
            if step.wait.is_some() {
                report.wait = step.wait;
                return report;
            }
            if step.more {
                report.more = true;
                return report;
            }
            if self.is_dead() || self.read_pending.load(Ordering::SeqCst) == 0 {
                return report;
            }
            full = true; // a wake-up we stood in for may have been an EOF
        }
    }

    /// Asks for the socket to be read (in full: until it would block), by this thread if it
    /// gets the reader, else by the thread holding it.
    fn ask_read(&self, full: bool) {
        let ask = if full { PENDING | FULL } else { PENDING };
        self.read_pending.fetch_or(ask, Ordering::SeqCst);
    }

    fn drain_locked(&self, r: &mut Reader, budget: TurnBudget, full: bool) -> ReadReport {
        let mut report = ReadReport::default();
        let mut budget = budget;
        if matches!(r.phase, Phase::Dead) {
            return report;
        }
        // The responses to every request this pass delivers leave together, in one write.
        let _batch = WriteBatch::new(self);
        if let Err(stop) = self.dispatch(r, &mut budget, &mut report) {
            self.stop(r, stop);
            return report;
        }
        loop {
            if self.is_dead() || matches!(r.phase, Phase::Dead) || report.wait.is_some() {
                return report;
            }
            if !budget.may_read() {
                report.more = true;
                return report;
            }
            let max = r.growth_limit(self.shared.limits.max_frame);
            if !r.rx.make_room(max) {
                self.stop(
                    r,
                    Stop::Protocol("receive buffer bookkeeping failed".into()),
                );
                return report;
            }
            Counters::raise(&self.shared.counters.rx_high_water, r.rx.buf.len());
            let Some(space) = r.rx.room() else {
                self.stop(
                    r,
                    Stop::Protocol("receive buffer bookkeeping failed".into()),
                );
                return report;
            };
            match self.read_socket(space) {
                Ok((0, _)) => {
                    let stop = if r.rx.unparsed().is_empty() {
                        Stop::Closed
                    } else {
                        Stop::Lost
                    };
                    self.stop(r, stop);
                    return report;
                }
                Ok((n, drained)) => {
                    r.rx.end += n;
                    budget.read(n);
                    if let Err(stop) = self.dispatch(r, &mut budget, &mut report) {
                        self.stop(r, stop);
                        return report;
                    }
                    if drained && !full {
                        return report;
                    }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => {
                        if self.write_failed.load(Ordering::SeqCst) {
                            // Everything the peer sent before the write side failed is
                            // delivered: now the QP learns that the link is gone.
                            self.stop(r, Stop::Lost);
                        }
                        return report;
                    }
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::PermissionDenied => {
                        self.stop(r, Stop::Refused(e.to_string()));
                        return report;
                    }
                    io::ErrorKind::InvalidData => {
                        self.stop(r, Stop::Protocol(e.to_string()));
                        return report;
                    }
                    _ => {
                        self.stop(r, Stop::Lost);
                        return report;
                    }
                },
            }
        }
    }

    /// Reads what the socket has into `space`: plaintext, through TLS if the connection has
    /// it, and whether the socket is known drained (a read from it returned less than it was
    /// offered: later data raises a new readiness edge). An accepted connection's first read
    /// decides whether it has TLS (the module docs of `tls`). Errors of kind
    /// `PermissionDenied` refuse the peer (plaintext where TLS is required), `InvalidData` is
    /// a TLS protocol error, `WouldBlock` means nothing more now.
    fn read_socket(&self, space: &mut [u8]) -> io::Result<(usize, bool)> {
        let plain = |space: &mut [u8]| {
            Counters::bump(&self.shared.counters.read_calls);
            let n = self.with_stream(|mut s| s.read(space)).unwrap_or(Ok(0))?;
            Ok((n, n < space.len()))
        };
        let Some(tls) = &self.tls else {
            return plain(space);
        };
        let mut state = tls.lock();
        let mut socket_short = false;
        loop {
            match &mut *state {
                TlsState::Plain => return plain(space),
                TlsState::Undecided {
                    tls: _,
                    allow_plaintext,
                } => {
                    let mut first = [0u8; 1];
                    let n = self.with_stream(|s| s.peek(&mut first)).unwrap_or(Ok(0))?;
                    if n == 0 {
                        return Ok((0, true));
                    }
                    if first[0] == TLS_HANDSHAKE_RECORD {
                        let TlsState::Undecided { tls, .. } =
                            std::mem::replace(&mut *state, TlsState::Plain)
                        else {
                            return Err(io::ErrorKind::InvalidData.into());
                        };
                        *state = TlsState::On(Box::new(rustls::Connection::Server(*tls)));
                    } else if *allow_plaintext {
                        *state = TlsState::Plain;
                    } else {
                        // Answered in plaintext: the peer speaks nothing else.
                        *state = TlsState::Plain;
                        return Err(io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            "this memory node requires TLS: connect with a certificate its CA \
                             signed",
                        ));
                    }
                }
                TlsState::On(c) => {
                    match c.reader().read(space) {
                        // 0: the peer's close_notify. Drained if this call's socket read was
                        // short and all the plaintext fit.
                        Ok(n) => return Ok((n, socket_short && n < space.len())),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e), // EOF without close_notify: a cut, not a close
                    }
                    Counters::bump(&self.shared.counters.read_calls);
                    let (got, short) = self
                        .with_stream(|s| {
                            let mut socket = ShortRead { s, short: false };
                            (c.read_tls(&mut socket), socket.short)
                        })
                        .unwrap_or((Ok(0), true));
                    let got = got?;
                    socket_short = short;
                    if got > 0 {
                        if let Err(e) = c.process_new_packets() {
                            let _ = self.write_tls(c); // the alert tells the peer why
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("TLS: {e}"),
                            ));
                        }
                        // Handshake flights and key updates leave at once.
                        self.write_tls(c)?;
                    }
                    // got == 0: the socket's EOF, which the next `reader().read` reports.
                }
            }
        }
    }

    /// Writes the TLS records `c` has pending until the socket would block.
    fn write_tls(&self, c: &mut rustls::Connection) -> io::Result<()> {
        while c.wants_write() {
            Counters::bump(&self.shared.counters.write_calls);
            let res = self.with_stream(|mut s| c.write_tls(&mut s));
            match res.unwrap_or_else(|| Err(io::ErrorKind::BrokenPipe.into())) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                },
            }
        }
        Ok(())
    }

    /// Writes plaintext `bytes` to the socket, through TLS if the connection has it; returns
    /// how many were taken (`WouldBlock`: none, the socket or TLS's buffer is full).
    fn write_socket(&self, bytes: &[u8]) -> io::Result<usize> {
        let plain = |bytes: &[u8]| {
            Counters::bump(&self.shared.counters.write_calls);
            self.with_stream(|mut s| s.write(bytes))
                .unwrap_or_else(|| Err(io::ErrorKind::BrokenPipe.into()))
        };
        let Some(tls) = &self.tls else {
            return plain(bytes);
        };
        let mut state = tls.lock();
        let TlsState::On(c) = &mut *state else {
            // A plaintext peer, or one refused before its first byte was read.
            return plain(bytes);
        };
        let n = c.writer().write(bytes)?;
        self.write_tls(c)?;
        if n == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Whether TLS records wait for the socket to take them.
    fn tls_pending(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| matches!(&*t.lock(), TlsState::On(c) if c.wants_write()))
    }

    /// Writes pending TLS records (the socket became writable).
    fn flush_tls(&self) -> io::Result<()> {
        if let Some(tls) = &self.tls
            && let TlsState::On(c) = &mut *tls.lock()
        {
            self.write_tls(c)?;
        }
        Ok(())
    }

    /// Parses and handles every complete frame in the buffer. A frame longer than
    /// [`ADMIT_FREE`] is first decided from its header by its QP: delivered once complete,
    /// or dropped as it arrives, or refused (the connection fails) — never buffered past a
    /// small frame's size before its QP admitted it.
    ///
    /// A turn serves at most what `budget` allows (`report.more` is set when frames are left
    /// for the next), and a request its QP's rate limit holds back stays in the buffer
    /// (`report.wait` says until when).
    fn dispatch(
        &self,
        r: &mut Reader,
        budget: &mut TurnBudget,
        report: &mut ReadReport,
    ) -> Result<(), Stop> {
        loop {
            if self.is_dead() {
                break;
            }
            if r.discard > 0 {
                let n = r.discard.min(r.rx.unparsed().len());
                r.rx.start += n;
                r.discard -= n;
                if r.discard > 0 {
                    break;
                }
                continue;
            }
            let max = r.phase.max_frame(self.shared.limits.max_frame);
            let Reader {
                rx,
                phase,
                admitted,
                discard,
                ..
            } = &mut *r;
            let avail = rx.unparsed();
            // The declared length is checked against the maximum before anything is buffered
            // for the frame.
            let Some(len) = frame_len(avail, max)? else {
                break;
            };
            if len > ADMIT_FREE && !*admitted && avail.len() < len {
                match self.admit(phase, avail, len)? {
                    None => break, // the header is not complete yet
                    Some(Admission::Deliver) => *admitted = true,
                    Some(Admission::Discard) => {
                        Counters::bump(&self.shared.counters.discarded_frames);
                        *discard = len;
                        continue;
                    }
                    Some(Admission::Refuse(why)) => return Err(Stop::Protocol(why.into())),
                }
            }
            let Some(bytes) = avail.get(..len) else {
                break; // incomplete
            };
            if !budget.may_serve() {
                report.more = true;
                break;
            }
            let frame = decode_frame(bytes)?;
            let request = matches!(frame, Frame::Packet(Packet::Request(_)));
            if request && let Some(until) = self.requests_held() {
                report.wait = Some(until);
                break;
            }
            if request && let Err(until) = self.service.admit(len, || self.shared.clock.now()) {
                report.wait = Some(until);
                break;
            }
            self.on_frame(phase, frame)?;
            if request {
                let seq = self.shared.counters.served.fetch_add(1, Ordering::Relaxed) + 1;
                self.service.count(len, seq);
            }
            budget.served();
            report.frames += 1;
            rx.start += len;
            *admitted = false;
            if self.write_failed.load(Ordering::SeqCst)
                && self.frames_after_failure.fetch_add(1, Ordering::SeqCst) + 1
                    >= FRAMES_AFTER_WRITE_FAILURE
            {
                return Err(Stop::Lost);
            }
        }
        r.rx.reset_if_empty();
        Ok(())
    }

    /// Asks the QP whether the large frame starting `avail` (declaring `len` bytes) can be
    /// legal, from its header (`None`: the header has not all arrived). Before set-up, every
    /// frame is small (the phase's maximum is a handshake frame's).
    fn admit(&self, phase: &Phase, avail: &[u8], len: usize) -> Result<Option<Admission>, Stop> {
        let Phase::Established { sink, qpn } = phase else {
            return Ok(Some(Admission::Deliver));
        };
        let Some(head) = decode_head(avail, len)? else {
            return Ok(None);
        };
        check_destination(&head, *qpn).map_err(|e| Stop::Protocol(e.to_string()))?;
        if self.closed.load(Ordering::SeqCst) {
            return Ok(Some(Admission::Discard));
        }
        let sink = sink.upgrade().ok_or(Stop::Orphan)?;
        Ok(Some(sink.admit(&head)))
    }

    fn on_frame(&self, phase: &mut Phase, frame: Frame<&[u8]>) -> Result<(), Stop> {
        match phase {
            Phase::Dead => Ok(()),
            Phase::Accepting(acceptor) => {
                let acceptor = acceptor.clone();
                let me = self.this.upgrade().ok_or(Stop::Orphan)?;
                acceptor.accept(&me, phase, frame)
            }
            Phase::Established { sink, qpn } => match frame {
                Frame::Packet(packet) => {
                    check_destination(&packet, *qpn).map_err(|e| Stop::Protocol(e.to_string()))?;
                    // Checked under the reader lock: after `Link::close`, nothing more is
                    // delivered (see `ConnShared::replace_connection`).
                    if self.closed.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    let sink = sink.upgrade().ok_or(Stop::Orphan)?;
                    sink.deliver(&packet);
                    Ok(())
                }
                Frame::Cm(_) => Err(Stop::Protocol(
                    "connection-management frame after set-up".into(),
                )),
            },
        }
    }

    /// Ends the connection from the read side: refuses a handshake, or tells the QP.
    fn stop(&self, r: &mut Reader, stop: Stop) {
        let counters = &self.shared.counters;
        let reject = match &stop {
            Stop::Protocol(reason) => {
                Counters::bump(&counters.protocol_errors);
                Some(reason.clone())
            }
            Stop::Refused(reason) => Some(reason.clone()),
            Stop::Lost | Stop::Closed => {
                Counters::bump(&counters.lost);
                None
            }
            Stop::Orphan => None,
        };
        let end = match stop {
            Stop::Closed => LinkEnd::Closed,
            _ => LinkEnd::Failed,
        };
        if let (Some(reason), Phase::Accepting(acceptor)) = (reject, &r.phase) {
            Counters::bump(&counters.rejected);
            acceptor.reject(self, reason);
        }
        self.failed.store(true, Ordering::SeqCst);
        self.report_down(r, end);
        self.shut_socket(false);
        if !self.owner.on_engine_thread() {
            self.kick(); // the engine drops it from its table
        }
    }

    /// Moves the reader to `Dead`, telling an established QP that its link is gone (once, and
    /// not after a local close).
    fn report_down(&self, r: &mut Reader, end: LinkEnd) {
        let phase = std::mem::replace(&mut r.phase, Phase::Dead);
        self.accepting.store(false, Ordering::SeqCst);
        let first = !std::mem::replace(&mut r.down_reported, true);
        if let Phase::Established { sink, .. } = phase
            && first
            && !self.closed.load(Ordering::SeqCst)
            && let Some(sink) = sink.upgrade()
        {
            sink.link_down(end);
        }
    }

    /// Waits until no delivery is running on this (closed) connection.
    pub(super) fn quiesce(&self) {
        drop(self.reader.lock());
    }

    /// Refuses a connection still in its handshake.
    pub(super) fn abort_handshake(&self, reason: &str) {
        let mut r = self.reader.lock();
        if matches!(r.phase, Phase::Accepting(_)) {
            self.stop(&mut r, Stop::Refused(reason.into()));
        }
    }

    /// Final clean-up by the engine that drops the connection.
    pub(super) fn teardown(&self) {
        if !self.closed.load(Ordering::SeqCst) {
            self.failed.store(true, Ordering::SeqCst);
        }
        {
            let mut r = self.reader.lock();
            self.report_down(&mut r, LinkEnd::Failed);
            r.rx.release();
        }
        self.shut_socket(true);
        self.stream.store(None);
    }

    // ---- write side ----

    /// Encodes `frame` after any backlog and writes as much as the socket takes (one `write`
    /// call when there is no backlog). Fails if the connection is shut, on a socket error, and
    /// when the backlog already exceeds the bound (the peer is not reading); the last two
    /// fail the write side (see [`fail_writes`](Self::fail_writes)).
    pub(super) fn send<D: AsRef<[u8]>>(&self, frame: &Frame<D>) -> Result<(), LinkDown> {
        let mut w = self.writer.lock();
        if w.shut {
            return Err(LinkDown);
        }
        let backlog = w.out.len() - w.sent;
        if backlog > self.shared.limits.out_limit {
            Counters::bump(&self.shared.counters.overflow_closes);
            return Err(self.fail_writes(w));
        }
        encode_frame(frame, &mut w.out);
        if w.corks > 0 && w.out.len() - w.sent < CORKED_BYTES {
            return Ok(()); // leaves with the cork's last release
        }
        if self.flush_locked(&mut w).is_err() {
            return Err(self.fail_writes(w));
        }
        Ok(())
    }

    /// Holds frames sent from now on until the matching [`uncork`](Self::uncork).
    pub(super) fn cork(&self) {
        self.writer.lock().corks += 1;
    }

    /// Releases one [`cork`](Self::cork); the last release writes what was held back.
    pub(super) fn uncork(&self) {
        let mut w = self.writer.lock();
        w.corks = w.corks.saturating_sub(1);
        if w.corks > 0 || w.shut || w.sent == w.out.len() {
            return;
        }
        if self.flush_locked(&mut w).is_err() {
            let _ = self.fail_writes(w);
        }
    }

    /// Whether the write side failed while the read side still delivers what the peer sent
    /// before: the QP is told that the link is gone once that is done.
    pub(super) fn is_draining(&self) -> bool {
        self.write_failed.load(Ordering::SeqCst) && !self.is_dead()
    }

    /// Fails the write side and lets the engine finish the job: it reads and delivers what
    /// the peer sent before the failure, then tells the QP (we may be inside the QP's locks
    /// here, and a reset peer's last frames, such as the NAK that explains the reset, are
    /// still in our socket). Shutting our write side ends a peer that is alive but not
    /// reading.
    fn fail_writes(&self, mut w: parking_lot::MutexGuard<'_, Writer>) -> LinkDown {
        w.shut = true;
        w.out = Vec::new();
        w.sent = 0;
        drop(w);
        self.write_failed.store(true, Ordering::SeqCst);
        let _ = self.with_stream(|s| s.shutdown(Shutdown::Write));
        self.kick();
        LinkDown
    }

    fn flush_locked(&self, w: &mut Writer) -> io::Result<()> {
        while w.sent < w.out.len() {
            let Some(rest) = w.out.get(w.sent..) else {
                break;
            };
            match self.write_socket(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => w.sent += n,
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                },
            }
        }
        self.flush_tls()?;
        if w.sent == w.out.len() {
            w.out.clear();
            w.sent = 0;
            if w.out.capacity() > KEEP_BUF {
                w.out = Vec::with_capacity(4096);
            }
        } else if w.sent > KEEP_BUF && w.sent * 2 > w.out.len() {
            w.out.drain(..w.sent);
            w.sent = 0;
        }
        Ok(())
    }

    /// Writes backlog after a writable event.
    pub(super) fn flush_pending(&self) {
        let mut w = self.writer.lock();
        if w.shut || w.corks > 0 || (w.sent == w.out.len() && !self.tls_pending()) {
            return;
        }
        if self.flush_locked(&mut w).is_err() {
            let _ = self.fail_writes(w);
        }
    }

    fn shut_socket(&self, release: bool) {
        {
            let mut w = self.writer.lock();
            if !w.shut {
                // What was sent before leaves first (a corked `ConnectReject`, a NAK).
                let _ = self.flush_locked(&mut w);
            }
            w.shut = true;
            if release {
                w.out = Vec::new();
                w.sent = 0;
            }
        }
        self.shutdown_stream();
    }

    /// `Link::close`: no more frames either way; the peer reads EOF.
    pub(super) fn close_local(&self) {
        self.closed.store(true, Ordering::SeqCst);
        {
            let mut w = self.writer.lock();
            if !w.shut {
                // Frames sent before the close leave first (a corked NAK that explains it),
                // as far as the socket takes them without blocking.
                let _ = self.flush_locked(&mut w);
            }
            w.shut = true;
            w.out = Vec::new();
            w.sent = 0;
        }
        self.shutdown_stream();
        self.kick();
    }
}

/// The link of a QP connected over TCP.
/// The socket as TLS reads it, noting whether a read returned less than it was offered (the
/// socket is drained then).
struct ShortRead<'a> {
    s: &'a TcpStream,
    short: bool,
}

impl Read for ShortRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.s.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

#[derive(Debug)]
pub(crate) struct TcpLink {
    conn: Arc<Conn>,
}

impl Link for TcpLink {
    /// A packet the socket refuses while the connection drains is lost, not a link failure
    /// of its own: the link's end reaches the QP through [`PacketSink::link_down`] once the
    /// frames the peer sent before are delivered, in order, as on a wire.
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        if let Packet::Response(r) = packet
            && matches!(r.kind, ResponseKind::Nak(NakCode::ReceiverNotReady))
        {
            self.conn.hold_requests();
        }
        match self.conn.send(&Frame::Packet(packet.clone())) {
            Err(LinkDown) if self.conn.is_draining() => Ok(()),
            sent => sent,
        }
    }

    fn close(&self) {
        self.conn.close_local();
    }

    fn poll_receive(&self) {
        let report = self
            .conn
            .try_read(TurnBudget::bytes_only(APP_READ_BUDGET), false);
        if report.more || report.wait.is_some() {
            self.conn.kick(); // leave the rest to the engine
        }
    }

    /// A TCP connection delivers by itself and says when it breaks: the QP waits for a slow
    /// peer within the device's budget, and closes the connection when it enters ERR.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::Stream(self.conn.shared.limits.timeouts)
    }

    fn cork(&self) {
        self.conn.cork();
    }

    fn uncork(&self) {
        self.conn.uncork();
    }

    fn set_service(&self, service: &QpService) {
        self.conn.set_service(service);
    }

    fn receive_posted(&self) {
        self.conn.release_requests();
    }

    fn served(&self) -> Option<crate::verbs::QpServed> {
        let s = &self.conn.service.served;
        Some(crate::verbs::QpServed {
            ops: s.ops.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
        })
    }
}

/// A cork on a connection's writes for one delivery pass (released when dropped).
struct WriteBatch<'a>(&'a Conn);

impl<'a> WriteBatch<'a> {
    fn new(conn: &'a Conn) -> Self {
        conn.cork();
        WriteBatch(conn)
    }
}

impl Drop for WriteBatch<'_> {
    fn drop(&mut self) {
        self.0.uncork();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soft::wire::{Response, ResponseKind};
    use crate::verbs::Psn;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// An owner that is never an engine and does nothing when kicked.
    struct NoEngine;
    impl Owner for NoEngine {
        fn kick(&self, _conn: Arc<Conn>) {}
        fn on_engine_thread(&self) -> bool {
            false
        }
    }

    /// A QP stand-in: counts deliveries and whether (and after how many) the link went down.
    #[derive(Debug, Default)]
    struct Sink {
        delivered: AtomicUsize,
        down: AtomicBool,
        delivered_before_down: AtomicUsize,
    }
    impl PacketSink for Sink {
        fn deliver(&self, _packet: &Packet<&[u8]>) {
            self.delivered.fetch_add(1, Ordering::SeqCst);
        }
        fn link_down(&self, _end: LinkEnd) {
            self.delivered_before_down
                .store(self.delivered.load(Ordering::SeqCst), Ordering::SeqCst);
            self.down.store(true, Ordering::SeqCst);
        }
    }

    const QPN: QpNumber = QpNumber(7);

    /// Our end of a loopback connection (non-blocking, registered with `poll` for reads) and
    /// the peer's.
    fn connected(poll: &mio::Poll) -> (TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut stream = TcpStream::from_std(ours);
        poll.registry()
            .register(&mut stream, Token(1), mio::Interest::READABLE)
            .unwrap();
        (stream, peer)
    }

    /// An acknowledgement frame for [`QPN`], encoded.
    fn ack_bytes() -> Vec<u8> {
        let mut bytes = Vec::new();
        let ack = Frame::<&[u8]>::Packet(Packet::Response(Response {
            dst_qp: QPN,
            psn: Psn::default(),
            kind: ResponseKind::Ack,
        }));
        encode_frame(&ack, &mut bytes);
        bytes
    }

    /// Waits (at most 100 polls of 100 ms) until the socket reports its read side closed,
    /// which is what the engine sees when the peer's close or reset arrives.
    fn wait_read_closed(poll: &mut mio::Poll) {
        let mut events = mio::Events::with_capacity(8);
        for _ in 0..100 {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if events.iter().any(|e| e.is_read_closed() || e.is_error()) {
                return;
            }
        }
        panic!("the peer's close never arrived");
    }

    /// An established connection over `stream` that delivers to `sink`.
    fn established(stream: TcpStream, sink: &Arc<Sink>) -> Arc<Conn> {
        let sink_dyn: Arc<dyn PacketSink> = sink.clone();
        let limits = Limits {
            max_frame: 1 << 16,
            out_limit: 1 << 20,
            spin_polls: 0,
            max_pending_handshakes: 1,
            timeouts: crate::soft::link::AdaptiveTimeouts::default(),
            keepalive: false,
        };
        Conn::new(
            stream,
            Token(1),
            Arc::new(NoEngine),
            Arc::new(ConnShared::new(
                limits,
                LinkStack::default(),
                Arc::default(),
                None,
                crate::verbs::RealClock::shared(),
            )),
            Phase::Established {
                sink: Arc::downgrade(&sink_dyn),
                qpn: QPN,
            },
            Vec::new(),
            None,
        )
    }

    /// The lost wake-up behind a memory node session that never ended (the soak): the peer
    /// sends its last frame and closes; the engine's readiness event for both asks for a
    /// full read but finds the reader taken by an application thread's poll, which reads
    /// only up to the frame. The EOF must still be read: no further event comes for it.
    #[test]
    fn a_full_read_left_to_the_reader_reaches_the_eof_behind_the_last_frame() {
        let mut poll = mio::Poll::new().unwrap();
        let (stream, mut peer) = connected(&poll);
        // The peer's last frame (an acknowledgement), then its close.
        peer.write_all(&ack_bytes()).unwrap();
        peer.shutdown(Shutdown::Write).unwrap();
        // Both are in our socket once it reports the read side closed.
        wait_read_closed(&mut poll);
        let sink = Arc::new(Sink::default());
        let conn = established(stream, &sink);
        // The engine asks for its full read; its `try_lock` then loses to the poll below
        // (the poll takes the reader first, so the engine returns at once, leaving the read
        // to it).
        conn.ask_read(true);
        // The application thread's poll: a short read on its own.
        conn.try_read(TurnBudget::bytes_only(APP_READ_BUDGET), false);
        assert_eq!(sink.delivered.load(Ordering::SeqCst), 1);
        assert!(
            sink.down.load(Ordering::SeqCst) && conn.is_dead(),
            "the peer closed, and the QP was not told"
        );
    }

    /// A responder that refuses an access sends its NAK and closes; our next transmit then
    /// meets the reset. The NAK must still reach the QP before the link's end does (the QP
    /// reports the refused access, not a transport failure), and the refused transmit is a
    /// lost packet, not a second report.
    #[test]
    fn frames_a_reset_peer_sent_reach_the_qp_before_its_link_goes_down() {
        let mut poll = mio::Poll::new().unwrap();
        let (stream, mut peer) = connected(&poll);
        // The peer's last frame, then a reset (a close with unread data does the same).
        peer.write_all(&ack_bytes()).unwrap();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        wait_read_closed(&mut poll);
        let sink = Arc::new(Sink::default());
        let conn = established(stream, &sink);
        let link = TcpLink { conn: conn.clone() };
        let request = Packet::Response(Response {
            dst_qp: QpNumber(9),
            psn: Psn::default(),
            kind: ResponseKind::Ack,
        });
        assert_eq!(
            link.transmit(&request),
            Ok(()),
            "a lost packet, not LinkDown"
        );
        assert!(conn.is_draining() && !sink.down.load(Ordering::SeqCst));
        // The engine's look at the connection it was kicked for.
        conn.try_read(TurnBudget::bytes_only(APP_READ_BUDGET), true);
        assert_eq!(sink.delivered.load(Ordering::SeqCst), 1);
        assert!(sink.down.load(Ordering::SeqCst) && conn.is_dead());
        assert_eq!(
            sink.delivered_before_down.load(Ordering::SeqCst),
            1,
            "the link went down before the peer's last frame was delivered"
        );
        assert_eq!(link.transmit(&request), Err(LinkDown), "down once reported");
    }
}
