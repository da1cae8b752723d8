//! # rnic-rdma — the verbs contract on rdma-core
//!
//! The substrate layer's hardware provider: the same [`rnic::Provider`] traits the software
//! RNIC implements, here backed by libibverbs, so everything above `rnic` runs unchanged on a
//! ConnectX, on Soft-RoCE (`rxe`) or on any other rdma-core device.
//!
//! ```text
//!  patronus-core ── rnic::verbs (Provider traits) ──┬── rnic::soft (software RNIC)
//!                                                    └── rnic-rdma (this crate)
//!                                                          ├ translate  contract ⇄ IBV_* numbers
//!                                                          ├ context    device, port, GID, events
//!                                                          ├ memory     PD, buffer, MR, MW
//!                                                          ├ queues     CQ (+ channel), SRQ
//!                                                          ├ qp         RC QP, post, state machine
//!                                                          ├ connect    out-of-band TCP handshake
//!                                                          ├ devices    listing and GID choice
//!                                                          └ ffi        the only unsafe code
//! ```
//!
//! libibverbs is loaded at run time (through `rdma-mummy-sys`), so this crate builds and its
//! binaries start on machines without rdma-core; [`devices::probe`] then reports
//! [`devices::ProbeError::LibraryMissing`]. See `docs/rdma.md` for requirements, GID selection
//! and the differences from the software RNIC.

#![warn(missing_docs)]

pub mod connect;
pub mod context;
pub mod devices;
mod ffi;
pub mod memory;
pub mod qp;
pub mod queues;
pub mod translate;
mod work;

pub use context::{RXE_VENDOR_ID, RdmaConfig, RdmaContext};
pub use memory::{RdmaBuffer, RdmaMr, RdmaMw, RdmaPd};
pub use qp::RdmaQp;
pub use queues::{RdmaChannel, RdmaCq, RdmaSrq};

use std::net::SocketAddr;

/// The rdma-core provider's type family.
#[derive(Debug)]
pub struct RdmaProvider;

impl rnic::Provider for RdmaProvider {
    type Context = RdmaContext;
    type Pd = RdmaPd;
    type Buffer = RdmaBuffer;
    type Mr = RdmaMr;
    type Mw = RdmaMw;
    type Cq = RdmaCq;
    type Channel = queues::RdmaChannel;
    type Srq = RdmaSrq;
    type Qp = RdmaQp;
    /// The out-of-band TCP endpoint of a listener.
    type Address = SocketAddr;
    type Listener = connect::RdmaListener;
}

/// Whether libibverbs is loaded in this process (it is loaded at start-up when installed).
pub fn libibverbs_loaded() -> bool {
    ffi::libibverbs_loaded()
}
