//! # rnic-rdma — the verbs contract on rdma-core
//!
//! The substrate layer's hardware provider: the same [`rnic::Provider`] traits the software
//! RNIC implements, here backed by libibverbs, so everything above `rnic` runs unchanged on a
//! ConnectX, on Soft-RoCE (`rxe`) or on any other rdma-core device.
//!
//! ```text
//!  patronus-core ── rnic::verbs (Provider traits) ──┬── rnic::soft (software RNIC)
//!                                                    └── rnic-rdma (this crate)
//! ```
//!
//! Layers, each using only those below it (checked by `scripts/import-cycles`):
//!
//! ```text
//!  connect    listeners: handshakes into the QPs an accept policy makes
//!  qp         RC QP: state machine, posting, both sides of the handshake
//!  queues     CQ (+ channel), SRQ           work   send requests as ibv_send_wr values
//!  memory     PD, buffer, MR, MW
//!  context    device, port, GID, events
//!  devices    listing and GID choice
//!  record · wire · translate · provider · ffi
//!             posted sends and window keys · handshake messages · contract ⇄ IBV_* numbers ·
//!             type family · the only unsafe code
//! ```
//!
//! This module wires the type family: the [`rnic::Provider`] impl and the verbs traits that
//! create objects of several layers (`Context`, `ProtectionDomain`), delegating to each layer.
//! Modules name each other by module path (`crate::memory::RdmaPd`), never by the re-exports
//! here.
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
mod provider;
pub mod qp;
pub mod queues;
mod record;
pub mod translate;
mod wire;
mod work;

pub use context::{RXE_VENDOR_ID, RdmaConfig, RdmaContext};
pub use memory::{RdmaBuffer, RdmaMr, RdmaMw, RdmaPd};
pub use provider::RdmaProvider;
pub use qp::RdmaQp;
pub use queues::{RdmaChannel, RdmaCq, RdmaSrq};

use connect::RdmaListener;
use rnic::{
    AcceptPolicy, AccessFlags, AsyncEvent, Clock, Context, DeviceAttr, MwType, PdId,
    ProtectionDomain, Provider, QpInit, VerbsResult,
};
use std::net::SocketAddr;
use std::sync::Arc;

impl Provider for RdmaProvider {
    type Context = RdmaContext;
    type Pd = RdmaPd;
    type Buffer = RdmaBuffer;
    type Mr = RdmaMr;
    type Mw = RdmaMw;
    type Cq = RdmaCq;
    type Channel = RdmaChannel;
    type Srq = RdmaSrq;
    type Qp = RdmaQp;
    /// The out-of-band TCP endpoint of a listener.
    type Address = SocketAddr;
    type Listener = RdmaListener;
}

impl Context<RdmaProvider> for RdmaContext {
    /// A hash of the device's name and port: names are unique on a host.
    fn device_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.device_name(), self.inner.config.port).hash(&mut h);
        h.finish()
    }
    fn query_device(&self) -> DeviceAttr {
        self.inner.attr.clone()
    }
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.config.clock.clone()
    }
    fn alloc_pd(&self) -> VerbsResult<RdmaPd> {
        RdmaPd::new(self)
    }
    fn create_cq(&self, capacity: u32) -> VerbsResult<RdmaCq> {
        RdmaCq::new(self, capacity)
    }
    fn create_channel(&self) -> VerbsResult<RdmaChannel> {
        RdmaChannel::new(self)
    }
    fn create_cq_on(&self, capacity: u32, channel: &RdmaChannel) -> VerbsResult<RdmaCq> {
        RdmaCq::new_on(self, capacity, channel)
    }
    fn alloc_buffer(&self, len: usize) -> VerbsResult<RdmaBuffer> {
        RdmaBuffer::new(len)
    }
    fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.next_async_event()
    }
    fn listen(&self, policy: Arc<dyn AcceptPolicy<RdmaProvider>>) -> VerbsResult<RdmaListener> {
        connect::listen(self, policy)
    }
    fn listener_address(&self, listener: &RdmaListener) -> SocketAddr {
        listener.address()
    }
}

impl ProtectionDomain<RdmaProvider> for RdmaPd {
    fn id(&self) -> PdId {
        self.id
    }
    fn reg_mr(
        &self,
        buffer: &RdmaBuffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<RdmaMr> {
        self.register_mr(buffer, offset, len, access)
    }
    fn alloc_mw(&self, mw_type: MwType) -> VerbsResult<RdmaMw> {
        self.allocate_mw(mw_type)
    }
    fn create_srq(&self, capacity: u32) -> VerbsResult<RdmaSrq> {
        RdmaSrq::new(self, capacity)
    }
    fn create_qp(&self, init: QpInit<'_, RdmaProvider>) -> VerbsResult<RdmaQp> {
        RdmaQp::new(self, init)
    }
    /// Cross-channel QPs are a ConnectX extension (MLNX_OFED's `ibv_exp_create_qp`, not in
    /// upstream rdma-core's verbs), which this provider neither detects nor drives.
    fn create_cross_channel_qp(
        &self,
        _init: QpInit<'_, RdmaProvider>,
        _cross: rnic::CrossChannel,
    ) -> VerbsResult<RdmaQp> {
        Err(rnic::VerbsError::Unsupported(
            "cross-channel QPs (WAIT, ENABLE, WQE patching) on an rdma-core device",
        ))
    }
}

/// Whether libibverbs is loaded in this process (it is loaded at start-up when installed).
pub fn libibverbs_loaded() -> bool {
    ffi::libibverbs_loaded()
}
