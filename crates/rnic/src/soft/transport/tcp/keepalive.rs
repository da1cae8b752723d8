//! Kernel-side liveness of a connection, derived from the QPs' budget
//! ([`AdaptiveTimeouts::budget`]): what the kernel can see that a QP cannot.
//!
//! - `TCP_USER_TIMEOUT = budget`: data the peer's host has not acknowledged for that long
//!   (a vanished host, a cut path) makes the kernel drop the connection (`ETIMEDOUT`), instead
//!   of retransmitting for the ~15 minutes of `tcp_retries2`. This covers the side that only
//!   responds — a memory node's QP never waits for a response, so its ack timer never runs.
//! - Keepalive probes after `budget / 2` idle, every `budget / 10` (at least a second each),
//!   5 of them: an idle connection to a vanished host goes down within about the budget too
//!   (with the user timeout set, Linux drops it once the budget has passed since the peer was
//!   last heard and a probe is unanswered).
//!
//! Neither fires while the peer's host lives: its kernel acknowledges data and answers
//! probes even when the peer process is stopped or starved of CPU. A live-but-silent peer
//! process is the QP's to detect (`soft::qp::ack_timer`).

use crate::soft::link::AdaptiveTimeouts;
use mio::net::TcpStream;
use socket2::{SockRef, TcpKeepalive};
use std::io;
use std::time::Duration;

/// Keepalive probes before the connection counts as dead (where no user timeout decides).
const PROBES: u32 = 5;

/// The keepalive parameters for `budget`: (idle time, probe interval).
pub(super) fn keepalive_times(budget: Duration) -> (Duration, Duration) {
    let at_least_a_second = |d: Duration| d.max(Duration::from_secs(1));
    (
        at_least_a_second(budget / 2),
        at_least_a_second(budget / 10),
    )
}

/// Sets keepalive and the user timeout on `stream` from `timeouts.budget`.
pub(super) fn arm(stream: &TcpStream, timeouts: &AdaptiveTimeouts) -> io::Result<()> {
    let sock = SockRef::from(stream);
    let (idle, interval) = keepalive_times(timeouts.budget);
    let params = TcpKeepalive::new()
        .with_time(idle)
        .with_interval(interval)
        .with_retries(PROBES);
    sock.set_tcp_keepalive(&params)?;
    sock.set_tcp_user_timeout(Some(timeouts.budget))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_gets_keepalive_and_a_user_timeout_from_the_budget() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let stream = TcpStream::from_std(client);
        let timeouts = AdaptiveTimeouts::default(); // 15 s
        arm(&stream, &timeouts).unwrap();
        let sock = SockRef::from(&stream);
        assert!(sock.keepalive().unwrap());
        // The kernel counts keepalive times in whole seconds.
        assert_eq!(sock.keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(sock.keepalive_interval().unwrap(), Duration::from_secs(1));
        assert_eq!(sock.keepalive_retries().unwrap(), PROBES);
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(timeouts.budget));
    }

    #[test]
    fn keepalive_times_scale_with_the_budget_and_stay_above_a_second() {
        let s = Duration::from_secs;
        assert_eq!(keepalive_times(s(60)), (s(30), s(6)));
        assert_eq!(keepalive_times(Duration::from_millis(50)), (s(1), s(1)));
    }
}
