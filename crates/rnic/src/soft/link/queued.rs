//! A deterministic in-process network: packets wait in a queue until [`QueuedNetwork::step`]
//! releases those due at `now`. Faults — delay, drop, reorder, kill — come from a seeded
//! generator, so a test replays exactly.

use super::{Link, LinkDown, LinkEnd, PacketSink};
use crate::soft::wire::Packet;
use crate::verbs::{Clock, Timestamp};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

/// Faults applied to every packet transmitted on the network.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Delivery delay, uniform in `[min, max]` µs.
    pub delay_us: (u64, u64),
    /// Probability that a packet is silently dropped.
    pub drop_probability: f64,
    /// Probability that a packet overtakes the one queued before it on the same link.
    pub reorder_probability: f64,
    /// Drop exactly the next `n` packets (whatever the probabilities).
    pub drop_next: u32,
}

#[derive(Debug)]
struct InFlight {
    due: Timestamp,
    seq: u64,
    link: u64,
    to: Weak<dyn PacketSink>,
    packet: Packet<Vec<u8>>,
}

#[derive(Debug)]
struct NetState {
    rng: StdRng,
    seq: u64,
    next_link: u64,
    faults: Faults,
    in_flight: Vec<InFlight>,
    killed: HashSet<u64>,
    /// Both ends of every live connection, so a kill can tell them.
    ends: HashMap<u64, [Weak<dyn PacketSink>; 2]>,
    /// Sinks to tell about a kill at the next step.
    down: Vec<(Weak<dyn PacketSink>, LinkEnd)>,
    delivered: u64,
    dropped: u64,
}

/// The queued network shared by every [`QueuedLink`] made from it.
#[derive(Debug)]
pub struct QueuedNetwork {
    clock: Arc<dyn Clock>,
    state: Mutex<NetState>,
}

/// One direction of a connection on a [`QueuedNetwork`].
#[derive(Debug)]
pub struct QueuedLink {
    net: Arc<QueuedNetwork>,
    /// Connection id (both directions share it).
    conn: u64,
    peer: Weak<dyn PacketSink>,
}

impl QueuedNetwork {
    /// A network timed by `clock` with faults drawn from `seed`.
    pub fn new(clock: Arc<dyn Clock>, seed: u64) -> Arc<Self> {
        Arc::new(QueuedNetwork {
            clock,
            state: Mutex::new(NetState {
                rng: StdRng::seed_from_u64(seed),
                seq: 0,
                next_link: 1,
                faults: Faults::default(),
                in_flight: Vec::new(),
                killed: HashSet::new(),
                ends: HashMap::new(),
                down: Vec::new(),
                delivered: 0,
                dropped: 0,
            }),
        })
    }

    /// Replaces the fault configuration.
    pub fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    /// Makes the two directions of a new connection between `a` and `b`.
    pub fn connect(
        self: &Arc<Self>,
        a: Weak<dyn PacketSink>,
        b: Weak<dyn PacketSink>,
    ) -> (QueuedLink, QueuedLink) {
        let mut st = self.state.lock();
        let conn = st.next_link;
        st.next_link += 1;
        st.ends.insert(conn, [a.clone(), b.clone()]);
        (
            QueuedLink {
                net: self.clone(),
                conn,
                peer: b,
            },
            QueuedLink {
                net: self.clone(),
                conn,
                peer: a,
            },
        )
    }

    /// Kills every connection: queued packets vanish, later transmits fail, and both ends
    /// learn at the next [`step`](Self::step).
    pub fn kill_all(&self) {
        let mut st = self.state.lock();
        let conns: Vec<u64> = (1..st.next_link).collect();
        for c in conns {
            st.killed.insert(c);
        }
        st.in_flight.clear();
        // Both ends of every connection still up learn, whether or not a packet was in flight.
        let ends: Vec<_> = st
            .ends
            .drain()
            .flat_map(|(_, e)| e)
            .map(|e| (e, LinkEnd::Failed))
            .collect();
        st.down.extend(ends);
    }

    /// Kills the connections that have a packet in flight right now (a link that dies under a
    /// packet: a request or response lost with its connection); the rest stay up. Both ends of
    /// each learn at the next [`step`](Self::step). Returns how many connections died.
    pub fn kill_in_flight(&self) -> usize {
        let mut st = self.state.lock();
        let conns: HashSet<u64> = st.in_flight.iter().map(|f| f.link).collect();
        for &c in &conns {
            st.killed.insert(c);
            if let Some(ends) = st.ends.remove(&c) {
                st.down
                    .extend(ends.into_iter().map(|e| (e, LinkEnd::Failed)));
            }
        }
        st.in_flight.retain(|f| !conns.contains(&f.link));
        conns.len()
    }

    /// When the earliest packet in flight is due (`None`: none in flight). A driver of a
    /// virtual clock moves the clock there and [`step`](Self::step)s, so packets spend exactly
    /// their delay on the wire and no virtual time passes while nothing is in flight.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.state.lock().in_flight.iter().map(|f| f.due).min()
    }

    /// Packets waiting for delivery.
    pub fn in_flight(&self) -> usize {
        self.state.lock().in_flight.len()
    }

    /// (delivered, dropped) counters.
    pub fn counters(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.delivered, st.dropped)
    }

    /// Delivers every packet due at or before `now` (including responses they trigger with
    /// zero delay), in due order. Returns how many were delivered.
    pub fn step(&self, now: Timestamp) -> usize {
        let mut count = 0;
        loop {
            let (batch, down) = {
                let mut st = self.state.lock();
                let down = std::mem::take(&mut st.down);
                let mut due: Vec<InFlight> = Vec::new();
                let mut i = 0;
                while i < st.in_flight.len() {
                    if st.in_flight[i].due <= now {
                        due.push(st.in_flight.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
                due.sort_by_key(|f| (f.due, f.seq));
                st.delivered += due.len() as u64;
                (due, down)
            };
            for (sink, end) in down.iter().filter_map(|(s, e)| Some((s.upgrade()?, *e))) {
                sink.link_down(end);
            }
            if batch.is_empty() {
                return count;
            }
            for f in batch {
                if let Some(sink) = f.to.upgrade() {
                    let p = &f.packet;
                    sink.deliver(&borrow(p));
                    count += 1;
                }
            }
        }
    }
}

fn borrow(p: &Packet<Vec<u8>>) -> Packet<&[u8]> {
    p.as_borrowed()
}

impl Link for QueuedLink {
    fn transmit(&self, packet: &Packet<&[u8]>) -> Result<(), LinkDown> {
        let now = self.net.clock.now();
        let mut st = self.net.state.lock();
        if st.killed.contains(&self.conn) {
            return Err(LinkDown);
        }
        if st.faults.drop_next > 0 {
            st.faults.drop_next -= 1;
            st.dropped += 1;
            return Ok(());
        }
        let faults = st.faults.clone();
        if faults.drop_probability > 0.0 && st.rng.random_bool(faults.drop_probability.min(1.0)) {
            st.dropped += 1;
            return Ok(());
        }
        let (lo, hi) = faults.delay_us;
        let delay = if hi > lo {
            st.rng.random_range(lo..=hi)
        } else {
            lo
        };
        st.seq += 1;
        let mut item = InFlight {
            due: now.plus_us(delay),
            seq: st.seq,
            link: self.conn,
            to: self.peer.clone(),
            packet: packet.to_owned_packet(),
        };
        let reorder = faults.reorder_probability > 0.0
            && st.rng.random_bool(faults.reorder_probability.min(1.0));
        let me = self.peer.as_ptr() as *const ();
        if !reorder {
            // A link delivers in order, as a real one: a packet sent after a slower one (sent
            // under a larger delay) waits behind it. Only the reorder fault overtakes.
            let behind = st
                .in_flight
                .iter()
                .filter(|f| f.link == self.conn && f.to.as_ptr() as *const () == me)
                .map(|f| f.due)
                .max();
            if let Some(last) = behind {
                item.due = item.due.max(last);
            }
        }
        if reorder {
            // Overtake the latest packet queued on this connection in the same direction.
            if let Some(prev) = st
                .in_flight
                .iter_mut()
                .filter(|f| f.link == self.conn && f.to.as_ptr() as *const () == me)
                .max_by_key(|f| (f.due, f.seq))
            {
                std::mem::swap(&mut prev.due, &mut item.due);
                std::mem::swap(&mut prev.seq, &mut item.seq);
            }
        }
        st.in_flight.push(item);
        Ok(())
    }

    fn close(&self) {
        let mut st = self.net.state.lock();
        if st.killed.insert(self.conn) {
            let conn = self.conn;
            st.ends.remove(&conn);
            st.in_flight.retain(|f| f.link != conn);
            st.down.push((self.peer.clone(), LinkEnd::Closed));
        }
    }
}
