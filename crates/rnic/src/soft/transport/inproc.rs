//! The in-process fabric: devices in one process, connected by inline or queued links.
//!
//! `SoftFabric::new()` gives the fast path (inline links: the requester's thread runs the
//! responder); `SoftFabric::queued(net)` routes every packet through a [`QueuedNetwork`] that a
//! test steps explicitly. Either wraps its links in a [`LinkStack`] (e.g. to record packets
//! with a [`PacketTrace`] or kill links with [`LinkFaults`](crate::soft::link::faulty::LinkFaults)).

use super::{Policy, check_private_data, connect_in_process};
use crate::soft::device::{Connecting, SoftConfig, SoftContext, Transport};
use crate::soft::link::inline::InlineLink;
use crate::soft::link::queued::QueuedNetwork;
use crate::soft::link::tracing::PacketTrace;
use crate::soft::link::{Link, LinkStack};
use crate::soft::provider::{SoftAddress, SoftListener};
use crate::verbs::{VerbsError, VerbsResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

/// How the fabric's links deliver packets.
#[derive(Clone, Debug)]
pub enum LinkMode {
    /// Synchronously, on the requester's thread.
    Inline,
    /// Through a steppable queue with fault injection.
    Queued(Arc<QueuedNetwork>),
}

struct FabricInner {
    mode: LinkMode,
    links: LinkStack,
    next_node: AtomicU32,
    next_port: AtomicU32,
    listeners: Mutex<HashMap<(u32, u32), Policy>>,
}

impl fmt::Debug for FabricInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcFabric")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// A set of in-process soft devices that can connect to each other.
#[derive(Clone, Debug)]
pub struct SoftFabric {
    inner: Arc<FabricInner>,
}

impl Default for SoftFabric {
    fn default() -> Self {
        Self::new()
    }
}

impl SoftFabric {
    /// A fabric with inline links.
    pub fn new() -> Self {
        Self::with_mode(LinkMode::Inline, None)
    }

    /// A fabric whose packets go through `net`.
    pub fn queued(net: Arc<QueuedNetwork>) -> Self {
        Self::with_mode(LinkMode::Queued(net), None)
    }

    /// A fabric with the given link mode, recording packets into `trace` if given.
    pub fn with_mode(mode: LinkMode, trace: Option<Arc<PacketTrace>>) -> Self {
        let links = match trace {
            Some(t) => LinkStack::new().traced(t),
            None => LinkStack::new(),
        };
        Self::with_links(mode, links)
    }

    /// A fabric with the given link mode whose links are wrapped in `links`.
    pub fn with_links(mode: LinkMode, links: LinkStack) -> Self {
        SoftFabric {
            inner: Arc::new(FabricInner {
                mode,
                links,
                next_node: AtomicU32::new(1),
                next_port: AtomicU32::new(1),
                listeners: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Opens a new device (node) on this fabric.
    pub fn open_device(&self, config: SoftConfig) -> SoftContext {
        let node = self.inner.next_node.fetch_add(1, Ordering::Relaxed);
        SoftContext::with_transport(
            config,
            Arc::new(InProcTransport {
                fabric: self.inner.clone(),
                node,
            }),
        )
    }
}

#[derive(Debug)]
struct InProcTransport {
    fabric: Arc<FabricInner>,
    node: u32,
}

/// Unregisters a listener when dropped.
struct Registration {
    fabric: Weak<FabricInner>,
    key: (u32, u32),
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Registration{:?}", self.key)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(f) = self.fabric.upgrade() {
            f.listeners.lock().remove(&self.key);
        }
    }
}

impl Transport for InProcTransport {
    fn listen(&self, policy: Policy) -> VerbsResult<SoftListener> {
        let port = self.fabric.next_port.fetch_add(1, Ordering::Relaxed);
        let key = (self.node, port);
        self.fabric.listeners.lock().insert(key, policy);
        Ok(SoftListener {
            address: SoftAddress::InProc {
                node: self.node,
                port,
            },
            _registration: Box::new(Registration {
                fabric: Arc::downgrade(&self.fabric),
                key,
            }),
        })
    }

    fn connect(
        &self,
        qp: &dyn Connecting,
        to: &SoftAddress,
        private_data: &[u8],
    ) -> VerbsResult<()> {
        let SoftAddress::InProc { node, port } = to else {
            return Err(VerbsError::InvalidArgument(
                "an in-process device connects to in-process addresses only",
            ));
        };
        check_private_data(private_data)?;
        let policy = self
            .fabric
            .listeners
            .lock()
            .get(&(*node, *port))
            .cloned()
            .ok_or_else(|| VerbsError::ConnectionRefused(format!("no listener at {to:?}")))?;
        connect_in_process(qp, &policy, private_data, |server, client| {
            match &self.fabric.mode {
                LinkMode::Inline => {
                    let (to_server, to_client) = InlineLink::pair(server, client);
                    (self.wrap(to_server), self.wrap(to_client))
                }
                LinkMode::Queued(net) => {
                    let (a, b) = net.connect(client, server);
                    (self.wrap(a), self.wrap(b))
                }
            }
        })
    }
}

impl InProcTransport {
    fn wrap<L: Link + 'static>(&self, link: L) -> Arc<dyn Link> {
        self.fabric.links.wrap(Arc::new(link))
    }
}
