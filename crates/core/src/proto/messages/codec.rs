//! The byte layout of control messages (summarised in `messages.rs`): every offset lives in
//! [`field`], decoding goes through the control channel's checked [`SlotReader`], encoding
//! writes the same offsets through a [`SlotWriter`].
//!
//! Decoding is strict and the encoding canonical: a message is accepted only if it is exactly
//! the encoding of what it decodes to — one slot long, with every byte its kind does not use
//! (reserved bytes, the other kinds' fields) zero. A peer cannot hide bytes the receiver
//! ignores, and a field added later in those bytes is refused by an older receiver instead of
//! being silently dropped.

use super::{
    Access, Grant, Mode, PermissionId, ProtoError, Reply, Request, RootName, SLOT_SIZE, Status,
};
use crate::proto::shards::ShardMap;
use crate::rpc::{Protocol, SlotReader, SlotWriter};
use rnic::MemoryKey;

/// Field offsets of requests and replies.
mod field {
    /// Both: the request id.
    pub const REQ_ID: usize = 0;
    /// Both: the message kind.
    pub const KIND: usize = 8;
    pub mod request {
        /// Access code (Share: 2 = withdraw).
        pub const ACCESS: usize = 9;
        pub const MODE: usize = 10;
        /// UseQp's slot, Revoke's `free`.
        pub const FLAGS: usize = 11;
        /// Kind-specific words.
        pub const A: usize = 16;
        pub const B: usize = 24;
        pub const C: usize = 32;
        pub const D: usize = 40;
        /// Publish / Lookup / Unpublish: the name, padded with zeros (A..=D).
        pub const NAME: usize = 16;
        /// Publish's object.
        pub const NAMED_ADDR: usize = 48;
        pub const NAMED_LEN: usize = 56;
    }
    pub mod reply {
        pub const STATUS: usize = 9;
        /// Granted's `contiguous`, Welcome's `type2`.
        pub const FLAGS: usize = 10;
        /// Granted's buffer rkey, Welcome's client id.
        pub const BUFFER_RKEY: usize = 12;
        pub const LIFETIME_RKEY: usize = 16;
        pub const MAX_LIFETIME: usize = 20;
        /// Welcome's shard count and headers per shard.
        pub const SHARDS: usize = 16;
        pub const HEADERS_PER_SHARD: usize = 20;
        /// Granted's header address, Welcome's secret.
        pub const HEADER_ADDR: usize = 24;
        pub const START_US: usize = 32;
        pub const BUFFER_ADDR: usize = 40;
        pub const BUFFER_LEN: usize = 48;
        /// Granted's and Extended's lifetime, Welcome's maximum lifetime.
        pub const LIFETIME_US: usize = 56;
        /// Welcome's shard map: first header, first buffer byte, buffer bytes per shard.
        pub const SHARD_HEADER_BASE: usize = 32;
        pub const SHARD_BUFFER_BASE: usize = 40;
        pub const SHARD_BUFFER_SPAN: usize = 48;
    }
}

mod kind {
    pub const ALLOCATE: u8 = 1;
    pub const ACQUIRE: u8 = 2;
    pub const EXTEND: u8 = 3;
    pub const REVOKE: u8 = 4;
    pub const HELLO: u8 = 5;
    pub const REBIND: u8 = 6;
    pub const USE_QP: u8 = 7;
    pub const RENEW: u8 = 8;
    pub const SHARE: u8 = 9;
    pub const PUBLISH: u8 = 10;
    pub const LOOKUP: u8 = 11;
    pub const UNPUBLISH: u8 = 12;
    pub const GRANTED: u8 = 0x81;
    pub const EXTENDED: u8 = 0x82;
    pub const REVOKED: u8 = 0x83;
    pub const FAILED: u8 = 0x84;
    pub const WELCOME: u8 = 0x85;
    pub const SHARED: u8 = 0x86;
    pub const NAMED: u8 = 0x87;
    pub const FOUND: u8 = 0x88;
}

/// The Patronus control protocol, for the control channel.
#[derive(Clone, Copy, Debug)]
pub struct ControlProtocol;

impl Protocol for ControlProtocol {
    type Request = Request;
    type Reply = Reply;
    const SLOT_SIZE: usize = SLOT_SIZE;

    fn encode_request(req_id: u64, req: &Request, slot: &mut [u8]) {
        write_request(&mut SlotWriter::new(slot), req_id, req);
    }
    fn decode_request(slot: &[u8]) -> Result<(u64, Request), ProtoError> {
        decode_request(slot)
    }
    fn encode_reply(req_id: u64, reply: &Reply, slot: &mut [u8]) {
        write_reply(&mut SlotWriter::new(slot), req_id, reply);
    }
    fn decode_reply(slot: &[u8]) -> Result<(u64, Reply), ProtoError> {
        decode_reply(slot)
    }
}

fn access_code(a: Access) -> u8 {
    match a {
        Access::Read => 0,
        Access::ReadWrite => 1,
    }
}
fn mode_code(m: Mode) -> u8 {
    match m {
        Mode::Shared => 0,
        Mode::Exclusive => 1,
    }
}
fn access_of(b: u8) -> Result<Access, ProtoError> {
    match b {
        0 => Ok(Access::Read),
        1 => Ok(Access::ReadWrite),
        _ => Err(ProtoError::BadField("access")),
    }
}
fn mode_of(b: u8) -> Result<Mode, ProtoError> {
    match b {
        0 => Ok(Mode::Shared),
        1 => Ok(Mode::Exclusive),
        _ => Err(ProtoError::BadField("mode")),
    }
}

fn status_code(s: Status) -> u8 {
    Status::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8
}

/// Encodes a request with its id.
pub fn encode_request(req_id: u64, req: &Request) -> [u8; SLOT_SIZE] {
    let mut b = [0u8; SLOT_SIZE];
    write_request(&mut SlotWriter::new(&mut b), req_id, req);
    b
}

fn write_request(w: &mut SlotWriter<'_>, req_id: u64, req: &Request) {
    use field::request::*;
    w.u64(field::REQ_ID, req_id);
    let permission = |w: &mut SlotWriter<'_>, id: PermissionId| {
        w.u64(A, id.header_addr);
        w.u64(B, id.start_us);
    };
    let kind = match *req {
        Request::Allocate {
            size,
            lease_us,
            mode,
        } => {
            w.u8(MODE, mode_code(mode));
            w.u64(A, size);
            w.u64(B, lease_us);
            kind::ALLOCATE
        }
        Request::Acquire {
            addr,
            size,
            lease_us,
            access,
            mode,
            wait_us,
        } => {
            w.u8(ACCESS, access_code(access));
            w.u8(MODE, mode_code(mode));
            w.u64(A, addr);
            w.u64(B, size);
            w.u64(C, lease_us);
            w.u64(D, wait_us);
            kind::ACQUIRE
        }
        Request::Extend { id, lease_us } => {
            permission(w, id);
            w.u64(C, lease_us);
            kind::EXTEND
        }
        Request::Hello { tenant, secret } => {
            w.u64(A, tenant as u64);
            w.u64(B, secret);
            kind::HELLO
        }
        Request::Renew { id, lease_us } => {
            permission(w, id);
            w.u64(C, lease_us);
            kind::RENEW
        }
        Request::Share {
            addr,
            tenant,
            access,
        } => {
            w.u8(ACCESS, access.map_or(2, access_code));
            w.u64(A, addr);
            w.u64(B, tenant as u64);
            kind::SHARE
        }
        Request::UseQp { slot } => {
            w.u8(FLAGS, slot);
            kind::USE_QP
        }
        Request::Rebind { id } => {
            permission(w, id);
            kind::REBIND
        }
        Request::Revoke { id, free } => {
            w.u8(FLAGS, free as u8);
            permission(w, id);
            kind::REVOKE
        }
        Request::Publish { name, addr, len } => {
            w.put(NAME, &name.padded());
            w.u64(NAMED_ADDR, addr);
            w.u64(NAMED_LEN, len);
            kind::PUBLISH
        }
        Request::Lookup { name } => {
            w.put(NAME, &name.padded());
            kind::LOOKUP
        }
        Request::Unpublish { name } => {
            w.put(NAME, &name.padded());
            kind::UNPUBLISH
        }
    };
    w.u8(field::KIND, kind);
}

/// Parses a request slot (strictly: see the module docs).
pub fn decode_request(buf: &[u8]) -> Result<(u64, Request), ProtoError> {
    let (req_id, req) = parse_request(buf)?;
    canonical(buf, &encode_request(req_id, &req))?;
    Ok((req_id, req))
}

/// Accepts `buf` only if it is `encoding`, the encoding of what it decoded to: one slot,
/// nothing in the bytes the decoder did not read.
fn canonical(buf: &[u8], encoding: &[u8; SLOT_SIZE]) -> Result<(), ProtoError> {
    if buf.len() != SLOT_SIZE {
        return Err(ProtoError::BadField("length"));
    }
    if buf != encoding {
        return Err(ProtoError::BadField("reserved"));
    }
    Ok(())
}

/// The fields of a request slot, whatever the bytes no field of its kind uses.
fn parse_request(buf: &[u8]) -> Result<(u64, Request), ProtoError> {
    use field::request::*;
    let r = SlotReader::new(buf, SLOT_SIZE)?;
    let id = || -> Result<PermissionId, ProtoError> {
        Ok(PermissionId {
            header_addr: r.u64(A)?,
            start_us: r.u64(B)?,
        })
    };
    let tenant = |at| u32::try_from(r.u64(at)?).map_err(|_| ProtoError::BadField("tenant"));
    let name = || RootName::from_padded(r.array(NAME)?).ok_or(ProtoError::BadField("name"));
    let req = match r.u8(field::KIND)? {
        kind::ALLOCATE => Request::Allocate {
            size: r.u64(A)?,
            lease_us: r.u64(B)?,
            mode: mode_of(r.u8(MODE)?)?,
        },
        kind::ACQUIRE => Request::Acquire {
            addr: r.u64(A)?,
            size: r.u64(B)?,
            lease_us: r.u64(C)?,
            access: access_of(r.u8(ACCESS)?)?,
            mode: mode_of(r.u8(MODE)?)?,
            wait_us: r.u64(D)?,
        },
        kind::EXTEND => Request::Extend {
            id: id()?,
            lease_us: r.u64(C)?,
        },
        kind::HELLO => Request::Hello {
            tenant: tenant(A)?,
            secret: r.u64(B)?,
        },
        kind::RENEW => Request::Renew {
            id: id()?,
            lease_us: r.u64(C)?,
        },
        kind::SHARE => Request::Share {
            addr: r.u64(A)?,
            tenant: tenant(B)?,
            access: match r.u8(ACCESS)? {
                2 => None,
                b => Some(access_of(b)?),
            },
        },
        kind::USE_QP => Request::UseQp { slot: r.u8(FLAGS)? },
        kind::REBIND => Request::Rebind { id: id()? },
        kind::REVOKE => Request::Revoke {
            id: id()?,
            free: r.flag(FLAGS, "free")?,
        },
        kind::PUBLISH => Request::Publish {
            name: name()?,
            addr: r.u64(NAMED_ADDR)?,
            len: r.u64(NAMED_LEN)?,
        },
        kind::LOOKUP => Request::Lookup { name: name()? },
        kind::UNPUBLISH => Request::Unpublish { name: name()? },
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, req))
}

/// Encodes a reply to request `req_id`.
pub fn encode_reply(req_id: u64, reply: &Reply) -> [u8; SLOT_SIZE] {
    let mut b = [0u8; SLOT_SIZE];
    write_reply(&mut SlotWriter::new(&mut b), req_id, reply);
    b
}

fn write_reply(w: &mut SlotWriter<'_>, req_id: u64, reply: &Reply) {
    use field::reply::*;
    w.u64(field::REQ_ID, req_id);
    let kind = match *reply {
        Reply::Granted(g) => {
            w.u8(FLAGS, g.contiguous as u8);
            w.u32(BUFFER_RKEY, g.buffer_rkey.0);
            w.u32(LIFETIME_RKEY, g.lifetime_rkey.0);
            w.u32(MAX_LIFETIME, g.max_lifetime_us);
            w.u64(HEADER_ADDR, g.id.header_addr);
            w.u64(START_US, g.id.start_us);
            w.u64(BUFFER_ADDR, g.buffer_addr);
            w.u64(BUFFER_LEN, g.buffer_len);
            w.u64(LIFETIME_US, g.lifetime_us);
            kind::GRANTED
        }
        Reply::Extended { lifetime_us } => {
            w.u64(LIFETIME_US, lifetime_us);
            kind::EXTENDED
        }
        Reply::Revoked => kind::REVOKED,
        Reply::Shared => kind::SHARED,
        Reply::Named => kind::NAMED,
        Reply::Found { addr, len } => {
            w.u64(BUFFER_ADDR, addr);
            w.u64(BUFFER_LEN, len);
            kind::FOUND
        }
        Reply::Welcome {
            client_id,
            secret,
            type2,
            shards,
            max_lifetime_us,
        } => {
            w.u64(LIFETIME_US, max_lifetime_us);
            w.u8(FLAGS, type2 as u8);
            w.u32(BUFFER_RKEY, client_id);
            w.u64(HEADER_ADDR, secret);
            w.u32(SHARDS, shards.shards);
            w.u32(HEADERS_PER_SHARD, shards.headers_per_shard);
            w.u64(SHARD_HEADER_BASE, shards.header_base);
            w.u64(SHARD_BUFFER_BASE, shards.buffer_base);
            w.u64(SHARD_BUFFER_SPAN, shards.buffer_span);
            kind::WELCOME
        }
        Reply::Failed(s) => {
            w.u8(STATUS, status_code(s));
            kind::FAILED
        }
    };
    w.u8(field::KIND, kind);
}

/// Parses a reply slot (strictly: see the module docs).
pub fn decode_reply(buf: &[u8]) -> Result<(u64, Reply), ProtoError> {
    let (req_id, reply) = parse_reply(buf)?;
    canonical(buf, &encode_reply(req_id, &reply))?;
    Ok((req_id, reply))
}

/// The fields of a reply slot, whatever the bytes no field of its kind uses.
fn parse_reply(buf: &[u8]) -> Result<(u64, Reply), ProtoError> {
    use field::reply::*;
    let r = SlotReader::new(buf, SLOT_SIZE)?;
    let reply = match r.u8(field::KIND)? {
        kind::GRANTED => Reply::Granted(Grant {
            id: PermissionId {
                header_addr: r.u64(HEADER_ADDR)?,
                start_us: r.u64(START_US)?,
            },
            buffer_addr: r.u64(BUFFER_ADDR)?,
            buffer_len: r.u64(BUFFER_LEN)?,
            buffer_rkey: MemoryKey(r.u32(BUFFER_RKEY)?),
            lifetime_rkey: MemoryKey(r.u32(LIFETIME_RKEY)?),
            max_lifetime_us: r.u32(MAX_LIFETIME)?,
            lifetime_us: r.u64(LIFETIME_US)?,
            contiguous: r.flag(FLAGS, "contiguous")?,
        }),
        kind::EXTENDED => Reply::Extended {
            lifetime_us: r.u64(LIFETIME_US)?,
        },
        kind::REVOKED => Reply::Revoked,
        kind::SHARED => Reply::Shared,
        kind::NAMED => Reply::Named,
        kind::FOUND => Reply::Found {
            addr: r.u64(BUFFER_ADDR)?,
            len: r.u64(BUFFER_LEN)?,
        },
        kind::WELCOME => Reply::Welcome {
            client_id: r.u32(BUFFER_RKEY)?,
            secret: r.u64(HEADER_ADDR)?,
            type2: r.flag(FLAGS, "type2")?,
            shards: ShardMap {
                shards: match r.u32(SHARDS)? {
                    n @ 1..=255 => n,
                    _ => return Err(ProtoError::BadField("shards")),
                },
                headers_per_shard: r.u32(HEADERS_PER_SHARD)?,
                header_base: r.u64(SHARD_HEADER_BASE)?,
                buffer_base: r.u64(SHARD_BUFFER_BASE)?,
                buffer_span: r.u64(SHARD_BUFFER_SPAN)?,
            },
            max_lifetime_us: r.u64(LIFETIME_US)?,
        },
        kind::FAILED => Reply::Failed(
            *Status::ALL
                .get(r.u8(STATUS)? as usize)
                .ok_or(ProtoError::BadField("status"))?,
        ),
        k => return Err(ProtoError::UnknownKind(k)),
    };
    Ok((r.u64(field::REQ_ID)?, reply))
}
