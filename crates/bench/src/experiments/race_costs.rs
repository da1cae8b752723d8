//! What RACE operations cost in permission operations and one-sided operations, per
//! operation and per kind (lookups, updates), summed over a run's logical clients — Table 4's
//! way of counting (§5.4), for the data structure of §6.1. Each logical client adds an
//! operation's counts ([`RaceStats::since`] around it) when it completes, and hands its sums
//! over when it is dropped at the end of the run.

use crate::harness::Row;
use patronus_ods::race::RaceStats;

/// Counts of completed operations of one kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct KindCosts {
    /// Operations completed.
    pub ops: u64,
    /// Their counts, summed.
    pub sum: RaceStats,
}

impl KindCosts {
    /// Adds one completed operation's counts.
    pub fn add(&mut self, delta: &RaceStats) {
        self.ops += 1;
        self.sum = self.sum.plus(delta);
    }

    fn merge(&mut self, o: &KindCosts) {
        self.ops += o.ops;
        self.sum = self.sum.plus(&o.sum);
    }

    fn per_op(&self, n: u64) -> f64 {
        n as f64 / self.ops.max(1) as f64
    }
}

/// Lookups' and updates' counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunCosts {
    /// Lookups.
    pub get: KindCosts,
    /// Updates (copy-on-write: a new block, a CAS, the old block freed).
    pub put: KindCosts,
}

impl RunCosts {
    /// Adds another client's sums.
    pub fn merge(&mut self, o: &RunCosts) {
        self.get.merge(&o.get);
        self.put.merge(&o.put);
    }

    /// The row with per-operation columns: `get_*` and `put_*` (acquires, allocation round
    /// trips, objects allocated, frees, one-sided extensions, one-sided operations, batches,
    /// retries), for the kinds the run had.
    pub fn columns(&self, mut row: Row) -> Row {
        for (name, k) in [("get", &self.get), ("put", &self.put)] {
            if k.ops == 0 {
                continue;
            }
            let s = &k.sum;
            for (what, n) in [
                ("acquires", s.acquires),
                ("allocations", s.allocations),
                ("allocated", s.allocated),
                ("frees", s.frees),
                ("extends", s.extends),
                ("one_sided", s.one_sided_ops()),
                ("batches", s.batches),
                ("retries", s.retries),
                ("refused", s.rejected),
            ] {
                row = row.with(&format!("{name}_{what}_per_op"), round3(k.per_op(n)));
            }
        }
        row
    }

    /// One console line per kind: `lookup: 1.00 acquire, 2.0 batches ...`.
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.get.ops > 0 {
            let (k, s) = (&self.get, &self.get.sum);
            out.push(format!(
                "lookup: {:.2} acquire, {:.2} one-sided ops in {:.2} batches, {:.2} refused, \
                 {:.2} retries",
                k.per_op(s.acquires),
                k.per_op(s.one_sided_ops()),
                k.per_op(s.batches),
                k.per_op(s.rejected),
                k.per_op(s.retries)
            ));
        }
        if self.put.ops > 0 {
            let (k, s) = (&self.put, &self.put.sum);
            out.push(format!(
                "update: {:.2} allocate ({:.2} blocks), {:.2} acquire, {:.2} free, {:.2} extend, \
                 {:.2} one-sided ops in {:.2} batches, {:.2} refused, {:.2} retries",
                k.per_op(s.allocations),
                k.per_op(s.allocated),
                k.per_op(s.acquires),
                k.per_op(s.frees),
                k.per_op(s.extends),
                k.per_op(s.one_sided_ops()),
                k.per_op(s.batches),
                k.per_op(s.rejected),
                k.per_op(s.retries)
            ));
        }
        out
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
