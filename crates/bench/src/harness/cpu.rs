//! CPU clocks: how much processor time a thread (or the process) has consumed, to charge
//! memory-node CPU per operation. Reading a CPU clock is not reading wall time, so these are
//! allowed where `Instant::now` is not.

pub use rnic::{process_cpu_time as process_cpu, thread_cpu_time as thread_cpu};

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Burns a little CPU deterministically (no sleeping, no clock in the loop condition).
    fn spin() -> u64 {
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        x
    }

    #[test]
    fn clocks_are_monotonic_and_process_covers_thread() {
        let t0 = thread_cpu();
        let p0 = process_cpu();
        std::hint::black_box(spin());
        let t1 = thread_cpu();
        let p1 = process_cpu();
        assert!(t1 >= t0);
        assert!(p1 >= p0);
        assert!(t1 > Duration::ZERO, "thread CPU clock unreadable");
        assert!(p1 >= t1, "process CPU {p1:?} < thread CPU {t1:?}");
    }
}
