//! The baselines' two-sided requests and replies, and the connection's scheme byte.
//!
//! Messages are carried by the control channel in slots of [`SLOT_SIZE`] bytes: a
//! [`HEADER`]-byte header (kind, request id), the kind's fields, and for `Write` and `Data` a
//! payload of up to [`MAX_PAYLOAD`] bytes. A message goes on the wire at the length it uses —
//! [`SMALL_MESSAGE`] bytes for every message without a payload, the fields plus the payload
//! otherwise — so small requests stay small ([`codec`] has the layout).
//!
//! Decoding checks the length and every tag and returns a [`ProtoError`]; it never panics,
//! whatever the peer sent. Ranges, sizes and objects are *not* judged here — the memory node
//! answers those with a [`FailCode`]. A `Write` longer than [`MAX_PAYLOAD`] cannot be carried:
//! the client refuses to send one ([`BaselineClient`](super::BaselineClient)), and a message
//! claiming one does not decode (the node drops it).
//!
//! The connection's private data carries the [`Scheme`] (`"PBL1"` ‖ scheme byte).

pub mod codec;

pub use codec::{BaselineProtocol, decode_reply, decode_request, encode_reply, encode_request};

use patronus_core::proto::messages::RootName;
use rnic::MemoryKey;

/// Bytes of a message's header: kind (at 0) and request id (at 8).
pub const HEADER: usize = 16;
/// Most bytes one `Read`/`Write` request moves (a page).
pub const MAX_PAYLOAD: usize = 4096;
/// Bytes of a `Write` before its payload (the largest header with fields).
pub const PAYLOAD_AT: usize = 32;
/// Bytes of every message slot: the longest message, a `Write` of [`MAX_PAYLOAD`] bytes.
pub const SLOT_SIZE: usize = PAYLOAD_AT + MAX_PAYLOAD;
/// Bytes on the wire of a message without a payload (and the least any message takes).
pub const SMALL_MESSAGE: usize = 64;

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
    /// A table (regions, names) or the pool is full.
    #[error("resources exhausted")]
    Exhausted,
    /// A verb failed on the memory node for another reason.
    #[error("memory-node verb failed")]
    Verbs,
    /// No allocated object there: never allocated, freed already, or not its first byte (or,
    /// registering an object's range, a range that leaves the object).
    #[error("no such object")]
    UnknownObject,
    /// An atomic's address is not 8-byte aligned.
    #[error("misaligned atomic")]
    Misaligned,
    /// The name is published already.
    #[error("name taken")]
    NameTaken,
    /// No object is published under the name.
    #[error("no such name")]
    UnknownName,
    /// An argument outside its domain (a zero size or length).
    #[error("invalid argument")]
    Invalid,
}

impl FailCode {
    const WIRE: [FailCode; 11] = [
        FailCode::WrongScheme,
        FailCode::UnknownRkey,
        FailCode::OutOfRange,
        FailCode::TooLong,
        FailCode::Exhausted,
        FailCode::Verbs,
        FailCode::UnknownObject,
        FailCode::Misaligned,
        FailCode::NameTaken,
        FailCode::UnknownName,
        FailCode::Invalid,
    ];

    pub(crate) fn to_wire(self) -> u8 {
        let i = Self::WIRE.iter().position(|&c| c == self).unwrap_or(0);
        i as u8 + 1
    }

    pub(crate) fn from_wire(b: u8) -> Result<Self, ProtoError> {
        (b as usize)
            .checked_sub(1)
            .and_then(|i| Self::WIRE.get(i))
            .copied()
            .ok_or(ProtoError::BadField("fail code"))
    }
}

/// A client's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BaselineRequest {
    /// First message: asks for the pool's coordinates.
    Hello,
    /// (Mr) Register `[addr, addr + len)` of the pool as a new region.
    RegisterMr {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
        /// Remote read only; otherwise read, write and atomics.
        read_only: bool,
        /// The range must lie inside one allocated object ([`FailCode::UnknownObject`]
        /// otherwise): the data structures' acquire. Otherwise any range of the pool (the
        /// microbenchmarks).
        object: bool,
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
    /// Copy `len` (≤ [`MAX_PAYLOAD`]) pool bytes at `addr` into the reply.
    Read {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u32,
    },
    /// Copy `bytes` (≤ [`MAX_PAYLOAD`]) into the pool at `addr`.
    Write {
        /// First byte.
        addr: u64,
        /// Payload.
        bytes: Vec<u8>,
    },
    /// (Rpc) Compare-and-swap of the aligned word at `addr`; answered with the old value.
    Cas {
        /// Address (8-byte aligned).
        addr: u64,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// (Rpc) Fetch-and-add on the aligned word at `addr`; answered with the old value.
    Faa {
        /// Address (8-byte aligned).
        addr: u64,
        /// Added (wrapping).
        add: u64,
    },
    /// Allocate a zeroed object of `size` bytes; under Mr, also register a read-write region
    /// over it (the scheme's allocate: alloc + registration in one request).
    Alloc {
        /// Bytes.
        size: u64,
    },
    /// Free the object starting at `addr`; under Mr, every region any client registered over
    /// it is deregistered.
    Free {
        /// Its first byte.
        addr: u64,
    },
    /// Publish `[addr, addr + len)` under `name`.
    Publish {
        /// The name.
        name: RootName,
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// The object published under `name`.
    Lookup {
        /// The name.
        name: RootName,
    },
    /// Withdraw `name`.
    Unpublish {
        /// The name.
        name: RootName,
    },
}

impl BaselineRequest {
    /// Payload bytes the request carries (a `Write`'s).
    pub fn payload_len(&self) -> usize {
        match self {
            BaselineRequest::Write { bytes, .. } => bytes.len(),
            _ => 0,
        }
    }
}

/// The memory node's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    Data(Vec<u8>),
    /// The value an atomic found.
    Atomic(u64),
    /// An object was allocated.
    Allocated {
        /// Its first byte.
        addr: u64,
        /// The key to reach it: the whole-pool rkey (Unprot, Qp), the new region's (Mr), none
        /// (Rpc).
        rkey: Option<MemoryKey>,
    },
    /// The object published under a name.
    Found {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
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

#[cfg(test)]
mod tests;
