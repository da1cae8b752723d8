//! One TCP connection (one RC QP): its read side (a shared buffer parsed by one reader at a
//! time), its write side (encode, write, bounded backlog), the server half of the handshake,
//! and [`TcpLink`], the [`Link`] a QP transmits through.
//!
//! Locks, innermost last: `reader` (held while frames are delivered, i.e. around QP locks),
//! then the QP's locks, then `writer` (a leaf: nothing is called while holding it but socket
//! I/O). `Link::close` takes only `writer`, so a QP may close its link from any context,
//! including from inside a delivery on this very connection.

use super::engine::{Command, Counters, EngineSet, EngineShared, Policy, in_engine};
use crate::soft::link::{Link, LinkDown, PacketSink};
use crate::soft::wire::codec::MAX_CM_FRAME_LEN;
use crate::soft::wire::{
    CmMessage, Frame, Packet, WIRE_VERSION, WireError, decode_frame, encode_frame, frame_len,
};
use crate::verbs::{QpNumber, QpState};
use arc_swap::ArcSwapOption;
use mio::Token;
use mio::net::TcpStream;
use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

/// Initial (and resting) size of a connection's read buffer.
const READ_BUF: usize = 32 * 1024;
/// A read or write buffer grown past this is released once empty.
const KEEP_BUF: usize = 1 << 20;
/// Bytes an application thread reads in one `poll_receive` before leaving the rest to the engine.
pub(super) const APP_READ_BUDGET: usize = 256 * 1024;

/// `read_pending` bits: someone found the reader busy and left the socket to its holder.
const PENDING: u8 = 1;

/// Where a connection is in its life, as seen by its reader.
pub(super) enum Phase {
    /// Accepted; the next frame must be a `ConnectRequest` for this policy.
    Accepting(Policy),
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
enum Stop {
    /// The peer broke the protocol (malformed or out-of-place frame).
    Protocol(String),
    /// The accept policy (or the listener) refused the connection.
    Refused(String),
    /// EOF, reset or another socket error.
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
    /// `buf[start..end]` holds received, unparsed bytes; `buf.len()` is the room.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    phase: Phase,
    down_reported: bool,
}

impl Reader {
    /// Makes room after `end`; grows the buffer only up to the declared length of the frame
    /// being received (checked against the maximum beforehand), and only as bytes arrive.
    fn make_room(&mut self, max_frame: usize) -> bool {
        if self.end < self.buf.len() {
            return true;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end < self.buf.len() {
                return true;
            }
        }
        // Full of one incomplete frame: its prefix is known and within `max_frame`.
        let declared = match self.buf.get(..self.end).map(|b| frame_len(b, max_frame)) {
            Some(Ok(Some(len))) => len,
            _ => return false,
        };
        if declared <= self.buf.len() {
            return false; // cannot happen: a complete frame would have been parsed
        }
        let grown = self.buf.len().saturating_mul(2).clamp(READ_BUF, declared);
        self.buf.resize(grown, 0);
        true
    }

    fn reset_if_empty(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP_BUF {
                self.buf = vec![0; READ_BUF];
            }
        }
    }
}

struct Writer {
    /// `out[sent..]` is encoded but not yet written to the socket.
    out: Vec<u8>,
    sent: usize,
    shut: bool,
}

/// What one read attempt did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ReadReport {
    /// Frames handled.
    pub(super) frames: usize,
    /// Stopped at the budget with the socket possibly still readable.
    pub(super) more: bool,
}

/// A TCP connection carrying one QP's frames.
pub(crate) struct Conn {
    /// Taken away (and the descriptor closed, resetting a peer whose data is still unread) when
    /// the engine drops the connection, even while a QP still holds its link.
    stream: ArcSwapOption<TcpStream>,
    token: Token,
    engine: Arc<EngineShared>,
    set: Arc<EngineSet>,
    this: Weak<Conn>,
    reader: Mutex<Reader>,
    read_pending: AtomicU8,
    writer: Mutex<Writer>,
    accepting: AtomicBool,
    /// Closed locally (`Link::close`): the QP knows; no `link_down`.
    closed: AtomicBool,
    /// Broken (protocol error, overflow, I/O error, EOF): the QP is told once.
    failed: AtomicBool,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpConn")
            .field("token", &self.token.0)
            .field("peer", &self.with_stream(|s| s.peer_addr().ok()).flatten())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .field("failed", &self.failed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Conn {
    pub(super) fn new(
        stream: TcpStream,
        token: Token,
        engine: Arc<EngineShared>,
        set: Arc<EngineSet>,
        phase: Phase,
        leftover: Vec<u8>,
    ) -> Arc<Conn> {
        let accepting = matches!(phase, Phase::Accepting(_));
        let end = leftover.len();
        let mut buf = leftover;
        buf.resize(end.max(READ_BUF), 0);
        Arc::new_cyclic(|this| Conn {
            stream: ArcSwapOption::from_pointee(stream),
            token,
            engine,
            set,
            this: this.clone(),
            reader: Mutex::new(Reader {
                buf,
                start: 0,
                end,
                phase,
                down_reported: false,
            }),
            read_pending: AtomicU8::new(0),
            writer: Mutex::new(Writer {
                out: Vec::with_capacity(4096),
                sent: 0,
                shut: false,
            }),
            accepting: AtomicBool::new(accepting),
            closed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        })
    }

    /// Runs `f` on the socket, unless the connection was already dropped by its engine.
    fn with_stream<R>(&self, f: impl FnOnce(&TcpStream) -> R) -> Option<R> {
        let guard = self.stream.load();
        guard.as_deref().map(f)
    }

    fn shutdown_stream(&self) {
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
    fn kick(&self) {
        if let Some(me) = self.this.upgrade() {
            self.engine.push(Command::Kick(me));
        }
    }

    // ---- read side ----

    /// Reads and delivers whatever has arrived, on the calling thread, unless another thread
    /// is reading this connection (then that thread is left to pick up what arrived: it
    /// re-checks `read_pending` after releasing the reader). One reader at a time and one
    /// buffer per connection keep frames in order whichever thread delivers them.
    ///
    /// `full`: read until the socket would block. Otherwise a short read ends the pass (an
    /// application thread polls again anyway; an engine always passes `true`).
    pub(super) fn try_read(&self, budget: usize, full: bool) -> ReadReport {
        let mut report = ReadReport::default();
        self.read_pending.fetch_or(PENDING, Ordering::SeqCst);
        let mut full = full;
        loop {
            let Some(mut r) = self.reader.try_lock() else {
                return report;
            };
            self.read_pending.store(0, Ordering::SeqCst);
            let step = self.drain_locked(&mut r, budget, full);
            drop(r);
            report.frames += step.frames;
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

    fn drain_locked(&self, r: &mut Reader, budget: usize, full: bool) -> ReadReport {
        let mut report = ReadReport::default();
        if matches!(r.phase, Phase::Dead) {
            return report;
        }
        if let Err(stop) = self.dispatch(r, &mut report.frames) {
            self.stop(r, stop);
            return report;
        }
        let mut got = 0usize;
        loop {
            if self.is_dead() || matches!(r.phase, Phase::Dead) {
                return report;
            }
            if got >= budget {
                report.more = true;
                return report;
            }
            let max = r.phase.max_frame(self.set.limits.max_frame);
            if !r.make_room(max) {
                self.stop(
                    r,
                    Stop::Protocol("receive buffer bookkeeping failed".into()),
                );
                return report;
            }
            let Some(space) = r.buf.get_mut(r.end..) else {
                self.stop(
                    r,
                    Stop::Protocol("receive buffer bookkeeping failed".into()),
                );
                return report;
            };
            let room = space.len();
            let res = self.with_stream(|mut s| s.read(space));
            match res.unwrap_or(Ok(0)) {
                Ok(0) => {
                    self.stop(r, Stop::Lost);
                    return report;
                }
                Ok(n) => {
                    r.end += n;
                    got += n;
                    if let Err(stop) = self.dispatch(r, &mut report.frames) {
                        self.stop(r, stop);
                        return report;
                    }
                    if n < room && !full {
                        return report;
                    }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return report,
                    io::ErrorKind::Interrupted => {}
                    _ => {
                        self.stop(r, Stop::Lost);
                        return report;
                    }
                },
            }
        }
    }

    /// Parses and handles every complete frame in the buffer.
    fn dispatch(&self, r: &mut Reader, frames: &mut usize) -> Result<(), Stop> {
        loop {
            if self.is_dead() {
                break;
            }
            let max = r.phase.max_frame(self.set.limits.max_frame);
            let Reader {
                buf,
                start,
                end,
                phase,
                ..
            } = &mut *r;
            let avail = buf.get(*start..*end).unwrap_or_default();
            // The declared length is checked against the maximum before anything is buffered
            // for the frame.
            let Some(len) = frame_len(avail, max)? else {
                break;
            };
            let Some(bytes) = avail.get(..len) else {
                break; // incomplete
            };
            let frame = decode_frame(bytes)?;
            self.on_frame(phase, frame)?;
            *frames += 1;
            *start += len;
        }
        r.reset_if_empty();
        Ok(())
    }

    fn on_frame(&self, phase: &mut Phase, frame: Frame<&[u8]>) -> Result<(), Stop> {
        match phase {
            Phase::Dead => Ok(()),
            Phase::Accepting(policy) => {
                let policy = policy.clone();
                self.accept_request(phase, policy, frame)
            }
            Phase::Established { sink, qpn } => match frame {
                Frame::Packet(packet) => {
                    let dst = match &packet {
                        Packet::Request(r) => r.dst_qp,
                        Packet::Response(r) => r.dst_qp,
                    };
                    if dst != *qpn {
                        return Err(Stop::Protocol(format!(
                            "packet for QP {} on the connection of QP {}",
                            dst.0, qpn.0
                        )));
                    }
                    // Checked under the reader lock: after `Link::close`, nothing more is
                    // delivered (see `EngineSet::replace_connection`).
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

    /// The server half of the handshake, on the engine thread: policy, establish, reply.
    fn accept_request(
        &self,
        phase: &mut Phase,
        policy: Policy,
        frame: Frame<&[u8]>,
    ) -> Result<(), Stop> {
        let Frame::Cm(CmMessage::ConnectRequest {
            version,
            qp: peer_qp,
            start_psn: peer_psn,
            private_data,
        }) = frame
        else {
            return Err(Stop::Protocol(
                "the first frame must be a ConnectRequest".into(),
            ));
        };
        if version != WIRE_VERSION {
            return Err(Stop::Protocol(format!(
                "unsupported wire version {version} (this node speaks {WIRE_VERSION})"
            )));
        }
        let server = policy.create_qp(&private_data).map_err(Stop::Refused)?;
        let qp = server.inner.clone();
        if qp.state() != QpState::Reset {
            return Err(Stop::Refused(
                "accept policy returned a QP that is not in RESET".into(),
            ));
        }
        let me = self.this.upgrade().ok_or(Stop::Orphan)?;
        self.set.replace_connection(qp.qpn, &me);
        let psn = qp.new_psn();
        *phase = Phase::Established {
            sink: qp.sink(),
            qpn: qp.qpn,
        };
        self.accepting.store(false, Ordering::SeqCst);
        if let Err(e) = qp.establish(peer_qp, psn, peer_psn, Arc::new(TcpLink { conn: me })) {
            *phase = Phase::Accepting(policy);
            return Err(Stop::Refused(format!("could not connect the QP: {e}")));
        }
        let reply = Frame::<&[u8]>::Cm(CmMessage::ConnectReply {
            qp: qp.qpn,
            start_psn: psn,
        });
        // The application learns of the QP before the client does (as in-process), so a
        // client that uses the connection right after `connect` returns finds it registered.
        Counters::bump(&self.set.counters.established);
        policy.established(server, &private_data);
        self.send(&reply).map_err(|LinkDown| Stop::Lost)?;
        Ok(())
    }

    /// Ends the connection from the read side: refuses a handshake, or tells the QP.
    fn stop(&self, r: &mut Reader, stop: Stop) {
        let counters = &self.set.counters;
        let reject = match &stop {
            Stop::Protocol(reason) => {
                Counters::bump(&counters.protocol_errors);
                Some(reason.clone())
            }
            Stop::Refused(reason) => Some(reason.clone()),
            Stop::Lost => {
                Counters::bump(&counters.lost);
                None
            }
            Stop::Orphan => None,
        };
        if let (Some(reason), Phase::Accepting(_)) = (reject, &r.phase) {
            Counters::bump(&counters.rejected);
            let _ = self.send(&Frame::<&[u8]>::Cm(CmMessage::ConnectReject { reason }));
        }
        self.failed.store(true, Ordering::SeqCst);
        self.report_down(r);
        self.shut_socket(false);
        if !in_engine() {
            self.kick(); // the engine drops it from its table
        }
    }

    /// Moves the reader to `Dead`, telling an established QP that its link is gone (once, and
    /// not after a local close).
    fn report_down(&self, r: &mut Reader) {
        let phase = std::mem::replace(&mut r.phase, Phase::Dead);
        self.accepting.store(false, Ordering::SeqCst);
        let first = !std::mem::replace(&mut r.down_reported, true);
        if let Phase::Established { sink, .. } = phase
            && first
            && !self.closed.load(Ordering::SeqCst)
            && let Some(sink) = sink.upgrade()
        {
            sink.link_down();
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
            self.report_down(&mut r);
            r.buf = Vec::new();
            r.start = 0;
            r.end = 0;
        }
        self.shut_socket(true);
        self.stream.store(None);
    }

    // ---- write side ----

    /// Encodes `frame` after any backlog and writes as much as the socket takes (one `write`
    /// call when there is no backlog). Fails if the connection is shut, on a socket error, and
    /// when the backlog already exceeds the bound (the peer is not reading): the connection
    /// is then closed and the engine tells the QP.
    pub(super) fn send<D: AsRef<[u8]>>(&self, frame: &Frame<D>) -> Result<(), LinkDown> {
        let mut w = self.writer.lock();
        if w.shut {
            return Err(LinkDown);
        }
        let backlog = w.out.len() - w.sent;
        if backlog > self.set.limits.out_limit {
            Counters::bump(&self.set.counters.overflow_closes);
            return Err(self.fail_locked(w));
        }
        encode_frame(frame, &mut w.out);
        if self.flush_locked(&mut w).is_err() {
            return Err(self.fail_locked(w));
        }
        Ok(())
    }

    /// Marks the connection broken from the write side and lets the engine finish the job
    /// (it tells the QP; we may be inside the QP's locks here).
    fn fail_locked(&self, mut w: parking_lot::MutexGuard<'_, Writer>) -> LinkDown {
        w.shut = true;
        w.out = Vec::new();
        w.sent = 0;
        drop(w);
        self.failed.store(true, Ordering::SeqCst);
        self.shutdown_stream();
        self.kick();
        LinkDown
    }

    fn flush_locked(&self, w: &mut Writer) -> io::Result<()> {
        while w.sent < w.out.len() {
            let Some(rest) = w.out.get(w.sent..) else {
                break;
            };
            let res = self.with_stream(|mut s| s.write(rest));
            match res.unwrap_or_else(|| Err(io::ErrorKind::BrokenPipe.into())) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => w.sent += n,
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                },
            }
        }
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
        if w.shut || w.sent == w.out.len() {
            return;
        }
        if self.flush_locked(&mut w).is_err() {
            let _ = self.fail_locked(w);
        }
    }

    fn shut_socket(&self, release: bool) {
        {
            let mut w = self.writer.lock();
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
            w.shut = true;
            w.out = Vec::new();
            w.sent = 0;
        }
        self.shutdown_stream();
        self.kick();
    }
}

/// The link of a QP connected over TCP.
#[derive(Debug)]
pub(crate) struct TcpLink {
    conn: Arc<Conn>,
}

impl TcpLink {
    pub(super) fn new(conn: Arc<Conn>) -> Self {
        TcpLink { conn }
    }
}

impl Link for TcpLink {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        self.conn.send(&Frame::Packet(packet.clone()))
    }

    fn close(&self) {
        self.conn.close_local();
    }

    fn poll_receive(&self) {
        let report = self.conn.try_read(APP_READ_BUDGET, false);
        if report.more {
            self.conn.kick(); // leave the rest to the engine
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8], room: usize) -> Reader {
        let mut buf = bytes.to_vec();
        buf.resize(room, 0);
        Reader {
            buf,
            start: 0,
            end: bytes.len(),
            phase: Phase::Dead,
            down_reported: false,
        }
    }

    #[test]
    fn make_room_compacts_before_growing() {
        let mut r = reader(&[9; 100], 100);
        r.start = 60;
        assert!(r.make_room(1 << 20));
        assert_eq!((r.start, r.end, r.buf.len()), (0, 40, 100));
        assert_eq!(&r.buf[..40], &[9; 40]);
    }

    #[test]
    fn make_room_grows_only_up_to_the_declared_frame() {
        // A full buffer holding the start of a frame declaring 100 KiB.
        let declared: u32 = 100 * 1024;
        let mut head = declared.to_be_bytes().to_vec();
        head.resize(READ_BUF, 0);
        let mut r = reader(&head, READ_BUF);
        assert!(r.make_room(1 << 20));
        assert_eq!(r.buf.len(), 2 * READ_BUF);
        r.end = r.buf.len();
        assert!(r.make_room(1 << 20));
        assert_eq!(r.buf.len(), declared as usize, "capped at the frame length");
        // Over the maximum: no growth (the caller treats it as a protocol error).
        let mut r = reader(&head, READ_BUF);
        assert!(!r.make_room(64 * 1024));
        assert_eq!(r.buf.len(), READ_BUF);
    }

    #[test]
    fn an_empty_buffer_shrinks_back() {
        let mut r = reader(&[], 4 * KEEP_BUF);
        r.reset_if_empty();
        assert_eq!(r.buf.len(), READ_BUF);
    }
}
