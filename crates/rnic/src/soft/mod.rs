//! The software RNIC provider.
//!
//! Layers, each using only those below it (checked by `scripts/import-cycles`):
//!
//! ```text
//!  transport   inproc (SoftFabric) · tcp (TcpNode: engines, connections, handshake)
//!  qp          RC queue pairs: sans-IO requester / responder cores and their glue
//!  objects     PD, buffer, MR, MW handles          queues   CQs (drive QP timers), SRQs
//!  device      configuration, QP numbers, events; the Transport / Connecting traits
//!  cross_channel  CQs and QPs by number for WAIT / ENABLE, the chain engine
//!  link        packet movers: inline, queued (faults), tracing, faulty; the Link trait
//!  mpt         protection table (regions, windows, bind and access checks)
//!  wire · gate · provider     messages · revocation barrier · type family
//! ```
//!
//! Memory blocks (raw memory, accessed only atomically) are provider-neutral:
//! [`crate::memory`], below every layer here (and re-exported as `arena`, their former path).
//!
//! - [`gate`]: the per-entry revocation barrier.
//! - [`mpt`]: the memory protection table (regions, windows, bind and access checks).
//! - [`wire`]: transport messages and their byte encoding.
//! - [`provider`]: the type-family marker, listener addresses and listeners.
//! - [`link`]: links, which only move packets between two connected QPs (inline, queued with
//!   faults, tracing), and the wrappers a transport stacks on each link it makes.
//! - [`device`]: the device context and its configuration.
//! - `cross_channel`: the registry a WAIT, an ENABLE or a bind for another QP resolves
//!   numbers in, and the engine thread that runs released work-request chains.
//! - [`queues`]: completion and shared receive queues.
//! - [`objects`]: PD, buffer, MR and MW handles.
//! - [`qp`]: RC queue pairs — sans-IO requester and responder cores plus their glue.
//! - [`transport`]: how devices find each other and connect QPs: the in-process fabric and
//!   the TCP transport, each making links and running the connection handshake.
//!
//! This module wires the type family: the [`Provider`] impl and the verbs traits that create
//! objects of several layers (`Context`, `ProtectionDomain`), delegating to each layer.

mod cross_channel;
pub mod device;
pub mod gate;
pub mod link;
pub mod mpt;
pub mod objects;
pub mod provider;
pub mod qp;
pub mod queues;
pub mod transport;
pub mod wire;

pub use crate::memory::Pinning;
pub use device::{DeviceResources, SoftConfig, SoftContext};
pub use link::{AdaptiveTimeouts, LinkStack, RetryPolicy};
pub use mpt::KeyPolicy;
pub use objects::{SoftBuffer, SoftMr, SoftMw, SoftPd};
pub use provider::{SoftAddress, SoftListener, SoftProvider};
pub use qp::SoftQp;
pub use queues::{SoftChannel, SoftCq, SoftSrq};
pub use transport::inproc::{LinkMode, SoftFabric};
pub use transport::tcp::{
    TcpNode, TcpOptions, TcpQpStats, TcpStats, TcpSyscalls, TlsError, TlsOptions,
    certificates_from_pem, engine_cpu_time, private_key_from_pem,
};

use crate::verbs::{
    AcceptPolicy, AccessFlags, AsyncEvent, Clock, Context, CrossChannel, DeviceAttr, MwType, PdId,
    ProtectionDomain, Provider, QpInit, VerbsError, VerbsResult,
};
use qp::QpInner;
use std::sync::Arc;

impl Provider for SoftProvider {
    type Context = SoftContext;
    type Pd = SoftPd;
    type Buffer = SoftBuffer;
    type Mr = SoftMr;
    type Mw = SoftMw;
    type Cq = SoftCq;
    type Channel = SoftChannel;
    type Srq = SoftSrq;
    type Qp = SoftQp;
    type Address = SoftAddress;
    type Listener = SoftListener;
}

impl Context<SoftProvider> for SoftContext {
    fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            qp_rate_limit: self.inner.transport.enforces_service(),
            ..self.inner.config.attr.clone()
        }
    }
    fn device_key(&self) -> u64 {
        self.inner.key
    }
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.config.clock.clone()
    }
    fn alloc_pd(&self) -> VerbsResult<SoftPd> {
        SoftPd::new(&self.inner)
    }
    fn create_cq(&self, capacity: u32) -> VerbsResult<SoftCq> {
        SoftCq::new(&self.inner, capacity, None)
    }
    fn create_channel(&self) -> VerbsResult<SoftChannel> {
        Ok(SoftChannel::default())
    }
    fn create_cq_on(&self, capacity: u32, channel: &SoftChannel) -> VerbsResult<SoftCq> {
        SoftCq::new(&self.inner, capacity, Some(channel.clone()))
    }
    fn alloc_buffer(&self, len: usize) -> VerbsResult<SoftBuffer> {
        if self.inner.config.huge_pages && len >= device::HUGE_PAGE {
            SoftBuffer::new_huge(len)
        } else {
            SoftBuffer::new(len)
        }
    }
    fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.inner.pop_event()
    }
    fn listen(&self, policy: Arc<dyn AcceptPolicy<SoftProvider>>) -> VerbsResult<SoftListener> {
        self.inner.transport.listen(policy)
    }
    fn listener_address(&self, listener: &SoftListener) -> SoftAddress {
        listener.address.clone()
    }
}

impl ProtectionDomain<SoftProvider> for SoftPd {
    fn id(&self) -> PdId {
        self.inner.id
    }
    fn reg_mr(
        &self,
        buffer: &SoftBuffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<SoftMr> {
        self.register_mr(buffer, offset, len, access)
    }
    fn alloc_mw(&self, mw_type: MwType) -> VerbsResult<SoftMw> {
        self.allocate_mw(mw_type)
    }
    fn create_srq(&self, capacity: u32) -> VerbsResult<SoftSrq> {
        SoftSrq::new(&self.inner.dev, self.inner.id, capacity)
    }
    fn create_qp(&self, init: QpInit<'_, SoftProvider>) -> VerbsResult<SoftQp> {
        QpInner::create(self, init, None)
    }
    fn create_cross_channel_qp(
        &self,
        init: QpInit<'_, SoftProvider>,
        cross: CrossChannel,
    ) -> VerbsResult<SoftQp> {
        if !self.inner.dev.config.attr.cross_channel {
            return Err(VerbsError::Unsupported("cross-channel QPs"));
        }
        QpInner::create(self, init, Some(cross))
    }
}
