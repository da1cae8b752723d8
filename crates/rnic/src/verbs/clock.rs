//! Time as a value: a microsecond [`Timestamp`] and an injectable [`Clock`].
//!
//! Sans-IO cores take `now` as an argument; only drivers hold a clock. Tests use
//! [`VirtualClock`] and advance it explicitly, so nothing waits on wall time.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Microseconds since an arbitrary, per-clock epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The epoch.
    pub const ZERO: Timestamp = Timestamp(0);
    /// `self + d`, saturating.
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.as_micros() as u64))
    }
    /// `self + us` microseconds, saturating.
    pub fn plus_us(self, us: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(us))
    }
    /// Time from `earlier` to `self` (zero if `earlier` is later).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}us", self.0)
    }
}

/// A source of time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// Wall time from a monotonic clock, in microseconds since the clock was made.
#[derive(Debug)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    /// A new clock whose epoch is now.
    #[allow(clippy::disallowed_methods)] // the one driver that reads real time
    pub fn new() -> Self {
        RealClock {
            origin: Instant::now(),
        }
    }
    /// A shared real clock.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(RealClock::new())
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.origin.elapsed().as_micros() as u64)
    }
}

/// A clock that moves only when told to. Shared by cloning the `Arc`.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now_us: AtomicU64,
}

impl VirtualClock {
    /// A virtual clock at time zero.
    pub fn new() -> Arc<Self> {
        Arc::new(VirtualClock::default())
    }
    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now_us
            .fetch_add(d.as_micros() as u64, Ordering::SeqCst);
    }
    /// Sets the time (never backwards).
    pub fn set(&self, t: Timestamp) {
        self.now_us.fetch_max(t.0, Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now_us.load(Ordering::SeqCst))
    }
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`): the one clock
/// behind every "CPU per operation" figure of the project (device engines, manager and server
/// threads, benchmark drivers). It is a system call: read it when a busy period starts and
/// ends, not around every operation. `Duration::ZERO` if the clock cannot be read.
pub fn thread_cpu_time() -> Duration {
    cpu_clock(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time all threads of this process have used so far (`CLOCK_PROCESS_CPUTIME_ID`);
/// `Duration::ZERO` if the clock cannot be read.
pub fn process_cpu_time() -> Duration {
    cpu_clock(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: nix::time::ClockId) -> Duration {
    nix::time::clock_gettime(clock).map_or(Duration::ZERO, Duration::from)
}
