//! Wire format of the baselines' two-sided requests: fixed 128-byte slots, little-endian.
//!
//! Every message is one slot: `kind: u8` at 0, `req_id: u64` at 8, then the kind's fields from
//! 16. A 64-byte payload ([`MAX_PAYLOAD`]) fits behind the fields. Decoding checks the length
//! and every tag and returns a [`ProtoError`]; it never panics, whatever the peer sent. Ranges
//! and lengths are *not* judged here — the memory node answers those with a [`FailCode`].
//!
//! The connection's private data carries the [`Scheme`] (`"PBL1"` ‖ scheme byte).

use patronus_core::rpc::{Protocol, SlotReader, SlotWriter};
use rnic::MemoryKey;

/// Bytes of every message slot.
pub const SLOT_SIZE: usize = 128;
/// Most bytes one `Read`/`Write` request moves.
pub const MAX_PAYLOAD: usize = 64;

/// Field offsets, in one place.
mod field {
    pub const KIND: usize = 0;
    pub const REQ_ID: usize = 8;
    /// First kind-specific field.
    pub const A: usize = 16;
    /// Second kind-specific field.
    pub const B: usize = 24;
    /// A presence byte (Welcome's rkey).
    pub const FLAG: usize = 32;
    /// A 32-bit field behind the presence byte.
    pub const C: usize = 36;
    /// Write's payload.
    pub const WRITE_BYTES: usize = 32;
    /// Data's payload.
    pub const DATA_BYTES: usize = 24;
}

const CONNECT_MAGIC: &[u8; 4] = b"PBL1";

/// The protection mechanism a client asks for when it connects (§7's compared systems).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// No protection: one whole-pool region with every remote right.
    Unprot,
    /// A memory region registered per permission (FaRM / Octopus style).
    Mr,
    /// Access gated by the QP's access flags, opened and closed per permission.
    Qp,
    /// No one-sided access: every data operation is an RPC served by the memory node's CPU.
    Rpc,
}

impl Scheme {
    /// Every scheme, in the paper's order.
    pub const ALL: [Scheme; 4] = [Scheme::Unprot, Scheme::Mr, Scheme::Qp, Scheme::Rpc];

    /// The connection private data announcing this scheme.
    pub fn private_data(self) -> [u8; 5] {
        let [a, b, c, d] = *CONNECT_MAGIC;
        [a, b, c, d, self as u8]
    }

    /// Parses connection private data.
    pub fn from_private_data(data: &[u8]) -> Result<Self, ProtoError> {
        match data {
            [a, b, c, d, s, ..] if [*a, *b, *c, *d] == *CONNECT_MAGIC => match s {
                0 => Ok(Scheme::Unprot),
                1 => Ok(Scheme::Mr),
                2 => Ok(Scheme::Qp),
                3 => Ok(Scheme::Rpc),
                _ => Err(ProtoError::UnknownKind(*s)),
            },
            _ => Err(ProtoError::Truncated {
                got: data.len(),
                want: 5,
            }),
        }
    }
}

/// Why a message could not be decoded (the control channel's slot error).
pub use patronus_core::rpc::SlotError as ProtoError;

/// Why the memory node refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum FailCode {
    /// The request does not belong to the client's scheme.
    #[error("request not allowed for this scheme")]
    WrongScheme,
    /// The rkey names no region this client registered.
    #[error("unknown rkey")]
    UnknownRkey,
    /// The range is empty or leaves the pool.
    #[error("range outside the pool")]
    OutOfRange,
    /// More than [`MAX_PAYLOAD`] bytes asked for in one request.
    #[error("payload too long")]
    TooLong,
    /// A table (regions, per-client quota) is full.
    #[error("resources exhausted")]
    Exhausted,
    /// A verb failed on the memory node for another reason.
    #[error("memory-node verb failed")]
    Verbs,
}

impl FailCode {
    fn to_wire(self) -> u8 {
        match self {
            FailCode::WrongScheme => 1,
            FailCode::UnknownRkey => 2,
            FailCode::OutOfRange => 3,
            FailCode::TooLong => 4,
            FailCode::Exhausted => 5,
            FailCode::Verbs => 6,
        }
    }

    fn from_wire(b: u8) -> Result<Self, ProtoError> {
        Ok(match b {
            1 => FailCode::WrongScheme,
            2 => FailCode::UnknownRkey,
            3 => FailCode::OutOfRange,
            4 => FailCode::TooLong,
            5 => FailCode::Exhausted,
            6 => FailCode::Verbs,
            _ => return Err(ProtoError::BadField("fail code")),
        })
    }
}

/// A client's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaselineRequest {
    /// First message: asks for the pool's coordinates.
    Hello,
    /// (Mr) Register `[addr, addr + len)` of the pool as a new region.
    RegisterMr {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// (Mr) Deregister a region this client registered.
    DeregisterMr {
        /// Its rkey.
        rkey: MemoryKey,
    },
    /// (Qp) Grant the client's QP remote read, write and atomic rights.
    OpenQp,
    /// (Qp) Take the rights away again.
    CloseQp,
    /// Copy `len` (≤ 64) pool bytes at `addr` into the reply.
    Read {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u32,
    },
    /// Copy the first `len` (≤ 64) of `bytes` into the pool at `addr`.
    Write {
        /// First byte.
        addr: u64,
        /// Bytes used from `bytes`.
        len: u32,
        /// Payload.
        bytes: [u8; MAX_PAYLOAD],
    },
}

/// The memory node's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaselineReply {
    /// Answer to `Hello`.
    Welcome(Welcome),
    /// A region was registered.
    Registered {
        /// Its rkey.
        rkey: MemoryKey,
    },
    /// The request was carried out.
    Done,
    /// Bytes read.
    Data {
        /// Bytes used from `bytes`.
        len: u32,
        /// Payload.
        bytes: [u8; MAX_PAYLOAD],
    },
    /// The request was refused.
    Failed(FailCode),
}

/// The pool's coordinates as a client sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// Address of the pool's first byte.
    pub pool_addr: u64,
    /// Bytes of pool.
    pub pool_len: u64,
    /// The whole-pool rkey (Unprot and Qp clients only).
    pub rkey: Option<MemoryKey>,
}

mod kind {
    pub const HELLO: u8 = 0x01;
    pub const REGISTER_MR: u8 = 0x02;
    pub const DEREGISTER_MR: u8 = 0x03;
    pub const OPEN_QP: u8 = 0x04;
    pub const CLOSE_QP: u8 = 0x05;
    pub const READ: u8 = 0x06;
    pub const WRITE: u8 = 0x07;
    pub const WELCOME: u8 = 0x81;
    pub const REGISTERED: u8 = 0x82;
    pub const DONE: u8 = 0x83;
    pub const DATA: u8 = 0x84;
    pub const FAILED: u8 = 0x85;
}

/// The baselines' protocol, for the control channel.
#[derive(Clone, Copy, Debug)]
pub struct BaselineProtocol;

impl Protocol for BaselineProtocol {
    type Request = BaselineRequest;
    type Reply = BaselineReply;
    const SLOT_SIZE: usize = SLOT_SIZE;

    fn encode_request(req_id: u64, req: &BaselineRequest, slot: &mut [u8]) {
        write_request(&mut SlotWriter::new(slot), req_id, req);
    }
    fn decode_request(slot: &[u8]) -> Result<(u64, BaselineRequest), ProtoError> {
        decode_request(slot)
    }
    fn encode_reply(req_id: u64, reply: &BaselineReply, slot: &mut [u8]) {
        write_reply(&mut SlotWriter::new(slot), req_id, reply);
    }
    fn decode_reply(slot: &[u8]) -> Result<(u64, BaselineReply), ProtoError> {
        decode_reply(slot)
    }
}

/// Encodes a request with its id.
pub fn encode_request(req_id: u64, req: &BaselineRequest) -> [u8; SLOT_SIZE] {
    let mut b = [0u8; SLOT_SIZE];
    write_request(&mut SlotWriter::new(&mut b), req_id, req);
    b
}

fn write_request(w: &mut SlotWriter<'_>, req_id: u64, req: &BaselineRequest) {
    w.u64(field::REQ_ID, req_id);
    let kind = match *req {
        BaselineRequest::Hello => kind::HELLO,
        BaselineRequest::RegisterMr { addr, len } => {
            w.u64(field::A, addr);
            w.u64(field::B, len);
            kind::REGISTER_MR
        }
        BaselineRequest::DeregisterMr { rkey } => {
            w.u32(field::A, rkey.0);
            kind::DEREGISTER_MR
        }
        BaselineRequest::OpenQp => kind::OPEN_QP,
        BaselineRequest::CloseQp => kind::CLOSE_QP,
        BaselineRequest::Read { addr, len } => {
            w.u64(field::A, addr);
            w.u32(field::B, len);
            kind::READ
        }
        BaselineRequest::Write { addr, len, bytes } => {
            w.u64(field::A, addr);
            w.u32(field::B, len);
            w.put(field::WRITE_BYTES, &bytes);
            kind::WRITE
        }
    };
    w.u8(field::KIND, kind);
}

/// Decodes a request and its id.
pub fn decode_request(input: &[u8]) -> Result<(u64, BaselineRequest), ProtoError> {
    let r = SlotReader::new(input, SLOT_SIZE)?;
    let req = match r.u8(field::KIND)? {
        kind::HELLO => BaselineRequest::Hello,
        kind::REGISTER_MR => BaselineRequest::RegisterMr {
            addr: r.u64(field::A)?,
            len: r.u64(field::B)?,
        },
        kind::DEREGISTER_MR => BaselineRequest::DeregisterMr {
            rkey: MemoryKey(r.u32(field::A)?),
        },
        kind::OPEN_QP => BaselineRequest::OpenQp,
        kind::CLOSE_QP => BaselineRequest::CloseQp,
        kind::READ => BaselineRequest::Read {
            addr: r.u64(field::A)?,
            len: r.u32(field::B)?,
        },
        kind::WRITE => BaselineRequest::Write {
            addr: r.u64(field::A)?,
            len: r.u32(field::B)?,
            bytes: r.array(field::WRITE_BYTES)?,
        },
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, req))
}

/// Encodes a reply with the id of the request it answers.
pub fn encode_reply(req_id: u64, reply: &BaselineReply) -> [u8; SLOT_SIZE] {
    let mut b = [0u8; SLOT_SIZE];
    write_reply(&mut SlotWriter::new(&mut b), req_id, reply);
    b
}

fn write_reply(w: &mut SlotWriter<'_>, req_id: u64, reply: &BaselineReply) {
    w.u64(field::REQ_ID, req_id);
    let kind = match *reply {
        BaselineReply::Welcome(welcome) => {
            w.u64(field::A, welcome.pool_addr);
            w.u64(field::B, welcome.pool_len);
            if let Some(rkey) = welcome.rkey {
                w.u8(field::FLAG, 1);
                w.u32(field::C, rkey.0);
            }
            kind::WELCOME
        }
        BaselineReply::Registered { rkey } => {
            w.u32(field::A, rkey.0);
            kind::REGISTERED
        }
        BaselineReply::Done => kind::DONE,
        BaselineReply::Data { len, bytes } => {
            w.u32(field::A, len);
            w.put(field::DATA_BYTES, &bytes);
            kind::DATA
        }
        BaselineReply::Failed(code) => {
            w.u8(field::A, code.to_wire());
            kind::FAILED
        }
    };
    w.u8(field::KIND, kind);
}

/// Decodes a reply and the id of the request it answers.
pub fn decode_reply(input: &[u8]) -> Result<(u64, BaselineReply), ProtoError> {
    let r = SlotReader::new(input, SLOT_SIZE)?;
    let reply = match r.u8(field::KIND)? {
        kind::WELCOME => BaselineReply::Welcome(Welcome {
            pool_addr: r.u64(field::A)?,
            pool_len: r.u64(field::B)?,
            rkey: match r.flag(field::FLAG, "rkey presence")? {
                false => None,
                true => Some(MemoryKey(r.u32(field::C)?)),
            },
        }),
        kind::REGISTERED => BaselineReply::Registered {
            rkey: MemoryKey(r.u32(field::A)?),
        },
        kind::DONE => BaselineReply::Done,
        kind::DATA => {
            let len = r.u32(field::A)?;
            if len as usize > MAX_PAYLOAD {
                return Err(ProtoError::BadField("data length"));
            }
            BaselineReply::Data {
                len,
                bytes: r.array(field::DATA_BYTES)?,
            }
        }
        kind::FAILED => BaselineReply::Failed(FailCode::from_wire(r.u8(field::A)?)?),
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let mut bytes = [0u8; MAX_PAYLOAD];
        bytes[63] = 9;
        let reqs = [
            BaselineRequest::Hello,
            BaselineRequest::RegisterMr { addr: 1, len: 2 },
            BaselineRequest::DeregisterMr {
                rkey: MemoryKey(0xabcd),
            },
            BaselineRequest::OpenQp,
            BaselineRequest::CloseQp,
            BaselineRequest::Read { addr: 7, len: 64 },
            BaselineRequest::Write {
                addr: 8,
                len: 3,
                bytes,
            },
        ];
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(
                decode_request(&encode_request(i as u64, r)),
                Ok((i as u64, *r))
            );
        }
        let replies = [
            BaselineReply::Welcome(Welcome {
                pool_addr: 1,
                pool_len: 2,
                rkey: Some(MemoryKey(3)),
            }),
            BaselineReply::Welcome(Welcome {
                pool_addr: 1,
                pool_len: 2,
                rkey: None,
            }),
            BaselineReply::Registered { rkey: MemoryKey(5) },
            BaselineReply::Done,
            BaselineReply::Data { len: 64, bytes },
            BaselineReply::Failed(FailCode::OutOfRange),
        ];
        for r in replies {
            assert_eq!(decode_reply(&encode_reply(42, &r)), Ok((42, r)));
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..2000usize {
            let mut buf = vec![0u8; n % (SLOT_SIZE + 8)];
            for b in &mut buf {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let _ = decode_request(&buf);
            let _ = decode_reply(&buf);
            let _ = Scheme::from_private_data(&buf);
        }
        assert_eq!(
            decode_request(&[1; 10]),
            Err(ProtoError::Truncated {
                got: 10,
                want: SLOT_SIZE
            })
        );
    }

    #[test]
    fn scheme_private_data() {
        for s in Scheme::ALL {
            assert_eq!(Scheme::from_private_data(&s.private_data()), Ok(s));
        }
        assert!(Scheme::from_private_data(b"XXXX\0").is_err());
    }
}
