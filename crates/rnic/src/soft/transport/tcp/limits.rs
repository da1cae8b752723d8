//! Bounds and counters of one TCP device, shared by its engines and connections.

use crate::soft::link::AdaptiveTimeouts;
use std::sync::atomic::{AtomicU64, Ordering};

/// Limits shared by a device's engines and connections.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Largest frame accepted once a connection is set up (max message + header).
    pub(super) max_frame: usize,
    /// Unsent bytes a connection may hold before a further frame closes it.
    pub(super) out_limit: usize,
    /// Empty zero-timeout polls before an engine parks.
    pub(super) spin_polls: u32,
    /// Accepted connections per engine still waiting for their `ConnectRequest`.
    pub(super) max_pending_handshakes: usize,
    /// The QPs' timeouts on this device's connections (their links' `RetryPolicy::Stream`).
    pub(super) timeouts: AdaptiveTimeouts,
    /// Whether connections get kernel keepalive and `TCP_USER_TIMEOUT` from the budget.
    pub(super) keepalive: bool,
}

/// Event counters of a device's TCP transport.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) accepted: AtomicU64,
    pub(super) connected: AtomicU64,
    pub(super) established: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) protocol_errors: AtomicU64,
    pub(super) overflow_closes: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) closed: AtomicU64,
    /// `read` calls on established and accepting connections (engines and pollers).
    pub(super) read_calls: AtomicU64,
    /// `write` calls on connections.
    pub(super) write_calls: AtomicU64,
    /// `epoll_wait` calls of the engines (`poll`, parking or not).
    pub(super) poll_calls: AtomicU64,
    /// Wake-ups of an engine by another thread (a write to its waker's eventfd).
    pub(super) wake_calls: AtomicU64,
    /// Largest receive buffer any connection has had, in bytes.
    pub(super) rx_high_water: AtomicU64,
    /// Large frames their QP decided on from the header, whose payload was dropped unbuffered.
    pub(super) discarded_frames: AtomicU64,
    /// Requests delivered to the device's QPs.
    pub(super) served: AtomicU64,
}

impl Counters {
    pub(super) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Raises a high-water mark to `v`.
    pub(super) fn raise(c: &AtomicU64, v: usize) {
        c.fetch_max(u64::try_from(v).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}
