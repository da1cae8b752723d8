//! The software RNIC provider.
//!
//! - [`arena`]: raw memory, accessed only atomically (the crate's one `unsafe` module).
//! - [`gate`]: the per-entry revocation barrier.
//! - [`mpt`]: the memory protection table (regions, windows, bind and access checks).
//! - [`qp`]: RC queue pairs — sans-IO requester and responder cores plus their glue.
//! - [`queues`]: completion and shared receive queues.
//! - [`objects`]: PD, buffer, MR and MW handles.
//! - [`wire`]: transport messages and their byte encoding.
//! - [`link`]: links (inline, queued with faults, tracing, TCP).
//! - [`fabric`]: in-process devices and their connections.
//! - [`device`]: the device context and its configuration.

pub mod arena;
pub mod device;
pub mod fabric;
pub mod gate;
pub mod link;
pub mod mpt;
pub mod objects;
pub mod qp;
pub mod queues;
pub mod wire;

pub use arena::Pinning;
pub use device::{SoftConfig, SoftContext};
pub use fabric::{LinkMode, SoftFabric};
pub use link::tcp::{TcpNode, TcpOptions, TcpStats, engine_cpu_time};
pub use mpt::KeyPolicy;
pub use objects::{SoftBuffer, SoftMr, SoftMw, SoftPd};
pub use qp::SoftQp;
pub use queues::{SoftCq, SoftSrq};

use crate::verbs::{AcceptPolicy, AsyncEvent, Clock, Context, DeviceAttr, Provider, VerbsResult};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// The software provider's type family.
#[derive(Debug)]
pub struct SoftProvider;

impl Provider for SoftProvider {
    type Context = SoftContext;
    type Pd = SoftPd;
    type Buffer = SoftBuffer;
    type Mr = SoftMr;
    type Mw = SoftMw;
    type Cq = SoftCq;
    type Srq = SoftSrq;
    type Qp = SoftQp;
    type Address = SoftAddress;
    type Listener = SoftListener;
}

/// Where a soft listener can be reached.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SoftAddress {
    /// A listener on an in-process fabric.
    InProc {
        /// Device on the fabric.
        node: u32,
        /// Listener on the device.
        port: u32,
    },
    /// A TCP listener.
    Tcp(SocketAddr),
}

/// A listening endpoint; dropping it stops accepting new connections.
pub struct SoftListener {
    pub(crate) address: SoftAddress,
    pub(crate) _registration: Box<dyn fmt::Debug + Send + Sync>,
}

impl fmt::Debug for SoftListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SoftListener({:?})", self.address)
    }
}

impl SoftListener {
    /// The address clients connect to.
    pub fn address(&self) -> &SoftAddress {
        &self.address
    }
}

impl Context<SoftProvider> for SoftContext {
    fn query_device(&self) -> DeviceAttr {
        self.inner.config.attr.clone()
    }
    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.config.clock.clone()
    }
    fn alloc_pd(&self) -> VerbsResult<SoftPd> {
        SoftPd::new(&self.inner)
    }
    fn create_cq(&self, capacity: u32) -> VerbsResult<SoftCq> {
        SoftCq::new(&self.inner, capacity)
    }
    fn alloc_buffer(&self, len: usize) -> VerbsResult<SoftBuffer> {
        Ok(SoftBuffer {
            block: arena::MemoryBlock::new(len)?,
        })
    }
    fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.inner.pop_event()
    }
    fn listen(&self, policy: Arc<dyn AcceptPolicy<SoftProvider>>) -> VerbsResult<SoftListener> {
        self.inner.transport.listen(self, policy)
    }
    fn listener_address(&self, listener: &SoftListener) -> SoftAddress {
        listener.address.clone()
    }
}
