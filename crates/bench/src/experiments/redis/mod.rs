//! The Redis comparison: the same key-value workload (keys, Zipfian popularity,
//! value size, read ratio, clients) against `redis-server` and against RACE hashing on
//! Patronus with the memory node in its own process — always over TCP, one system at a time,
//! each server pinned to its own core ([`run::SERVER_CORE`]; the client thread to the other).
//! Redis runs unpipelined and pipelined; RACE's operations are one round trip per step, each
//! client one operation at a time, on a node with a PD per client (`serve`'s default) and on
//! one with a shared PD. Three rounds run every system in turn; rows are medians. Before it,
//! the floor ([`floor`]): what a round trip costs on this machine. Reported: throughput,
//! p50/p99 latency, the server's CPU per operation split by thread, the client's, and each
//! target (module `targets`).

pub mod redis_server;
pub mod run;
pub mod store;
mod targets;

pub use redis_server::{RedisConnection, RedisServer};
pub use store::{KvConnection, KvRequest};

use crate::experiments::floor;
use crate::experiments::race_costs::RunCosts;
use crate::harness::process::pin_this_thread;
use crate::harness::{BenchOpts, Experiment, Figure, Panel, PanelKind, Point, Row, Series};
use crate::kv::KvWorkload;
use anyhow::Result;
use patronus_core::manager::Isolation;
use std::time::Duration;

/// Commands per pipeline in the pipelined Redis runs.
const PIPELINE: usize = 16;
/// The systems, in the order each round runs them (so each alternates with the others).
const SYSTEMS: [&str; 4] = ["Redis", RACE, "Redis pipelined", RACE_SHARED];
/// RACE on a memory node as `patronus serve` runs by default: a PD per client.
pub const RACE: &str = "Patronus RACE";
/// RACE on a memory node with one PD for all (the paper's mode).
pub const RACE_SHARED: &str = "Patronus RACE (shared PD)";
/// Runs of each system at each client count; the rows are their medians.
const ROUNDS: usize = 3;

struct Plan {
    /// Round trips per case of the floor measurement.
    floor_samples: u64,
    clients: Vec<u32>,
    keys: u64,
    ops: u64,
    budget: Duration,
}

fn plan(opts: &BenchOpts) -> Plan {
    if opts.quick {
        Plan {
            floor_samples: 10_000,
            clients: vec![1, 4],
            keys: 300,
            ops: 4_000,
            budget: Duration::from_millis(400),
        }
    } else {
        Plan {
            floor_samples: 50_000,
            clients: vec![1, 4, 16],
            keys: 20_000,
            ops: 100_000,
            budget: Duration::from_secs(5),
        }
    }
}

/// A RACE system: its node and its loaded table.
struct RaceSystem {
    node: run::PatronusNode,
    table: run::RaceTable,
}

/// Runs the comparison (over TCP whatever `opts.transport` says).
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = plan(opts);
    let mut exp = Experiment::new("redis", "tcp", opts.quick);
    // The physical limit first: what a round trip costs here, raw and through the soft NIC.
    let floor = floor::measure(plan.floor_samples)?;
    floor.print();
    exp.rows.extend(floor.rows());
    // Clients (and their devices' engines) on the core the servers do not have.
    let _pin = pin_this_thread(1 - run::SERVER_CORE);
    let workload = KvWorkload::new(plan.keys, 0.99, 0.5, 4096);
    println!(
        "Redis comparison: 50 % reads, Zipfian 0.99, {} keys, 4 KiB values, over TCP; \
         {ROUNDS} rounds, each system in turn; medians. RACE clients keep rights for 200 ms \
         (up to 1,024) and allocate and free blocks 16 per round trip",
        plan.keys
    );
    let have_redis = RedisServer::available();
    if !have_redis {
        println!("redis-server is not installed: only Patronus runs");
    }
    // The table of each RACE system is loaded once; its nodes sleep while the others run.
    // Room for the table and the blocks updates allocate before their old ones are freed.
    let pool_mib = ((plan.keys * 3 * 4096) >> 20).max(64) + 64;
    let mut races = Vec::new();
    for isolation in [Isolation::PdPerClient, Isolation::SharedPd] {
        let node = run::PatronusNode::start(pool_mib, isolation)?;
        let table = run::RaceTable::load(&node, &workload)?;
        races.push(RaceSystem { node, table });
    }
    let separate = races.iter().all(|r| r.node.separate());
    let mut runs: std::collections::BTreeMap<(usize, u32), Vec<Row>> = Default::default();
    let mut costs_of = std::collections::BTreeMap::<u32, RunCosts>::new();
    for round in 0..ROUNDS {
        for &n in &plan.clients {
            for (k, system) in SYSTEMS.iter().enumerate() {
                let row = match *system {
                    "Redis" | "Redis pipelined" if have_redis => {
                        let depth = if *system == "Redis" { 1 } else { PIPELINE };
                        // A fresh server per run: the same loaded state for each.
                        let server = RedisServer::start(Some(run::SERVER_CORE))?;
                        let r = run::redis(
                            &server,
                            &workload,
                            n as usize,
                            depth,
                            plan.ops,
                            plan.budget,
                        )?;
                        r.row(system, n)
                            .with("pinned", server.process().pinned().is_some())
                    }
                    "Redis" | "Redis pipelined" => continue,
                    _ => {
                        let sys = &races[usize::from(*system == RACE_SHARED)];
                        let (r, failed, first, costs) =
                            run::race(&sys.node, &sys.table, n as usize, plan.ops, plan.budget)?;
                        if let Some(first) = &first {
                            println!("          {failed} operations failed; the first: {first}");
                        }
                        if *system == RACE && round == 0 {
                            costs_of.insert(n, costs);
                        }
                        r.row(system, n)
                            .with("node_in_own_process", sys.node.separate())
                            .with("failed_ops", failed)
                            .with("first_failure", first.unwrap_or_default())
                    }
                };
                print_row(&row, round);
                runs.entry((k, n)).or_default().push(row);
            }
        }
    }
    println!("Medians of {ROUNDS} runs:");
    print_header();
    for ((_, n), rows) in runs {
        let mut row = median_row(rows);
        if row.mechanism == RACE
            && let Some(c) = costs_of.get(&n)
        {
            row = c.columns(row);
            for line in c.summary() {
                println!("          {line}");
            }
        }
        print_row(&row, usize::MAX);
        exp.rows.push(row);
    }
    exp.rows.sort_by(|a, b| {
        a.mechanism
            .cmp(&b.mechanism)
            .then(a.clients.cmp(&b.clients))
    });
    targets::summarize(&mut exp, &plan.clients, have_redis, separate, &floor);
    exp.figure = figure(&exp);
    Ok(exp)
}

fn print_header() {
    println!(
        "{:<26} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "system",
        "clients",
        "Kops/s",
        "p50 us",
        "p99 us",
        "node/op",
        "manager",
        "NIC eng",
        "client/op"
    );
}

/// One line: the node's CPU per operation (µs) in total and split by thread, the client's.
fn print_row(r: &Row, round: usize) {
    if round == 0 {
        print_header();
    }
    let f = |k: &str| r.get_f64(k).unwrap_or(0.0);
    println!(
        "{:<26} {:>7} {:>9.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
        r.mechanism,
        r.clients,
        r.throughput_ops / 1e3,
        r.p50_us,
        r.p99_us,
        r.mn_cpu_us_per_op,
        f("node_manager_cpu_us_per_op"),
        f("mn_engine_cpu_us_per_op"),
        f("client_cpu_us_per_op"),
    );
}

/// The run with the median throughput, its other numbers replaced by their medians over the
/// runs, and every run's throughput and node CPU beside them.
fn median_row(mut rows: Vec<Row>) -> Row {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let tputs: Vec<f64> = rows.iter().map(|r| r.throughput_ops).collect();
    let cpus: Vec<f64> = rows.iter().map(|r| r.mn_cpu_us_per_op).collect();
    let keys = [
        "mn_manager_cpu_us_per_op",
        "mn_engine_cpu_us_per_op",
        "node_manager_cpu_us_per_op",
        "node_other_cpu_us_per_op",
        "client_cpu_us_per_op",
    ];
    let medians: Vec<(&str, f64)> = keys
        .iter()
        .map(|k| {
            (
                *k,
                median(rows.iter().filter_map(|r| r.get_f64(k)).collect()),
            )
        })
        .collect();
    let (p50, p99, cpu) = (
        median(rows.iter().map(|r| r.p50_us).collect()),
        median(rows.iter().map(|r| r.p99_us).collect()),
        median(cpus.clone()),
    );
    rows.sort_by(|a, b| a.throughput_ops.total_cmp(&b.throughput_ops));
    let mut row = rows.swap_remove(rows.len() / 2);
    row.p50_us = p50;
    row.p99_us = p99;
    row.mn_cpu_us_per_op = cpu;
    for (k, v) in medians {
        row = row.with(k, v);
    }
    row.with("runs", tputs.len())
        .with("runs_throughput_ops", tputs)
        .with("runs_node_cpu_us_per_op", cpus)
}

fn figure(exp: &Experiment) -> Figure {
    Figure {
        title: "RACE on Patronus vs Redis, over TCP (50 % reads, 4 KiB values)".into(),
        panels: vec![
            panel(exp, "(a) throughput", "throughput (Kops/s)", |r| {
                r.throughput_ops / 1e3
            }),
            panel(exp, "(b) server CPU per operation", "µs / op", |r| {
                r.mn_cpu_us_per_op
            }),
        ],
    }
}

fn panel(exp: &Experiment, title: &str, y: &str, f: impl Fn(&Row) -> f64) -> Panel {
    Panel {
        title: title.into(),
        x_label: "clients".into(),
        y_label: y.into(),
        x_log: true,
        y_log: true,
        kind: PanelKind::Lines,
        series: SYSTEMS
            .iter()
            .map(|s| Series {
                name: s.to_string(),
                points: exp
                    .rows
                    .iter()
                    .filter(|r| r.mechanism == *s)
                    .map(|r| Point::xy(f64::from(r.clients), f(r)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect(),
    }
}
