//! The wire layout of the baselines' messages (little-endian), in one place:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0 | kind |
//! | 8..16 | request id |
//! | 16..24 | A: address, size, rkey, pool address, old value, payload length (`Data`) |
//! | 24..32 | B: length, compare, addend, pool length, payload length (`Write`) |
//! | 32..40 | C: swap |
//! | 40 | flags: `RegisterMr`'s (bit 0 read-only, bit 1 object), rkey presence |
//! | 44..48 | an optional rkey (`Welcome`, `Allocated`) |
//! | 16..48 or 32..64 | a root name, zero-padded (`Lookup`/`Unpublish`, `Publish`) |
//! | 32.. | the payload of `Write` and `Data` |
//!
//! A message is [`SMALL_MESSAGE`] bytes on the wire, or its payload's end if that is further.

use super::{
    BaselineReply, BaselineRequest, FailCode, HEADER, MAX_PAYLOAD, PAYLOAD_AT, ProtoError,
    SLOT_SIZE, SMALL_MESSAGE, Welcome,
};
use patronus_core::proto::messages::{ROOT_NAME_MAX, RootName};
use patronus_core::rpc::{Protocol, SlotReader, SlotWriter};
use rnic::MemoryKey;

mod field {
    pub const KIND: usize = 0;
    pub const REQ_ID: usize = 8;
    pub const A: usize = 16;
    pub const B: usize = 24;
    pub const C: usize = 32;
    pub const FLAGS: usize = 40;
    pub const KEY: usize = 44;
    /// `Lookup`'s and `Unpublish`'s name.
    pub const NAME: usize = 16;
    /// `Publish`'s name (behind address and length).
    pub const PUBLISHED_NAME: usize = 32;
}

mod flag {
    pub const READ_ONLY: u8 = 1;
    pub const OBJECT: u8 = 2;
}

mod kind {
    pub const HELLO: u8 = 0x01;
    pub const REGISTER_MR: u8 = 0x02;
    pub const DEREGISTER_MR: u8 = 0x03;
    pub const OPEN_QP: u8 = 0x04;
    pub const CLOSE_QP: u8 = 0x05;
    pub const READ: u8 = 0x06;
    pub const WRITE: u8 = 0x07;
    pub const CAS: u8 = 0x08;
    pub const FAA: u8 = 0x09;
    pub const ALLOC: u8 = 0x0a;
    pub const FREE: u8 = 0x0b;
    pub const PUBLISH: u8 = 0x0c;
    pub const LOOKUP: u8 = 0x0d;
    pub const UNPUBLISH: u8 = 0x0e;
    pub const WELCOME: u8 = 0x81;
    pub const REGISTERED: u8 = 0x82;
    pub const DONE: u8 = 0x83;
    pub const DATA: u8 = 0x84;
    pub const FAILED: u8 = 0x85;
    pub const ATOMIC: u8 = 0x86;
    pub const ALLOCATED: u8 = 0x87;
    pub const FOUND: u8 = 0x88;
}

/// The baselines' protocol, for the control channel.
#[derive(Clone, Copy, Debug)]
pub struct BaselineProtocol;

impl Protocol for BaselineProtocol {
    type Request = BaselineRequest;
    type Reply = BaselineReply;
    const SLOT_SIZE: usize = SLOT_SIZE;

    fn encode_request(req_id: u64, req: &BaselineRequest, slot: &mut [u8]) {
        let len = wire_len_of(req.payload_len()).min(slot.len());
        write_request(&mut SlotWriter::new(&mut slot[..len]), req_id, req);
    }
    fn decode_request(slot: &[u8]) -> Result<(u64, BaselineRequest), ProtoError> {
        decode_request(slot)
    }
    fn encode_reply(req_id: u64, reply: &BaselineReply, slot: &mut [u8]) {
        let payload = match reply {
            BaselineReply::Data(bytes) => bytes.len(),
            _ => 0,
        };
        let len = wire_len_of(payload).min(slot.len());
        write_reply(&mut SlotWriter::new(&mut slot[..len]), req_id, reply);
    }
    fn decode_reply(slot: &[u8]) -> Result<(u64, BaselineReply), ProtoError> {
        decode_reply(slot)
    }
    fn wire_len(message: &[u8]) -> usize {
        let Ok(r) = SlotReader::new(message, SMALL_MESSAGE) else {
            return SLOT_SIZE;
        };
        let payload = match r.u8(field::KIND) {
            Ok(kind::WRITE) => r.u32(field::B),
            Ok(kind::DATA) => r.u32(field::A),
            _ => Ok(0),
        };
        wire_len_of(payload.map_or(MAX_PAYLOAD, |n| n as usize))
    }
}

/// Bytes on the wire of a message with `payload` bytes of payload.
fn wire_len_of(payload: usize) -> usize {
    match payload {
        0 => SMALL_MESSAGE,
        n => (PAYLOAD_AT + n.min(MAX_PAYLOAD)).max(SMALL_MESSAGE),
    }
}

/// Encodes a request with its id: the bytes that go on the wire.
pub fn encode_request(req_id: u64, req: &BaselineRequest) -> Vec<u8> {
    let mut b = vec![0u8; wire_len_of(req.payload_len())];
    write_request(&mut SlotWriter::new(&mut b), req_id, req);
    b
}

/// Writes the payload's length at `len_at` and as much of it as a message carries: a longer
/// one is announced at its length, which does not decode (never sent by a client).
fn put_payload(w: &mut SlotWriter<'_>, len_at: usize, bytes: &[u8]) {
    w.u32(len_at, u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    w.put(PAYLOAD_AT, bytes.get(..MAX_PAYLOAD).unwrap_or(bytes));
}

fn write_request(w: &mut SlotWriter<'_>, req_id: u64, req: &BaselineRequest) {
    w.u64(field::REQ_ID, req_id);
    let kind = match req {
        BaselineRequest::Hello => kind::HELLO,
        &BaselineRequest::RegisterMr {
            addr,
            len,
            read_only,
            object,
        } => {
            w.u64(field::A, addr);
            w.u64(field::B, len);
            let mut flags = 0;
            if read_only {
                flags |= flag::READ_ONLY;
            }
            if object {
                flags |= flag::OBJECT;
            }
            w.u8(field::FLAGS, flags);
            kind::REGISTER_MR
        }
        BaselineRequest::DeregisterMr { rkey } => {
            w.u32(field::A, rkey.0);
            kind::DEREGISTER_MR
        }
        BaselineRequest::OpenQp => kind::OPEN_QP,
        BaselineRequest::CloseQp => kind::CLOSE_QP,
        &BaselineRequest::Read { addr, len } => {
            w.u64(field::A, addr);
            w.u32(field::B, len);
            kind::READ
        }
        BaselineRequest::Write { addr, bytes } => {
            w.u64(field::A, *addr);
            put_payload(w, field::B, bytes);
            kind::WRITE
        }
        &BaselineRequest::Cas {
            addr,
            compare,
            swap,
        } => {
            w.u64(field::A, addr);
            w.u64(field::B, compare);
            w.u64(field::C, swap);
            kind::CAS
        }
        &BaselineRequest::Faa { addr, add } => {
            w.u64(field::A, addr);
            w.u64(field::B, add);
            kind::FAA
        }
        &BaselineRequest::Alloc { size } => {
            w.u64(field::A, size);
            kind::ALLOC
        }
        &BaselineRequest::Free { addr } => {
            w.u64(field::A, addr);
            kind::FREE
        }
        BaselineRequest::Publish { name, addr, len } => {
            w.u64(field::A, *addr);
            w.u64(field::B, *len);
            w.put(field::PUBLISHED_NAME, &name.padded());
            kind::PUBLISH
        }
        BaselineRequest::Lookup { name } => {
            w.put(field::NAME, &name.padded());
            kind::LOOKUP
        }
        BaselineRequest::Unpublish { name } => {
            w.put(field::NAME, &name.padded());
            kind::UNPUBLISH
        }
    };
    w.u8(field::KIND, kind);
}

fn name_at(r: &SlotReader<'_>, at: usize) -> Result<RootName, ProtoError> {
    RootName::from_padded(r.array::<ROOT_NAME_MAX>(at)?).ok_or(ProtoError::BadField("name"))
}

/// A payload: its length at `len_at` (at most [`MAX_PAYLOAD`]), its bytes behind the fields.
fn payload(r: &SlotReader<'_>, len_at: usize) -> Result<Vec<u8>, ProtoError> {
    let len = r.u32(len_at)? as usize;
    if len > MAX_PAYLOAD {
        return Err(ProtoError::BadField("payload length"));
    }
    Ok(r.slice(PAYLOAD_AT, len)?.to_vec())
}

/// Decodes a request and its id from the bytes that arrived.
pub fn decode_request(input: &[u8]) -> Result<(u64, BaselineRequest), ProtoError> {
    let r = SlotReader::variable(input, HEADER, SLOT_SIZE)?;
    let req = match r.u8(field::KIND)? {
        kind::HELLO => BaselineRequest::Hello,
        kind::REGISTER_MR => {
            let flags = r.u8(field::FLAGS)?;
            if flags & !(flag::READ_ONLY | flag::OBJECT) != 0 {
                return Err(ProtoError::BadField("registration flags"));
            }
            BaselineRequest::RegisterMr {
                addr: r.u64(field::A)?,
                len: r.u64(field::B)?,
                read_only: flags & flag::READ_ONLY != 0,
                object: flags & flag::OBJECT != 0,
            }
        }
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
            bytes: payload(&r, field::B)?,
        },
        kind::CAS => BaselineRequest::Cas {
            addr: r.u64(field::A)?,
            compare: r.u64(field::B)?,
            swap: r.u64(field::C)?,
        },
        kind::FAA => BaselineRequest::Faa {
            addr: r.u64(field::A)?,
            add: r.u64(field::B)?,
        },
        kind::ALLOC => BaselineRequest::Alloc {
            size: r.u64(field::A)?,
        },
        kind::FREE => BaselineRequest::Free {
            addr: r.u64(field::A)?,
        },
        kind::PUBLISH => BaselineRequest::Publish {
            name: name_at(&r, field::PUBLISHED_NAME)?,
            addr: r.u64(field::A)?,
            len: r.u64(field::B)?,
        },
        kind::LOOKUP => BaselineRequest::Lookup {
            name: name_at(&r, field::NAME)?,
        },
        kind::UNPUBLISH => BaselineRequest::Unpublish {
            name: name_at(&r, field::NAME)?,
        },
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, req))
}

/// Encodes a reply with the id of the request it answers: the bytes that go on the wire.
pub fn encode_reply(req_id: u64, reply: &BaselineReply) -> Vec<u8> {
    let payload = match reply {
        BaselineReply::Data(bytes) => bytes.len(),
        _ => 0,
    };
    let mut b = vec![0u8; wire_len_of(payload)];
    write_reply(&mut SlotWriter::new(&mut b), req_id, reply);
    b
}

fn put_key(w: &mut SlotWriter<'_>, rkey: Option<MemoryKey>) {
    if let Some(rkey) = rkey {
        w.u8(field::FLAGS, 1);
        w.u32(field::KEY, rkey.0);
    }
}

fn key(r: &SlotReader<'_>) -> Result<Option<MemoryKey>, ProtoError> {
    Ok(match r.flag(field::FLAGS, "rkey presence")? {
        false => None,
        true => Some(MemoryKey(r.u32(field::KEY)?)),
    })
}

fn write_reply(w: &mut SlotWriter<'_>, req_id: u64, reply: &BaselineReply) {
    w.u64(field::REQ_ID, req_id);
    let kind = match reply {
        BaselineReply::Welcome(welcome) => {
            w.u64(field::A, welcome.pool_addr);
            w.u64(field::B, welcome.pool_len);
            put_key(w, welcome.rkey);
            kind::WELCOME
        }
        BaselineReply::Registered { rkey } => {
            w.u32(field::A, rkey.0);
            kind::REGISTERED
        }
        BaselineReply::Done => kind::DONE,
        BaselineReply::Data(bytes) => {
            put_payload(w, field::A, bytes);
            kind::DATA
        }
        BaselineReply::Atomic(old) => {
            w.u64(field::A, *old);
            kind::ATOMIC
        }
        BaselineReply::Allocated { addr, rkey } => {
            w.u64(field::A, *addr);
            put_key(w, *rkey);
            kind::ALLOCATED
        }
        BaselineReply::Found { addr, len } => {
            w.u64(field::A, *addr);
            w.u64(field::B, *len);
            kind::FOUND
        }
        BaselineReply::Failed(code) => {
            w.u8(field::A, code.to_wire());
            kind::FAILED
        }
    };
    w.u8(field::KIND, kind);
}

/// Decodes a reply and the id of the request it answers from the bytes that arrived.
pub fn decode_reply(input: &[u8]) -> Result<(u64, BaselineReply), ProtoError> {
    let r = SlotReader::variable(input, HEADER, SLOT_SIZE)?;
    let reply = match r.u8(field::KIND)? {
        kind::WELCOME => BaselineReply::Welcome(Welcome {
            pool_addr: r.u64(field::A)?,
            pool_len: r.u64(field::B)?,
            rkey: key(&r)?,
        }),
        kind::REGISTERED => BaselineReply::Registered {
            rkey: MemoryKey(r.u32(field::A)?),
        },
        kind::DONE => BaselineReply::Done,
        kind::DATA => BaselineReply::Data(payload(&r, field::A)?),
        kind::ATOMIC => BaselineReply::Atomic(r.u64(field::A)?),
        kind::ALLOCATED => BaselineReply::Allocated {
            addr: r.u64(field::A)?,
            rkey: key(&r)?,
        },
        kind::FOUND => BaselineReply::Found {
            addr: r.u64(field::A)?,
            len: r.u64(field::B)?,
        },
        kind::FAILED => BaselineReply::Failed(FailCode::from_wire(r.u8(field::A)?)?),
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, reply))
}
