//! Seeded multi-client RACE workloads whose whole history is checked for linearizability by
//! `lincheck` (a per-key register: put, insert, update, delete, get).
//!
//! Logical clients — each with its own connection — run their operations step by step in a
//! seeded random order on one thread, so a run replays exactly and the recorded times (the
//! scheduler's step count) order invocations and completions exactly. A few hot keys take
//! puts (insert, else update: what `patronus kv put` does), inserts, updates, deletes and
//! gets with unique values, while other operations insert fresh keys into a table made small
//! enough to split all the time. Faults, by seed: block READs refused on the way (a right
//! whose lease ran out while its batch waited), a client frozen past every lease it holds
//! (the virtual clock jumps while it is not scheduled; others may take over its split), and
//! a client that crashes mid-operation (its connection closes: the operation's outcome is
//! unknown; a new client takes its place). At the end every key is read once more, so a lost
//! write cannot hide. A history that is not linearizable fails the test with a minimal
//! witness, and the history and the witness are written to files named in the failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use lincheck::kv::{self, Op as KvOp, Outcome as KvOutcome};
use lincheck::{Budget, Ticket};
use patronus_core::cluster::Link;
use patronus_ods::race::{
    self, Delete, Insert, LockMode, Lookup, RaceConfig, RaceError, TableClient, Update,
};
use race_support::faulty::Faulty;
use race_support::{Mem, Rng, key, opts, settle, value};
use std::task::Poll;
use std::time::Duration;

type FMem = Faulty<Mem>;

/// The table shape: six slots per subtable, so it splits every few inserts.
fn tiny(lock: LockMode) -> RaceConfig {
    RaceConfig {
        slots: 2,
        max_depth: 14,
        ..race_support::small(lock)
    }
}

/// What a workload does.
#[derive(Clone, Copy, Debug)]
struct Workload {
    transport: Link,
    lock: LockMode,
    seed: u64,
    /// Logical clients, each on its own connection.
    clients: usize,
    /// Operations to start (the final reads come on top).
    ops: u64,
    hot_keys: u64,
    /// Per scheduled step: chance of refusing the next block READs of that client.
    refuse: f64,
    /// Per scheduled step: chance of freezing that client past its leases.
    freeze: f64,
    /// Per started operation: chance that its client crashes during it.
    crash: f64,
    /// Clients read a key's block beside its buckets on a guess (`ClientOptions::speculate`).
    speculate: bool,
}

/// A logical client's operation in flight.
#[allow(clippy::large_enum_variant)] // eight live at a time
enum Running {
    Get(Lookup),
    Insert(Insert<FMem>),
    Update(Update<FMem>),
    Delete(Delete<FMem>),
    /// `put`: insert, else update (again while they race with deletes).
    Put {
        insert: Option<Insert<FMem>>,
        update: Option<Update<FMem>>,
        key: Vec<u8>,
        value: Vec<u8>,
        rounds: u32,
    },
}

/// How a step ended.
enum Step {
    Pending,
    Done(KvOutcome),
    /// An error after which the operation may or may not have taken effect.
    Unknown(RaceError),
}

impl Running {
    fn step(&mut self, t: &mut TableClient<FMem>, m: &mut FMem) -> Step {
        let done =
            |r: Poll<Result<(), RaceError>>, ok: KvOutcome, err: (RaceError, KvOutcome)| match r {
                Poll::Pending => Step::Pending,
                Poll::Ready(Ok(())) => Step::Done(ok),
                Poll::Ready(Err(e)) if e == err.0 => Step::Done(err.1),
                Poll::Ready(Err(e)) => Step::Unknown(e),
            };
        match self {
            Running::Get(o) => match o.step(t, m) {
                Poll::Pending => Step::Pending,
                Poll::Ready(Ok(Some(v))) => Step::Done(KvOutcome::value(text(&v))),
                Poll::Ready(Ok(None)) => Step::Done(KvOutcome::Absent),
                Poll::Ready(Err(e)) => Step::Unknown(e),
            },
            Running::Insert(o) => done(
                o.step(t, m),
                KvOutcome::Inserted,
                (RaceError::KeyExists, KvOutcome::Exists),
            ),
            Running::Update(o) => done(
                o.step(t, m),
                KvOutcome::Updated,
                (RaceError::NotFound, KvOutcome::Absent),
            ),
            Running::Delete(o) => done(
                o.step(t, m),
                KvOutcome::Deleted,
                (RaceError::NotFound, KvOutcome::Absent),
            ),
            Running::Put {
                insert,
                update,
                key,
                value,
                rounds,
            } => {
                if let Some(o) = insert {
                    return match o.step(t, m) {
                        Poll::Pending => Step::Pending,
                        Poll::Ready(Ok(())) => Step::Done(KvOutcome::Inserted),
                        Poll::Ready(Err(RaceError::KeyExists)) => {
                            *insert = None;
                            *update = Some(Update::new(t, key, value).unwrap());
                            Step::Pending
                        }
                        Poll::Ready(Err(e)) => Step::Unknown(e),
                    };
                }
                let Some(o) = update else {
                    unreachable!("a put runs an insert or an update")
                };
                match o.step(t, m) {
                    Poll::Pending => Step::Pending,
                    Poll::Ready(Ok(())) => Step::Done(KvOutcome::Updated),
                    Poll::Ready(Err(RaceError::NotFound)) if *rounds < 8 => {
                        // Deleted meanwhile: insert again.
                        *rounds += 1;
                        *update = None;
                        *insert = Some(Insert::new(t, key, value).unwrap());
                        Step::Pending
                    }
                    Poll::Ready(Err(e)) => Step::Unknown(e),
                }
            }
        }
    }
}

fn running_stage(r: &Running) -> String {
    match r {
        Running::Get(o) => format!("get {:?}", o),
        Running::Insert(o) => format!(
            "insert {:?} {:?} split {:?}",
            o.stage(),
            o,
            o.split().map(|s| s.phase())
        ),
        Running::Update(o) => format!("update {:?}", o.stage()),
        Running::Delete(o) => format!("delete {:?}", o.stage()),
        Running::Put { insert, update, .. } => format!(
            "put {:?} {:?}",
            insert
                .as_ref()
                .map(|o| (o.stage(), o.split().map(|s| s.phase()))),
            update.as_ref().map(|o| o.stage())
        ),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Logical {
    table: TableClient<FMem>,
    mem: FMem,
    op: Option<(Running, Ticket, bool)>,
    /// Scheduled steps this client sits out (frozen).
    frozen: u64,
}

/// What a run did, for the report and its checks.
#[derive(Debug, Default)]
struct Totals {
    ops: u64,
    unknown: u64,
    errors: Vec<String>,
    crashes: u64,
    freezes: u64,
    refused: usize,
    splits: u64,
    takeovers: u64,
    /// Guessed blocks read, and those that saved a validation.
    guesses: (u64, u64),
}

/// Runs `w` and checks its history; returns what it did.
fn run(mut w: Workload) -> Totals {
    // Debugging aid: override the fault rates.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<f64>().ok());
    w.refuse = env("PATRONUS_RH_REFUSE").unwrap_or(w.refuse);
    w.freeze = env("PATRONUS_RH_FREEZE").unwrap_or(w.freeze);
    let spare = (w.ops as f64 * w.crash * 2.0) as usize + 2;
    let (bed, mems) = support::bed(
        w.transport,
        w.clients + spare,
        race_support::node_cfg(),
        race_support::client_cfg(),
    );
    let mut mems = mems.into_iter().map(Faulty::new);
    let mut first = mems.next().unwrap();
    let root = race::create(&mut first, tiny(w.lock)).unwrap();
    let o = race::ClientOptions {
        speculate: w.speculate,
        ..opts()
    };
    let block = u64::from(tiny(w.lock).block_size);
    let open = |mut mem: FMem| {
        mem.block_len = block;
        Logical {
            table: race::open(&mut mem, root, o).unwrap(),
            mem,
            op: None,
            frozen: 0,
        }
    };
    let mut clients: Vec<Logical> = std::iter::once(first)
        .chain(mems.by_ref().take(w.clients - 1))
        .map(open)
        .collect();
    let rec = kv::Recorder::new();
    // Debugging aid: PATRONUS_WATCH_KEY=<key> reads that key after every step through a
    // connection of its own and reports the step at which it vanished.
    let watch = std::env::var("PATRONUS_WATCH_KEY").ok();
    let mut watcher = watch.as_ref().map(|_| open(mems.next().unwrap()));
    let mut seen = false;
    let trace_from: Option<u64> = std::env::var("PATRONUS_TRACE_FROM")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut rng = Rng::new(w.seed);
    let mut totals = Totals::default();
    let (mut started, mut version, mut fresh, mut time) = (0u64, 0u64, 0u64, 0u64);
    let hot = |k: u64| format!("hot-{k}");
    while started < w.ops || clients.iter().any(|c| c.op.is_some()) {
        time += 1;
        let i = rng.below(clients.len() as u64) as usize;
        let c = &mut clients[i];
        if c.frozen > 0 {
            c.frozen -= 1;
            continue;
        }
        if c.op.is_none() {
            if started >= w.ops {
                continue;
            }
            started += 1;
            version += 1;
            let k = rng.below(w.hot_keys);
            let v = format!("v{version}-c{i}");
            let kb = hot(k).into_bytes();
            let (running, op) = match rng.below(20) {
                0..=5 => (Running::Get(Lookup::new(&c.table, &kb)), KvOp::get(hot(k))),
                6..=9 => (
                    Running::Put {
                        insert: Some(Insert::new(&c.table, &kb, v.as_bytes()).unwrap()),
                        update: None,
                        key: kb.clone(),
                        value: v.clone().into_bytes(),
                        rounds: 0,
                    },
                    KvOp::put(hot(k), v),
                ),
                10 => (
                    Running::Insert(Insert::new(&c.table, &kb, v.as_bytes()).unwrap()),
                    KvOp::insert(hot(k), v),
                ),
                11..=12 => (
                    Running::Update(Update::new(&c.table, &kb, v.as_bytes()).unwrap()),
                    KvOp::update(hot(k), v),
                ),
                13..=14 => (
                    Running::Delete(Delete::new(&c.table, &kb)),
                    KvOp::delete(hot(k)),
                ),
                _ => {
                    // A fresh key: the table grows and splits under everyone else.
                    fresh += 1;
                    let fk = key(fresh);
                    let fv = value(fresh, version);
                    (
                        Running::Insert(Insert::new(&c.table, &fk, &fv).unwrap()),
                        KvOp::insert(text(&fk), text(&fv)),
                    )
                }
            };
            let ticket = rec.invoke_at(i as u64, op, time);
            let crash = rng.chance(w.crash);
            c.op = Some((running, ticket, crash));
        }
        if rng.chance(w.refuse) {
            c.mem.refuse_block_reads += 1;
        }
        let Some((running, _, crash)) = c.op.as_mut() else {
            continue;
        };
        let stage = format!("{:?}", running_stage(running));
        let step = running.step(&mut c.table, &mut c.mem);
        settle(&c.table, &mut c.mem);
        if trace_from.is_some_and(|f| time >= f) {
            eprintln!(
                "t={time} c={i} {stage} refused={} -> {}",
                c.mem.refused,
                match &step {
                    Step::Pending => "pending".to_string(),
                    Step::Done(o) => format!("{o:?}"),
                    Step::Unknown(e) => format!("ERR {e}"),
                }
            );
        }
        if let (Some(k), Some(wt)) = (&watch, watcher.as_mut()) {
            let here = wt.table.get(&mut wt.mem, k.as_bytes()).unwrap().is_some();
            if seen && !here {
                let audit = wt.table.audit(&mut wt.mem).unwrap();
                let all = wt.table.scan(&mut wt.mem).unwrap();
                let found = all.iter().any(|(kk, _)| kk == k.as_bytes());
                panic!(
                    "{k} vanished at time {time}: client {i} stepped {stage}; {audit:?}; in scan: {found}"
                );
            }
            seen |= here;
        }
        let crash_now = *crash && matches!(step, Step::Pending) && rng.chance(0.3);
        match step {
            Step::Pending if crash_now => {
                // The client crashes mid-operation: its connection closes, its outcome is
                // unknown; a new client takes its place.
                let (_, ticket, _) = c.op.take().unwrap();
                rec.unknown(ticket);
                totals.crashes += 1;
                let replacement = mems.next().expect("a spare connection for the crash");
                let dead = std::mem::replace(c, open(replacement));
                totals.refused += dead.mem.refused;
                drop(dead);
            }
            Step::Pending => {
                if rng.chance(w.freeze) {
                    // Frozen past every lease it holds: the others go on meanwhile.
                    totals.freezes += 1;
                    if trace_from.is_some_and(|f| time >= f) {
                        eprintln!("t={time} c={i} FROZEN; clock jumps");
                    }
                    c.frozen = 50 + rng.below(200);
                    bed.clock
                        .advance(o.split_lease + o.fence_gap + Duration::from_millis(1));
                }
            }
            Step::Done(outcome) => {
                let (_, ticket, _) = c.op.take().unwrap();
                rec.complete_at(ticket, outcome, time);
                totals.ops += 1;
            }
            Step::Unknown(e) => {
                let (_, ticket, _) = c.op.take().unwrap();
                rec.unknown(ticket);
                totals.unknown += 1;
                totals.errors.push(e.to_string());
            }
        }
    }
    // Every key read once more, after everything else.
    let c = &mut clients[0];
    c.mem.refuse_block_reads = 0;
    let keys: Vec<String> = (0..w.hot_keys)
        .map(hot)
        .chain((1..=fresh).map(|f| text(&key(f))))
        .collect();
    for k in keys {
        time += 1;
        let ticket = rec.invoke_at(0, KvOp::get(k.clone()), time);
        let got = c.table.get(&mut c.mem, k.as_bytes()).unwrap();
        time += 1;
        let outcome = got.map_or(KvOutcome::Absent, |v| KvOutcome::value(text(&v)));
        rec.complete_at(ticket, outcome, time);
        totals.ops += 1;
    }
    for c in &clients {
        let s = c.table.stats();
        totals.splits += s.splits;
        totals.takeovers += s.takeovers;
        totals.guesses.0 += s.guesses;
        totals.guesses.1 += s.guesses_right;
        totals.refused += c.mem.refused;
    }
    let c = &mut clients[0];
    let audit = c.table.audit(&mut c.mem).unwrap();
    let history = rec.into_history();
    let stats = lincheck::assert_linearizable(
        &history,
        Budget::states(50_000_000),
        std::env::temp_dir().join("patronus-lincheck"),
    );
    eprintln!(
        "{w:?}: {} operations checked ({} completed, {} unknown: {:?}), {} crashes, {} freezes, \
         {} refused READs, {} splits, {} takeovers; checker: {stats:?}; {audit:?}",
        history.len(),
        totals.ops,
        totals.unknown,
        totals.errors.iter().take(3).collect::<Vec<_>>(),
        totals.crashes,
        totals.freezes,
        totals.refused,
        totals.splits,
        totals.takeovers,
    );
    assert_eq!(
        (audit.duplicates, audit.unclaimed, audit.unreadable),
        (0, 0, 0),
        "{audit:?}"
    );
    assert!(totals.splits > 0, "no split happened: {totals:?}");
    totals
}

fn workload(transport: Link, lock: LockMode, seed: u64, ops: u64) -> Workload {
    Workload {
        transport,
        lock,
        seed,
        clients: 8,
        ops,
        hot_keys: 6,
        refuse: 0.0,
        freeze: 0.0,
        crash: 0.0,
        speculate: false,
    }
}

/// Operations per in-process run in CI (four runs, with the final reads about 27,000
/// checked operations in all).
const INPROC_OPS: u64 = 5_500;

/// Operations per run over TCP (each costs milliseconds of control round trips).
const TCP_OPS: u64 = 800;

fn no_faults(t: Link) {
    let ops = if t == Link::InProc {
        INPROC_OPS
    } else {
        TCP_OPS
    };
    let tot = run(workload(t, LockMode::Lease, 1, ops));
    assert_eq!(tot.unknown, 0, "{tot:?}");
}

/// Block READs refused on the way, with lock words. Fails on the code before issue 25's
/// second fix (a refused verifying READ undid a right CAS: a deleted key came back).
fn refused_reads_with_lock_words(t: Link) {
    let ops = if t == Link::InProc {
        INPROC_OPS
    } else {
        TCP_OPS
    };
    let tot = run(Workload {
        refuse: 0.05,
        ..workload(t, LockMode::Word, 2, ops)
    });
    assert!(tot.refused > 0, "{tot:?}");
}

/// Clients frozen past their leases (others take over their splits) and refused READs.
fn frozen_clients_and_refused_reads(t: Link) {
    let ops = if t == Link::InProc {
        INPROC_OPS
    } else {
        TCP_OPS
    };
    let tot = run(Workload {
        refuse: 0.02,
        freeze: 0.002,
        ..workload(t, LockMode::Lease, 4, ops)
    });
    assert!(tot.freezes > 0 && tot.takeovers > 0, "{tot:?}");
}

/// Crashing clients (with a lease lock: a crashed resizer's word would stall its subtable
/// for good). Few crashes: each leaves an operation of unknown outcome, which the checker
/// must place anywhere after its invocation or nowhere.
fn crashing_clients(t: Link) {
    let ops = if t == Link::InProc {
        INPROC_OPS
    } else {
        TCP_OPS
    };
    let tot = run(Workload {
        refuse: 0.02,
        crash: if t == Link::InProc { 0.002 } else { 0.006 },
        ..workload(t, LockMode::Lease, 3, ops)
    });
    assert!(tot.crashes > 0, "{tot:?}");
}

/// Clients that read keys' blocks on a guess of where their entries are, with every fault:
/// a guess whose entry was replaced (and its block freed and reused) or whose READ is
/// refused must never decide an answer.
fn guessing_clients_with_faults(t: Link) {
    let ops = if t == Link::InProc {
        INPROC_OPS
    } else {
        TCP_OPS
    };
    let tot = run(Workload {
        refuse: 0.02,
        freeze: 0.002,
        crash: if t == Link::InProc { 0.002 } else { 0.006 },
        speculate: true,
        ..workload(t, LockMode::Lease, 5, ops)
    });
    let (read, right) = tot.guesses;
    assert!(right > 0 && read > right, "{tot:?}");
}

/// Clients frozen past their leases while block READs are refused, with lock words. Lost
/// an acknowledged insert's key on the code before issue 25's third fix (seed 2 then:
/// `key-00002`): a frozen resizer came back after clearing T''s `NewHalf` mark but before
/// recording its split done, and the client that resumed the split thawed T' again — under
/// a split T' had started meanwhile. `race_split_schedules.rs` has the deterministic test.
#[test]
fn frozen_resizer_with_a_lock_word_and_refused_reads() {
    run(Workload {
        refuse: 0.05,
        freeze: 0.002,
        ..workload(Link::InProc, LockMode::Word, 2, 7_000)
    });
}

patronus_core::both_transports!(
    no_faults,
    refused_reads_with_lock_words,
    frozen_clients_and_refused_reads,
    crashing_clients,
    guessing_clients_with_faults
);

/// The long run (README): `PATRONUS_SOAK_OPS` operations (default 10^6) in seeded runs of
/// 10,000, each on a fresh node (a longer run fills the test node's memory): refused READs
/// in both lock modes, freezes and crashes with the lease lock.
#[test]
#[ignore = "long: run by the soak command in the README"]
fn soak() {
    let total: u64 = std::env::var("PATRONUS_SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut done = 0;
    let mut seed = 100;
    while done < total {
        // Crashes with the lease lock only (a crashed resizer's word stalls its subtable for
        // good); freezes with both.
        let lock = if seed % 2 == 0 {
            LockMode::Lease
        } else {
            LockMode::Word
        };
        let lease = lock == LockMode::Lease;
        let tot = run(Workload {
            refuse: 0.03,
            freeze: 0.001,
            crash: if lease { 0.001 } else { 0.0 },
            ..workload(Link::InProc, lock, seed, 10_000.min(total - done))
        });
        done += tot.ops;
        seed += 1;
        eprintln!("soak: {done} of {total} operations checked");
    }
}
