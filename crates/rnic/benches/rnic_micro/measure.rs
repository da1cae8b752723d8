//! Timing and statistics helpers: the only code here that reads real time.

use anyhow::{Result, anyhow};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[allow(clippy::disallowed_methods)] // benchmarks are drivers that read real time
pub(crate) fn now() -> Instant {
    Instant::now()
}

#[allow(clippy::disallowed_methods)] // benchmarks are drivers that read real time (report stamp)
pub(crate) fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Median cost of one `now()` pair: every latency sample includes it once.
pub(crate) fn timer_overhead_ns() -> u64 {
    let mut v: Vec<u64> = (0..10_001)
        .map(|_| {
            let t0 = now();
            ns(now() - t0)
        })
        .collect();
    median(&mut v)
}

pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(crate) fn new_hist() -> Result<Histogram<u64>> {
    // 1 ns .. 100 s with 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).map_err(|e| anyhow!("histogram: {e}"))
}

/// Percentiles of one latency distribution, in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lat {
    pub(crate) samples: u64,
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) mean: f64,
    pub(crate) min: u64,
    pub(crate) max: u64,
}

impl Lat {
    pub(crate) fn of(h: &Histogram<u64>) -> Lat {
        Lat {
            samples: h.len(),
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            mean: h.mean(),
            min: h.min(),
            max: h.max(),
        }
    }
    pub(crate) fn json(&self) -> Value {
        json!({
            "samples": self.samples, "p50_ns": self.p50, "p99_ns": self.p99,
            "mean_ns": self.mean, "min_ns": self.min, "max_ns": self.max,
        })
    }
}

/// The median of `v` (sorted in place); 0 for none.
fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2
    }
}

pub(crate) fn fmt_ns(v: u64) -> String {
    let f = v as f64;
    if f >= 1e9 {
        format!("{:.2} s", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.2} ms", f / 1e6)
    } else if f >= 1e4 {
        format!("{:.1} us", f / 1e3)
    } else {
        format!("{v} ns")
    }
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// Times `op` after `warmup` untimed runs, until `iters` samples or `budget` of sampling time
/// (whichever comes first, so a loaded machine cannot stretch the run without bound).
pub(crate) fn sample(
    warmup: u64,
    iters: u64,
    budget: Duration,
    mut op: impl FnMut() -> Result<()>,
) -> Result<Lat> {
    for _ in 0..warmup {
        op()?;
    }
    let mut hist = new_hist()?;
    let deadline = now() + budget;
    for _ in 0..iters {
        let t0 = now();
        op()?;
        let t1 = now();
        hist.saturating_record(ns(t1 - t0));
        if t1 > deadline {
            break;
        }
    }
    Ok(Lat::of(&hist))
}
