//! Process-level scenario runs of `patronus kv` against `patronus serve` (issue 25: "no
//! acknowledged write is ever lost"), each invocation a process as a user runs it, the whole
//! history checked for linearizability by `lincheck`.
//!
//! - `faults`: loops of put/get/del on a few hot keys and of fresh inserts on a table that
//!   splits continuously, while a seeded schedule SIGKILLs and SIGSTOPs `kv` processes,
//!   SIGSTOPs `serve`, and restarts it (its memory is volatile: each life is an epoch whose
//!   table starts empty);
//! - `busy`: the same loops with no fault, while CPU burners share the cores: nothing may fail
//!   and no invocation may take longer than 10 s.
//!
//! `docs/operations.md` ("Scenario runs") says how to run them and read their report.

pub mod classify;
pub mod clock;
pub mod config;
pub mod faults;
pub mod history;
pub mod invoke;
pub mod record;
pub mod report;
pub mod run;
pub mod serve;
pub mod workload;
