//! The provider's type-family marker and the handles no verbs object owns: listener addresses
//! and listeners.
//!
//! A leaf: every layer of the provider names [`SoftProvider`] (in `QpInit<SoftProvider>`,
//! `AcceptPolicy<SoftProvider>`), so it is defined here, below them all. Its `Provider` impl,
//! which names every object type, is wired in the parent module (`soft/mod.rs`), above them.

use std::fmt;
use std::net::SocketAddr;

/// The software provider's type family.
#[derive(Debug)]
pub struct SoftProvider;

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
    /// The transport's registration; dropping it unregisters the listener.
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
