//! The revocation barrier of one protection-table entry (memory region or window).
//!
//! One-sided accesses run concurrently with binds, so revoking a key must not complete while an
//! access that validated against the old binding is still copying: a late write could land in
//! the next owner's buffer. A seqlock validates after the copy — too late for a write — so
//! each entry has a state word and an in-flight count:
//!
//! - **accessor** ([`KeyGate::enter`]): increment `inflight`, *then* read `state`; proceed only if
//!   it is open with the expected key byte; decrement when the copy is done (guard drop).
//! - **binder** ([`KeyGate::close`] + [`KeyGate::drain`]): mark `state` closed, *then* wait until
//!   `inflight` is zero; only then change the binding and [`KeyGate::open`] it with a new key.
//!
//! Both sides use sequentially consistent operations, so either the binder sees the accessor's
//! increment (and waits for it) or the accessor sees the closed state (and backs off): no access
//! validated against the old key overlaps the change. The wait is bounded because copies are
//! bounded (a maximum message size) and no guard is held across I/O. Binders of one entry are
//! serialized by the caller. `tests/loom_gate.rs` model-checks this protocol.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, Ordering};

const OPEN: u32 = 1 << 8;

/// State word + in-flight count of one protection-table entry.
#[derive(Debug)]
pub struct KeyGate {
    /// Bits 0..8: current key byte. Bit 8: open (accesses with that key may proceed).
    state: AtomicU32,
    inflight: AtomicU32,
}

/// Held by an access while it uses the entry; dropping it lets a pending bind proceed.
#[derive(Debug)]
#[must_use = "the access is only protected while the guard lives"]
pub struct GateGuard<'a> {
    gate: &'a KeyGate,
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.gate.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl KeyGate {
    /// A closed gate with the given key byte.
    pub fn new(key_byte: u8) -> Self {
        KeyGate {
            state: AtomicU32::new(key_byte as u32),
            inflight: AtomicU32::new(0),
        }
    }

    /// Enters if the gate is open with `key_byte`.
    pub fn enter(&self, key_byte: u8) -> Option<GateGuard<'_>> {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        let guard = GateGuard { gate: self };
        let s = self.state.load(Ordering::SeqCst);
        if s == OPEN | key_byte as u32 {
            Some(guard)
        } else {
            None // dropping the guard undoes the increment
        }
    }

    /// Closes the gate: no new access is admitted. Returns whether it was open.
    pub fn close(&self) -> bool {
        let old = self.state.fetch_and(!OPEN, Ordering::SeqCst);
        old & OPEN != 0
    }

    /// Waits until every access admitted before [`close`](Self::close) has finished.
    pub fn drain(&self) {
        let mut spins = 0u32;
        while self.inflight.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                yield_now();
            }
        }
    }

    /// Opens the gate with a new key byte. Call only after `close` + `drain`.
    pub fn open(&self, key_byte: u8) {
        self.state.store(OPEN | key_byte as u32, Ordering::SeqCst);
    }

    /// Sets the key byte of a closed gate without opening it.
    pub fn set_closed_key(&self, key_byte: u8) {
        self.state.store(key_byte as u32, Ordering::SeqCst);
    }

    /// The current key byte and whether the gate is open.
    pub fn snapshot(&self) -> (u8, bool) {
        let s = self.state.load(Ordering::SeqCst);
        (s as u8, s & OPEN != 0)
    }
}

#[cfg(loom)]
fn yield_now() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
fn yield_now() {
    std::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn admits_only_matching_open_key() {
        let g = KeyGate::new(7);
        assert!(g.enter(7).is_none(), "closed gate admits nothing");
        g.open(7);
        assert!(g.enter(7).is_some());
        assert!(g.enter(8).is_none());
        assert!(g.close());
        g.drain();
        assert!(g.enter(7).is_none());
        g.open(8);
        assert!(g.enter(7).is_none(), "old key dies on rebind");
        assert_eq!(g.snapshot(), (8, true));
    }
}
