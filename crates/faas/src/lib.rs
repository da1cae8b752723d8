//! Function-as-a-service on protected remote memory (the paper's §6.2): functions of a chain
//! run one after another in one warm container, share what they read from remote memory
//! through permissions the chain takes once, and hand their outputs on in remote memory.
//!
//! - [`chain`]: a chain is a sequence of functions; [`chain::run_chain`] runs one invocation:
//!   it **acquires every remote input once on bootstrap**, runs the functions with the
//!   intermediate data in the container's local memory, and **revokes on exit** (also when a
//!   function fails). Outputs are allocated in remote memory ([`chain::ChainCtx::output`])
//!   under a lease a few times the function's run time, for whoever consumes them next.
//! - [`runtime`]: containers are worker threads, each with its own connection to remote
//!   memory (made once: warm starts), pulling invocations from one queue, so a dispatcher
//!   keeps every container busy.
//! - [`apps`]: ServerlessBench TC4's applications.
//!
//! The crate uses remote memory only through [`patronus_ods::RemoteMemory`], so the same
//! functions run on Patronus and on the baselines.
//!
//! Invariants:
//! - A chain holds no permission after it ends: every right acquired on bootstrap is
//!   released on exit, and an output's allocation right is given up once written (consumers
//!   acquire their own).
//! - A function reaches remote memory only through the chain's inputs and its own outputs:
//!   [`chain::ChainCtx`] has no other door.

#![warn(missing_docs)]

pub mod apps;
pub mod chain;
mod error;
pub mod runtime;

pub use chain::{
    Chain, ChainCtx, ChainReport, Datum, Function, Input, Invocation, free, run_chain,
};
pub use error::FaasError;
pub use runtime::{Done, Runtime};
