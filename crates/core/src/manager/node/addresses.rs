//! Sessions per source address: no one host takes every connection the node serves.
//!
//! A session is counted against the IP address its first control connection (shard 0's)
//! came from when that connection is established, and given back when the session ends.
//! The accept policy refuses a first control connection from an address at its limit.
//! Connections from this process (in-process transport) have no address and are not counted.
//!
//! Invariant: an address's count is the number of live sessions that came from it (an
//! address without one has no entry). The check and the count happen one handshake apart on
//! the transport's thread, so handshakes from one address that run at once on several
//! threads can pass the check together: at most one per transport thread over the limit.

use std::collections::HashMap;
use std::net::IpAddr;

/// Live sessions per source address, and the limit.
#[derive(Debug)]
pub(super) struct AddressSessions {
    limit: u32,
    live: HashMap<IpAddr, u32>,
}

impl AddressSessions {
    pub(super) fn new(limit: u32) -> Self {
        AddressSessions {
            limit,
            live: HashMap::new(),
        }
    }

    /// Whether a new session from `from` is refused.
    pub(super) fn full(&self, from: IpAddr) -> bool {
        self.live.get(&from).is_some_and(|&n| n >= self.limit)
    }

    /// A session from `from` started.
    pub(super) fn add(&mut self, from: IpAddr) {
        *self.live.entry(from).or_default() += 1;
    }

    /// A session from `from` ended.
    pub(super) fn remove(&mut self, from: IpAddr) {
        if let Some(n) = self.live.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&from);
            }
        }
    }

    /// Addresses with a live session.
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_at_its_limit_is_full_until_one_of_its_sessions_ends() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut s = AddressSessions::new(2);
        assert!(!s.full(a));
        s.add(a);
        s.add(a);
        assert!(s.full(a), "two sessions: at the limit");
        assert!(!s.full(b), "another address is not");
        s.add(b);
        s.remove(a);
        assert!(!s.full(a));
        s.remove(a);
        s.remove(b);
        assert_eq!(
            s.len(),
            0,
            "no entry is left for an address without a session"
        );
        s.remove(a);
        assert_eq!(s.len(), 0, "an unknown address is ignored");
    }
}
