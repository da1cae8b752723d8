//! Byte encoding of [`Frame`]s for stream links (the TCP link), in the style of smoltcp's wire
//! module: every offset lives in [`field`], decoding goes through a checked view, encoding writes
//! the same offsets into a buffer sized up front. The layout is specified in
//! `docs/wire-format.md`; summary:
//!
//! ```text
//! 0      4        5           6        7       8
//! +------+--------+-----------+--------+-------+------------------------------+
//! | len  | version| frame type| opcode | flags | body (per frame type/opcode) |
//! +------+--------+-----------+--------+-------+------------------------------+
//! ```
//!
//! `len` is a big-endian `u32` counting the whole frame, prefix included; every integer is
//! big-endian (network byte order). Packet bodies start with the 24-bit destination QPN and PSN,
//! each carried in a `u32` whose top byte must be zero.
//!
//! # Panic contract
//!
//! [`frame_len`] and [`decode_frame`] never panic on peer input: every read is bounds-checked
//! (`get`, `split_at_checked`, `try_from`), and any malformed byte string is reported as a
//! [`WireError`]. A stream link calls [`frame_len`] on its receive buffer, refuses the connection
//! on `Err` (in particular [`WireError::TooLarge`], which is reported before any buffer is grown
//! for the frame), waits for more bytes on `Ok(None)` or while the buffer is shorter than the
//! length, and then hands exactly that many bytes to [`decode_frame`].
//!
//! Decoding is strict and the encoding canonical: a byte string that decodes re-encodes to the
//! same bytes (reserved bits and fields must be zero, lengths must agree exactly, no trailing
//! bytes). The only panic is in [`encode_frame`], on *local* input, for a frame longer than
//! `u32::MAX` bytes.

use super::{
    CmMessage, Frame, MAX_PRIVATE_DATA, NakCode, Packet, Request, RequestOp, Response,
    ResponseKind, WIRE_VERSION,
};
use crate::verbs::{MemoryKey, Psn, QpNumber};

/// Length of the header common to every frame (length prefix, version, type, opcode, flags).
pub const FRAME_HEADER_LEN: usize = field::HEADER_END;

/// Length of the header of every packet frame (common header, destination QPN, PSN).
pub const PACKET_HEADER_LEN: usize = field::PACKET_HEADER_END;

/// Largest fixed part of a frame carrying a payload (WRITE): a link accepting payloads of up to
/// `n` bytes must accept frames of `n + MAX_PAYLOAD_OVERHEAD` bytes.
pub const MAX_PAYLOAD_OVERHEAD: usize = field::write::DATA_START;

/// Longest [`CmMessage::ConnectReject`] reason on the wire, in bytes; [`encode_frame`] truncates
/// longer reasons at a character boundary.
pub const MAX_REJECT_REASON: usize = 256;

/// Largest connection-management frame (a reject with the longest reason): a link's
/// `max_frame` must be at least this.
pub const MAX_CM_FRAME_LEN: usize = {
    let req = field::connect_request::PRIVATE_START + MAX_PRIVATE_DATA;
    let rej = field::connect_reject::REASON_START + MAX_REJECT_REASON;
    if req > rej { req } else { rej }
};

/// Wire decoding failure. Any of these from a peer is a protocol error: the link closes the
/// connection (and its QP goes to the error state).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before a field the frame must contain (or before the end the length
    /// prefix declares).
    #[error("truncated frame")]
    Truncated,
    /// The length prefix declares a frame larger than the receiver accepts.
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Declared frame length (prefix included).
        size: usize,
        /// The receiver's maximum.
        max: usize,
    },
    /// The length prefix declares fewer bytes than the common frame header.
    #[error("length prefix {declared} is shorter than the {FRAME_HEADER_LEN}-byte frame header")]
    BadLength {
        /// Declared frame length.
        declared: usize,
    },
    /// The buffer handed to [`decode_frame`] is longer than the length prefix declares.
    #[error("buffer of {actual} bytes holds a frame declaring {declared} bytes")]
    LengthMismatch {
        /// Declared frame length.
        declared: usize,
        /// Length of the buffer.
        actual: usize,
    },
    /// The frame was written by another version of the wire format.
    #[error("unsupported wire version {got} (this side speaks version {WIRE_VERSION})")]
    UnsupportedVersion {
        /// The version byte of the frame.
        got: u8,
    },
    /// The frame-type byte names no known frame type.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrameType(u8),
    /// The opcode byte names no operation of its frame type.
    #[error("unknown opcode {opcode:#04x} for frame type {frame_type:#04x}")]
    UnknownOpcode {
        /// The frame type.
        frame_type: u8,
        /// The opcode.
        opcode: u8,
    },
    /// The NAK code byte names no known [`NakCode`].
    #[error("unknown NAK code {0:#04x}")]
    UnknownNakCode(u8),
    /// A field holds a value the format forbids: a QPN or PSN over 24 bits, reserved bits or
    /// bytes not zero, private data or reject reason too long, a reason that is not UTF-8, ...
    #[error("bad field {field}: {problem}")]
    BadField {
        /// Name of the field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A variable-length part declares a length that disagrees with the bytes left in the frame.
    #[error("{field} declares {declared} bytes but the frame holds {available}")]
    PayloadLength {
        /// Name of the length field.
        field: &'static str,
        /// Declared length.
        declared: usize,
        /// Bytes left in the frame after the fixed fields.
        available: usize,
    },
    /// A fixed-size frame is followed by extra bytes inside its declared length.
    #[error("{extra} trailing bytes after the frame body")]
    TrailingBytes {
        /// Number of bytes past the end of the body.
        extra: usize,
    },
}

/// Field offsets, in bytes from the start of the frame (the length prefix is at offset 0).
///
/// `Field` ranges are fixed-size fields; `*_START` constants begin a variable-length part that
/// runs to the end of the frame; `END` constants are the length of fixed-size frames.
pub mod field {
    use core::ops::Range;

    /// A fixed-size field.
    pub type Field = Range<usize>;

    /// Frame length, prefix included (`u32`).
    pub const LENGTH: Field = 0..4;
    /// Wire version (`u8`).
    pub const VERSION: usize = 4;
    /// Frame type (`u8`).
    pub const FRAME_TYPE: usize = 5;
    /// Opcode (`u8`).
    pub const OPCODE: usize = 6;
    /// Flags (`u8`).
    pub const FLAGS: usize = 7;
    /// End of the common header.
    pub const HEADER_END: usize = 8;

    /// Frame-type values.
    pub mod frame_type {
        /// Connection management.
        pub const CM: u8 = 0x01;
        /// Transport packet.
        pub const PACKET: u8 = 0x02;
    }

    /// Opcode values (unique across frame types, to ease reading hex dumps).
    pub mod opcode {
        /// RDMA READ request.
        pub const READ: u8 = 0x01;
        /// RDMA WRITE request.
        pub const WRITE: u8 = 0x02;
        /// Compare-and-swap request.
        pub const COMPARE_SWAP: u8 = 0x03;
        /// Fetch-and-add request.
        pub const FETCH_ADD: u8 = 0x04;
        /// SEND request.
        pub const SEND: u8 = 0x05;
        /// Acknowledgement.
        pub const ACK: u8 = 0x11;
        /// READ response data.
        pub const READ_DATA: u8 = 0x12;
        /// Atomic acknowledgement.
        pub const ATOMIC_ACK: u8 = 0x13;
        /// Negative acknowledgement.
        pub const NAK: u8 = 0x14;
        /// Connect request.
        pub const CONNECT_REQUEST: u8 = 0x21;
        /// Connect reply.
        pub const CONNECT_REPLY: u8 = 0x22;
        /// Connect reject.
        pub const CONNECT_REJECT: u8 = 0x23;
    }

    /// Flag bits.
    pub mod flags {
        /// SEND: the invalidate rkey field is meaningful (SEND_WITH_INV).
        pub const SEND_INVALIDATE: u8 = 0x01;
        /// Any request: AckReq, the requester asks for an acknowledgement now.
        pub const ACK_REQ: u8 = 0x02;
    }

    /// NAK code values (0–3 are the InfiniBand AETH NAK codes).
    pub mod nak {
        /// PSN sequence error.
        pub const PSN_SEQUENCE_ERROR: u8 = 0x00;
        /// Invalid request.
        pub const INVALID_REQUEST: u8 = 0x01;
        /// Remote access error.
        pub const REMOTE_ACCESS_ERROR: u8 = 0x02;
        /// Remote operational error.
        pub const REMOTE_OPERATIONAL_ERROR: u8 = 0x03;
        /// Invalid rkey for SEND_WITH_INV.
        pub const INVALID_RKEY: u8 = 0x04;
        /// Receiver not ready.
        pub const RECEIVER_NOT_READY: u8 = 0x05;
    }

    /// Packet frames: destination QPN (`u32`, top byte zero).
    pub const DST_QP: Field = 8..12;
    /// Packet frames: PSN (`u32`, top byte zero).
    pub const PSN: Field = 12..16;
    /// End of the packet header.
    pub const PACKET_HEADER_END: usize = 16;

    /// READ request.
    pub mod read {
        use super::Field;
        /// Remote address (`u64`).
        pub const ADDR: Field = 16..24;
        /// Remote key (`u32`).
        pub const RKEY: Field = 24..28;
        /// Bytes to read (`u32`).
        pub const LEN: Field = 28..32;
        /// Frame length.
        pub const END: usize = 32;
    }

    /// WRITE request.
    pub mod write {
        use super::Field;
        /// Remote address (`u64`).
        pub const ADDR: Field = 16..24;
        /// Remote key (`u32`).
        pub const RKEY: Field = 24..28;
        /// Payload length (`u32`).
        pub const DATA_LEN: Field = 28..32;
        /// Payload, to the end of the frame.
        pub const DATA_START: usize = 32;
    }

    /// Compare-and-swap request.
    pub mod compare_swap {
        use super::Field;
        /// Remote address (`u64`).
        pub const ADDR: Field = 16..24;
        /// Remote key (`u32`).
        pub const RKEY: Field = 24..28;
        /// Compare value (`u64`).
        pub const COMPARE: Field = 28..36;
        /// Swap value (`u64`).
        pub const SWAP: Field = 36..44;
        /// Frame length.
        pub const END: usize = 44;
    }

    /// Fetch-and-add request.
    pub mod fetch_add {
        use super::Field;
        /// Remote address (`u64`).
        pub const ADDR: Field = 16..24;
        /// Remote key (`u32`).
        pub const RKEY: Field = 24..28;
        /// Addend (`u64`).
        pub const ADD: Field = 28..36;
        /// Frame length.
        pub const END: usize = 36;
    }

    /// SEND request.
    pub mod send {
        use super::Field;
        /// Rkey to invalidate (`u32`); zero unless the SEND_INVALIDATE flag is set.
        pub const INVALIDATE_RKEY: Field = 16..20;
        /// Payload length (`u32`).
        pub const DATA_LEN: Field = 20..24;
        /// Payload, to the end of the frame.
        pub const DATA_START: usize = 24;
    }

    /// ACK response.
    pub mod ack {
        /// Frame length.
        pub const END: usize = 16;
    }

    /// READ response.
    pub mod read_data {
        use super::Field;
        /// Payload length (`u32`).
        pub const DATA_LEN: Field = 16..20;
        /// Payload, to the end of the frame.
        pub const DATA_START: usize = 20;
    }

    /// Atomic acknowledgement.
    pub mod atomic_ack {
        use super::Field;
        /// Previous value (`u64`).
        pub const ORIGINAL: Field = 16..24;
        /// Frame length.
        pub const END: usize = 24;
    }

    /// NAK response.
    pub mod nak_body {
        /// NAK code (`u8`).
        pub const CODE: usize = 16;
        /// Frame length.
        pub const END: usize = 17;
    }

    /// Connect request.
    pub mod connect_request {
        use super::Field;
        /// Wire version the client speaks (`u8`).
        pub const VERSION: usize = 8;
        /// Private-data length (`u8`, at most `MAX_PRIVATE_DATA`).
        pub const PRIVATE_LEN: usize = 9;
        /// Reserved, zero (`u16`).
        pub const RESERVED: Field = 10..12;
        /// The client's QPN (`u32`, top byte zero).
        pub const QP: Field = 12..16;
        /// The client's first PSN (`u32`, top byte zero).
        pub const START_PSN: Field = 16..20;
        /// Private data, to the end of the frame.
        pub const PRIVATE_START: usize = 20;
    }

    /// Connect reply.
    pub mod connect_reply {
        use super::Field;
        /// The server's QPN (`u32`, top byte zero).
        pub const QP: Field = 8..12;
        /// The server's first PSN (`u32`, top byte zero).
        pub const START_PSN: Field = 12..16;
        /// Frame length.
        pub const END: usize = 16;
    }

    /// Connect reject.
    pub mod connect_reject {
        use super::Field;
        /// Reason length (`u16`, at most `MAX_REJECT_REASON`).
        pub const REASON_LEN: Field = 8..10;
        /// UTF-8 reason, to the end of the frame.
        pub const REASON_START: usize = 10;
    }
}

use field::{flags, frame_type, nak, opcode};

/// Mask of the 24 bits a QPN or PSN may use.
const U24_MASK: u32 = 0x00ff_ffff;

/// A SEND's key to invalidate: the one it carries with the invalidate flag; without the
/// flag the field must be zero.
fn invalidate_of(
    rkey: crate::verbs::Rkey,
    fl: u8,
) -> Result<Option<crate::verbs::Rkey>, WireError> {
    if fl & flags::SEND_INVALIDATE != 0 {
        Ok(Some(rkey))
    } else if rkey.0 != 0 {
        Err(WireError::BadField {
            field: "invalidate_rkey",
            problem: "nonzero without the invalidate flag",
        })
    } else {
        Ok(None)
    }
}

fn usize_from(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Total length (including the 4-byte length prefix) of the frame starting at `buf[0]`, once
/// the prefix is complete.
///
/// Returns `Ok(None)` if `buf` holds fewer than 4 bytes. Fails with [`WireError::TooLarge`] if
/// the declared length exceeds `max_frame` (so a receiver checks it before allocating anything
/// for the frame), and with [`WireError::BadLength`] if it is shorter than
/// [`FRAME_HEADER_LEN`]. Only the prefix is examined; [`decode_frame`] validates the rest.
pub fn frame_len(buf: &[u8], max_frame: usize) -> Result<Option<usize>, WireError> {
    let Some(prefix) = buf.get(field::LENGTH) else {
        return Ok(None);
    };
    let declared = usize_from(be_u32(prefix)?);
    if declared > max_frame {
        return Err(WireError::TooLarge {
            size: declared,
            max: max_frame,
        });
    }
    if declared < FRAME_HEADER_LEN {
        return Err(WireError::BadLength { declared });
    }
    Ok(Some(declared))
}

fn be_u32(b: &[u8]) -> Result<u32, WireError> {
    <[u8; 4]>::try_from(b)
        .map(u32::from_be_bytes)
        .map_err(|_| WireError::Truncated)
}

/// A checked view of one whole frame: the buffer holds exactly the length its prefix declares,
/// at least the common header, and the version is [`WIRE_VERSION`]. Field reads past the end of
/// the frame fail with [`WireError::Truncated`].
#[derive(Debug, Clone, Copy)]
struct FrameView<'a> {
    buf: &'a [u8],
}

impl<'a> FrameView<'a> {
    fn new_checked(buf: &'a [u8]) -> Result<Self, WireError> {
        let prefix = buf.get(field::LENGTH).ok_or(WireError::Truncated)?;
        let declared = usize_from(be_u32(prefix)?);
        if declared < FRAME_HEADER_LEN {
            return Err(WireError::BadLength { declared });
        }
        if buf.len() < declared {
            return Err(WireError::Truncated);
        }
        if buf.len() > declared {
            return Err(WireError::LengthMismatch {
                declared,
                actual: buf.len(),
            });
        }
        let view = FrameView { buf };
        let version = view.u8(field::VERSION)?;
        if version != WIRE_VERSION {
            return Err(WireError::UnsupportedVersion { got: version });
        }
        Ok(view)
    }

    fn u8(&self, at: usize) -> Result<u8, WireError> {
        self.buf.get(at).copied().ok_or(WireError::Truncated)
    }

    fn array<const N: usize>(&self, f: field::Field) -> Result<[u8; N], WireError> {
        let bytes = self.buf.get(f).ok_or(WireError::Truncated)?;
        <[u8; N]>::try_from(bytes).map_err(|_| WireError::Truncated)
    }

    fn u16(&self, f: field::Field) -> Result<u16, WireError> {
        self.array(f).map(u16::from_be_bytes)
    }

    fn u32(&self, f: field::Field) -> Result<u32, WireError> {
        self.array(f).map(u32::from_be_bytes)
    }

    fn u64(&self, f: field::Field) -> Result<u64, WireError> {
        self.array(f).map(u64::from_be_bytes)
    }

    /// A 24-bit value carried in a `u32` whose top byte must be zero.
    fn u24(&self, f: field::Field, name: &'static str) -> Result<u32, WireError> {
        let v = self.u32(f)?;
        if v & !U24_MASK != 0 {
            return Err(WireError::BadField {
                field: name,
                problem: "value exceeds 24 bits",
            });
        }
        Ok(v)
    }

    fn rkey(&self, f: field::Field) -> Result<MemoryKey, WireError> {
        self.u32(f).map(MemoryKey)
    }

    /// The variable part from `start` to the end of the frame, whose length field (named
    /// `name`) declared `declared` bytes.
    fn tail(
        &self,
        start: usize,
        declared: usize,
        name: &'static str,
    ) -> Result<&'a [u8], WireError> {
        let (_, rest) = self
            .buf
            .split_at_checked(start)
            .ok_or(WireError::Truncated)?;
        if rest.len() != declared {
            return Err(WireError::PayloadLength {
                field: name,
                declared,
                available: rest.len(),
            });
        }
        Ok(rest)
    }

    /// Checks that a fixed-size frame is exactly `end` bytes long.
    fn finish(&self, end: usize) -> Result<(), WireError> {
        match self.buf.len().checked_sub(end) {
            None => Err(WireError::Truncated),
            Some(0) => Ok(()),
            Some(extra) => Err(WireError::TrailingBytes { extra }),
        }
    }

    /// Checks that the flags byte has no bit outside `allowed`.
    fn flags(&self, allowed: u8) -> Result<u8, WireError> {
        let f = self.u8(field::FLAGS)?;
        if f & !allowed != 0 {
            return Err(WireError::BadField {
                field: "flags",
                problem: "reserved bits set",
            });
        }
        Ok(f)
    }
}

/// Parses exactly one whole frame.
///
/// `buf` must hold the frame's length prefix and exactly the number of bytes it declares
/// (as reported by [`frame_len`]); shorter buffers fail with [`WireError::Truncated`], longer
/// ones with [`WireError::LengthMismatch`]. Payloads borrow from `buf`. Never panics.
pub fn decode_frame(buf: &[u8]) -> Result<Frame<&[u8]>, WireError> {
    let view = FrameView::new_checked(buf)?;
    let ty = view.u8(field::FRAME_TYPE)?;
    let op = view.u8(field::OPCODE)?;
    match ty {
        frame_type::CM => decode_cm(&view, op).map(Frame::Cm),
        frame_type::PACKET => decode_packet(&view, op).map(Frame::Packet),
        other => Err(WireError::UnknownFrameType(other)),
    }
}

fn decode_packet<'a>(v: &FrameView<'a>, op: u8) -> Result<Packet<&'a [u8]>, WireError> {
    let allowed_flags = match op {
        opcode::SEND => flags::SEND_INVALIDATE | flags::ACK_REQ,
        opcode::READ | opcode::WRITE | opcode::COMPARE_SWAP | opcode::FETCH_ADD => flags::ACK_REQ,
        opcode::ACK | opcode::READ_DATA | opcode::ATOMIC_ACK | opcode::NAK => 0,
        other => {
            return Err(WireError::UnknownOpcode {
                frame_type: frame_type::PACKET,
                opcode: other,
            });
        }
    };
    let fl = v.flags(allowed_flags)?;
    let dst_qp = QpNumber(v.u24(field::DST_QP, "dst_qp")?);
    let psn = Psn::new(v.u24(field::PSN, "psn")?);
    let ack_req = fl & flags::ACK_REQ != 0;
    let request = |op| {
        Ok(Packet::Request(Request {
            dst_qp,
            psn,
            op,
            ack_req,
        }))
    };
    let response = |kind| Ok(Packet::Response(Response { dst_qp, psn, kind }));
    match op {
        opcode::READ => {
            use field::read as f;
            let op = RequestOp::Read {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                len: v.u32(f::LEN)?,
            };
            v.finish(f::END)?;
            request(op)
        }
        opcode::WRITE => {
            use field::write as f;
            let addr = v.u64(f::ADDR)?;
            let rkey = v.rkey(f::RKEY)?;
            let len = usize_from(v.u32(f::DATA_LEN)?);
            let data = v.tail(f::DATA_START, len, "data_len")?;
            request(RequestOp::Write { addr, rkey, data })
        }
        opcode::COMPARE_SWAP => {
            use field::compare_swap as f;
            let op = RequestOp::CompareSwap {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                compare: v.u64(f::COMPARE)?,
                swap: v.u64(f::SWAP)?,
            };
            v.finish(f::END)?;
            request(op)
        }
        opcode::FETCH_ADD => {
            use field::fetch_add as f;
            let op = RequestOp::FetchAdd {
                addr: v.u64(f::ADDR)?,
                rkey: v.rkey(f::RKEY)?,
                add: v.u64(f::ADD)?,
            };
            v.finish(f::END)?;
            request(op)
        }
        opcode::SEND => {
            use field::send as f;
            let invalidate = invalidate_of(v.rkey(f::INVALIDATE_RKEY)?, fl)?;
            let len = usize_from(v.u32(f::DATA_LEN)?);
            let data = v.tail(f::DATA_START, len, "data_len")?;
            request(RequestOp::Send { data, invalidate })
        }
        opcode::ACK => {
            v.finish(field::ack::END)?;
            response(ResponseKind::Ack)
        }
        opcode::READ_DATA => {
            use field::read_data as f;
            let len = usize_from(v.u32(f::DATA_LEN)?);
            let data = v.tail(f::DATA_START, len, "data_len")?;
            response(ResponseKind::ReadData(data))
        }
        opcode::ATOMIC_ACK => {
            use field::atomic_ack as f;
            let original = v.u64(f::ORIGINAL)?;
            v.finish(f::END)?;
            response(ResponseKind::AtomicAck(original))
        }
        opcode::NAK => {
            use field::nak_body as f;
            let code = nak_from_u8(v.u8(f::CODE)?)?;
            v.finish(f::END)?;
            response(ResponseKind::Nak(code))
        }
        other => Err(WireError::UnknownOpcode {
            frame_type: frame_type::PACKET,
            opcode: other,
        }),
    }
}

fn decode_cm(v: &FrameView<'_>, op: u8) -> Result<CmMessage, WireError> {
    if matches!(
        op,
        opcode::CONNECT_REQUEST | opcode::CONNECT_REPLY | opcode::CONNECT_REJECT
    ) {
        v.flags(0)?;
    }
    match op {
        opcode::CONNECT_REQUEST => {
            use field::connect_request as f;
            let version = v.u8(f::VERSION)?;
            let private_len = usize::from(v.u8(f::PRIVATE_LEN)?);
            if private_len > MAX_PRIVATE_DATA {
                return Err(WireError::BadField {
                    field: "private_len",
                    problem: "exceeds MAX_PRIVATE_DATA",
                });
            }
            if v.u16(f::RESERVED)? != 0 {
                return Err(WireError::BadField {
                    field: "reserved",
                    problem: "reserved bytes not zero",
                });
            }
            let qp = QpNumber(v.u24(f::QP, "qp")?);
            let start_psn = Psn::new(v.u24(f::START_PSN, "start_psn")?);
            let private_data = v.tail(f::PRIVATE_START, private_len, "private_len")?;
            Ok(CmMessage::ConnectRequest {
                version,
                qp,
                start_psn,
                private_data: private_data.to_vec(),
            })
        }
        opcode::CONNECT_REPLY => {
            use field::connect_reply as f;
            let qp = QpNumber(v.u24(f::QP, "qp")?);
            let start_psn = Psn::new(v.u24(f::START_PSN, "start_psn")?);
            v.finish(f::END)?;
            Ok(CmMessage::ConnectReply { qp, start_psn })
        }
        opcode::CONNECT_REJECT => {
            use field::connect_reject as f;
            let len = usize::from(v.u16(f::REASON_LEN)?);
            if len > MAX_REJECT_REASON {
                return Err(WireError::BadField {
                    field: "reason_len",
                    problem: "exceeds MAX_REJECT_REASON",
                });
            }
            let bytes = v.tail(f::REASON_START, len, "reason_len")?;
            let reason = core::str::from_utf8(bytes).map_err(|_| WireError::BadField {
                field: "reason",
                problem: "not valid UTF-8",
            })?;
            Ok(CmMessage::ConnectReject {
                reason: reason.to_owned(),
            })
        }
        other => Err(WireError::UnknownOpcode {
            frame_type: frame_type::CM,
            opcode: other,
        }),
    }
}

fn nak_from_u8(code: u8) -> Result<NakCode, WireError> {
    Ok(match code {
        nak::PSN_SEQUENCE_ERROR => NakCode::PsnSequenceError,
        nak::INVALID_REQUEST => NakCode::InvalidRequest,
        nak::REMOTE_ACCESS_ERROR => NakCode::RemoteAccessError,
        nak::REMOTE_OPERATIONAL_ERROR => NakCode::RemoteOperationalError,
        nak::INVALID_RKEY => NakCode::InvalidRkey,
        nak::RECEIVER_NOT_READY => NakCode::ReceiverNotReady,
        other => return Err(WireError::UnknownNakCode(other)),
    })
}

fn nak_to_u8(code: NakCode) -> u8 {
    match code {
        NakCode::PsnSequenceError => nak::PSN_SEQUENCE_ERROR,
        NakCode::InvalidRequest => nak::INVALID_REQUEST,
        NakCode::RemoteAccessError => nak::REMOTE_ACCESS_ERROR,
        NakCode::RemoteOperationalError => nak::REMOTE_OPERATIONAL_ERROR,
        NakCode::InvalidRkey => nak::INVALID_RKEY,
        NakCode::ReceiverNotReady => nak::RECEIVER_NOT_READY,
    }
}

/// The part of a reject reason that goes on the wire: at most [`MAX_REJECT_REASON`] bytes, cut
/// at a character boundary.
fn wire_reason(reason: &str) -> &str {
    let mut end = reason.len().min(MAX_REJECT_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.get(..end).unwrap_or_default()
}

/// The part of the private data that goes on the wire: at most [`MAX_PRIVATE_DATA`] bytes.
fn wire_private_data(data: &[u8]) -> &[u8] {
    data.get(..MAX_PRIVATE_DATA).unwrap_or(data)
}

/// Length in bytes of the encoding of `frame` (length prefix included), i.e. how many bytes
/// [`encode_frame`] appends.
pub fn encoded_len<D: AsRef<[u8]>>(frame: &Frame<D>) -> usize {
    match frame {
        Frame::Cm(CmMessage::ConnectRequest { private_data, .. }) => {
            field::connect_request::PRIVATE_START + wire_private_data(private_data).len()
        }
        Frame::Cm(CmMessage::ConnectReply { .. }) => field::connect_reply::END,
        Frame::Cm(CmMessage::ConnectReject { reason }) => {
            field::connect_reject::REASON_START + wire_reason(reason).len()
        }
        Frame::Packet(Packet::Request(r)) => match &r.op {
            RequestOp::Read { .. } => field::read::END,
            RequestOp::Write { data, .. } => field::write::DATA_START + data.as_ref().len(),
            RequestOp::CompareSwap { .. } => field::compare_swap::END,
            RequestOp::FetchAdd { .. } => field::fetch_add::END,
            RequestOp::Send { data, .. } => field::send::DATA_START + data.as_ref().len(),
        },
        Frame::Packet(Packet::Response(r)) => match &r.kind {
            ResponseKind::Ack => field::ack::END,
            ResponseKind::ReadData(data) => field::read_data::DATA_START + data.as_ref().len(),
            ResponseKind::AtomicAck(_) => field::atomic_ack::END,
            ResponseKind::Nak(_) => field::nak_body::END,
        },
    }
}

/// A writer over the zero-filled bytes of one frame being encoded, sized by [`encoded_len`].
/// Writes that fall outside it are dropped (they cannot happen: the size comes from the same
/// `field` offsets); the debug assertion catches a layout bug in tests.
struct FrameWriter<'a> {
    buf: &'a mut [u8],
}

impl FrameWriter<'_> {
    fn put(&mut self, f: field::Field, bytes: &[u8]) {
        match self.buf.get_mut(f) {
            Some(dst) if dst.len() == bytes.len() => dst.copy_from_slice(bytes),
            _ => debug_assert!(false, "field outside the frame"),
        }
    }

    fn put_u8(&mut self, at: usize, v: u8) {
        self.put(at..at + 1, &[v]);
    }

    fn put_u16(&mut self, f: field::Field, v: u16) {
        self.put(f, &v.to_be_bytes());
    }

    fn put_u32(&mut self, f: field::Field, v: u32) {
        self.put(f, &v.to_be_bytes());
    }

    fn put_u64(&mut self, f: field::Field, v: u64) {
        self.put(f, &v.to_be_bytes());
    }

    /// A 24-bit value; QPNs are masked to the 24 bits the wire carries.
    fn put_u24(&mut self, f: field::Field, v: u32) {
        self.put_u32(f, v & U24_MASK);
    }

    fn put_tail(&mut self, start: usize, bytes: &[u8]) {
        self.put(start..start + bytes.len(), bytes);
    }

    fn header(&mut self, len: u32, ty: u8, op: u8, fl: u8) {
        self.put_u32(field::LENGTH, len);
        self.put_u8(field::VERSION, WIRE_VERSION);
        self.put_u8(field::FRAME_TYPE, ty);
        self.put_u8(field::OPCODE, op);
        self.put_u8(field::FLAGS, fl);
    }

    fn packet_header(&mut self, len: u32, op: u8, fl: u8, dst_qp: QpNumber, psn: Psn) {
        self.header(len, frame_type::PACKET, op, fl);
        self.put_u24(field::DST_QP, dst_qp.0);
        self.put_u24(field::PSN, psn.value());
    }
}

/// Appends the whole encoded frame (length prefix included) to `out`: one contiguous frame, so a
/// stream link can write it with one syscall. Allocates nothing beyond growing `out`.
///
/// Values the wire cannot carry are cut to fit rather than producing a frame the peer would
/// reject: QPNs are masked to 24 bits, private data is truncated to [`MAX_PRIVATE_DATA`] bytes
/// and a reject reason to [`MAX_REJECT_REASON`] bytes (at a character boundary). Callers
/// validate these earlier (the verbs layer refuses oversized private data).
///
/// # Panics
///
/// If the frame would exceed `u32::MAX` bytes (a payload of about 4 GiB); this is local input,
/// never peer input.
pub fn encode_frame<D: AsRef<[u8]>>(frame: &Frame<D>, out: &mut Vec<u8>) {
    let len = encoded_len(frame);
    let Ok(len32) = u32::try_from(len) else {
        panic!("wire frame of {len} bytes exceeds the u32 length prefix");
    };
    let start = out.len();
    out.resize(start + len, 0);
    let Some(buf) = out.get_mut(start..) else {
        return;
    };
    let mut w = FrameWriter { buf };
    match frame {
        Frame::Cm(cm) => encode_cm(&mut w, len32, cm),
        Frame::Packet(Packet::Request(r)) => encode_request(&mut w, len32, r),
        Frame::Packet(Packet::Response(r)) => encode_response(&mut w, len32, r),
    }
}

fn encode_cm(w: &mut FrameWriter<'_>, len: u32, cm: &CmMessage) {
    match cm {
        CmMessage::ConnectRequest {
            version,
            qp,
            start_psn,
            private_data,
        } => {
            use field::connect_request as f;
            let private_data = wire_private_data(private_data);
            w.header(len, frame_type::CM, opcode::CONNECT_REQUEST, 0);
            w.put_u8(f::VERSION, *version);
            // At most MAX_PRIVATE_DATA (64), so it fits the byte.
            w.put_u8(
                f::PRIVATE_LEN,
                u8::try_from(private_data.len()).unwrap_or(u8::MAX),
            );
            w.put_u16(f::RESERVED, 0);
            w.put_u24(f::QP, qp.0);
            w.put_u24(f::START_PSN, start_psn.value());
            w.put_tail(f::PRIVATE_START, private_data);
        }
        CmMessage::ConnectReply { qp, start_psn } => {
            use field::connect_reply as f;
            w.header(len, frame_type::CM, opcode::CONNECT_REPLY, 0);
            w.put_u24(f::QP, qp.0);
            w.put_u24(f::START_PSN, start_psn.value());
        }
        CmMessage::ConnectReject { reason } => {
            use field::connect_reject as f;
            let reason = wire_reason(reason);
            w.header(len, frame_type::CM, opcode::CONNECT_REJECT, 0);
            // At most MAX_REJECT_REASON (256), so it fits the u16.
            w.put_u16(
                f::REASON_LEN,
                u16::try_from(reason.len()).unwrap_or(u16::MAX),
            );
            w.put_tail(f::REASON_START, reason.as_bytes());
        }
    }
}

/// Payload length for a `u32` length field; the whole frame fits a `u32` (checked by the
/// caller), so the payload does too.
fn data_len(data: &[u8]) -> u32 {
    u32::try_from(data.len()).unwrap_or(u32::MAX)
}

fn encode_request<D: AsRef<[u8]>>(w: &mut FrameWriter<'_>, len: u32, r: &Request<D>) {
    let ack_req = if r.ack_req { flags::ACK_REQ } else { 0 };
    match &r.op {
        RequestOp::Read { addr, rkey, len: n } => {
            use field::read as f;
            w.packet_header(len, opcode::READ, ack_req, r.dst_qp, r.psn);
            w.put_u64(f::ADDR, *addr);
            w.put_u32(f::RKEY, rkey.0);
            w.put_u32(f::LEN, *n);
        }
        RequestOp::Write { addr, rkey, data } => {
            use field::write as f;
            let data = data.as_ref();
            w.packet_header(len, opcode::WRITE, ack_req, r.dst_qp, r.psn);
            w.put_u64(f::ADDR, *addr);
            w.put_u32(f::RKEY, rkey.0);
            w.put_u32(f::DATA_LEN, data_len(data));
            w.put_tail(f::DATA_START, data);
        }
        RequestOp::CompareSwap {
            addr,
            rkey,
            compare,
            swap,
        } => {
            use field::compare_swap as f;
            w.packet_header(len, opcode::COMPARE_SWAP, ack_req, r.dst_qp, r.psn);
            w.put_u64(f::ADDR, *addr);
            w.put_u32(f::RKEY, rkey.0);
            w.put_u64(f::COMPARE, *compare);
            w.put_u64(f::SWAP, *swap);
        }
        RequestOp::FetchAdd { addr, rkey, add } => {
            use field::fetch_add as f;
            w.packet_header(len, opcode::FETCH_ADD, ack_req, r.dst_qp, r.psn);
            w.put_u64(f::ADDR, *addr);
            w.put_u32(f::RKEY, rkey.0);
            w.put_u64(f::ADD, *add);
        }
        RequestOp::Send { data, invalidate } => {
            use field::send as f;
            let data = data.as_ref();
            let (fl, rkey) = match invalidate {
                Some(k) => (flags::SEND_INVALIDATE, k.0),
                None => (0, 0),
            };
            w.packet_header(len, opcode::SEND, fl | ack_req, r.dst_qp, r.psn);
            w.put_u32(f::INVALIDATE_RKEY, rkey);
            w.put_u32(f::DATA_LEN, data_len(data));
            w.put_tail(f::DATA_START, data);
        }
    }
}

fn encode_response<D: AsRef<[u8]>>(w: &mut FrameWriter<'_>, len: u32, r: &Response<D>) {
    match &r.kind {
        ResponseKind::Ack => w.packet_header(len, opcode::ACK, 0, r.dst_qp, r.psn),
        ResponseKind::ReadData(data) => {
            use field::read_data as f;
            let data = data.as_ref();
            w.packet_header(len, opcode::READ_DATA, 0, r.dst_qp, r.psn);
            w.put_u32(f::DATA_LEN, data_len(data));
            w.put_tail(f::DATA_START, data);
        }
        ResponseKind::AtomicAck(original) => {
            w.packet_header(len, opcode::ATOMIC_ACK, 0, r.dst_qp, r.psn);
            w.put_u64(field::atomic_ack::ORIGINAL, *original);
        }
        ResponseKind::Nak(code) => {
            w.packet_header(len, opcode::NAK, 0, r.dst_qp, r.psn);
            w.put_u8(field::nak_body::CODE, nak_to_u8(*code));
        }
    }
}

mod head;
pub use head::decode_head;

/// The length of a payload whose bytes have not arrived (see [`decode_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadLen(pub usize);

#[cfg(test)]
mod tests;
