//! The Redis comparison: the same key-value workload (keys, Zipfian popularity,
//! value size, read ratio, clients) against `redis-server` and against RACE hashing on
//! Patronus with the memory node in its own process — always over TCP, one system at a time,
//! each server pinned to its own core ([`run::SERVER_CORE`]; the client thread has the other).
//! Redis runs unpipelined and pipelined; RACE's operations are one round trip per step, each
//! client one operation at a time. Reported: throughput, p50/p99 latency, and the server's CPU
//! per operation (Redis's process; the memory node's process).

pub mod redis_server;
pub mod run;
pub mod store;

pub use redis_server::{RedisConnection, RedisServer};
pub use store::{KvConnection, KvRequest};

use crate::experiments::floor;
use crate::experiments::race_costs::RunCosts;
use crate::harness::process::pin_this_thread;
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Panel, PanelKind, PaperRef, Point, Ratio, Row, Series,
};
use crate::kv::KvWorkload;
use anyhow::Result;
use std::time::Duration;

/// Commands per pipeline in the pipelined Redis runs.
const PIPELINE: usize = 16;
const SYSTEMS: [&str; 3] = ["Redis", "Redis pipelined", "Patronus RACE"];

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
    let workload = |keys| KvWorkload::new(keys, 0.99, 0.5, 4096);
    println!(
        "Redis comparison: 50 % reads, Zipfian 0.99, {} keys, 4 KiB values, over TCP",
        plan.keys
    );
    println!(
        "{:<16} {:>7} {:>10} {:>9} {:>9} {:>16} {:>15}",
        "system", "clients", "Kops/s", "p50 us", "p99 us", "server CPU us/op", "soft NIC us/op"
    );
    let mut record = |system: &str,
                      n: u32,
                      r: run::Run,
                      costs: Option<&RunCosts>,
                      extra: Vec<(&str, serde_json::Value)>| {
        let mut row = r.driven.row(system, n, r.server_cpu, r.nic_cpu);
        if let Some(c) = costs {
            row = c.columns(row);
        }
        for (k, v) in extra {
            row = row.with(k, v);
        }
        println!(
            "{:<16} {:>7} {:>10.1} {:>9.1} {:>9.1} {:>16.2} {:>15.2}",
            system,
            n,
            row.throughput_ops / 1e3,
            row.p50_us,
            row.p99_us,
            row.get_f64("mn_manager_cpu_us_per_op").unwrap_or(0.0),
            row.get_f64("mn_engine_cpu_us_per_op").unwrap_or(0.0),
        );
        exp.rows.push(row);
    };
    let have_redis = RedisServer::available();
    if have_redis {
        for (system, depth) in [("Redis", 1), ("Redis pipelined", PIPELINE)] {
            for &n in &plan.clients {
                // A fresh server per run: the same loaded state for each.
                let server = RedisServer::start(Some(run::SERVER_CORE))?;
                let r = run::redis(
                    &server,
                    &workload(plan.keys),
                    n as usize,
                    depth,
                    plan.ops,
                    plan.budget,
                )?;
                record(
                    system,
                    n,
                    r,
                    None,
                    vec![("pinned", server.process().pinned().is_some().into())],
                );
            }
        }
    } else {
        println!("redis-server is not installed: only Patronus runs");
    }
    let node = run::PatronusNode::start(256)?;
    for &n in &plan.clients {
        let (r, failed, first, costs) = run::race(
            &node,
            &workload(plan.keys),
            n as usize,
            plan.ops,
            plan.budget,
        )?;
        if let Some(first) = &first {
            println!("          {failed} operations failed; the first: {first}");
        }
        for line in costs.summary() {
            println!("          {line}");
        }
        record(
            "Patronus RACE",
            n,
            r,
            Some(&costs),
            vec![
                ("node_in_own_process", node.separate().into()),
                ("failed_ops", failed.into()),
                ("first_failure", first.unwrap_or_default().into()),
            ],
        );
    }
    summarize(&mut exp, &plan, have_redis, node.separate());
    Ok(exp)
}

fn summarize(exp: &mut Experiment, plan: &Plan, have_redis: bool, separate: bool) {
    let tput = |s: &str, n: u32| exp.row(s, n).map(|r| r.throughput_ops);
    let mut ratios = Vec::new();
    let mut paper = Vec::new();
    for &n in &plan.clients {
        for redis in ["Redis", "Redis pipelined"] {
            if let (Some(p), Some(r)) = (tput("Patronus RACE", n), tput(redis, n)) {
                ratios.push(Ratio {
                    name: format!("Patronus RACE / {redis} throughput, {n} clients"),
                    value: p / r.max(1e-9),
                });
            }
        }
        if let (Some(p), Some(r)) = (exp.row("Patronus RACE", n), exp.row("Redis", n)) {
            ratios.push(Ratio {
                name: format!(
                    "memory node (with its soft NIC) / redis-server CPU per op, {n} clients"
                ),
                value: p.mn_cpu_us_per_op / r.mn_cpu_us_per_op.max(1e-9),
            });
            let host = p.get_f64("mn_manager_cpu_us_per_op").unwrap_or(0.0);
            ratios.push(Ratio {
                name: format!(
                    "memory node without its soft NIC / redis-server CPU per op, {n} clients"
                ),
                value: host / r.mn_cpu_us_per_op.max(1e-9),
            });
        }
    }
    let max = plan.clients.iter().copied().max().unwrap_or(1);
    paper.push(PaperRef {
        metric: format!("Patronus RACE / Redis throughput, {max} clients (not in the paper)"),
        ours: tput("Patronus RACE", max)
            .zip(tput("Redis", max))
            .map(|(p, r)| p / r.max(1e-9)),
        paper: None,
        unit: "×".into(),
        source: "not in the paper: Redis is the system a user would pick instead".into(),
    });
    let completed = exp.all_completed("failed_ops", "RACE operation");
    exp.checks = vec![
        Check {
            claim: "redis-server is installed, so the comparison ran".into(),
            holds: have_redis,
            detail: if have_redis {
                "both systems ran".into()
            } else {
                "redis-server is missing (`apt-get install redis-server`): only Patronus ran".into()
            },
        },
        Check {
            claim: "the memory node ran in a process of its own".into(),
            holds: separate,
            detail: if separate {
                "`patronus serve`, pinned with taskset where available".into()
            } else {
                "in this process: no `patronus` binary beside the benchmark's (`cargo build --release -p patronus-cli` puts one there)".into()
            },
        },
        completed,
    ];
    exp.ratios = ratios;
    exp.paper = paper;
    exp.notes = vec![
        "Both systems serve the same workload: keys `key:NNN…` (16 B), 4 KiB values, 50 % reads, Zipfian 0.99, every key loaded first; reads check the value belongs to its key.".into(),
        format!("Redis: `redis-server` with persistence off, one connection per client, GET/SET; pipelined runs send {PIPELINE} commands per round trip (each command's latency is its pipeline's). RACE: each client one operation at a time, every step one batch of one-sided operations or one permission RPC (a lookup acquires a right over the block it reads)."),
        format!("One system at a time, its server pinned to core {} with taskset, the clients on the benchmark's one client thread. Server CPU per op is the server process's CPU (from the scheduler's statistics) over the operations; for the memory node it is split: its soft NIC's engine threads (the transport and the one-sided operations, which an RDMA NIC does in hardware) apart from the rest (manager, control path). The node's engines sleep when idle (`--engine-spin-polls 0`), as Redis's event loop does.", run::SERVER_CORE),
    ];
    exp.figure = Figure {
        title: "RACE on Patronus vs Redis, over TCP (50 % reads, 4 KiB values)".into(),
        panels: vec![
            panel(exp, "(a) throughput", "throughput (Kops/s)", |r| {
                r.throughput_ops / 1e3
            }),
            panel(exp, "(b) server CPU per operation", "µs / op", |r| {
                r.mn_cpu_us_per_op
            }),
        ],
    };
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
