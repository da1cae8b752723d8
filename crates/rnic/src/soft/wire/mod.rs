//! Messages of the soft NIC's RC transport, as parsed representations.
//!
//! Links carry these values; the in-process links move them directly, the TCP link encodes
//! them with [`codec`] (format in `docs/wire-format.md`). Payloads are generic so the TCP engine
//! can parse borrowed views out of its receive buffer (`Packet<&[u8]>`) while queued links own
//! theirs (`Packet<Vec<u8>>`).
//!
//! Panic contract: nothing in this module panics on peer input; parsing returns [`WireError`].

pub mod codec;

pub use codec::{PayloadLen, WireError, decode_frame, decode_head, encode_frame, frame_len};

use crate::verbs::{Psn, QpNumber, Rkey};

/// Version of the wire format; a peer with another version is refused at connection set-up.
/// Version 2 added the AckReq flag of requests.
pub const WIRE_VERSION: u8 = 2;

/// A transport packet between two connected RC QPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet<D = Vec<u8>> {
    /// Requester → responder.
    Request(Request<D>),
    /// Responder → requester.
    Response(Response<D>),
}

/// A request; `psn` orders requests of one QP (one PSN per request, whatever its size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<D = Vec<u8>> {
    /// The responder QP.
    pub dst_qp: QpNumber,
    /// Packet sequence number.
    pub psn: Psn,
    /// The operation.
    pub op: RequestOp<D>,
    /// AckReq (the BTH's A bit): the responder acknowledges a WRITE or SEND that carries it
    /// at once; one without it is acknowledged by the next acknowledgement or response the
    /// responder sends (acknowledgements are cumulative), so a requester may coalesce them.
    /// READs and atomics are answered whatever it says; errors are always NAKed.
    pub ack_req: bool,
}

/// The operation of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestOp<D = Vec<u8>> {
    /// RDMA READ of `len` bytes.
    Read {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Bytes to read.
        len: u32,
    },
    /// RDMA WRITE of `data`.
    Write {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Payload.
        data: D,
    },
    /// Compare-and-swap.
    CompareSwap {
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Fetch-and-add.
    FetchAdd {
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Remote key.
        rkey: Rkey,
        /// Addend.
        add: u64,
    },
    /// Two-sided SEND, optionally invalidating a type-2 window of the responder.
    Send {
        /// Payload.
        data: D,
        /// Window to invalidate (SEND_WITH_INV).
        invalidate: Option<Rkey>,
    },
}

/// A response to the request with the same PSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response<D = Vec<u8>> {
    /// The requester QP.
    pub dst_qp: QpNumber,
    /// PSN of the request answered.
    pub psn: Psn,
    /// Outcome.
    pub kind: ResponseKind<D>,
}

/// Outcome of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseKind<D = Vec<u8>> {
    /// WRITE or SEND executed.
    Ack,
    /// READ data.
    ReadData(D),
    /// Atomic executed; the previous value.
    AtomicAck(u64),
    /// Refused; see [`NakCode`].
    Nak(NakCode),
}

/// Negative acknowledgement codes (IB AETH NAK codes, plus receiver-not-ready).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN out of sequence: the connection is broken.
    PsnSequenceError,
    /// Invalid request: QP access flags, misaligned atomic, malformed request.
    InvalidRequest,
    /// Remote access error: rkey, PD, rights or range.
    RemoteAccessError,
    /// Remote operational error: e.g. the receive buffer was bad.
    RemoteOperationalError,
    /// SEND_WITH_INV named a window the responder could not invalidate.
    InvalidRkey,
    /// Receiver not ready: no receive posted (retry later).
    ReceiverNotReady,
}

/// Connection-management messages exchanged once per connection on the TCP link, before any
/// packet (the in-process links exchange the same values directly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMessage {
    /// Client → listener.
    ConnectRequest {
        /// Wire version the client speaks.
        version: u8,
        /// The client's QP.
        qp: QpNumber,
        /// The client's first request PSN.
        start_psn: Psn,
        /// Application data for the accept policy (at most [`MAX_PRIVATE_DATA`] bytes).
        private_data: Vec<u8>,
    },
    /// Listener → client: accepted.
    ConnectReply {
        /// The server's QP.
        qp: QpNumber,
        /// The server's first request PSN.
        start_psn: Psn,
    },
    /// Listener → client: refused.
    ConnectReject {
        /// Why.
        reason: String,
    },
}

/// Largest private-data blob in a connect request (as rdma_cm's 56 bytes, rounded up).
pub const MAX_PRIVATE_DATA: usize = 64;

/// Everything that travels on a TCP link: connection management first, then packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<D = Vec<u8>> {
    /// Connection set-up.
    Cm(CmMessage),
    /// Transport packet.
    Packet(Packet<D>),
}

impl<D> RequestOp<D> {
    /// The same operation with its payload mapped by `f`.
    pub fn map_data<'a, E>(&'a self, f: impl FnOnce(&'a D) -> E) -> RequestOp<E> {
        match self {
            RequestOp::Read { addr, rkey, len } => RequestOp::Read {
                addr: *addr,
                rkey: *rkey,
                len: *len,
            },
            RequestOp::Write { addr, rkey, data } => RequestOp::Write {
                addr: *addr,
                rkey: *rkey,
                data: f(data),
            },
            RequestOp::CompareSwap {
                addr,
                rkey,
                compare,
                swap,
            } => RequestOp::CompareSwap {
                addr: *addr,
                rkey: *rkey,
                compare: *compare,
                swap: *swap,
            },
            RequestOp::FetchAdd { addr, rkey, add } => RequestOp::FetchAdd {
                addr: *addr,
                rkey: *rkey,
                add: *add,
            },
            RequestOp::Send { data, invalidate } => RequestOp::Send {
                data: f(data),
                invalidate: *invalidate,
            },
        }
    }
}

impl<D> ResponseKind<D> {
    /// The same outcome with its payload mapped by `f`.
    pub fn map_data<'a, E>(&'a self, f: impl FnOnce(&'a D) -> E) -> ResponseKind<E> {
        match self {
            ResponseKind::Ack => ResponseKind::Ack,
            ResponseKind::ReadData(d) => ResponseKind::ReadData(f(d)),
            ResponseKind::AtomicAck(v) => ResponseKind::AtomicAck(*v),
            ResponseKind::Nak(c) => ResponseKind::Nak(*c),
        }
    }
}

impl<D> Packet<D> {
    /// The QP the packet is addressed to.
    pub fn dst_qp(&self) -> QpNumber {
        match self {
            Packet::Request(r) => r.dst_qp,
            Packet::Response(r) => r.dst_qp,
        }
    }

    /// The same packet with its payloads mapped by `f`.
    pub fn map_data<'a, E>(&'a self, f: impl FnOnce(&'a D) -> E) -> Packet<E> {
        match self {
            Packet::Request(r) => Packet::Request(Request {
                dst_qp: r.dst_qp,
                psn: r.psn,
                op: r.op.map_data(f),
                ack_req: r.ack_req,
            }),
            Packet::Response(r) => Packet::Response(Response {
                dst_qp: r.dst_qp,
                psn: r.psn,
                kind: r.kind.map_data(f),
            }),
        }
    }
}

impl<D: AsRef<[u8]>> RequestOp<D> {
    /// A view whose payload borrows from `self`.
    pub fn as_borrowed(&self) -> RequestOp<&[u8]> {
        self.map_data(|d| d.as_ref())
    }
}

impl<D: AsRef<[u8]>> ResponseKind<D> {
    /// A view whose payload borrows from `self`.
    pub fn as_borrowed(&self) -> ResponseKind<&[u8]> {
        self.map_data(|d| d.as_ref())
    }
}

impl<D: AsRef<[u8]>> Packet<D> {
    /// A view whose payloads borrow from `self`.
    pub fn as_borrowed(&self) -> Packet<&[u8]> {
        self.map_data(|d| d.as_ref())
    }
    /// Copies the payloads into an owned packet.
    pub fn to_owned_packet(&self) -> Packet<Vec<u8>> {
        self.map_data(|d| d.as_ref().to_vec())
    }
}
