//! The revocation barrier of one protection-table entry (memory region or window).
//!
//! One-sided accesses run concurrently with binds, so revoking a key must not complete while an
//! access that validated against the old binding is still copying: a late write could land in
//! the next owner's buffer. A seqlock validates after the copy — too late for a write — so
//! each entry has one word holding its state *and* its in-flight count:
//!
//! ```text
//!  bit 40: open   bits 32..40: key byte   bits 0..32: accesses in flight
//! ```
//!
//! - **accessor** ([`KeyGate::enter`]): one `fetch_add(1)` both registers the access and reads
//!   the state it registered against; it proceeds only if that state was open with its key byte
//!   (otherwise it undoes the increment); the guard's drop decrements.
//! - **binder** ([`KeyGate::close`] + [`KeyGate::drain`]): clears the open bit, then waits until
//!   the count is zero; only then changes the binding and [`KeyGate::open`]s it with a new key.
//!
//! Because both sides modify the same word, its modification order decides: an increment
//! ordered before the close was admitted and is waited for; one ordered after it sees the gate
//! closed. No store→load ordering across two locations is needed (which loom could not check).
//! The drain's acquire load of a zero count synchronizes with every admitted access's release
//! decrement, and opening is a release that admitted accessors acquire, so binding data written
//! between drain and open is seen whole. The wait is bounded because copies are bounded (a
//! maximum message size) and no guard is held across I/O. Binders of one entry are serialized
//! by the caller. `tests/loom_gate.rs` model-checks the protocol.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

const COUNT_MASK: u64 = 0xffff_ffff;
const KEY_SHIFT: u32 = 32;
const OPEN: u64 = 1 << 40;

fn state(key_byte: u8, open: bool) -> u64 {
    ((key_byte as u64) << KEY_SHIFT) | if open { OPEN } else { 0 }
}

/// State word + in-flight count of one protection-table entry.
#[derive(Debug)]
pub struct KeyGate {
    word: AtomicU64,
}

/// Held by an access while it uses the entry; dropping it lets a pending bind proceed.
#[derive(Debug)]
#[must_use = "the access is only protected while the guard lives"]
pub struct GateGuard<'a> {
    gate: &'a KeyGate,
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.gate.word.fetch_sub(1, Ordering::Release);
    }
}

impl KeyGate {
    /// A closed gate with the given key byte.
    pub fn new(key_byte: u8) -> Self {
        KeyGate {
            word: AtomicU64::new(state(key_byte, false)),
        }
    }

    /// Enters if the gate is open with `key_byte`.
    pub fn enter(&self, key_byte: u8) -> Option<GateGuard<'_>> {
        let old = self.word.fetch_add(1, Ordering::AcqRel);
        let guard = GateGuard { gate: self };
        if old & !COUNT_MASK == state(key_byte, true) {
            Some(guard)
        } else {
            None // dropping the guard undoes the increment
        }
    }

    /// Closes the gate: no new access is admitted. Returns whether it was open.
    pub fn close(&self) -> bool {
        self.word.fetch_and(!OPEN, Ordering::AcqRel) & OPEN != 0
    }

    /// Waits until every access admitted before [`close`](Self::close) has finished.
    pub fn drain(&self) {
        let mut spins = 0u32;
        while self.word.load(Ordering::Acquire) & COUNT_MASK != 0 {
            spins += 1;
            if cfg!(not(loom)) && spins < 128 {
                std::hint::spin_loop();
            } else {
                yield_now();
            }
        }
    }

    fn set_state(&self, new_state: u64) {
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            // Keep the count: rejected accessors may be undoing their increments right now.
            let new = (cur & COUNT_MASK) | new_state;
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Opens the gate with a new key byte. Call only after `close` + `drain`.
    pub fn open(&self, key_byte: u8) {
        self.set_state(state(key_byte, true));
    }

    /// Sets the key byte of a closed gate without opening it.
    pub fn set_closed_key(&self, key_byte: u8) {
        self.set_state(state(key_byte, false));
    }

    /// The current key byte and whether the gate is open.
    pub fn snapshot(&self) -> (u8, bool) {
        let w = self.word.load(Ordering::Acquire);
        ((w >> KEY_SHIFT) as u8, w & OPEN != 0)
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
