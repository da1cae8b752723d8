//! What the send queues posted: each QP's record of its send requests that have not completed
//! and the keys of the windows their binds change.
//!
//! Invariants:
//! - A QP records every send request (wr_id, opcode) in posting order before the doorbell,
//!   under one lock, so its record's order is the send queue's order. RC completes send
//!   requests in order, so a completion for `wr_id` retires every older entry (the unsignaled
//!   ones that completed silently). The record is bounded.
//! - A window's recorded rkey is that of its latest posted bind; a bind that fails (or is
//!   flushed) rolls it back to the last one that succeeded, unless a later bind was posted.

use parking_lot::Mutex;
use rnic::WcOpcode;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A posted send request: its `wr_id`, its completion opcode and, for a bind, the window's
/// keys and the rkey the bind gives it.
pub(crate) type Posted = (u64, WcOpcode, Option<(Arc<MwKeys>, u32)>);

/// The posted send requests of one QP that have not completed yet.
#[derive(Debug)]
pub(crate) struct SendRecord {
    entries: Mutex<VecDeque<Posted>>,
    cap: usize,
}

impl SendRecord {
    /// The record of a QP with `max_send_wr` send slots.
    pub(crate) fn new(max_send_wr: u32) -> SendRecord {
        SendRecord {
            entries: Mutex::new(VecDeque::new()),
            cap: (max_send_wr as usize).saturating_mul(4).max(1024),
        }
    }

    /// Retires the oldest entry for `wr_id` and every older one; returns its opcode. The
    /// older ones were unsignaled and succeeded (an RC send queue completes in order and an
    /// error always completes); the entry itself succeeded if `success`. Binds among them
    /// settle their window's keys.
    pub(crate) fn complete(&self, wr_id: u64, success: bool) -> Option<WcOpcode> {
        let mut q = self.entries.lock();
        let pos = q.iter().position(|(id, _, _)| *id == wr_id)?;
        let op = q[pos].1;
        for (i, (_, _, bind)) in q.drain(..=pos).enumerate() {
            if let Some((keys, new)) = bind {
                if i < pos || success {
                    keys.bind_succeeded(new);
                } else {
                    keys.bind_failed(new);
                }
            }
        }
        Some(op)
    }

    /// Records requests about to be posted, in posting order; beyond the bound, the oldest
    /// entries go.
    pub(crate) fn record(&self, posted: impl IntoIterator<Item = Posted>) {
        let mut q = self.entries.lock();
        q.extend(posted);
        let excess = q.len().saturating_sub(self.cap);
        q.drain(..excess);
    }

    /// Removes the `n` newest entries: requests the device did not take.
    pub(crate) fn unrecord(&self, n: usize) {
        let mut q = self.entries.lock();
        let len = q.len();
        q.truncate(len - n.min(len));
    }

    /// Forgets every entry (the QP was reset).
    pub(crate) fn clear(&self) {
        self.entries.lock().clear();
    }
}

/// A window's keys, shared with the send records of the QPs that posted binds of it (which
/// settle them when the binds complete, possibly after the window is gone).
#[derive(Debug)]
pub(crate) struct MwKeys {
    /// The rkey of the latest posted bind, or `confirmed` after that bind failed.
    rkey: AtomicU32,
    /// The rkey of the latest bind known to have succeeded (the allocation's at first).
    confirmed: AtomicU32,
}

impl MwKeys {
    /// The keys of a window allocated with `rkey`.
    pub(crate) fn new(rkey: u32) -> MwKeys {
        MwKeys {
            rkey: AtomicU32::new(rkey),
            confirmed: AtomicU32::new(rkey),
        }
    }

    /// The recorded rkey.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::SeqCst)
    }

    /// Records the rkey of a posted bind.
    pub(crate) fn posted(&self, new: u32) {
        self.rkey.store(new, Ordering::SeqCst);
    }

    /// A bind to `new` succeeded.
    pub(crate) fn bind_succeeded(&self, new: u32) {
        self.confirmed.store(new, Ordering::SeqCst);
    }

    /// A bind to `new` failed or was flushed: the window kept its key. Unless a later bind
    /// was posted meanwhile, the recorded rkey goes back to the last confirmed one.
    pub(crate) fn bind_failed(&self, new: u32) {
        let confirmed = self.confirmed.load(Ordering::SeqCst);
        let _ = self
            .rkey
            .compare_exchange(new, confirmed, Ordering::SeqCst, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::{MwKeys, SendRecord};
    use rnic::WcOpcode;
    use std::sync::Arc;

    /// Posts a bind of `keys` to `new` on `rec` (as `post_send` records it).
    fn post_bind(rec: &SendRecord, keys: &Arc<MwKeys>, wr_id: u64, new: u32) {
        rec.entries
            .lock()
            .push_back((wr_id, WcOpcode::BindMw, Some((keys.clone(), new))));
        keys.posted(new);
    }

    #[test]
    fn failed_bind_rolls_the_rkey_back() {
        let rec = SendRecord::new(16);
        let keys = Arc::new(MwKeys::new(0x100));
        post_bind(&rec, &keys, 1, 0x101);
        assert_eq!(rec.complete(1, true), Some(WcOpcode::BindMw));
        assert_eq!(keys.rkey(), 0x101);
        post_bind(&rec, &keys, 2, 0x102);
        rec.complete(2, false);
        assert_eq!(
            keys.rkey(),
            0x101,
            "the window kept the key of its last good bind"
        );
    }

    #[test]
    fn flushed_binds_roll_back_to_the_last_good_key() {
        // An unsignaled bind that succeeded, then a failed one and a flushed one behind it.
        let rec = SendRecord::new(16);
        let keys = Arc::new(MwKeys::new(0x100));
        post_bind(&rec, &keys, 1, 0x101);
        post_bind(&rec, &keys, 2, 0x102);
        post_bind(&rec, &keys, 3, 0x103);
        rec.complete(2, false);
        assert_eq!(keys.rkey(), 0x103, "a later bind is still outstanding");
        rec.complete(3, false);
        assert_eq!(
            keys.rkey(),
            0x101,
            "back to the unsignaled bind that succeeded"
        );
    }

    #[test]
    fn a_later_post_is_not_undone() {
        let rec = SendRecord::new(16);
        let keys = Arc::new(MwKeys::new(0x100));
        post_bind(&rec, &keys, 1, 0x101);
        let other = SendRecord::new(16);
        post_bind(&other, &keys, 9, 0x102);
        rec.complete(1, false);
        assert_eq!(keys.rkey(), 0x102);
    }
}
