//! Why an invocation failed.

use patronus_ods::MemError;

/// Why a chain (or a function of it) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaasError {
    /// Remote memory refused or failed (an input the container may not read, a lease that
    /// ended, an exhausted pool).
    #[error("remote memory: {0}")]
    Memory(#[from] MemError),
    /// The invocation's input is malformed or out of range.
    #[error("bad input: {0}")]
    BadInput(String),
    /// A function asked for an input the invocation does not have.
    #[error("no input {0}")]
    NoInput(usize),
    /// A function asked for bytes outside the input it was handed (refused before anything
    /// reaches the NIC, which would refuse it too).
    #[error("bytes {offset}..{end} are outside input {input} ({len} bytes)")]
    OutOfBounds {
        /// The input.
        input: usize,
        /// The first byte asked for.
        offset: u64,
        /// One past the last.
        end: u64,
        /// The input's length.
        len: u64,
    },
    /// The chain's name is not registered.
    #[error("no chain called {0:?}")]
    NoChain(String),
    /// A structure in remote memory is full.
    #[error("{0} is full")]
    Full(&'static str),
    /// The runtime has stopped (a container failed to connect, or it was shut down).
    #[error("runtime stopped: {0}")]
    Stopped(String),
}
