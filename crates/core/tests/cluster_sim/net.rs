//! The network: one FIFO channel per (client, manager shard) and direction, as RC QPs are
//! FIFO per QP. Every message gets its own random delay, but never overtakes the one before
//! it on its channel (a slow message holds up the ones behind it); messages on different
//! channels reorder freely. A channel belongs to one connection (`conn`): when a connection
//! breaks, everything in flight on it is lost, and a message of an old connection that is
//! still queued is dropped on delivery.

use patronus_core::proto::messages::{Reply, Request};
use std::collections::VecDeque;

/// What travels.
#[derive(Clone, Copy, Debug)]
pub enum Body {
    /// Client → node.
    Request(Request),
    /// Node → client.
    Reply(Reply),
}

/// One message.
#[derive(Clone, Copy, Debug)]
pub struct Msg {
    /// Delivery time (node clock, µs).
    pub at: u64,
    /// The client slot.
    pub slot: usize,
    /// The shard (control channel).
    pub shard: usize,
    /// The client's connection (session) it was sent on.
    pub conn: u64,
    /// Wire request id.
    pub wire: u64,
    pub body: Body,
}

/// All channels.
pub struct Net {
    shards: usize,
    /// Index: (slot * shards + shard) * 2 + (0 up, 1 down).
    queues: Vec<VecDeque<Msg>>,
    /// Messages sent, for the statistics.
    pub sent: u64,
}

impl Net {
    pub fn new(slots: usize, shards: usize) -> Self {
        Net {
            shards,
            queues: vec![VecDeque::new(); slots * shards * 2],
            sent: 0,
        }
    }

    fn index(&self, slot: usize, shard: usize, down: bool) -> usize {
        (slot * self.shards + shard) * 2 + usize::from(down)
    }

    /// Queues `msg` to arrive `delay` µs after `now`, behind everything on its channel.
    pub fn send(&mut self, now: u64, delay: u64, mut msg: Msg) {
        let down = matches!(msg.body, Body::Reply(_));
        let q = &mut self.queues[(msg.slot * self.shards + msg.shard) * 2 + usize::from(down)];
        let last = q.back().map_or(0, |m| m.at);
        msg.at = (now + delay.max(1)).max(last);
        q.push_back(msg);
        self.sent += 1;
    }

    /// The earliest delivery time.
    pub fn next_at(&self) -> Option<u64> {
        self.queues
            .iter()
            .filter_map(|q| q.front().map(|m| m.at))
            .min()
    }

    /// Takes every message due at `now`, in delivery order (ties: channel order), each
    /// channel in FIFO order.
    pub fn due(&mut self, now: u64, out: &mut Vec<Msg>) {
        loop {
            let mut best: Option<(u64, usize)> = None;
            for (i, q) in self.queues.iter().enumerate() {
                if let Some(m) = q.front()
                    && m.at <= now
                    && best.is_none_or(|(at, _)| m.at < at)
                {
                    best = Some((m.at, i));
                }
            }
            let Some((_, i)) = best else { return };
            out.extend(self.queues[i].pop_front());
        }
    }

    /// The connection of client `slot` broke (a lost message, a crash, a node restart):
    /// everything in flight on its channels, both ways, is lost.
    pub fn break_client(&mut self, slot: usize) {
        for shard in 0..self.shards {
            for down in [false, true] {
                let i = self.index(slot, shard, down);
                self.queues[i].clear();
            }
        }
    }
}
