//! The provider's type-family marker.
//!
//! A leaf: the layers name [`RdmaProvider`] (in `QpInit<RdmaProvider>`,
//! `AcceptPolicy<RdmaProvider>`), so it is defined here, below them all. Its `Provider` impl,
//! which names every object type, is wired in the crate root (`lib.rs`), above them.

/// The rdma-core provider's type family.
#[derive(Debug)]
pub struct RdmaProvider;
