//! Control-path messages between the client library and the manager, carried by two-sided
//! SEND/RECV in fixed-size slots ([`SLOT_SIZE`] bytes, little-endian).
//!
//! ```text
//! request:  0 u64 req_id | 8 u8 kind | 9 u8 access | 10 u8 mode | 11 u8 flags | 12 u32 rsvd
//!           16 u64 a | 24 u64 b | 32 u64 c | 40 u64 d
//!           (Hello: a = tenant, b = secret; Share: a = addr, b = tenant, access 2 = withdraw;
//!            Extend / Renew / Rebind / Revoke: a, b = permission id, c = lease;
//!            Publish / Lookup / Unpublish: 16..48 the name padded with zeros, Publish:
//!            48 u64 addr | 56 u64 len)
//! reply:    0 u64 req_id | 8 u8 kind | 9 u8 status | 10 u8 flags | 11 u8 rsvd | 12 u32 buffer_rkey
//!           16 u32 lifetime_rkey | 20 u32 max_lifetime_us | 24 u64 header_addr | 32 u64 start_us
//!           40 u64 buffer_addr | 48 u64 buffer_len | 56 u64 lifetime_us
//!           (Found: buffer_addr, buffer_len; Welcome: 10 type2 | 12 client_id | 16 u32 shards |
//!            20 u32 headers_per_shard | 24 secret | 32, 40, 48 the shard map |
//!            56 u64 max_lifetime_us)
//! ```
//! Only durations travel (lease and lifetime in µs); the start time is an opaque part of the
//! permission id (the ABA filter), never compared with the client's clock.
//!
//! The codec (`proto/messages/codec.rs`, field offsets in one place) reads through the control
//! channel's checked slot views; parsing never panics on peer input, it returns a
//! [`ProtoError`]. Parsing is strict: reserved bytes, and the fields a kind does not use, must
//! be zero, and a message is exactly one slot (the encoding is canonical).

use rnic::MemoryKey;

/// Bytes of one message slot.
pub const SLOT_SIZE: usize = 64;

/// Control requests a client may have unanswered at once on a control connection: the client
/// posts this many receive slots for the replies, and a memory node that gives each connection
/// its own request credits gives at least this many (`NodeLimits::control_credits`).
pub const MAX_OUTSTANDING_RPCS: u32 = 16;

/// Identifies a tenant (configured on the memory node with its secret); it travels in `Hello`.
pub type TenantId = u32;

/// The tenant of clients that never authenticated as another (a node with no tenants
/// configured serves every client as this one tenant).
pub const DEFAULT_TENANT: TenantId = 0;

/// Read-only or read-write permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Remote read only (no atomics).
    Read,
    /// Read, write and atomics.
    ReadWrite,
}

/// Shared or exclusive ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Compatible with other shared holders.
    Shared,
    /// No other holder at the same time.
    Exclusive,
}

/// The cluster-wide permission identifier: header address plus its start time (ABA filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermissionId {
    /// Address of the permission's header on the memory node.
    pub header_addr: u64,
    /// Start time of the permission, µs on the memory node's clock.
    pub start_us: u64,
}

/// Longest name of a published root object, bytes.
pub const ROOT_NAME_MAX: usize = 32;

/// The name of a published root object (a table's metadata, say): 1 to [`ROOT_NAME_MAX`]
/// bytes of UTF-8 without NUL. Names are per tenant: a client sees its own tenant's only.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RootName([u8; ROOT_NAME_MAX]);

impl RootName {
    /// `name` as a root name, or `None` if it is empty, longer than [`ROOT_NAME_MAX`] bytes or
    /// holds a NUL.
    pub fn new(name: &str) -> Option<Self> {
        Self::from_bytes(name.as_bytes())
    }

    /// The name padded with zeros (its wire form), checked as [`RootName::new`] does.
    pub fn from_padded(raw: [u8; ROOT_NAME_MAX]) -> Option<Self> {
        let len = raw.iter().position(|&b| b == 0).unwrap_or(ROOT_NAME_MAX);
        let (name, pad) = raw.split_at(len);
        if pad.iter().any(|&b| b != 0) {
            return None;
        }
        Self::from_bytes(name)
    }

    fn from_bytes(name: &[u8]) -> Option<Self> {
        if name.is_empty() || name.len() > ROOT_NAME_MAX || name.contains(&0) {
            return None;
        }
        std::str::from_utf8(name).ok()?;
        let mut raw = [0u8; ROOT_NAME_MAX];
        raw[..name.len()].copy_from_slice(name);
        Some(RootName(raw))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(ROOT_NAME_MAX);
        // Checked UTF-8 at construction; the fallback is never taken.
        std::str::from_utf8(&self.0[..len]).unwrap_or_default()
    }

    /// The wire form: the name padded with zeros.
    pub fn padded(&self) -> [u8; ROOT_NAME_MAX] {
        self.0
    }

    /// A stable hash of the name (FNV-1a), which picks the manager shard that keeps it.
    pub fn hash(&self) -> u64 {
        self.0.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

impl std::fmt::Debug for RootName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A control request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `allocate(size, lease, mode)`: memory plus a read-write permission over it.
    Allocate {
        /// Bytes wanted.
        size: u64,
        /// Lease, µs.
        lease_us: u64,
        /// Ownership.
        mode: Mode,
    },
    /// `acquire(addr, size, lease, access, mode)`.
    Acquire {
        /// Start of an allocated object.
        addr: u64,
        /// Bytes (at most the object's size).
        size: u64,
        /// Lease, µs.
        lease_us: u64,
        /// Rights.
        access: Access,
        /// Ownership.
        mode: Mode,
        /// How long to wait for a conflicting holder, µs (0: fail at once).
        wait_us: u64,
    },
    /// RPC-based extension (the comparison baseline for CN-collaborated extension).
    Extend {
        /// The permission.
        id: PermissionId,
        /// Added lifetime, µs.
        lease_us: u64,
    },
    /// First message on a control connection: authenticates the client as `tenant` with the
    /// tenant's secret, and asks for the client's identity, which its data connections then
    /// present (so nobody can attach a QP to another client's domain).
    Hello {
        /// The tenant the client acts for.
        tenant: TenantId,
        /// The tenant's secret, as configured on the memory node.
        secret: u64,
    },
    /// Renewal of a permission past its maximum lifetime: a new permission over the same
    /// object, with the same rights and ownership, replaces the old one in one step (an
    /// exclusive holder keeps the object without a gap). Refused while others wait for it.
    Renew {
        /// The permission being replaced.
        id: PermissionId,
        /// Lease of the new permission, µs.
        lease_us: u64,
    },
    /// Lets another tenant acquire an object of the caller's tenant with at most `access`
    /// (`None` withdraws the grant; permissions already granted end by their leases).
    Share {
        /// Start of the object's buffer.
        addr: u64,
        /// The tenant granted access.
        tenant: u32,
        /// Most it may acquire.
        access: Option<Access>,
    },
    /// Type-2 isolation: the client now uses its data connection `slot`; windows of its new
    /// grants are bound to that connection's QP.
    UseQp {
        /// Index of the data connection (as in its connection intent).
        slot: u8,
    },
    /// Type-2 isolation: bind the permission's windows again, to the client's current QP (its
    /// earlier QP broke). The reply is a `Granted` with the same id and new rkeys.
    Rebind {
        /// The permission.
        id: PermissionId,
    },
    /// `revoke(perm)`; with `free`, the memory is deallocated as well.
    Revoke {
        /// The permission.
        id: PermissionId,
        /// Deallocate the memory too.
        free: bool,
    },
    /// Publishes `[addr, addr + len)` under `name` for the caller's tenant (a named root:
    /// other clients of the tenant find it with `Lookup`). A name is an address, not a
    /// right: using the object still takes an `acquire`.
    Publish {
        /// The name.
        name: RootName,
        /// Start of the object's buffer.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// The object the caller's tenant published under `name`.
    Lookup {
        /// The name.
        name: RootName,
    },
    /// Withdraws a name of the caller's tenant.
    Unpublish {
        /// The name.
        name: RootName,
    },
}

/// Outcome codes of a control request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Done.
    Ok,
    /// No buffer of that size is free.
    NoMemory,
    /// Headers or memory windows are exhausted.
    PoolExhausted,
    /// A conflicting holder did not leave before the wait deadline.
    ConflictTimeout,
    /// The permission does not exist any more (or the id is stale: ABA filtered).
    NotFound,
    /// The manager refuses to extend (maximum lifetime reached or waiters queued).
    ExtensionRefused,
    /// Malformed or inconsistent arguments (size 0, not an object start, longer than the
    /// object).
    InvalidArgument,
    /// A window bind failed at the NIC.
    BindFailed,
    /// The client has not authenticated as a tenant, or its tenant or secret is unknown.
    Unauthorized,
    /// The object belongs to another tenant (freeing or sharing it is the owner's right).
    NotOwner,
    /// The manager is too far behind to grant a lease that would still be alive when its
    /// reply arrives (admission control): back off and ask again.
    Overloaded,
    /// The client's tenant holds as much as its quota allows (memory, permissions, exclusive
    /// permissions or connections): free or revoke something first.
    QuotaExceeded,
    /// The name is published already (by the same tenant).
    NameTaken,
    /// Larger than the largest object the memory node allocates (its largest slab class).
    TooLarge,
}

impl Status {
    /// Every status, in the order of its wire code (a status's code is its index here: add
    /// new statuses at the end).
    pub const ALL: [Status; 14] = [
        Status::Ok,
        Status::NoMemory,
        Status::PoolExhausted,
        Status::ConflictTimeout,
        Status::NotFound,
        Status::ExtensionRefused,
        Status::InvalidArgument,
        Status::BindFailed,
        Status::Unauthorized,
        Status::NotOwner,
        Status::Overloaded,
        Status::QuotaExceeded,
        Status::NameTaken,
        Status::TooLarge,
    ];
}

/// A granted permission, as sent to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Permission id.
    pub id: PermissionId,
    /// Start of the buffer.
    pub buffer_addr: u64,
    /// Length of the buffer.
    pub buffer_len: u64,
    /// rkey covering the buffer (and, when `contiguous`, the lifetime field before it).
    pub buffer_rkey: MemoryKey,
    /// rkey covering the lifetime field (equal to `buffer_rkey` when contiguous).
    pub lifetime_rkey: MemoryKey,
    /// Granted lifetime, µs.
    pub lifetime_us: u64,
    /// Header and buffer share one window.
    pub contiguous: bool,
    /// The manager's maximum lifetime, µs (saturated to `u32::MAX`): no extension reaches
    /// past it, so the client's expiry never does either.
    pub max_lifetime_us: u32,
}

impl Grant {
    /// Address of the lifetime word (the CAS target of CN-collaborated extension).
    pub fn lifetime_addr(&self) -> u64 {
        self.id.header_addr + super::header::LIFETIME_OFFSET as u64
    }
}

/// A control reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Allocate / acquire succeeded.
    Granted(Grant),
    /// RPC extend succeeded; the new lifetime from the start, µs.
    Extended {
        /// New total lifetime.
        lifetime_us: u64,
    },
    /// Revoke done.
    Revoked,
    /// Share done.
    Shared,
    /// Publish or Unpublish done.
    Named,
    /// Answer to `Lookup`: the published object.
    Found {
        /// Start of its buffer.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// Answer to `Hello`.
    Welcome {
        /// The client's id on this memory node.
        client_id: u32,
        /// Secret the client's data connections present with the id.
        secret: u64,
        /// Windows are type 2, bound to one of the client's QPs: after a QP switch the client
        /// must `UseQp` and `Rebind` its permissions.
        type2: bool,
        /// The node's manager shards: the client connects to each and routes by address.
        shards: super::shards::ShardMap,
        /// The node's maximum lifetime of a permission, µs: no grant lasts longer, so the
        /// client never asks for a longer lease and plans its extensions within it.
        max_lifetime_us: u64,
    },
    /// Failed.
    Failed(Status),
}

impl Reply {
    /// The reply's kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Reply::Granted(_) => "Granted",
            Reply::Extended { .. } => "Extended",
            Reply::Revoked => "Revoked",
            Reply::Shared => "Shared",
            Reply::Named => "Named",
            Reply::Found { .. } => "Found",
            Reply::Welcome { .. } => "Welcome",
            Reply::Failed(_) => "Failed",
        }
    }
}

mod codec;

/// Why a slot could not be parsed.
pub use crate::rpc::SlotError as ProtoError;
pub use codec::{ControlProtocol, decode_reply, decode_request, encode_reply, encode_request};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let id = PermissionId {
            header_addr: 0x1000,
            start_us: 77,
        };
        let reqs = [
            Request::Allocate {
                size: 64,
                lease_us: 100,
                mode: Mode::Exclusive,
            },
            Request::Acquire {
                addr: 5,
                size: 6,
                lease_us: 7,
                access: Access::Read,
                mode: Mode::Shared,
                wait_us: 9,
            },
            Request::Extend { id, lease_us: 3 },
            Request::Revoke { id, free: true },
            Request::Hello {
                tenant: 4,
                secret: 0xfeed,
            },
            Request::Renew { id, lease_us: 8 },
            Request::Share {
                addr: 0x40,
                tenant: 2,
                access: Some(Access::Read),
            },
            Request::Share {
                addr: 0x40,
                tenant: 2,
                access: None,
            },
            Request::UseQp { slot: 2 },
            Request::Rebind { id },
            Request::Publish {
                name: RootName::new(&"n".repeat(ROOT_NAME_MAX)).unwrap(),
                addr: 0x40,
                len: u64::MAX,
            },
            Request::Lookup {
                name: RootName::new("orders").unwrap(),
            },
            Request::Unpublish {
                name: RootName::new("é").unwrap(),
            },
        ];
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(
                decode_request(&encode_request(i as u64, r)),
                Ok((i as u64, *r))
            );
        }
        let replies = [
            Reply::Granted(Grant {
                id,
                buffer_addr: 1,
                buffer_len: 2,
                buffer_rkey: MemoryKey(3),
                lifetime_rkey: MemoryKey(4),
                lifetime_us: 5,
                contiguous: true,
                max_lifetime_us: 6,
            }),
            Reply::Extended { lifetime_us: 9 },
            Reply::Revoked,
            Reply::Shared,
            Reply::Named,
            Reply::Found { addr: 0x40, len: 9 },
            Reply::Failed(Status::NotOwner),
            Reply::Failed(Status::NameTaken),
            Reply::Welcome {
                client_id: 3,
                secret: 99,
                type2: true,
                shards: super::super::shards::ShardMap {
                    shards: 4,
                    header_base: 0x1000,
                    headers_per_shard: 7,
                    buffer_base: 0x10_0000,
                    buffer_span: 1 << 20,
                },
                max_lifetime_us: 1_000_000,
            },
            Reply::Failed(Status::ConflictTimeout),
        ];
        for r in replies {
            assert_eq!(decode_reply(&encode_reply(42, &r)), Ok((42, r)));
        }
    }

    #[test]
    fn unused_bytes_and_longer_slots_are_refused() {
        let wire = encode_reply(7, &Reply::Found { addr: 0x40, len: 9 });
        // The reply's reserved byte, then a word only Granted uses.
        for at in [11, 32] {
            let mut bad = wire;
            bad[at] = 1;
            assert_eq!(decode_reply(&bad), Err(ProtoError::BadField("reserved")));
        }
        let mut long = wire.to_vec();
        long.push(0);
        assert_eq!(decode_reply(&long), Err(ProtoError::BadField("length")));
        let hello = encode_request(
            1,
            &Request::Hello {
                tenant: 4,
                secret: 5,
            },
        );
        for at in [9, 12, 40] {
            let mut bad = hello;
            bad[at] = 0x80;
            assert_eq!(decode_request(&bad), Err(ProtoError::BadField("reserved")));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }
    }
}
