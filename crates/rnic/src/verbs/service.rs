//! How a device serves one QP's incoming requests: its weight among the QPs an engine serves,
//! and an optional responder rate limit ([`QpService`], set with
//! [`QueuePair::set_service`](super::QueuePair::set_service)).
//!
//! Modelled on `ibv_modify_qp_rate_limit` (`rate_limit` in kbps, `max_burst_sz`), which
//! paces a QP's *sends* in bytes on real NICs; there is no operation rate there. A device
//! that enforces these reports [`DeviceAttr::qp_rate_limit`](super::DeviceAttr).
//!
//! What a device served a QP ([`QpServed`], read with
//! [`QueuePair::served`](super::QueuePair::served)) is the other half: a node that decides
//! services from load reads it.
//!
//! Invariants of a valid service ([`QpService::validate`]): `1 <= weight <= MAX_WEIGHT`, and
//! every [`TokenRate`] has a nonzero rate and a nonzero burst.

use super::error::{VerbsError, VerbsResult};

/// Largest [`QpService::weight`].
pub const MAX_WEIGHT: u32 = 64;

/// Service of one QP's incoming requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpService {
    /// Share of its engine: when several QPs have requests waiting, each turn serves up to
    /// `weight` times a base quantum of operations and bytes of this one (weighted round
    /// robin). `1` by default.
    pub weight: u32,
    /// Responder rate limit: requests beyond it wait (unread, so the transport's flow control
    /// pushes back on the requester) until tokens return. `None`: unlimited.
    pub rate: Option<RateLimit>,
}

impl Default for QpService {
    fn default() -> Self {
        QpService {
            weight: 1,
            rate: None,
        }
    }
}

/// A responder rate limit: operations per second and bytes per second, each a token bucket
/// (`None`: that dimension is unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests served per second, with a burst of requests.
    pub ops: Option<TokenRate>,
    /// Request bytes (frame bytes as received) served per second, with a burst in bytes.
    pub bytes: Option<TokenRate>,
}

/// A token bucket's refill rate and depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenRate {
    /// Tokens added per second.
    pub per_sec: u64,
    /// Tokens the bucket holds at most (and holds at first): how much may be served at once
    /// after an idle period.
    pub burst: u64,
}

/// What a device served one QP's incoming requests: the requests its responder executed and
/// their bytes, counted since the QP's current connection was established (a reconnected QP
/// starts again from zero, so a reader that takes differences treats a smaller count as a
/// new connection). Monotonic while the connection lasts.
///
/// Where it comes from depends on the provider (see [`QueuePair::served`](super::QueuePair::served)):
/// the soft NIC over TCP counts in its engines; in-process links and rdma-core answer `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpServed {
    /// Requests served (one per request frame delivered to the responder: a READ, WRITE,
    /// SEND or atomic, duplicates included).
    pub ops: u64,
    /// Their bytes, as the device counts them (the soft NIC over TCP: request frame bytes as
    /// received, so a READ counts its small request, not its response).
    pub bytes: u64,
}

impl QpServed {
    /// What was served since `earlier` (a reading of the same QP): the difference, or all of
    /// `self` if a count went down (a new connection since).
    pub fn since(&self, earlier: &QpServed) -> QpServed {
        if self.ops < earlier.ops || self.bytes < earlier.bytes {
            return *self;
        }
        QpServed {
            ops: self.ops - earlier.ops,
            bytes: self.bytes - earlier.bytes,
        }
    }
}

impl QpService {
    /// Checks the invariants (module docs).
    pub fn validate(&self) -> VerbsResult<()> {
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(VerbsError::InvalidArgument(
                "QP service weight out of range 1..=64",
            ));
        }
        let rates = self.rate.iter().flat_map(|r| [r.ops, r.bytes]).flatten();
        for rate in rates {
            if rate.per_sec == 0 || rate.burst == 0 {
                return Err(VerbsError::InvalidArgument(
                    "a rate limit needs a nonzero rate and burst",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(QpService::default().validate().is_ok());
        let zero = QpService {
            weight: 0,
            rate: None,
        };
        assert!(zero.validate().is_err());
        let heavy = QpService {
            weight: MAX_WEIGHT + 1,
            rate: None,
        };
        assert!(heavy.validate().is_err());
        let no_burst = QpService {
            weight: 1,
            rate: Some(RateLimit {
                ops: None,
                bytes: Some(TokenRate {
                    per_sec: 10,
                    burst: 0,
                }),
            }),
        };
        assert!(no_burst.validate().is_err());
    }

    #[test]
    fn served_differences_restart_with_a_new_connection() {
        let a = QpServed {
            ops: 10,
            bytes: 100,
        };
        let b = QpServed {
            ops: 15,
            bytes: 180,
        };
        assert_eq!(b.since(&a), QpServed { ops: 5, bytes: 80 });
        let fresh = QpServed { ops: 3, bytes: 30 };
        assert_eq!(
            fresh.since(&b),
            fresh,
            "a count went down: a new connection"
        );
    }
}
