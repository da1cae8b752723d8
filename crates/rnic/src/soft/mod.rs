//! The software RNIC provider.
//!
//! - [`arena`]: raw memory, accessed only atomically (the crate's one `unsafe` module).
//! - [`gate`]: the per-entry revocation barrier.
//! - [`mpt`]: the memory protection table (regions, windows, bind and access checks).
//! - [`wire`]: transport messages and their byte encoding.
pub mod arena;
pub mod gate;
pub mod mpt;
pub mod wire;
