//! The register machine of one key.
//!
//! Invariants: `state` is the register (a value id, `None` when absent). Look-ahead, for
//! values with one writer (and readers with known results): once such a value is overwritten
//! it never comes back, so overwriting it while some read of it is still to be linearized
//! dooms that read; such a write is refused at once rather than found out later. `waiting`
//! counts those reads per value, `sole` marks the values with one writer (the initial value
//! counts as a write; a repeatable context write never makes its value sole).

use crate::fingerprint::{DOMAIN_KV, mix128};
use crate::search::Machine;

/// An interned operation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kop {
    Put(u32),
    Insert(u32),
    Update(u32),
    Delete,
    Get,
}

/// An interned result; `None` in [`Register::ops`] means unknown.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kres {
    Inserted,
    Updated,
    Exists,
    Absent,
    Deleted,
    Value(u32),
}

/// One key's register.
#[derive(Debug, Default)]
pub(super) struct Register {
    pub(super) ops: Vec<(Kop, Option<Kres>)>,
    pub(super) state: Option<u32>,
    /// Per value id: known reads of it not yet linearized.
    waiting: Vec<u32>,
    /// Per value id: written by one operation only (or only initially).
    sole: Vec<bool>,
}

impl Register {
    /// The machine for `ops` from the initial state `state`; the ops from `repeatable` on may
    /// take effect any number of times.
    pub(super) fn new(
        ops: Vec<(Kop, Option<Kres>)>,
        state: Option<u32>,
        repeatable: usize,
    ) -> Self {
        let mut register = Register {
            ops,
            state,
            waiting: Vec::new(),
            sole: Vec::new(),
        };
        register.look_ahead(repeatable);
        register
    }

    /// Fills in the look-ahead.
    fn look_ahead(&mut self, repeatable: usize) {
        let ids = self.ops.iter().filter_map(|&(kop, res)| match (kop, res) {
            (_, Some(Kres::Value(v))) | (Kop::Put(v) | Kop::Insert(v) | Kop::Update(v), _)
                if v != JUNK =>
            {
                Some(v as usize + 1)
            }
            _ => None,
        });
        let n = ids
            .chain(self.state.map(|v| v as usize + 1))
            .max()
            .unwrap_or(0);
        let mut writers = vec![0u32; n];
        self.waiting = vec![0; n];
        if let Some(v) = self.state {
            writers[v as usize] += 1;
        }
        for (i, &(kop, res)) in self.ops.iter().enumerate() {
            match (kop, res) {
                (Kop::Put(v) | Kop::Insert(v) | Kop::Update(v), _) if v != JUNK => {
                    writers[v as usize] += if i < repeatable { 1 } else { 2 };
                }
                (Kop::Get, Some(Kres::Value(v))) => self.waiting[v as usize] += 1,
                _ => {}
            }
        }
        self.sole = writers.iter().map(|&w| w == 1).collect();
    }

    /// Whether leaving the current value dooms a read still waiting for it.
    fn dooms(&self) -> bool {
        self.state.is_some_and(|v| {
            let v = v as usize;
            self.sole.get(v).copied().unwrap_or(false) && self.waiting[v] > 0
        })
    }
}

/// The value id standing for "some value no kept read observes" (see `decide`).
pub(super) const JUNK: u32 = u32::MAX;

/// The register's next state after `op` with result `res` (any result if `None`), or `None`
/// if the model does not allow it.
pub(super) fn step(state: Option<u32>, op: Kop, res: Option<Kres>) -> Option<Option<u32>> {
    use Kres as R;
    let present = state.is_some();
    match (op, res) {
        (Kop::Put(v), None) => Some(Some(v)),
        (Kop::Put(v), Some(R::Inserted)) if !present => Some(Some(v)),
        (Kop::Put(v), Some(R::Updated)) if present => Some(Some(v)),
        (Kop::Insert(v), None) => Some(state.or(Some(v))),
        (Kop::Insert(v), Some(R::Inserted)) if !present => Some(Some(v)),
        (Kop::Insert(_), Some(R::Exists)) if present => Some(state),
        (Kop::Update(v), None) => Some(state.map(|_| v)),
        (Kop::Update(v), Some(R::Updated)) if present => Some(Some(v)),
        (Kop::Update(_), Some(R::Absent)) if !present => Some(state),
        (Kop::Delete, None) => Some(None),
        (Kop::Delete, Some(R::Deleted)) if present => Some(None),
        (Kop::Delete, Some(R::Absent)) if !present => Some(state),
        (Kop::Get, None) => Some(state),
        (Kop::Get, Some(R::Value(v))) if state == Some(v) => Some(state),
        (Kop::Get, Some(R::Absent)) if !present => Some(state),
        _ => None,
    }
}

impl Machine for Register {
    /// The previous state, and the value a read waited for.
    type Undo = (Option<u32>, Option<u32>);

    fn apply(&mut self, op: usize) -> Option<Self::Undo> {
        let (kop, res) = self.ops[op];
        let next = step(self.state, kop, res)?;
        if next != self.state && self.dooms() {
            return None;
        }
        let read = match (kop, res) {
            (Kop::Get, Some(Kres::Value(v))) => {
                self.waiting[v as usize] -= 1;
                Some(v)
            }
            _ => None,
        };
        Some((std::mem::replace(&mut self.state, next), read))
    }

    fn is_read(&self, op: usize) -> bool {
        matches!(
            self.ops[op],
            (Kop::Get, Some(_))
                | (Kop::Insert(_), Some(Kres::Exists))
                | (Kop::Update(_), Some(Kres::Absent))
                | (Kop::Delete, Some(Kres::Absent))
        )
    }

    fn undo(&mut self, (state, read): Self::Undo) {
        self.state = state;
        if let Some(v) = read {
            self.waiting[v as usize] += 1;
        }
    }

    fn fingerprint(&self) -> u128 {
        mix128(DOMAIN_KV, self.state.map_or(0, |v| u64::from(v) + 1), 0)
    }
}
