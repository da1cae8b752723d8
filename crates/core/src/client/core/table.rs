//! The two halves of what the client has in flight: calls (what the application asked for,
//! keyed by the id it was handed) and sends (what went on the wire, keyed by wire request id,
//! with the answers each still owes). A call has at most one send it waits for at a time; a
//! send outlives its call while answers are owed (a retry's duplicate, a grant that arrives
//! after its call timed out), so every answer that comes is recognised and accounted for.

use crate::client::error::ClientError;
use crate::proto::messages::{Access, Mode, Reply, Request};
use rnic::Timestamp;
use std::time::Duration;

/// What a call's outcome becomes when it is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The reply as it is.
    Reply,
    /// A permission with this access and mode whose lease counts from `sent` (an allocation
    /// or an acquisition).
    Grant {
        /// Access asked for.
        access: Access,
        /// Mode asked for.
        mode: Mode,
        /// The lease clock's time before the first send.
        sent: Timestamp,
    },
}

/// Where a call is.
#[derive(Debug)]
pub(super) enum CallState {
    /// Waiting for a receive slot on its channel (every one is owed an answer).
    Queued,
    /// Sent; waiting for the answer to this wire id.
    Sent(u64),
    /// Refused as overloaded; sent again (under a new id) at this time.
    Backoff(Timestamp),
    /// Ended; the outcome waits to be taken.
    Done(Result<Reply, ClientError>),
}

/// One operation the application asked for (see the module docs).
#[derive(Debug)]
pub(super) struct Call {
    pub(super) owner: Owner,
    /// The logical client that started it ([`super::ClientCore::start_for`]).
    pub(super) caller: u16,
    /// The request as asked (the lease slack is added to each send).
    pub(super) request: Request,
    pub(super) state: CallState,
    /// The channel its next send goes to.
    pub(super) channel: usize,
    /// Channels tried so far (an allocation that a shard cannot serve tries the next; a
    /// request for every shard goes to each in turn).
    pub(super) tried: usize,
    /// When the call started (timer clock): back-off and waiting for a slot end by
    /// `started + rpc_timeout`.
    pub(super) started: Timestamp,
    /// The next back-off.
    pub(super) backoff: Duration,
}

/// What a send's next answer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The call with this id waits for it.
    Call(u64),
    /// Its call gave up (timed out): a grant that comes is handed back (revoked, and freed if
    /// it allocated).
    Orphaned,
    /// Nobody: the first answer is expected and dropped (a hand-back's revoke).
    Detached,
    /// Answered already: later copies are duplicates (strays).
    Answered,
}

/// One request on the wire (see the module docs).
#[derive(Debug)]
pub(super) struct Send {
    pub(super) channel: usize,
    /// As it went on the wire.
    pub(super) request: Request,
    pub(super) target: Target,
    /// A replayed copy's call (a tamper helper's): takes the answer after `target`'s.
    pub(super) replay: Option<u64>,
    /// Answers still owed: one per copy sent (a retry owes a second).
    pub(super) owed: u32,
    /// Lease clock at the first copy (the round trip the lease policy learns from).
    pub(super) sent_lease: Timestamp,
    /// A retry goes out then (once), if no answer came.
    pub(super) retry_at: Option<Timestamp>,
    /// Its call gives up then.
    pub(super) deadline: Option<Timestamp>,
    /// Whether its round trip is a control round trip the lease policy may learn from.
    pub(super) measures: bool,
}

/// A control channel's credits and request ids.
#[derive(Clone, Copy, Debug)]
pub(super) struct Channel {
    /// Receive slots: answers that may be owed at once.
    pub(super) slots: u32,
    /// Answers owed now.
    pub(super) owed: u32,
    pub(super) next_id: u64,
    pub(super) step: u64,
}

impl Channel {
    pub(super) fn new(slots: u32, first: u64, step: u64) -> Self {
        Channel {
            slots: slots.max(1),
            owed: 0,
            next_id: first,
            step: step.max(1),
        }
    }

    /// Ids from now on are `first + i * step` (the next such id not below those used).
    pub(super) fn use_ids(&mut self, first: u64, step: u64) {
        let step = step.max(1);
        let next = self.next_id.max(first);
        self.next_id = next + (first % step + step - next % step) % step;
        self.step = step;
    }

    pub(super) fn has_credit(&self) -> bool {
        self.owed < self.slots
    }

    pub(super) fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += self.step;
        id
    }
}
