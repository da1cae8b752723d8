//! Checking for tests: on failure, write the evidence to files and say where.
//!
//! Files are named `lincheck-<model>-<pid>-<n>.history.jsonl` and `….witness.jsonl` in the
//! caller's directory (`n` counts failures within the process), so concurrent tests never
//! overwrite each other's evidence. Both are JSON lines that `lincheck check FILE` re-checks.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Model;
use crate::budget::{Budget, Stats};
use crate::error::{Dump, Error};
use crate::history::History;
use crate::verdict::{Verdict, undecided};

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// Checks `history`; if it is not shown linearizable, writes the history (and the witness of a
/// violation) into `dump_dir` (created if needed) and returns an error naming the files.
pub fn verify<M: Model>(
    history: &History<M>,
    budget: Budget,
    dump_dir: impl AsRef<Path>,
) -> Result<Stats, Error> {
    let verdict = M::check(history, budget);
    if let Verdict::Linearizable(stats) = verdict {
        return Ok(stats);
    }
    let dir = dump_dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let n = FAILURES.fetch_add(1, Ordering::Relaxed);
    let stem = format!("lincheck-{}-{}-{n}", M::NAME, std::process::id());
    let history_file = dir.join(format!("{stem}.history.jsonl"));
    history.write_jsonl(&history_file)?;
    match verdict {
        Verdict::Violation(w) => {
            let witness_file = dir.join(format!("{stem}.witness.jsonl"));
            w.history.write_jsonl(&witness_file)?;
            let dump = Some(Dump {
                history: history_file,
                witness: Some(witness_file),
            });
            Err(Error::NotLinearizable {
                report: w.to_string(),
                dump,
            })
        }
        Verdict::Undecided(stats) | Verdict::Linearizable(stats) => {
            let dump = Some(Dump {
                history: history_file,
                witness: None,
            });
            Err(Error::Undecided {
                report: undecided(&stats),
                dump,
            })
        }
    }
}

/// [`verify`], panicking with the error's message (witness and file names) on failure.
#[track_caller]
pub fn assert_linearizable<M: Model>(
    history: &History<M>,
    budget: Budget,
    dump_dir: impl AsRef<Path>,
) -> Stats {
    match verify(history, budget, dump_dir) {
        Ok(stats) => stats,
        Err(e) => panic!("{e}"),
    }
}
