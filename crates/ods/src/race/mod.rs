//! RACE hashing (Zuo et al., ATC'21) on protected remote memory, as §6.1 of the Patronus
//! paper adopts it: an extendible hash table whose every operation is one-sided.
//!
//! ```text
//! root ──> directory: global depth | 2^max_depth entries (depth, subtable)
//!                                          │
//!          subtable: lock object address | bucket groups [main 0 | overflow | main 1] ...
//!                                          │ slot: fingerprint | frozen | units | pointer
//!          KV block (its own object):  checksum | lengths | key hash | nonce | key | value
//! ```
//!
//! Permissions (§6.1): a client acquires each subtable (shared, read-write) once and reuses
//! the right across operations, extending it one-sidedly; KV blocks are allocated four at a
//! time (one round trip), in shared mode, each its own object with its own right; a reader of
//! another client's block acquires a right of its own over it; a resizer takes the subtable's
//! lock object exclusively (its lease is what lets others finish a split it abandoned) — or
//! CASes a lock word in it, the vanilla variant.
//!
//! The table is described in `docs/data-structures.md` (layout, rights, the split protocol,
//! the reader design and why a delayed client never sees or changes another key's block).
//!
//! - `layout`, `block`, `records`, `hash`: the remote formats;
//! - [`TableClient`] (`client`), `directory`, `table` ([`create`], [`open`]): a client;
//! - `ops`: [`Lookup`], [`Insert`], [`Update`], [`Delete`] as steppable state machines;
//! - `split`: [`Split`], the resize protocol; [`KeyClass`], the keys a subtable claims;
//! - `blocking`: `get`, `insert`, `update`, `delete`, `scan` run to completion;
//! - `destroy`: [`TableClient::destroy`] frees a table no other client uses;
//! - `named`: [`create_named`], [`open_named`], [`destroy_named`] find a table by name
//!   ([`NamedRoots`](crate::NamedRoots));
//! - [`RaceStats`], [`SplitTime`], [`RaceError`], [`RaceConfig`], [`ClientOptions`].

mod acquiring;
mod block;
mod blocking;
mod class;
mod client;
mod config;
mod destroy;
mod directory;
mod error;
mod guesses;
mod hash;
mod layout;
mod named;
mod ops;
mod records;
mod retire;
mod rights;
mod split;
mod stats;
mod table;

pub use blocking::{Audit, KeyValues};
pub use class::KeyClass;
pub use client::{SPLIT_TIMES_KEPT, TableClient};
pub use config::{ClientOptions, LockMode, MAX_DEPTH_LIMIT, RaceConfig};
pub use destroy::Destroyed;
pub use error::RaceError;
pub use named::{create_named, destroy_named, open_named};
pub use ops::{Delete, Insert, Lookup, Stage, Update};
pub use records::Phase;
pub use split::{Split, SplitOutcome};
pub use stats::{RaceStats, SplitTime};
pub use table::{create, open};
