//! # rnic — the RDMA verbs contract and a software RNIC
//!
//! This crate is the substrate layer of the project:
//!
//! ```text
//!  patronus-core (client library, memory-node manager)
//!        │ uses only the traits in `verbs`
//!  ┌─────▼──────────────────────────────────────────────┐
//!  │ verbs: types, work requests, Provider traits       │
//!  ├──────────────────────────┬─────────────────────────┤
//!  │ soft: software RNIC      │ (rdma-core provider:    │
//!  │  transports: inproc, tcp │  crate rnic-rdma, same  │
//!  │  mpt / responder / qp    │  traits)                │
//!  │  links: inline, queued,  │                         │
//!  │   tracing, faulty, tcp   │                         │
//!  ├──────────────────────────┴─────────────────────────┤
//!  │ memory: page-aligned blocks both providers         │
//!  │  register, touched only through atomics            │
//!  └────────────────────────────────────────────────────┘
//! ```
//!
//! The software provider implements the verbs semantics that protected remote memory depends on:
//! protection domains, memory regions with per-page translation, type-1 and type-2 memory windows
//! with 8-bit key rotation, RC queue pairs with their state machine and error propagation, and
//! completion queues. Its protection table and responder are sans-IO; links only move messages;
//! transports find peers, run the connection handshake and make the links.

#![warn(missing_docs)]

pub mod endpoints;
pub mod memory;
pub mod soft;
pub mod verbs;

#[cfg(test)]
mod watch_tests;

pub use verbs::*;
