//! Explanations taken from what a run counted, not fixed sentences: the lease and control-path
//! counters the client library keeps ([`ClientStats`](patronus_core::client::ClientStats),
//! put in rows by [`with_client_stats`](super::driver::with_client_stats)) and the memory
//! node's CPU per operation. A check that fails names the counters that explain it; when none
//! does, it says the cause is unknown.

use crate::harness::{Check, Row};

/// Wasted grants (ended before their first access) allowed per row, as a fraction.
pub const MAX_WASTED: f64 = 0.01;

/// What a row counted about leases, in one phrase; `None` for rows without grants counted.
pub fn leases(r: &Row) -> Option<String> {
    let grants = r.get_f64("grants").filter(|&g| g > 0.0)?;
    Some(format!(
        "{grants:.0} grants, {:.2} % wasted ({:.0} dead on arrival), control round trip p50 {:.0} µs / p99 {:.0} µs, lease slack {:.0} µs, {:.0} RPC retries",
        r.get_f64("grants_wasted_pct").unwrap_or(0.0),
        r.get_f64("grants_dead_on_arrival").unwrap_or(0.0),
        r.get_f64("ctrl_rtt_p50_us").unwrap_or(0.0),
        r.get_f64("ctrl_rtt_p99_us").unwrap_or(0.0),
        r.get_f64("lease_slack_us").unwrap_or(0.0),
        r.get_f64("rpc_retries").unwrap_or(0.0),
    ))
}

/// What a row counted about extensions, in one phrase.
pub fn extensions(r: &Row) -> String {
    let g = |k: &str| r.get_f64(k).unwrap_or(0.0);
    format!(
        "{}: {:.0} CAS and {:.0} RPC extensions, {:.0} refused, {:.0} local expiries",
        r.mechanism,
        g("cas_extensions"),
        g("rpc_extensions"),
        g("extension_refusals"),
        g("local_expiries")
    )
}

/// The memory node's CPU per operation of a row, split into manager and engine threads.
fn node_cpu(r: &Row) -> String {
    format!(
        "{:.1} µs of memory-node CPU per op (manager {:.1}, NIC engine {:.1})",
        r.mn_cpu_us_per_op,
        r.get_f64("mn_manager_cpu_us_per_op").unwrap_or(0.0),
        r.get_f64("mn_engine_cpu_us_per_op").unwrap_or(0.0),
    )
}

/// "At most 1 % of grants wasted" over `rows` (those with client counts).
pub fn wasted_check<'a>(what: &str, rows: impl IntoIterator<Item = &'a Row>) -> Option<Check> {
    let counted: Vec<&Row> = rows
        .into_iter()
        .filter(|r| r.get_f64("grants").is_some_and(|g| g > 0.0))
        .collect();
    let worst = counted.iter().copied().max_by(|a, b| {
        let w = |r: &Row| r.get_f64("grants_wasted_pct").unwrap_or(0.0);
        w(a).total_cmp(&w(b))
    })?;
    let pct = worst.get_f64("grants_wasted_pct").unwrap_or(0.0);
    Some(Check {
        claim: format!(
            "{what}: at most {:.0} % of grants wasted (ended before their first access) in every row",
            MAX_WASTED * 100.0
        ),
        holds: pct <= MAX_WASTED * 100.0,
        detail: format!(
            "worst row {} × {}: {}",
            worst.mechanism,
            worst.clients,
            leases(worst).unwrap_or_default()
        ),
    })
}

/// Why `ours` (Patronus) fell behind `theirs` in throughput, from what both rows measured.
pub fn throughput_gap(ours: &Row, theirs: &Row) -> String {
    let mut causes = Vec::new();
    let wasted = ours.get_f64("grants_wasted_pct").unwrap_or(0.0);
    if wasted > MAX_WASTED * 100.0 {
        causes.push(format!("{wasted:.1} % of grants were wasted"));
    }
    if ours.mn_cpu_us_per_op > 1.2 * theirs.mn_cpu_us_per_op {
        causes.push(format!(
            "the memory node spent more CPU per op: {} vs {} for {}",
            node_cpu(ours),
            node_cpu(theirs),
            theirs.mechanism
        ));
    }
    if ours.p50_us > 1.2 * theirs.p50_us {
        causes.push(format!(
            "each access waited longer: p50 {:.1} µs vs {:.1} µs",
            ours.p50_us, theirs.p50_us
        ));
    }
    let leases = leases(ours).map_or_else(String::new, |l| format!(" Patronus: {l}."));
    if causes.is_empty() {
        format!(
            ". Cause unknown: no counter measured in this run explains it (grants not wasted, node CPU and access latency not higher).{leases}"
        )
    } else {
        format!(". Measured in this run: {}.{leases}", causes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mech: &str, wasted_pct: Option<f64>, cpu: f64, p50: f64) -> Row {
        let mut r = Row::new(mech, 64);
        r.mn_cpu_us_per_op = cpu;
        r.p50_us = p50;
        match wasted_pct {
            Some(w) => r.with("grants", 1000).with("grants_wasted_pct", w),
            None => r,
        }
    }

    #[test]
    fn the_wasted_check_names_the_worst_row() {
        let rows = [
            row("Patronus", Some(0.2), 1.0, 1.0),
            row("Patronus", Some(3.5), 1.0, 1.0),
            row("MR", None, 1.0, 1.0),
        ];
        let c = wasted_check("fig5", rows.iter()).unwrap();
        assert!(!c.holds);
        assert!(c.detail.contains("3.50 % wasted"), "{}", c.detail);
        assert!(wasted_check("fig5", rows[..1].iter()).unwrap().holds);
        assert!(wasted_check("fig5", rows[2..].iter()).is_none());
    }

    #[test]
    fn a_gap_is_explained_by_what_differs_or_called_unknown() {
        let mr = row("MR", None, 10.0, 10.0);
        let why = throughput_gap(&row("Patronus", Some(5.0), 30.0, 10.0), &mr);
        assert!(why.contains("5.0 % of grants were wasted"), "{why}");
        assert!(why.contains("more CPU per op"), "{why}");
        assert!(!why.contains("waited longer"), "{why}");
        let why = throughput_gap(&row("Patronus", Some(0.1), 10.0, 10.0), &mr);
        assert!(why.contains("Cause unknown"), "{why}");
    }
}
