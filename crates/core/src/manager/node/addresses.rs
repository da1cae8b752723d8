//! Sessions per source address: no one host takes every connection the node serves.
//!
//! A session is counted against the IP address its first control connection (shard 0's)
//! came from when that connection is established, and given back when the session ends.
//! The accept policy refuses a first control connection from an address at its limit.
//! Connections from this process (in-process transport) have no address and are not counted.
//!
//! Addresses are counted by network prefix, so that one host cannot go around the limit by
//! using many of its addresses: an IPv4 address by its first `v4_prefix` bits (32 by default:
//! the address), an IPv6 one by its first `v6_prefix` (64 by default: a host is commonly given
//! a whole /64), every loopback address as one (127.0.0.0/8 and ::1 are all this host; unless
//! `loopback_hosts` says to count them as the other addresses, as tests that play several
//! hosts on one machine do), and an IPv4-mapped IPv6 address as the IPv4 address it maps.
//!
//! Invariant: a prefix's count is the number of live sessions that came from it (a prefix
//! without one has no entry). The check and the count happen one handshake apart on
//! the transport's thread, so handshakes from one address that run at once on several
//! threads can pass the check together: at most one per transport thread over the limit.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Live sessions per source prefix, and the limit.
#[derive(Debug)]
pub(super) struct AddressSessions {
    limit: u32,
    v4_prefix: u8,
    v6_prefix: u8,
    /// Whether loopback addresses are counted like others (else all as one).
    loopback_hosts: bool,
    live: HashMap<IpAddr, u32>,
}

impl AddressSessions {
    /// At most `limit` sessions per prefix of `v4_prefix` / `v6_prefix` bits (see the module
    /// docs; lengths beyond an address's are taken as the whole address).
    pub(super) fn new(limit: u32, v4_prefix: u8, v6_prefix: u8, loopback_hosts: bool) -> Self {
        AddressSessions {
            limit,
            v4_prefix: v4_prefix.min(32),
            v6_prefix: v6_prefix.min(128),
            loopback_hosts,
            live: HashMap::new(),
        }
    }

    /// The prefix `from` is counted under.
    fn key(&self, from: IpAddr) -> IpAddr {
        let v4 = |a: Ipv4Addr, bits: u8| {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        };
        let one_host = !self.loopback_hosts;
        match from {
            IpAddr::V4(a) if one_host && a.is_loopback() => v4(a, 8),
            IpAddr::V4(a) => v4(a, self.v4_prefix),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(m) if one_host && m.is_loopback() => v4(m, 8),
                Some(m) => v4(m, self.v4_prefix),
                None if one_host && a.is_loopback() => v4(Ipv4Addr::LOCALHOST, 8),
                None => {
                    let bits = self.v6_prefix;
                    let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                    IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
                }
            },
        }
    }

    /// Whether a new session from `from` is refused.
    pub(super) fn full(&self, from: IpAddr) -> bool {
        self.live
            .get(&self.key(from))
            .is_some_and(|&n| n >= self.limit)
    }

    /// A session from `from` started.
    pub(super) fn add(&mut self, from: IpAddr) {
        *self.live.entry(self.key(from)).or_default() += 1;
    }

    /// A session from `from` ended.
    pub(super) fn remove(&mut self, from: IpAddr) {
        let from = self.key(from);
        if let Some(n) = self.live.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&from);
            }
        }
    }

    /// Prefixes with a live session.
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
        let mut s = AddressSessions::new(2, 32, 64, false);
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

    #[test]
    fn many_addresses_of_one_host_or_network_count_as_one() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let mut s = AddressSessions::new(2, 24, 64, false);
        s.add(ip("127.0.0.2"));
        s.add(ip("::1"));
        assert!(
            s.full(ip("127.0.0.3")),
            "every loopback address is this host"
        );
        assert!(s.full(ip("::ffff:127.0.0.9")), "mapped loopback too");
        s.add(ip("10.1.2.3"));
        s.add(ip("::ffff:10.1.2.200"));
        assert!(s.full(ip("10.1.2.77")), "one /24");
        assert!(!s.full(ip("10.1.3.1")), "the next /24 is another");
        s.add(ip("2001:db8:0:1::1"));
        s.add(ip("2001:db8:0:1:ffff::2"));
        assert!(s.full(ip("2001:db8:0:1::99")), "one /64");
        assert!(!s.full(ip("2001:db8:0:2::1")), "the next /64 is another");
        for a in ["127.0.0.7", "127.0.0.8", "10.1.2.9", "10.1.2.10"] {
            s.remove(ip(a));
        }
        s.remove(ip("2001:db8:0:1::5"));
        s.remove(ip("2001:db8:0:1::6"));
        assert_eq!(s.len(), 0, "given back under the same prefixes");
        let exact = AddressSessions::new(1, 32, 128, true);
        assert_eq!(exact.key(ip("10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(exact.key(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(
            exact.key(ip("127.0.0.2")),
            ip("127.0.0.2"),
            "loopback addresses counted as hosts"
        );
        let all = AddressSessions::new(1, 0, 0, false);
        assert_eq!(all.key(ip("10.1.2.3")), ip("0.0.0.0"), "a /0 is everyone");
        assert_eq!(all.key(ip("2001:db8::1")), ip("::"));
    }
}
