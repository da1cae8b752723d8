//! The client library (CN-lib, paper Table 2): control path over a control QP (RPCs into the
//! memory node's shared receive queue), data path as one-sided verbs through windows on a
//! virtual QP with spares.
//!
//! - `allocate`, `acquire`, `extend` (one-sided CAS on the lifetime field), `revoke`, `free`;
//! - `read`, `write`, `cas`, `faa`, and [`Batch`] for many ops behind one doorbell;
//! - every operation without waiting: [`Client::start`] an [`Op`] for a [`Ticket`];
//! - [`Client::status`] (what it knows and counted) and [`Client::control`] (a new session,
//!   arming, sharing, named roots).
//!
//! The control QP is separate from the data QPs, so a data-QP fault never disturbs the
//! control plane. The client's expiry is conservative: (send time of the request + granted
//! lifetime − margin) on its own clock; only durations travel.
//!
//! Everything the client holds at the memory node belongs to a session (`session`): when the
//! control connection is lost, or the memory node ended the session (a refused reconnection
//! says so: [`ClientError::SessionEnded`], never a wrong secret), the next control operation
//! opens a new one (`control`; [`SessionControl::reconnect`] does it at once), and the permissions of
//! the old one are dead ([`ClientError::SessionLost`]). The memory they cover belongs to the
//! tenant, not to the session: [`Client::free`] of an old session's permission frees the
//! object by acquiring it again in the new session.
//!
//! - `node`: [`ComputeNode`], a process's handle on one memory node: the session (control
//!   channels, data QPs with spares) its clients share, the locked `core` and the shared
//!   wait on the control channels;
//! - `driver`: [`Client`], one logical client of a compute node (its staging memory, its tag
//!   on the data CQ) and the Table 2 control calls; `config`: [`ClientConfig`];
//! - `session`: what one `Hello` opened (control channels, identity, data QPs);
//! - `control`: blocking and pipelined RPCs, and reconnecting a lost session;
//! - `data`, `extend`, `posted`: the data path, and CN extensions posted without waiting
//!   (`posted` holds their table);
//! - `perm`, `lease`, `renew`: permissions, the lease policy and the client's counts, and
//!   renewal past the maximum lifetime;
//! - `qps`: the session's data QPs (lanes, spares, the recovery worker) and the data CQ that
//!   files completions per user; `error`: [`ClientError`].

mod alloc_link;
mod batch_run;
mod config;
mod control;
pub mod core;
mod data;
mod driver;
mod error;
mod extend;
mod lease;
mod many;
mod node;
mod one_sided;
mod op;
mod perm;
mod posted;
mod pump;
mod qps;
mod renew;
mod session;
#[cfg(all(test, feature = "testing"))]
mod shared_qp_tests;
mod status;
mod ticket;

pub use batch_run::PostedBatch;
pub use config::ClientConfig;
pub use data::Batch;
pub use driver::Client;
pub use error::ClientError;
pub use lease::{ClientStats, LeasePolicy, RttEstimator};
pub use node::ComputeNode;
pub use op::OpResult;
pub use perm::Perm;
pub use posted::MAX_POSTED;
pub use qps::{QpStats, SwitchKind};
pub use renew::LongLease;
pub use status::{ClientStatus, SessionControl};
pub use ticket::{Done, Op, Ticket};
// The protocol's credit count: control requests a client may have unanswered at once.
pub use crate::proto::messages::MAX_OUTSTANDING_RPCS;
