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

/// The CPU clock of one thread of this process, readable from any of its threads: a thread
/// that must not pay a system call per busy streak to account for its time (an engine that
/// parks after every frame) leaves the reading to whoever asks. Exact whether the thread runs
/// or sleeps (the kernel's per-thread CPU clock, the one `pthread_getcpuclockid` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCpuClock {
    tid: i32,
}

impl ThreadCpuClock {
    /// The calling thread's clock.
    pub fn of_current_thread() -> Self {
        ThreadCpuClock {
            tid: nix::unistd::gettid().as_raw(),
        }
    }

    /// CPU time the thread has used so far; `None` once it has exited.
    pub fn read(&self) -> Option<Duration> {
        // Linux's clock id of a thread's scheduler CPU clock: the thread id, complemented and
        // shifted, with the "per thread" (4) and "scheduler" (2) bits (MAKE_THREAD_CPUCLOCK in
        // the kernel's posix-timers.h, a stable ABI glibc relies on).
        let id = (!self.tid << 3) | 6;
        nix::time::clock_gettime(nix::time::ClockId::from_raw(id))
            .ok()
            .map(Duration::from)
    }
}

/// CPU time all threads of this process have used so far (`CLOCK_PROCESS_CPUTIME_ID`);
/// `Duration::ZERO` if the clock cannot be read.
pub fn process_cpu_time() -> Duration {
    cpu_clock(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: nix::time::ClockId) -> Duration {
    nix::time::clock_gettime(clock).map_or(Duration::ZERO, Duration::from)
}

#[cfg(test)]
mod cpu_clock_tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // the test needs a second thread to read from
    fn a_threads_cpu_clock_read_from_another_thread_matches_its_own() {
        let (to_main, from_worker) = std::sync::mpsc::channel();
        let (to_worker, from_main) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let clock = ThreadCpuClock::of_current_thread();
            let mut x = 0u64;
            while thread_cpu_time() < Duration::from_millis(5) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let own = thread_cpu_time();
            to_main.send((clock, own)).unwrap();
            from_main.recv().unwrap();
            thread_cpu_time()
        });
        let (clock, own) = from_worker.recv().unwrap();
        let seen = clock.read().expect("the worker is alive");
        assert!(seen >= own, "read from outside {seen:?} < its own {own:?}");
        to_worker.send(()).unwrap();
        let last = worker.join().unwrap();
        assert!(
            seen <= last,
            "read from outside {seen:?} > its final {last:?}"
        );
        assert_ne!(clock, ThreadCpuClock::of_current_thread());
    }
}
