//! `Lookup`: probe the key's two combined buckets, then validate the entries whose
//! fingerprint matches, lowest position first (of two entries of one key, the lower one is
//! the key's: see `insert`). A candidate whose block the probe read on a guess
//! (`race::guesses`) is judged from that read, without a validation batch.

use super::probe::{Probe, Probed, Snapshot};
use super::validate::{Validate, Verdict};
use super::{Stage, ready};
use crate::memory::RemoteMemory;
use crate::race::client::TableClient;
use crate::race::error::RaceError;
use crate::race::guesses::Guess;
use crate::race::hash::KeyHash;
use crate::race::layout::SlotAt;
use patronus_core::proto::messages::Access;
use std::task::Poll;

/// A lookup of one key: `Some(value)` or `None`.
#[derive(Debug)]
pub struct Lookup {
    key: Vec<u8>,
    h: KeyHash,
    state: State,
    attempts: u32,
}

#[derive(Debug)]
enum State {
    Probe(Probe),
    Check {
        snap: Snapshot,
        next: usize,
        v: Option<Validate>,
    },
    Done,
}

impl Lookup {
    /// A lookup of `key` in `t`'s table.
    pub fn new<M: RemoteMemory>(t: &TableClient<M>, key: &[u8]) -> Self {
        let h = KeyHash::of(key, t.root.config.seed);
        Lookup {
            key: key.to_vec(),
            h,
            state: State::Probe(Probe::guessing(h, Access::Read)),
            attempts: 0,
        }
    }

    /// Where the lookup is.
    pub fn stage<M: RemoteMemory>(&self, t: &TableClient<M>) -> Stage {
        match &self.state {
            State::Probe(_) => Stage::Probing,
            State::Check { v: Some(v), .. } if v.holds_right(t) => Stage::Reading,
            State::Check { .. } => Stage::Acquiring,
            State::Done => Stage::Done,
        }
    }

    /// One step (see the module docs of `ops`).
    pub fn step<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        mem: &mut M,
    ) -> Poll<Result<Option<Vec<u8>>, RaceError>> {
        match &mut self.state {
            State::Probe(p) => {
                let snap = match ready!(p.step(t, mem, None)) {
                    Probed::Snap(s) => s,
                    Probed::WriteFailed(e) => return Poll::Ready(Err(e.into())),
                };
                self.state = State::Check {
                    snap,
                    next: 0,
                    v: None,
                };
                Poll::Pending
            }
            State::Check { snap, next, v } => {
                if v.is_none() {
                    let cands = snap.candidates(self.h.fingerprint());
                    let Some(at) = cands.get(*next) else {
                        self.state = State::Done;
                        return Poll::Ready(Ok(None));
                    };
                    // The block read beside the buckets, if a guess named this entry.
                    if let Some(verdict) = snap.judged(*at, &self.key) {
                        let at = *at;
                        return self.judge(t, verdict, at);
                    }
                    *v = Some(Validate::new(*at, snap.subtable, Access::Read));
                }
                let Some(val) = v.as_mut() else {
                    return Poll::Pending;
                };
                let verdict = ready!(val.step(t, mem, &self.key, &self.h));
                let at = val.at;
                self.judge(t, verdict, at)
            }
            State::Done => Poll::Ready(Err(RaceError::Finished)),
        }
    }

    /// Acts on a candidate's verdict: the key's value, the next candidate, or a new probe.
    fn judge<M: RemoteMemory>(
        &mut self,
        t: &mut TableClient<M>,
        verdict: Verdict,
        at: SlotAt,
    ) -> Poll<Result<Option<Vec<u8>>, RaceError>> {
        let State::Check { snap, next, v } = &mut self.state else {
            return Poll::Ready(Err(RaceError::Finished));
        };
        match verdict {
            Verdict::Key(b) => {
                let subtable = snap.subtable;
                t.guesses.remember(self.h.primary, Guess { subtable, at });
                self.state = State::Done;
                Poll::Ready(Ok(Some(b.value)))
            }
            Verdict::Other => {
                *next += 1;
                *v = None;
                Poll::Pending
            }
            Verdict::Gone => {
                self.attempts += 1;
                t.stats.retries += 1;
                if self.attempts > t.opts.max_attempts {
                    return Poll::Ready(Err(RaceError::Contended {
                        attempts: self.attempts,
                    }));
                }
                self.state = State::Probe(Probe::new(self.h));
                Poll::Pending
            }
        }
    }
}
