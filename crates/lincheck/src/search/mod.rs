//! The search: Lowe's just-in-time linearization (after Wing & Gong), with a memo of visited
//! states, as in Porcupine.
//!
//! The call and return events of the operations with a known result are sorted by time (calls
//! before returns at equal times, so touching intervals overlap) and threaded on a doubly
//! linked list; the calls of operations with an unknown result are on a second list, sorted by
//! invocation. The candidates to take effect next are the known calls before the first return
//! (the *frontier*: the earliest completion of an operation not yet linearized) and then the
//! unknown calls invoked by the frontier. The search tries them in that order (known ones first,
//! so unknown ones are applied only when nothing else works): it linearizes a candidate if the
//! model accepts it and the resulting (linearized set, state) pair is new, lifts its events out
//! of the lists and starts again; when no candidate is left it backtracks: undoes the most
//! recent linearization and tries the candidate after it.
//!
//! A *read* (an operation that changes nothing given its result, such as a `get`) that the
//! model accepts now is linearized now, without trying anything else first: any linearization
//! from here can be rearranged to put it first (it is a candidate, so nothing must precede it,
//! and moving it earlier changes no state). This removes the branching over which of many
//! concurrent reads go first.
//!
//! A model may also mark an unknown operation *eager* in a state (an unknown pop when the
//! front item can only ever leave through an unknown pop): it then goes first in the same way.
//! Conversely it may mark a known operation *deferrable* (pushing an item that no known pop
//! returns): it is then tried only when it is due.
//!
//! Operations of one *class* (the same operation with the same result, so the same effect in
//! every state) are interchangeable, which prunes: among known candidates of a class only the
//! one that completes first is tried (if a later-due one went first and the first-due later,
//! swapping them keeps real-time order); among unknown ones only the earliest-invoked one not
//! yet applied (whatever a later one does, the earlier one, available too, could do instead).
//!
//! Invariants:
//! - the lists hold exactly the events of the operations not yet linearized, in time order;
//! - within a class, the applied operations are the earliest-invoked ones;
//! - `stack` holds the linearized operations in linearization order, with what it takes to
//!   undo each; the machine's state is the initial state with them applied;
//! - `set_fp` is the Zobrist fingerprint of the linearized set;
//! - an operation whose result is unknown has no return event: it never forces a
//!   backtrack, and it may stay unlinearized, which is the same as taking effect after every
//!   other operation (where nobody can observe it). So the history is linearizable as soon as
//!   every operation with a known result is linearized;
//! - a *repeatable* operation (the shrinker's context, see `engine`) need not take effect and
//!   may take effect any number of times within its interval: applying it never lifts it from
//!   the list nor enters the linearized set, so only the model state changes (the memo still
//!   bounds the search). Its completion, if any, is a deadline against `clock`, the latest
//!   invocation among the other linearized operations (which the linearized set determines,
//!   so the memo stays exact; ignoring repeatable ones there only makes it more permissive).

mod jit;
mod links;

pub(crate) use jit::search;

/// A sequential model with its state, applied and undone in place.
pub(crate) trait Machine {
    /// What it takes to undo one applied operation.
    type Undo;
    /// Applies operation `op` (an index the machine knows) if the model allows it in the
    /// current state with its recorded result (any result if unknown).
    fn apply(&mut self, op: usize) -> Option<Self::Undo>;
    /// Whether `op`, with its recorded result, never changes the state.
    fn is_read(&self, op: usize) -> bool;
    /// Whether the unknown operation `op`, if it is a candidate and the model accepts it now,
    /// may be applied now without trying anything else first (some linearization from here
    /// applies it next, whenever there is one at all).
    fn eager(&self, _op: usize) -> bool {
        false
    }
    /// Whether the known operation `op` may wait, in the current state, until it is due (its
    /// return is the first one left): some linearization from here places it then, whenever
    /// there is one at all.
    fn deferrable(&self, _op: usize) -> bool {
        false
    }
    /// Undoes the most recent `apply`.
    fn undo(&mut self, undo: Self::Undo);
    /// The fingerprint of the current state.
    fn fingerprint(&self) -> u128;
}

/// An operation's interval; `complete` is `None` when its result is unknown.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) invoke: u64,
    pub(crate) complete: Option<u64>,
    /// May take effect any number of times, none required (until `complete`, if set: then
    /// not after anything invoked later).
    pub(crate) repeat: bool,
    /// Operations of one class have the same effect (and result, if known).
    pub(crate) class: Option<u64>,
}

impl Span {
    /// An operation as recorded.
    pub(crate) fn once(invoke: u64, complete: Option<u64>) -> Self {
        Span {
            invoke,
            complete,
            repeat: false,
            class: None,
        }
    }

    /// Whether it must take effect (its result is known and it is not repeatable).
    pub(crate) fn known(&self) -> bool {
        self.complete.is_some() && !self.repeat
    }

    /// The same, in an equivalence class.
    pub(crate) fn in_class(self, class: u64) -> Self {
        Span {
            class: Some(class),
            ..self
        }
    }
}

/// The answer of one search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    Linearizable,
    /// Not linearizable; every attempt got stuck at a completion no later than this *horizon*
    /// (so the history truncated there fails too, see `engine`).
    Violation(u64),
    Exhausted,
}
