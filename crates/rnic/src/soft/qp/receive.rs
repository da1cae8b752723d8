//! The receive side of a QP as its responder sees it: the QP's own receive queue — whose
//! receives a managed queue yields only below its enable limit (cross-channel RECV_ENABLE) —
//! or a shared receive queue.

use super::responder::RecvSource;
use super::responder::ResponderState;
use crate::soft::queues::SoftSrq;
use crate::verbs::{Psn, RecvWr};
use std::collections::VecDeque;

/// The responder core and the QP's own receive queue (the QP's `rx` lock).
pub(super) struct Rx {
    pub(super) responder: ResponderState,
    pub(super) recv_queue: VecDeque<RecvWr>,
    /// Receives consumed since creation or reset: the index of the queue's head.
    pub(super) recv_taken: u64,
    /// A managed receive queue's enable limit (receives below it may be consumed).
    pub(super) recv_enabled: Option<u64>,
}

impl Rx {
    pub(super) fn new(recv_psn: Psn, managed: bool) -> Self {
        Rx {
            responder: ResponderState::new(recv_psn),
            recv_queue: VecDeque::new(),
            recv_taken: 0,
            recv_enabled: managed.then_some(0),
        }
    }
}

/// A shared receive queue.
pub(super) struct SrqSource<'a>(pub(super) &'a SoftSrq);
impl RecvSource for SrqSource<'_> {
    fn take(&mut self) -> Option<RecvWr> {
        self.0.inner.queue.lock().pop_front()
    }
    fn next_capacity(&mut self) -> Option<usize> {
        let queue = self.0.inner.queue.lock();
        queue.front().map(recv_capacity)
    }
}
/// The QP's own receive queue; a managed one yields only receives below its enable limit.
pub(super) struct QueueSource<'a> {
    pub(super) queue: &'a mut VecDeque<RecvWr>,
    pub(super) taken: &'a mut u64,
    pub(super) enabled: Option<u64>,
}
impl QueueSource<'_> {
    fn head_enabled(&self) -> bool {
        self.enabled.is_none_or(|limit| *self.taken < limit)
    }
}
impl RecvSource for QueueSource<'_> {
    fn take(&mut self) -> Option<RecvWr> {
        if !self.head_enabled() {
            return None;
        }
        let wr = self.queue.pop_front()?;
        *self.taken += 1;
        Some(wr)
    }
    fn next_capacity(&mut self) -> Option<usize> {
        if !self.head_enabled() {
            return None;
        }
        self.queue.front().map(recv_capacity)
    }
}

/// Bytes a receive can take.
fn recv_capacity(wr: &RecvWr) -> usize {
    wr.sge.map_or(0, |s| s.length as usize)
}
