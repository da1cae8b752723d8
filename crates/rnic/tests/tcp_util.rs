//! Shared helpers of the TCP transport tests (included with `#[path]`; as a test target of its
//! own it has no tests).
#![allow(dead_code)] // each test binary uses a different subset
#![allow(clippy::unwrap_used)] // test helpers panic on unexpected failures

use parking_lot::Mutex;
use rnic::soft::wire::{
    CmMessage, Frame, Packet, Request, RequestOp, WIRE_VERSION, decode_frame, encode_frame,
    frame_len,
};
use rnic::soft::*;
use rnic::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Generous wall-clock bound for anything a test waits for.
pub const WAIT: Duration = Duration::from_secs(20);

/// QP timing for tests. Over a socket the transport's adaptive timeouts apply instead
/// (`TcpOptions::timeouts`); this long ack timeout is for loopback connections, which keep the
/// verbs contract's timers, so that a heavily loaded test machine never exhausts their retries.
pub fn timing() -> QpTiming {
    QpTiming {
        ack_timeout_us: 500_000,
        ..QpTiming::default()
    }
}

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// An accept policy that creates QPs on one PD/CQ and keeps them.
#[derive(Debug)]
pub struct Policy {
    pub pd: SoftPd,
    pub cq: SoftCq,
    pub access: AccessFlags,
    pub refuse: Mutex<Option<String>>,
    pub got: Mutex<Vec<SoftQp>>,
    pub private: Mutex<Vec<Vec<u8>>>,
    /// Who each accepted connection came from.
    pub peers: Mutex<Vec<Peer>>,
}

impl Policy {
    pub fn qp_init(&self) -> QpInit<'_, SoftProvider> {
        QpInit {
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            max_send_wr: 256,
            max_recv_wr: 256,
            access: self.access,
            timing: timing(),
        }
    }

    pub fn last(&self) -> Option<SoftQp> {
        self.got.lock().last().cloned()
    }

    pub fn count(&self) -> usize {
        self.got.lock().len()
    }
}

impl AcceptPolicy<SoftProvider> for Policy {
    fn create_qp(&self, _private: &[u8]) -> Result<SoftQp, String> {
        if let Some(reason) = self.refuse.lock().clone() {
            return Err(reason);
        }
        self.pd.create_qp(self.qp_init()).map_err(|e| e.to_string())
    }
    fn established(&self, qp: SoftQp, private: &[u8]) {
        self.got.lock().push(qp);
        self.private.lock().push(private.to_vec());
    }
    fn established_from(&self, qp: SoftQp, peer: &Peer, private: &[u8]) {
        self.peers.lock().push(peer.clone());
        self.established(qp, private)
    }
}

/// A memory node: a TCP device, a registered buffer, a listener.
#[derive(Debug)]
pub struct Server {
    pub ctx: SoftContext,
    pub pd: SoftPd,
    pub cq: SoftCq,
    pub buf: SoftBuffer,
    pub mr: SoftMr,
    pub policy: Arc<Policy>,
    pub listener: Option<SoftListener>,
    pub addr: SoftAddress,
    pub sock: SocketAddr,
}

pub const SERVER_BUF: usize = 1 << 20;

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    pub fn new() -> Server {
        Self::with(SoftConfig::default(), TcpOptions::default())
    }

    pub fn with(config: SoftConfig, options: TcpOptions) -> Server {
        let ctx = TcpNode::open_with(config, loopback(), options).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096).unwrap();
        let buf = ctx.alloc_buffer(SERVER_BUF).unwrap();
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
        let mr = pd.reg_mr(&buf, 0, SERVER_BUF, all).unwrap();
        let policy = Arc::new(Policy {
            pd: pd.clone(),
            cq: cq.clone(),
            access: AccessFlags::REMOTE_ALL,
            refuse: Mutex::new(None),
            got: Mutex::new(Vec::new()),
            private: Mutex::new(Vec::new()),
            peers: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(policy.clone()).unwrap();
        let addr = listener.address().clone();
        let SoftAddress::Tcp(sock) = addr.clone() else {
            panic!("TCP listener with a non-TCP address: {addr:?}");
        };
        Server {
            ctx,
            pd,
            cq,
            buf,
            mr,
            policy,
            listener: Some(listener),
            addr,
            sock,
        }
    }

    /// Waits until the policy has handed over `n` QPs.
    pub fn wait_qps(&self, n: usize) -> SoftQp {
        wait_until("server QP established", || self.policy.count() >= n);
        self.policy.got.lock()[n - 1].clone()
    }
}

/// A compute node: a TCP device with a registered buffer and one QP.
#[derive(Debug)]
pub struct Client {
    pub ctx: SoftContext,
    pub pd: SoftPd,
    pub cq: SoftCq,
    pub buf: SoftBuffer,
    pub mr: SoftMr,
    pub qp: SoftQp,
}

pub const CLIENT_BUF: usize = 1 << 20;

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    pub fn new() -> Client {
        Self::with_access(AccessFlags::empty())
    }

    pub fn with_access(access: AccessFlags) -> Client {
        Self::with_options(access, TcpOptions::default())
    }

    pub fn with_options(access: AccessFlags, options: TcpOptions) -> Client {
        Self::with_config(SoftConfig::default(), access, options)
    }

    pub fn with_config(config: SoftConfig, access: AccessFlags, options: TcpOptions) -> Client {
        let ctx = TcpNode::open_with(config, loopback(), options).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096).unwrap();
        let buf = ctx.alloc_buffer(CLIENT_BUF).unwrap();
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL;
        let mr = pd.reg_mr(&buf, 0, CLIENT_BUF, all).unwrap();
        let qp = pd
            .create_qp(QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                max_send_wr: 256,
                max_recv_wr: 256,
                access,
                timing: timing(),
            })
            .unwrap();
        Client {
            ctx,
            pd,
            cq,
            buf,
            mr,
            qp,
        }
    }

    pub fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            addr: self.buf.addr() + offset,
            length,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts one signalled request.
    pub fn post(&self, wr_id: u64, op: SendOp<'_, SoftMw, SoftMr>) {
        self.qp
            .post_send(&[SendWr {
                wr_id,
                signaled: true,
                op,
            }])
            .unwrap();
    }

    /// Posts one signalled request and waits for its completion.
    pub fn run(&self, wr_id: u64, op: SendOp<'_, SoftMw, SoftMr>) -> WorkCompletion {
        self.post(wr_id, op);
        let wc = wait_wcs(&self.cq, 1).remove(0);
        assert_eq!(wc.wr_id, wr_id, "{wc:?}");
        wc
    }

    pub fn read(&self, offset: u64, len: u32, remote_addr: u64, rkey: Rkey) -> WorkCompletion {
        self.run(
            1,
            SendOp::Read {
                local: self.sge(offset, len),
                remote_addr,
                rkey,
            },
        )
    }
}

pub fn empty_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qp_num: QpNumber(0),
        invalidated_rkey: None,
    }
}

/// Spins on `cond` (polling nothing else) up to [`WAIT`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let clock = RealClock::new();
    let start = clock.now();
    while !cond() {
        assert!(
            clock.now().since(start) < WAIT,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// Spin-polls `cq` until `n` completions arrived (up to [`WAIT`]).
pub fn wait_wcs(cq: &SoftCq, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [empty_wc(); 16];
    wait_until("completions", || {
        let k = cq.poll(&mut wc[..(n - out.len()).min(16)]);
        out.extend_from_slice(&wc[..k]);
        out.len() >= n
    });
    out
}

/// Polls `cq` a while to drive progress (flushes) without expecting anything particular.
pub fn drain_cq(cq: &SoftCq) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [empty_wc(); 16];
    loop {
        let k = cq.poll(&mut wc);
        if k == 0 {
            return out;
        }
        out.extend_from_slice(&wc[..k]);
    }
}

// ---- a raw TCP peer speaking the wire format by hand ----

/// A listening socket that plays the memory node by hand: it accepts one connection, answers
/// its handshake, and then answers requests only when the test says so.
#[derive(Debug)]
pub struct RawServer {
    pub listener: std::net::TcpListener,
    pub addr: SoftAddress,
}

/// What the raw server learnt in a handshake.
#[derive(Debug)]
pub struct RawConn {
    pub raw: Raw,
    /// The connecting QP (responses go to it).
    pub client_qp: QpNumber,
    /// Its first request's PSN.
    pub client_psn: Psn,
}

/// The QP number the raw server claims.
pub const RAW_SERVER_QP: QpNumber = QpNumber(0x5e);

impl RawServer {
    pub fn bind() -> RawServer {
        let listener = std::net::TcpListener::bind(loopback()).unwrap();
        let addr = SoftAddress::Tcp(listener.local_addr().unwrap());
        RawServer { listener, addr }
    }

    /// Connects `qp` (on another thread: `connect` blocks for the handshake) and answers the
    /// handshake.
    pub fn connect(&self, qp: &SoftQp) -> RawConn {
        std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name("raw-connect".into())
                .spawn_scoped(s, || qp.connect(&self.addr, b""))
                .unwrap();
            let (stream, _) = self.listener.accept().unwrap();
            stream.set_nodelay(true).unwrap();
            stream.set_read_timeout(Some(WAIT)).unwrap();
            stream.set_write_timeout(Some(WAIT)).unwrap();
            let mut raw = Raw {
                s: stream,
                buf: Vec::new(),
            };
            let RawRead::Frame(Frame::Cm(CmMessage::ConnectRequest { qp, start_psn, .. })) =
                raw.read_frame()
            else {
                panic!("no ConnectRequest");
            };
            let reply = Frame::<&[u8]>::Cm(CmMessage::ConnectReply {
                qp: RAW_SERVER_QP,
                start_psn: Psn::new(1),
            });
            raw.send(&encode(&reply)).unwrap();
            h.join().unwrap().unwrap();
            RawConn {
                raw,
                client_qp: qp,
                client_psn: start_psn,
            }
        })
    }
}

impl RawConn {
    /// Answers the request `psn` with READ data.
    pub fn answer_read(&mut self, psn: Psn, data: &[u8]) {
        use rnic::soft::wire::{Packet, Response, ResponseKind};
        let response = Frame::Packet(Packet::Response(Response {
            dst_qp: self.client_qp,
            psn,
            kind: ResponseKind::ReadData(data),
        }));
        self.raw.send(&encode(&response)).unwrap();
    }
}

pub fn encode(frame: &Frame<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(frame, &mut out);
    out
}

/// A raw socket peer.
#[derive(Debug)]
pub struct Raw {
    pub s: TcpStream,
    pub buf: Vec<u8>,
}

#[derive(Debug)]
pub enum RawRead {
    Frame(Frame<Vec<u8>>),
    Closed,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        Raw { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.s.write_all(bytes)
    }

    /// Sends a ConnectRequest and returns the server's QP and start PSN.
    pub fn handshake(&mut self, my_qp: u32, my_psn: u32) -> (QpNumber, Psn) {
        let req = Frame::Cm(CmMessage::ConnectRequest {
            version: WIRE_VERSION,
            qp: QpNumber(my_qp),
            start_psn: Psn::new(my_psn),
            private_data: b"raw".to_vec(),
        });
        self.send(&encode(&req)).unwrap();
        match self.read_frame() {
            RawRead::Frame(Frame::Cm(CmMessage::ConnectReply { qp, start_psn })) => (qp, start_psn),
            RawRead::Frame(f) => panic!("unexpected frame {f:?}"),
            RawRead::Closed => panic!("closed during handshake"),
        }
    }

    /// Reads one frame; `Closed` on EOF or reset.
    pub fn read_frame(&mut self) -> RawRead {
        loop {
            if let Ok(Some(len)) = frame_len(&self.buf, usize::MAX)
                && self.buf.len() >= len
            {
                let f = decode_frame(&self.buf[..len]).unwrap();
                let owned = match f {
                    Frame::Cm(c) => Frame::Cm(c),
                    Frame::Packet(p) => Frame::Packet(p.to_owned_packet()),
                };
                self.buf.drain(..len);
                return RawRead::Frame(owned);
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => return RawRead::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return RawRead::Closed;
                }
                Err(e) => panic!("raw read: {e}"),
            }
        }
    }

    /// Reads frames until a request with `psn` arrives (skipping others, e.g. retransmissions
    /// of earlier requests); panics on a close.
    pub fn read_request(&mut self, psn: Psn) -> rnic::soft::wire::Request {
        loop {
            match self.read_frame() {
                RawRead::Frame(Frame::Packet(rnic::soft::wire::Packet::Request(r)))
                    if r.psn == psn =>
                {
                    return r;
                }
                RawRead::Frame(_) => {}
                RawRead::Closed => panic!("closed while waiting for request {psn:?}"),
            }
        }
    }

    /// Reads until the server closes; returns the frames seen before.
    pub fn read_until_closed(&mut self) -> Vec<Frame<Vec<u8>>> {
        let mut frames = Vec::new();
        loop {
            match self.read_frame() {
                RawRead::Frame(f) => frames.push(f),
                RawRead::Closed => return frames,
            }
        }
    }
}

/// WRITE, READ back (and a READ larger than socket buffers), CAS and FAA from `c` into
/// `s`'s registered buffer, each checked on both sides. Returns the pattern the large READ
/// read, which stays at offset 4096 of `s`'s buffer.
pub fn one_sided_ops(s: &Server, c: &Client) -> Vec<u8> {
    let base = s.buf.addr();
    let rkey = s.mr.rkey();
    // WRITE lands.
    c.buf.write(0, b"0123456789abcdef").unwrap();
    let wc = c.run(
        1,
        SendOp::Write {
            local: c.sge(0, 16),
            remote_addr: base + 100,
            rkey,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 16];
    s.buf.read(100, &mut got).unwrap();
    assert_eq!(&got, b"0123456789abcdef");

    // READ brings it back (and a larger READ spanning several socket writes).
    let wc = c.read(1000, 16, base + 100, rkey);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
    c.buf.read(1000, &mut got).unwrap();
    assert_eq!(&got, b"0123456789abcdef");
    let pattern: Vec<u8> = (0..256 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    s.buf.write(4096, &pattern).unwrap();
    let wc = c.read(8192, pattern.len() as u32, base + 4096, rkey);
    assert_eq!(wc.status, WcStatus::Success);
    let mut back = vec![0u8; pattern.len()];
    c.buf.read(8192, &mut back).unwrap();
    assert!(back == pattern, "large READ corrupted");

    // CAS and FAA.
    s.buf.store_u64(512, 5).unwrap();
    let wc = c.run(
        2,
        SendOp::CompareSwap {
            local: c.sge(64, 8),
            remote_addr: base + 512,
            rkey,
            compare: 5,
            swap: 9,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(c.buf.load_u64(64).unwrap(), 5);
    assert_eq!(s.buf.load_u64(512).unwrap(), 9);
    let wc = c.run(
        3,
        SendOp::FetchAdd {
            local: c.sge(72, 8),
            remote_addr: base + 512,
            rkey,
            add: 10,
        },
    );
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(c.buf.load_u64(72).unwrap(), 9);
    assert_eq!(s.buf.load_u64(512).unwrap(), 19);
    pattern
}

/// A request frame from a raw peer to QP `dst`.
pub fn request(dst: QpNumber, psn: Psn, op: RequestOp<&[u8]>) -> Vec<u8> {
    encode(&Frame::Packet(Packet::Request(Request {
        dst_qp: dst,
        psn,
        op,
        ack_req: true,
    })))
}

/// The header of a WRITE or SEND frame whose payload would be `payload` bytes: the frame of
/// `op` (with an empty payload) with its length prefix and payload length field raised. The
/// payload itself is left to the caller.
pub fn large_header(dst: QpNumber, psn: Psn, op: RequestOp<&[u8]>, payload: u32) -> Vec<u8> {
    let len_field = match op {
        RequestOp::Write { .. } => 28..32,
        RequestOp::Send { .. } => 20..24,
        _ => panic!("no payload"),
    };
    let mut bytes = request(dst, psn, op);
    let declared = bytes.len() as u32 + payload;
    bytes[0..4].copy_from_slice(&declared.to_be_bytes());
    bytes[len_field].copy_from_slice(&payload.to_be_bytes());
    bytes
}
