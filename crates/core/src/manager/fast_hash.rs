//! The hash maps and sets of the manager's hot path: foldhash, seeded at random.
//!
//! The standard library's SipHash took 37 % of the manager's instructions per + Expr
//! permission (`docs/evaluation.md`, "The manager alone"). Its keys are header and buffer
//! addresses, window ids, client ids and request ids — some of them chosen by clients — so
//! the seed is drawn per map from the process's random state ([`foldhash::fast::RandomState`]),
//! never fixed: a client cannot aim its values at one bucket without knowing it.

use std::collections::{HashMap, HashSet};

/// A `HashMap` with foldhash, seeded at random.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash, seeded at random.
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;
