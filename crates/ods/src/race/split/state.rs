//! The split's state machine: locking, the split rights and their renewal, and the
//! dispatch of the phases (`phases`).

use crate::memory::{Acquiring, RemoteMemory};
use crate::race::class::KeyClass;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::layout::Slot;
use crate::race::records::{Phase, SplitRecord};
use crate::race::stats::{RaceStats, SplitTime, ended};
use rnic::Timestamp;
use std::task::Poll;

/// How a split attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitOutcome {
    /// The subtable was split (by this client, or finished for a resizer that stopped).
    Split,
    /// Nothing to do: split already, or no split in progress (stray frozen slots thawed).
    NotNeeded,
    /// Another client holds the lock.
    Busy,
    /// This client's lock lease ran out (or a split right ended) mid-split: it stopped; the
    /// next lock holder finishes.
    LockLost,
}

/// What an entry of T is to the split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Unknown,
    /// Stays in T.
    Lower,
    /// Moves to T'.
    Upper,
    /// Names no valid block (freed): dropped.
    Dangling,
    /// Being classified: a right over its block is being acquired, or is held and its block
    /// not read yet.
    Reading,
}

#[derive(Debug)]
pub(super) enum State {
    /// Read T's lock object address.
    Locate,
    /// Take the lock (Lease: acquire it exclusively; Word: acquire the lock object).
    Lock,
    /// Word: CAS the lock word.
    TakeWord,
    /// Acquire the split rights over T and the directory.
    Rights,
    /// Read the record and T.
    Load,
    /// Write the record, then go on.
    Record(Box<State>),
    Freeze,
    Reload,
    Allocate,
    /// Mark T''s lock object as the new half of this split.
    MarkChild,
    /// Acquire a right over an existing T' (recovery).
    OpenNew,
    Classify,
    ReadBlocks,
    WriteNew,
    Publish,
    Depth,
    Flip,
    ReadNew,
    Thaw,
    /// Take a right over T''s lock object, then clear its `NewHalf` mark.
    ChildLock,
    /// A resumed `Thawing` split: read T''s mark before thawing anything.
    ChildCheck,
    ChildClear,
    Unlock,
    Done,
}

/// A split of one subtable (see the module docs); a step does at most one batch or one
/// control request (the classification's acquires are started and polled without waiting).
pub struct Split<M: RemoteMemory> {
    pub(super) subtable: u64,
    /// The depth the caller saw T at (`None`: only finish a split in progress).
    pub(super) expect: Option<u8>,
    pub(super) lock_addr: u64,
    /// Lease: the exclusive right. Word: a shared right over the lock object.
    pub(super) lock: Option<M::Region>,
    /// Word: the lock word is this client's.
    pub(super) held: bool,
    pub(super) tag: u64,
    pub(super) t_right: Option<M::Region>,
    pub(super) dir_right: Option<M::Region>,
    pub(super) new_right: Option<M::Region>,
    pub(super) record: SplitRecord,
    /// The phase last written to the lock object (or read from it).
    pub(super) recorded: Phase,
    /// Whether the record found was another resizer's split in progress.
    pub(super) resumed: bool,
    /// Only try the lock, never wait for it ([`Split::trying`]).
    pub(super) try_lock: bool,
    /// Undo instead of finishing (no memory for T').
    pub(super) rollback: Option<RaceError>,
    pub(super) slots: Vec<Slot>,
    pub(super) new_slots: Vec<Slot>,
    pub(super) class: Vec<Class>,
    /// The classification's rights over T's blocks.
    pub(super) blocks: Box<Blocks<M::Region>>,
    /// A right over T''s lock object (marking and unmarking it).
    pub(super) child: Option<M::Region>,
    /// The subtable turned out to be the new half of a split in progress: finish that one.
    pub(super) redirect: Option<u64>,
    pub(super) cursor: usize,
    /// Block rights that ended before their blocks were read (acquired again).
    pub(super) reacquired: u32,
    pub(super) state: State,
    pub(super) outcome: Option<Result<SplitOutcome, RaceError>>,
    /// How long it took so far (boxed: a split waits inside every writer's state).
    pub(super) timing: Box<Timing>,
}

/// The rights over T's blocks a split classifies T's entries with (boxed, as `Timing`: a
/// split waits inside every writer's state).
#[derive(Debug)]
pub(super) struct Blocks<R> {
    /// Rights over blocks of T's entries (by slot position), held and not read yet.
    pub(super) held: Vec<(u32, R)>,
    /// Acquires of such rights in flight (at most `CLASSIFY_IN_FLIGHT`).
    pub(super) pending: Vec<(u32, Acquiring<R>)>,
    /// No entry before this slot position is left to classify (`Class::Unknown`).
    pub(super) scan: usize,
}

impl<R> Default for Blocks<R> {
    fn default() -> Self {
        Blocks {
            held: Vec::new(),
            pending: Vec::new(),
            scan: 0,
        }
    }
}

/// A split's time so far.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Timing {
    /// When the first step ran, and when the last one began, in which phase (the time since
    /// is not in `time` yet).
    started: Option<(Timestamp, Timestamp, Phase)>,
    /// The client's counts when the first step ran.
    counted: RaceStats,
    /// Time and steps so far (a client keeps them once the split is done).
    pub(super) time: SplitTime,
}

impl<M: RemoteMemory> std::fmt::Debug for Split<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Split")
            .field("subtable", &format_args!("{:#x}", self.subtable))
            .field("phase", &self.record.phase)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> Split<M> {
    /// A split of `subtable`, which the caller found full at `depth`; `None` only finishes
    /// (or undoes) a split another resizer left in progress.
    pub fn new(t: &TableClient<M>, subtable: u64, depth: Option<u8>) -> Self {
        Split {
            subtable,
            expect: depth,
            lock_addr: 0,
            lock: None,
            held: false,
            tag: t.lock_tag(),
            t_right: None,
            dir_right: None,
            new_right: None,
            record: SplitRecord::IDLE,
            recorded: Phase::Idle,
            resumed: false,
            try_lock: false,
            rollback: None,
            slots: Vec::new(),
            new_slots: Vec::new(),
            class: Vec::new(),
            blocks: Box::default(),
            child: None,
            redirect: None,
            cursor: 0,
            reacquired: 0,
            state: State::Locate,
            outcome: None,
            timing: Box::default(),
        }
    }

    /// This split only tries the lock (with a lease lock): if someone holds it, the split
    /// ends `Busy` at once and the holder is left alone. For a writer that finds a split in its
    /// way: with Patronus, a waiting exclusive acquire makes the node refuse the holder's
    /// extensions, and a live split would be taken from its resizer.
    pub fn trying(mut self) -> Self {
        self.try_lock = true;
        self
    }

    /// The phase of the split as last recorded in the lock object (by this resizer, or by
    /// the one it took over from).
    pub fn phase(&self) -> Phase {
        self.recorded
    }

    /// The subtable being split (once a split of another subtable's new half turns into
    /// the parent's, the parent).
    pub fn subtable(&self) -> u64 {
        self.subtable
    }

    /// The keys the subtable claimed before the split — the writers that wait while it is
    /// frozen — from the moment the split read its depth (or the record of the split it
    /// finishes) until it records the split done; `None` outside that span.
    pub fn key_class(&self) -> Option<KeyClass> {
        match self.record.phase {
            Phase::Idle | Phase::NewHalf => None,
            _ => Some(KeyClass {
                depth: self.record.depth,
                suffix: self.record.suffix,
            }),
        }
    }

    /// Runs the split's next step (at most one batch or one control request — or, while it
    /// classifies T's entries, polls and starts acquires without waiting for their answers,
    /// as readers do): `Pending` while there is more to do, `Ready` with its [`SplitOutcome`] once it is over (a
    /// split whose lock lease ran out unlocks and ends as `LockLost`).
    pub fn step(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<SplitOutcome, RaceError>> {
        if self.timing.started.is_none() {
            self.timing.counted = t.stats;
        }
        let phase = self.record.phase;
        self.timing.account(mem.now(), phase);
        self.timing.time.steps += 1;
        t.split_awaiting = false;
        if !matches!(
            self.state,
            State::Locate | State::Lock | State::TakeWord | State::Done | State::Unlock
        ) {
            match self.renew(t, mem) {
                Ok(true) => {}
                Ok(false) => return Poll::Pending,
                Err(_) => return self.abandon(t, mem),
            }
        }
        let r = match std::mem::replace(&mut self.state, State::Done) {
            State::Locate => self.locate(t, mem),
            State::Lock => self.take_lock(t, mem),
            State::TakeWord => self.take_word(t, mem),
            State::Rights => self.take_rights(t, mem),
            State::Load => self.load(t, mem),
            State::Record(next) => self.write_record(t, mem, *next),
            State::Freeze => self.freeze(t, mem),
            State::Reload => self.reload(t, mem),
            State::Allocate => self.allocate(t, mem),
            State::MarkChild => self.mark_child(t, mem),
            State::ChildLock => self.child_lock(t, mem),
            State::ChildCheck => self.child_check(t, mem),
            State::ChildClear => self.child_clear(t, mem),
            State::OpenNew => self.open_new(t, mem),
            State::Classify => self.classify(t, mem),
            State::ReadBlocks => self.read_blocks(t, mem),
            State::WriteNew => self.write_new(t, mem),
            State::Publish => self.publish(t, mem),
            State::Depth => self.depth(t, mem),
            State::Flip => self.flip(t, mem),
            State::ReadNew => self.read_new(t, mem),
            State::Thaw => self.thaw(t, mem),
            State::Unlock => return self.unlock(t, mem),
            State::Done => {
                return Poll::Ready(self.outcome.take().unwrap_or(Err(RaceError::Finished)));
            }
        };
        match r {
            Ok(next) => {
                self.state = next;
                Poll::Pending
            }
            // A right of the split ended under it: it is late; stop without another write.
            Err(RaceError::Memory(e)) if ended(&e) => self.abandon(t, mem),
            Err(e) => {
                self.outcome = Some(Err(e));
                self.state = State::Unlock;
                Poll::Pending
            }
        }
    }

    /// Ends the attempt with `outcome` (after unlocking).
    pub(super) fn finish(&mut self, outcome: Result<SplitOutcome, RaceError>) -> State {
        self.outcome = Some(outcome);
        State::Unlock
    }
}

impl Timing {
    /// Adds the time since the last step began to the phase the split was in when it began;
    /// `phase` is the one it is in now.
    fn account(&mut self, now: Timestamp, phase: Phase) {
        let Some((_, last, then)) = self.started.as_mut() else {
            self.started = Some((now, now, phase));
            return;
        };
        let d = now.since(*last);
        let was = std::mem::replace(then, phase);
        *last = now;
        let t = &mut self.time;
        match was {
            Phase::Idle | Phase::NewHalf => t.lock += d,
            Phase::Freezing => t.freeze += d,
            Phase::Copying => t.copy += d,
            Phase::Publishing => t.publish += d,
            Phase::Thawing => t.thaw += d,
        }
    }

    /// The split's time once it is over (as of `now`, in `phase`; `stats`: its client's
    /// counts now), as its client keeps it.
    pub(super) fn finish(&mut self, now: Timestamp, phase: Phase, stats: &RaceStats) -> SplitTime {
        self.account(now, phase);
        let total = self
            .started
            .map_or_else(Default::default, |(s, _, _)| now.since(s));
        SplitTime {
            total,
            counts: stats.since(&self.counted),
            ..self.time
        }
    }
}
