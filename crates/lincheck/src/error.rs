//! The crate's one error type.
//!
//! Every fallible function returns [`Error`]. Parse errors always name the input and the
//! 1-based line of the offending record; a failed check names the files it dumped (if any), so a
//! test failure message is enough to find and re-run the evidence (`lincheck check FILE`).

use std::fmt;
use std::path::PathBuf;

/// Files written when a check fails (see [`crate::verify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump {
    /// The whole checked history, as JSON lines.
    pub history: PathBuf,
    /// The minimal non-linearizable sub-history, as JSON lines (absent when undecided).
    pub witness: Option<PathBuf>,
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "history written to {}", self.history.display())?;
        if let Some(witness) = &self.witness {
            write!(f, ", witness to {}", witness.display())?;
        }
        Ok(())
    }
}

fn dump_note(dump: &Option<Dump>) -> String {
    dump.as_ref().map(|d| format!(" ({d})")).unwrap_or_default()
}

/// Everything that can go wrong reading, writing or checking a history.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a JSON-lines history is malformed.
    #[error("{source_name}:{line}: {message}")]
    Parse {
        /// The file name (or `<input>` for text parsed from memory).
        source_name: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// An entry pushed into a [`crate::History`] is inconsistent (e.g. completes before it was
    /// invoked, or has a result but no completion time).
    #[error("operation #{index}: {message}")]
    Invalid {
        /// The 0-based position the entry would have had in the history.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The history is not linearizable; `report` is the rendered witness.
    #[error("history is not linearizable{}\n{report}", dump_note(dump))]
    NotLinearizable {
        /// The rendered minimal witness and its explanation.
        report: String,
        /// Where the history and the witness were written, if they were.
        dump: Option<Dump>,
    },
    /// The search budget ran out before a decision; callers must treat this as a failure.
    #[error("linearizability undecided: {report}{}", dump_note(dump))]
    Undecided {
        /// Which limit ran out and how far the search got.
        report: String,
        /// Where the history was written, if it was.
        dump: Option<Dump>,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
