//! Sentences that compare measured numbers, built from the numbers themselves, so that a
//! report cannot say "degrades" when a run stayed flat: a single run against another changes
//! only beyond [`NOISE`], and repeated runs differ only when their spreads do not overlap.

use std::fmt;

/// The relative change below which one run against another (on 2 cores shared with the
/// clients) is called flat: the bound Figure 6's single-run flow-control check uses.
pub const NOISE: f64 = 0.05;

/// Which way a number moved, or that it did not beyond the noise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Within the noise (single runs) or overlapping spreads (repeated runs).
    Flat,
    /// Higher beyond the noise, or higher in every run.
    Up,
    /// Lower beyond the noise, or lower in every run.
    Down,
}

/// How `after` compares with `before` in single runs: [`Change::Flat`] when the relative
/// change is within [`NOISE`] of `before` (and when `before` is zero or not finite).
pub fn change(before: f64, after: f64) -> Change {
    if !(before.is_finite() && after.is_finite()) || before <= 0.0 {
        return Change::Flat;
    }
    let rel = after / before - 1.0;
    if rel > NOISE {
        Change::Up
    } else if rel < -NOISE {
        Change::Down
    } else {
        Change::Flat
    }
}

/// The trend from `before` to `after` (both in `unit`) as a phrase: "stays flat (126.8 →
/// 126.4 Kops/s)", "drops by 23 % (126.8 → 97.6 Kops/s)" or "rises by 12 % (…)".
pub fn trend(before: f64, after: f64, unit: &str) -> String {
    let numbers = format!("({before:.1} → {after:.1} {unit})");
    let pct = (after / before - 1.0).abs() * 100.0;
    match change(before, after) {
        Change::Flat => format!("stays flat {numbers}"),
        Change::Up => format!("rises by {pct:.0} % {numbers}"),
        Change::Down => format!("drops by {pct:.0} % {numbers}"),
    }
}

/// Repeated runs of one measurement: the median run and the lowest and highest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median (of an even count, the lower of the two middle runs: a run that happened).
    pub median: f64,
    /// The lowest run.
    pub min: f64,
    /// The highest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (`None` when there are none).
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Spread {
            median: *v.get((v.len().checked_sub(1)?) / 2)?,
            min: *v.first()?,
            max: *v.last()?,
        })
    }

    /// How `self` compares with `other`: [`Change::Up`] when every run of `self` is above
    /// every run of `other`, [`Change::Down`] when every one is below, else a tie.
    pub fn against(&self, other: &Spread) -> Change {
        if self.min > other.max {
            Change::Up
        } else if self.max < other.min {
            Change::Down
        } else {
            Change::Flat
        }
    }

    /// `self` against `other` as a phrase ("12 % lower in every run (…)", "a tie: the runs'
    /// spreads overlap (…)"), with both spreads and the medians' ratio, in `unit`.
    pub fn versus(&self, other: &Spread, name: &str, other_name: &str, unit: &str) -> String {
        let ratio = self.median / other.median;
        let pct = (ratio - 1.0).abs() * 100.0;
        let numbers = format!(
            "{name} {self} vs {other_name} {other} {unit}, median (lowest–highest run); medians {ratio:.2}×"
        );
        match self.against(other) {
            Change::Flat => format!("a tie: the runs' spreads overlap — {numbers}"),
            Change::Up => format!("{pct:.0} % higher in every run — {numbers}"),
            Change::Down => format!("{pct:.0} % lower in every run — {numbers}"),
        }
    }
}

impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn single_runs_move_only_beyond_the_noise() {
        assert_eq!(change(126.8, 126.4), Change::Flat);
        assert_eq!(change(100.0, 104.9), Change::Flat);
        assert_eq!(change(100.0, 94.0), Change::Down);
        assert_eq!(change(100.0, 106.0), Change::Up);
        assert_eq!(change(0.0, 5.0), Change::Flat);
        assert_eq!(
            trend(126.8, 126.4, "Kops/s"),
            "stays flat (126.8 → 126.4 Kops/s)"
        );
        assert_eq!(
            trend(100.0, 77.0, "Kops/s"),
            "drops by 23 % (100.0 → 77.0 Kops/s)"
        );
        assert_eq!(
            trend(100.0, 112.0, "µs"),
            "rises by 12 % (100.0 → 112.0 µs)"
        );
    }

    #[test]
    fn overlapping_spreads_are_ties() {
        let a = Spread::of(&[10.0, 12.0, 11.0]).unwrap();
        assert_eq!(
            a,
            Spread {
                median: 11.0,
                min: 10.0,
                max: 12.0
            }
        );
        let b = Spread::of(&[11.5, 13.0, 14.0]).unwrap();
        let c = Spread::of(&[20.0, 21.0]).unwrap();
        assert_eq!(c.median, 20.0);
        assert_eq!(a.against(&b), Change::Flat);
        assert_eq!(a.against(&c), Change::Down);
        assert_eq!(c.against(&a), Change::Up);
        assert!(a.versus(&b, "x", "y", "u").starts_with("a tie"));
        assert!(
            c.versus(&a, "x", "y", "u")
                .starts_with("82 % higher in every run")
        );
        assert!(Spread::of(&[]).is_none());
    }
}
