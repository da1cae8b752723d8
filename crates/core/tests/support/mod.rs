//! Test support.
//!
//! - [`fake_nic`]: deterministic simulation for the manager-core tests — a fake NIC + memory
//!   that executes [`NicOp`](patronus_core::manager::NicOp)s like the soft NIC does, and a
//!   [`Sim`] driver with a virtual clock that pumps the sans-IO core (`begin` → CASes → `plan`
//!   → chain → `finish` → header writes → replies) exactly as the memory node's runner does.
//! - [`bed`]: an embedded cluster on a virtual clock for end-to-end tests.
#![allow(dead_code)]

pub mod bed;
pub mod fake_nic;

#[allow(unused_imports)]
pub use fake_nic::*;
