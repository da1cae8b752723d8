//! `Perm`: an opaque granted permission.

use crate::proto::messages::{Access, Grant, Mode, PermissionId};
use rnic::{MemoryKey, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// [`Perm::first_use`]: no access tried yet.
const UNUSED: u8 = 0;
/// An access went out under the lease.
const USED: u8 = 1;
/// Counted as wasted: the lease had ended before the first access.
const WASTED: u8 = 2;

/// A granted permission: remote address, rkeys, id (header address + start time) and the
/// client's conservative expiry. Obtained from `allocate`/`acquire`; ended by `revoke`.
#[derive(Debug)]
pub struct Perm {
    pub(crate) grant: Grant,
    pub(crate) access: Access,
    pub(crate) mode: Mode,
    /// Lifetime from the start, µs, as the client last set or saw it in the header (shared
    /// with a posted extension in flight, which raises it when it completes).
    pub(crate) lifetime_us: Arc<AtomicU64>,
    /// When the client sent the request that granted this (its own clock).
    pub(crate) sent_at: Timestamp,
    pub(crate) margin_us: u64,
    /// Current rkeys (buffer << 32 | lifetime), shared with the client so that a rebind after a
    /// QP switch (type-2 isolation) refreshes them without the application noticing.
    pub(crate) rkeys: Arc<AtomicU64>,
    /// Whether an access went out under the lease, or it was counted as wasted.
    first_use: AtomicU8,
    /// The number of the client's session that granted it: the permission ends with that
    /// session.
    pub(crate) session: u64,
}

pub(crate) fn pack(buffer: MemoryKey, lifetime: MemoryKey) -> u64 {
    ((buffer.0 as u64) << 32) | lifetime.0 as u64
}

impl Perm {
    /// Whether this is a chunk allocated one-sided ([`Client::allocate_one_sided`]): no header,
    /// no lease; the client's until its session ends.
    ///
    /// [`Client::allocate_one_sided`]: super::Client::allocate_one_sided
    pub fn is_one_sided(&self) -> bool {
        self.grant.id.header_addr == 0
    }

    pub(crate) fn new(
        grant: Grant,
        access: Access,
        mode: Mode,
        sent_at: Timestamp,
        margin_us: u64,
        session: u64,
    ) -> Self {
        Perm {
            lifetime_us: Arc::new(AtomicU64::new(grant.lifetime_us)),
            rkeys: Arc::new(AtomicU64::new(pack(grant.buffer_rkey, grant.lifetime_rkey))),
            grant,
            access,
            mode,
            sent_at,
            margin_us,
            first_use: AtomicU8::new(UNUSED),
            session,
        }
    }

    /// Notes an access issued under the lease.
    pub(crate) fn mark_used(&self) {
        let _ = self
            .first_use
            .compare_exchange(UNUSED, USED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Notes that the lease ended before any access; counts the grant as wasted once.
    pub(crate) fn mark_wasted(&self, stats: &mut super::lease::ClientStats) {
        if self
            .first_use
            .compare_exchange(UNUSED, WASTED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            stats.wasted += 1;
        }
    }

    /// The grant as the memory node sent it.
    pub fn grant(&self) -> Grant {
        self.grant
    }

    /// The permission id.
    pub fn id(&self) -> PermissionId {
        self.grant.id
    }
    /// First address of the buffer.
    pub fn addr(&self) -> u64 {
        self.grant.buffer_addr
    }
    /// Length of the buffer.
    pub fn len(&self) -> u64 {
        self.grant.buffer_len
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.grant.buffer_len == 0
    }
    /// The rkey of the buffer window.
    pub fn rkey(&self) -> MemoryKey {
        MemoryKey((self.rkeys.load(Ordering::SeqCst) >> 32) as u32)
    }
    /// The rkey of the window over the header's lifetime field.
    pub fn lifetime_rkey(&self) -> MemoryKey {
        MemoryKey(self.rkeys.load(Ordering::SeqCst) as u32)
    }
    /// Rights.
    pub fn access(&self) -> Access {
        self.access
    }
    /// Ownership.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Whether header and buffer share one window.
    pub fn contiguous(&self) -> bool {
        self.grant.contiguous
    }
    /// Current lifetime from the start, µs.
    pub fn lifetime_us(&self) -> u64 {
        self.lifetime_us.load(Ordering::SeqCst)
    }
    /// Records the lifetime the manager's `Extended` reply reported for a pipelined RPC
    /// extension (an `Op::Request` ticket of an `Extend`). It only
    /// moves the local expiry: the manager, not this value, decides when the windows close.
    pub fn note_extended(&self, lifetime_us: u64) {
        self.lifetime_us.fetch_max(lifetime_us, Ordering::SeqCst);
    }

    /// The number of the client's session that granted this permission
    /// (`Client::session`); it ended with that session.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The manager's maximum lifetime for this permission, µs.
    pub fn max_lifetime_us(&self) -> u64 {
        self.grant.max_lifetime_us as u64
    }
    /// Tamper helper: a copy whose buffer rkey is `rkey` (a guess at another window's key).
    #[cfg(feature = "testing")]
    pub fn with_rkey(&self, rkey: MemoryKey) -> Perm {
        let p = self.copy();
        p.rkeys
            .store(pack(rkey, self.lifetime_rkey()), Ordering::SeqCst);
        p
    }

    /// Tamper helper: a permission for `[addr, addr + len)` through `rkey` that nobody granted
    /// (an adversary's guess at another tenant's memory), built on this one's identity.
    #[cfg(feature = "testing")]
    pub fn forged(&self, addr: u64, len: u64, rkey: MemoryKey) -> Perm {
        let mut p = self.with_rkey(rkey);
        p.grant.buffer_addr = addr;
        p.grant.buffer_len = len;
        p
    }

    /// Conservative local expiry: send time + min(lifetime, maximum lifetime) − margin.
    pub fn expiry(&self) -> Timestamp {
        Timestamp(
            self.sent_at
                .0
                .saturating_add(self.lifetime_us().min(self.max_lifetime_us()))
                .saturating_sub(self.margin_us),
        )
    }

    /// Tamper helper: a copy carrying the same id, address and rkeys, as a stale message or
    /// an adversary would hold after the permission ended. For tests of the protection.
    #[cfg(feature = "testing")]
    pub fn forged_copy(&self) -> Perm {
        self.copy()
    }

    /// A second handle on the same grant (its rkeys are a snapshot: not refreshed in place).
    #[cfg(feature = "testing")]
    fn copy(&self) -> Perm {
        Perm {
            grant: self.grant,
            access: self.access,
            mode: self.mode,
            lifetime_us: Arc::new(AtomicU64::new(self.lifetime_us())),
            sent_at: self.sent_at,
            margin_us: self.margin_us,
            rkeys: Arc::new(AtomicU64::new(self.rkeys.load(Ordering::SeqCst))),
            first_use: AtomicU8::new(self.first_use.load(Ordering::Relaxed)),
            session: self.session,
        }
    }

    /// Tamper helper: changes the buffer rkey's key byte (a guessed or corrupted key).
    #[cfg(feature = "testing")]
    pub fn corrupt_rkey(&mut self) {
        let bad = self.rkey().incremented();
        self.rkeys
            .store(pack(bad, self.lifetime_rkey()), Ordering::SeqCst);
    }
}
