//! The fault schedule: drawn from the seed before the run starts, so a seed names its faults
//! (which loop, when, for how long); which process a kv fault reaches is whatever that loop
//! runs at that moment, and the log says which.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt;

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL the `kv` process loop `target` is running: its operation's outcome is unknown.
    KillKv {
        /** The loop. */
        target: u64,
    },
    /// SIGSTOP the `kv` process loop `target` is running, SIGCONT it `ms` later: past its
    /// 100 ms leases, so its permissions end meanwhile.
    StopKv {
        /** The loop. */
        target: u64,
        /** How long it stays stopped. */
        ms: u64,
    },
    /// SIGSTOP `serve`, SIGCONT it `ms` later (some past `kv`'s 5 s request timeout).
    StopServe {
        /** How long it stays stopped. */
        ms: u64,
    },
    /// End `serve` (SIGKILL if `crash`, else SIGTERM: a drain), start a new one `down_ms`
    /// after the old one was reaped, and create the table again (the memory is volatile).
    RestartServe {
        /** SIGKILL rather than SIGTERM. */
        crash: bool,
        /** How long the node stays down. */
        down_ms: u64,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillKv { target } => write!(f, "SIGKILL kv loop {target}"),
            Fault::StopKv { target, ms } => write!(f, "SIGSTOP kv loop {target} for {ms} ms"),
            Fault::StopServe { ms } => write!(f, "SIGSTOP serve for {ms} ms"),
            Fault::RestartServe { crash, down_ms } => write!(
                f,
                "restart serve ({}, down {down_ms} ms)",
                if *crash { "SIGKILL" } else { "SIGTERM" }
            ),
        }
    }
}

/// A fault and when (ms after the loops started).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// When.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub fault: Fault,
}

/// Quiet time after a serve fault (stop or restart) before the next one.
const SERVE_GAP_MS: u64 = 6_000;
/// No fault in the first 3 s (the loops warm up) nor in the last 4 s.
const HEAD_MS: u64 = 3_000;
const TAIL_MS: u64 = 4_000;
/// A restart needs this much of the run after it (drain, down time, a new table, work).
const RESTART_TAIL_MS: u64 = 10_000;

/// How long serve is busy with a fault that starts at `at_ms`: from then to the end of its
/// quiet time.
fn serve_span(p: &Planned) -> Option<(u64, u64)> {
    let len = match p.fault {
        Fault::StopServe { ms } => ms,
        // A drain takes up to a second (shutdown_grace_ms), a start and a create a few more.
        Fault::RestartServe { down_ms, .. } => down_ms + 3_000,
        _ => return None,
    };
    Some((p.at_ms, p.at_ms + len + SERVE_GAP_MS))
}

/// The schedule of a run of `duration_ms` with `loops` loops, seeded: a fault every 1.5 to 4
/// s, 30% SIGKILL kv, 30% SIGSTOP kv, 20% SIGSTOP serve, 20% restart serve (serve faults
/// kept apart); runs of 30 s or more always get at least one serve stop and one restart.
pub fn plan(seed: u64, duration_ms: u64, loops: u64) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let short_stop = |rng: &mut StdRng| Fault::StopServe {
        ms: rng.random_range(200..3_000),
    };
    let serve_stop = |rng: &mut StdRng| {
        if rng.random_bool(0.25) {
            Fault::StopServe {
                ms: rng.random_range(5_000..7_000),
            }
        } else {
            short_stop(rng)
        }
    };
    let restart = |rng: &mut StdRng| Fault::RestartServe {
        crash: rng.random_bool(0.5),
        down_ms: rng.random_range(300..2_000),
    };
    let mut planned: Vec<Planned> = Vec::new();
    if duration_ms >= 30_000 {
        let at = |rng: &mut StdRng, lo: f64, hi: f64| {
            (duration_ms as f64 * rng.random_range(lo..hi)) as u64
        };
        let stop = Planned {
            at_ms: at(&mut rng, 0.15, 0.3),
            fault: short_stop(&mut rng),
        };
        let after_stop = serve_span(&stop).map_or(0, |(_, end)| end);
        planned.push(stop);
        planned.push(Planned {
            at_ms: at(&mut rng, 0.45, 0.6)
                .max(after_stop)
                .min(duration_ms - RESTART_TAIL_MS),
            fault: restart(&mut rng),
        });
    }
    let mut t = HEAD_MS;
    loop {
        t += rng.random_range(1_500..4_000);
        if t + TAIL_MS > duration_ms {
            break;
        }
        let target = rng.random_range(0..loops.max(1));
        let roll = rng.random_range(0..100u32);
        let kv_fault = |rng: &mut StdRng| {
            if rng.random_bool(0.5) {
                Fault::KillKv { target }
            } else {
                Fault::StopKv {
                    target,
                    ms: rng.random_range(200..1_500),
                }
            }
        };
        let fault = match roll {
            0..60 => kv_fault(&mut rng),
            60..80 => serve_stop(&mut rng),
            _ if t + RESTART_TAIL_MS <= duration_ms => restart(&mut rng),
            _ => kv_fault(&mut rng),
        };
        let mut p = Planned { at_ms: t, fault };
        if let Some((a, b)) = serve_span(&p) {
            let clash = planned
                .iter()
                .filter_map(serve_span)
                .any(|(c, d)| a < d && c < b);
            if clash || b > duration_ms + SERVE_GAP_MS {
                p.fault = kv_fault(&mut rng);
            }
        }
        planned.push(p);
    }
    planned.sort_by_key(|p| p.at_ms);
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_seeded_with_serve_faults_apart() {
        assert_eq!(plan(3, 60_000, 10), plan(3, 60_000, 10));
        assert_ne!(plan(3, 60_000, 10), plan(4, 60_000, 10));
        for seed in 0..200 {
            let p = plan(seed, 60_000, 10);
            assert!(p.len() >= 10, "{p:?}");
            assert!(p.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
            let spans: Vec<_> = p.iter().filter_map(serve_span).collect();
            for (i, (a, b)) in spans.iter().enumerate() {
                for (c, d) in &spans[i + 1..] {
                    assert!(b <= c || d <= a, "seed {seed}: {p:?}");
                }
            }
            let has = |f: fn(&Fault) -> bool| p.iter().any(|x| f(&x.fault));
            assert!(has(|f| matches!(f, Fault::RestartServe { .. })), "{seed}");
            assert!(has(|f| matches!(f, Fault::StopServe { .. })), "{seed}");
            assert!(has(|f| matches!(f, Fault::KillKv { .. })), "{seed}");
            assert!(has(|f| matches!(f, Fault::StopKv { .. })), "{seed}");
            for x in &p {
                if let Fault::RestartServe { .. } = x.fault {
                    assert!(x.at_ms + RESTART_TAIL_MS <= 60_000, "{seed}: {x:?}");
                }
                if let Fault::KillKv { target } | Fault::StopKv { target, .. } = x.fault {
                    assert!(target < 10);
                }
            }
        }
        // A short run has kv faults only where serve faults do not fit.
        assert!(plan(1, 5_000, 4).is_empty());
        assert_eq!(
            Fault::RestartServe {
                crash: true,
                down_ms: 500
            }
            .to_string(),
            "restart serve (SIGKILL, down 500 ms)"
        );
    }
}
