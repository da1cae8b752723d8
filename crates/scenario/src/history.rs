//! From invocations to one lincheck history, epoch by epoch.
//!
//! A node's memory is volatile: each `serve` process is an *epoch* whose table starts empty
//! (the scenario creates it again after each start). An epoch spans from the spawn of its
//! `serve` to the moment that process was reaped. Every key is named `e<epoch>:<key>` in the
//! history, so the epochs are independent parts of one history, each starting empty.
//!
//! - An invocation whose interval lies within one epoch's span goes to that epoch with its
//!   classified result (it can only have reached that node).
//! - One whose interval touches several epochs spans a restart: it may have taken effect on
//!   any of those nodes, or none; it goes to each as *unknown* (or *failed*, if it failed
//!   before it touched a table).
//! - One whose interval touches no epoch ran wholly while no node was up: it must have failed;
//!   if it did not, that is a violation by itself (no history needed).
//! - An exit 4 (no table) from an invocation started after its epoch's table was created is a
//!   violation too: a table's name does not go away while its node is up.

use crate::classify::{Classified, EXIT_NO_TABLE, is_failure};
use crate::invoke::{Ended, Invocation};
use lincheck::kv::{Op, Outcome};
use lincheck::{Entry, Status};
use std::collections::BTreeSet;

/// One `serve` process's life, on the run's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochSpan {
    /// When it was spawned.
    pub spawned: u64,
    /// When it was reaped (`None`: never, in the run).
    pub reaped: Option<u64>,
    /// When the `kv create` of its table completed (`None`: never).
    pub table: Option<u64>,
}

impl EpochSpan {
    fn touches(&self, invoke: u64, complete: u64) -> bool {
        invoke <= self.reaped.unwrap_or(u64::MAX) && complete >= self.spawned
    }
}

/// The quiescent `kv scan` at the end of the run: every key of the last epoch read at once.
#[derive(Clone, Debug)]
pub struct FinalScan {
    /// The epoch it ran in.
    pub epoch: usize,
    /// Its interval.
    pub invoke: u64,
    /// Its interval's end.
    pub complete: u64,
    /// The keys and values it printed.
    pub pairs: Vec<(String, String)>,
}

/// The client id of the final scan's reads.
pub const SCAN_CLIENT: u64 = 1_000_000;

/// The history and what building it found.
#[derive(Debug, Default)]
pub struct Built {
    /// The history (keys `e<epoch>:<key>`).
    pub history: lincheck::kv::History,
    /// Invocations that ran wholly while no node was up (all must have failed).
    pub while_down: usize,
    /// Invocations that spanned a restart.
    pub spanning: usize,
    /// Violations found without the checker.
    pub violations: Vec<String>,
}

/// The history key of `key` in epoch `epoch`.
pub fn epoch_key(epoch: usize, key: &str) -> String {
    format!("e{epoch}:{key}")
}

/// Builds the history of `invocations` (classified as `classes`) over `epochs`, with the
/// final scan's reads.
pub fn build(
    epochs: &[EpochSpan],
    invocations: &[Invocation],
    classes: &[Classified],
    scan: Option<&FinalScan>,
) -> Built {
    let mut built = Built::default();
    let mut entries: Vec<Entry<Op, Outcome>> = Vec::new();
    for (inv, class) in invocations.iter().zip(classes) {
        let (invoke, complete) = (inv.ran.invoke, inv.ran.complete);
        let hit: Vec<usize> = (0..epochs.len())
            .filter(|&k| epochs[k].touches(invoke, complete))
            .collect();
        let entry = |k: usize, status: Status<Outcome>| Entry {
            client: inv.client,
            invoke,
            complete: Some(complete),
            op: inv.op.to_lincheck(epoch_key(k, inv.op.key())),
            status,
        };
        match hit.as_slice() {
            [] => {
                built.while_down += 1;
                if !is_failure(&inv.op, inv.ran.ended) {
                    built.violations.push(format!(
                        "loop {} invocation {} ({} {}) ran wholly while no node was up \
                         [{invoke}, {complete}] and ended {}: {:?}",
                        inv.client,
                        inv.seq,
                        inv.op.name(),
                        inv.op.key(),
                        inv.ran.ended,
                        inv.ran.stdout.trim()
                    ));
                }
            }
            [k] => {
                let k = *k;
                if inv.ran.ended == Ended::Exit(EXIT_NO_TABLE)
                    && epochs[k].table.is_some_and(|t| invoke > t)
                {
                    built.violations.push(format!(
                        "loop {} invocation {} ({} {}) found no table at [{invoke}, \
                         {complete}] though node {k} had created it at {}",
                        inv.client,
                        inv.seq,
                        inv.op.name(),
                        inv.op.key(),
                        epochs[k].table.unwrap_or_default()
                    ));
                }
                entries.push(entry(k, class.status.clone()));
            }
            several => {
                built.spanning += 1;
                for &k in several {
                    let status = match class.status {
                        Status::Failed => Status::Failed,
                        _ => Status::Unknown,
                    };
                    entries.push(entry(k, status));
                }
            }
        }
    }
    if let Some(scan) = scan {
        let prefix = epoch_key(scan.epoch, "");
        let mut keys: BTreeSet<String> = entries
            .iter()
            .map(|e| e.op.key())
            .filter(|k| k.starts_with(&prefix))
            .map(str::to_string)
            .collect();
        keys.extend(scan.pairs.iter().map(|(k, _)| epoch_key(scan.epoch, k)));
        for key in keys {
            let raw = &key[prefix.len()..];
            let outcome = match scan.pairs.iter().find(|(k, _)| k == raw) {
                Some((_, v)) => Outcome::value(v.clone()),
                None => Outcome::Absent,
            };
            entries.push(Entry {
                client: SCAN_CLIENT,
                invoke: scan.invoke,
                complete: Some(scan.complete),
                op: Op::get(key),
                status: Status::Done(outcome),
            });
        }
    }
    entries.sort_by_key(|e| (e.invoke, e.client));
    // Every entry has complete >= invoke: from_entries cannot fail on them.
    built.history =
        lincheck::kv::History::from_entries(Default::default(), entries).unwrap_or_default();
    built
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;
    use crate::invoke::{KvOp, Ran};

    fn inv(
        client: u64,
        op: KvOp,
        invoke: u64,
        complete: u64,
        ended: Ended,
        out: &str,
    ) -> Invocation {
        Invocation {
            client,
            seq: invoke,
            op,
            ran: Ran {
                pid: 1,
                invoke,
                complete,
                ended,
                stdout: out.into(),
                stderr: if ended == Ended::Exit(1) {
                    "error: cannot reach the memory node at 127.0.0.1:1: refused\n".into()
                } else {
                    String::new()
                },
            },
        }
    }

    fn put(v: &str) -> KvOp {
        KvOp::Put {
            key: "k".into(),
            value: v.into(),
        }
    }

    fn get() -> KvOp {
        KvOp::Get { key: "k".into() }
    }

    fn classes(invs: &[Invocation]) -> Vec<Classified> {
        invs.iter()
            .map(|i| classify(&i.op, i.ran.ended, &i.ran.stdout, &i.ran.stderr))
            .collect()
    }

    const OK: Ended = Ended::Exit(0);

    /// Node 0 lives [0, 100], node 1 [150, ∞).
    fn epochs() -> Vec<EpochSpan> {
        vec![
            EpochSpan {
                spawned: 0,
                reaped: Some(100),
                table: Some(5),
            },
            EpochSpan {
                spawned: 150,
                reaped: None,
                table: Some(160),
            },
        ]
    }

    #[test]
    fn epochs_split_the_history_and_restarts_make_spanning_ops_unknown() {
        let invs = vec![
            inv(1, put("a"), 10, 20, OK, "inserted\n"),
            // Across the restart: unknown in both epochs.
            inv(2, put("b"), 90, 170, OK, "updated\n"),
            // Wholly while down: failed to connect, as it must.
            inv(3, put("c"), 110, 140, Ended::Exit(1), ""),
            // The new node's table starts empty: the old write is gone.
            inv(1, get(), 200, 210, Ended::Exit(3), ""),
        ];
        let b = build(&epochs(), &invs, &classes(&invs), None);
        assert!(b.violations.is_empty(), "{:?}", b.violations);
        assert_eq!((b.while_down, b.spanning), (1, 1));
        let e = b.history.entries();
        assert_eq!(e.len(), 4);
        assert_eq!(e[0].op, Op::put("e0:k", "a"));
        assert_eq!(e[1].op, Op::put("e0:k", "b"));
        assert_eq!(e[1].status, Status::Unknown);
        assert_eq!(e[2].op, Op::put("e1:k", "b"));
        assert_eq!(e[2].status, Status::Unknown);
        assert_eq!(e[3].op, Op::get("e1:k"));
        assert!(lincheck::check_kv(&b.history, lincheck::Budget::default()).is_linearizable());
    }

    #[test]
    fn success_while_down_and_a_vanished_table_are_violations() {
        let invs = vec![
            inv(3, put("c"), 110, 140, OK, "inserted\n"),
            inv(4, get(), 170, 180, Ended::Exit(4), ""),
            // Before the table was created, no table is an answer.
            inv(4, get(), 152, 158, Ended::Exit(4), ""),
        ];
        let b = build(&epochs(), &invs, &classes(&invs), None);
        assert_eq!(b.violations.len(), 2, "{:?}", b.violations);
        assert!(b.violations[0].contains("while no node was up"));
        assert!(b.violations[1].contains("found no table"));
    }

    #[test]
    fn the_final_scan_reads_every_key_of_the_last_epoch() {
        let invs = vec![
            inv(1, put("a"), 200, 210, OK, "inserted\n"),
            inv(
                2,
                KvOp::Put {
                    key: "f".into(),
                    value: "x".into(),
                },
                220,
                230,
                OK,
                "inserted\n",
            ),
        ];
        let lost = FinalScan {
            epoch: 1,
            invoke: 300,
            complete: 310,
            pairs: vec![("k".into(), "a".into())],
        };
        let b = build(&epochs(), &invs, &classes(&invs), Some(&lost));
        let scan_reads: Vec<_> = b
            .history
            .entries()
            .iter()
            .filter(|e| e.client == SCAN_CLIENT)
            .collect();
        assert_eq!(scan_reads.len(), 2);
        // `f` was acknowledged but the scan does not show it: a lost write.
        let v = lincheck::check_kv(&b.history, lincheck::Budget::default());
        let w = v.witness().expect("a violation");
        assert_eq!(w.key.as_deref(), Some("e1:f"));
    }
}
