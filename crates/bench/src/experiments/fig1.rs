//! The paper's Figure 1: the latency of protection operations on the NIC. MR registration
//! (reg + dereg) and a type-1 MW bind over region sizes 4 KiB .. 256 MiB, a QP access-flag
//! change and a QP recovery, next to substrate anchors (a raw TCP ping-pong, a one-sided READ
//! over the soft NIC's TCP transport, UCX when installed) measured in the same run.
//!
//! The protection operations are local NIC operations: they run on in-process devices
//! whatever the transport; the transport option selects where QP recovery's handshake goes
//! and adds a READ on that transport to the anchors.
//!
//! With `--provider rdma` the protection operations run on an rdma-core device instead
//! (`rdma.rs`), through the same generic measurement code, with the soft NIC's beside them.

mod anchors;
mod endpoints;
mod protection;
mod rdma;

use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Latency, Panel, PanelKind, PaperRef, Point,
    ProviderChoice, Ratio, Row, Series, bar,
};
use anyhow::{Result, bail};
use endpoints::{MemoryNode, Requester, memory_node};
use patronus_core::cluster::Link;
use protection::{SizeCosts, SizePlan};
use rnic::soft::{SoftConfig, SoftFabric, SoftProvider};
use rnic::{MemoryRegion, Provider};
use std::time::Instant;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Target (`docs/benchmarks.md`): a soft-NIC READ over TCP within this factor of a raw TCP
/// ping-pong of the same size (the transport adds little to a round trip).
const TARGET_READ_OVER_PINGPONG: f64 = 1.5;
/// Target (`docs/benchmarks.md`): an in-process MW bind (posted and completed) within this.
const TARGET_MW_BIND_US: f64 = 0.3;

/// The paper's numbers for Figure 1's operations (ConnectX-5), µs: an MW bind (§1, §2.2,
/// Figure 1), MR registration of 256 MiB ("~1 ms for 256 MB", §1, §2.1) and per 2 MiB (§3.1),
/// a QP access-flag change (§2.1) and a QP recovery (§7.2.5, Table 5 "Recover QP").
const PAPER_MW_BIND_US: f64 = 1.1;
const PAPER_MR_256MIB_US: f64 = 1000.0;
const PAPER_MR_PER_2MIB_US: f64 = 20.0;
const PAPER_QP_FLAG_US: f64 = 100.0;
const PAPER_QP_RECOVERY_US: f64 = 1004.0;

/// How much of everything to measure.
#[derive(Clone, Debug)]
struct Plan {
    sizes: Vec<usize>,
    /// Warm MR registrations at the smallest size; fewer at larger ones (each touches every page).
    mr_reps_small: usize,
    mw_iters: u64,
    flag_iters: u64,
    recovery_iters: u64,
    anchor_iters: u64,
}

impl Plan {
    fn for_opts(opts: &BenchOpts) -> Plan {
        let sizes = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB];
        let largest = opts.max_region.unwrap_or(match opts.provider {
            ProviderChoice::Rdma { .. } => 256 * MIB,
            ProviderChoice::Soft if opts.quick => 16 * MIB,
            ProviderChoice::Soft => 256 * MIB,
        });
        Plan {
            sizes: sizes.into_iter().filter(|&s| s <= largest).collect(),
            mr_reps_small: if opts.quick { 100 } else { 400 },
            mw_iters: if opts.quick { 2_000 } else { 20_000 },
            flag_iters: if opts.quick { 2_000 } else { 20_000 },
            recovery_iters: if opts.quick { 100 } else { 1_000 },
            anchor_iters: if opts.quick { 2_000 } else { 20_000 },
        }
    }

    fn mr_reps(&self, size: usize) -> usize {
        let n = self.mr_reps_small;
        match size {
            s if s <= 64 * KIB => n,
            s if s <= MIB => n / 4,
            s if s <= 16 * MIB => n / 25,
            _ => n / 80,
        }
        .max(3)
    }
}

/// Runs Figure 1 sized by `opts`, on the provider it names.
pub fn run(opts: &BenchOpts) -> Result<Experiment> {
    let plan = Plan::for_opts(opts);
    if plan.sizes.is_empty() {
        bail!("Figure 1's largest region is below its smallest size (4 KiB)");
    }
    match &opts.provider {
        ProviderChoice::Soft => run_plan(opts, &plan),
        ProviderChoice::Rdma { device } => rdma::run(opts, &plan, device.clone()),
    }
}

/// Medians and tails of the non-size-dependent operations.
struct Singles {
    flag: Latency,
    recovery: Latency,
    pingpong: Latency,
    read_tcp: Latency,
    /// A READ in-process when that is the selected transport.
    read_other: Option<Latency>,
    ucx: anchors::UcxAnchors,
}

#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
fn run_plan(opts: &BenchOpts, plan: &Plan) -> Result<Experiment> {
    let started = Instant::now();
    println!(
        "Figure 1: latency of protection operations (soft NIC; recovery and anchors over {})",
        opts.transport_name()
    );
    let costs = sizes(plan)?;
    let singles = singles(opts.transport, plan)?;
    let mut exp = Experiment::new("fig1", opts.transport_name(), opts.quick);
    exp.rows = rows(&costs, &singles, opts.transport_name());
    exp.figure = figure(&costs, &singles);
    judge(&mut exp, &costs, &singles)?;
    exp.notes.extend(notes(&costs));
    exp.notes.extend(singles.ucx.notes.iter().cloned());
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

/// MR and MW at every size of `plan` on `mn`, whose own loopback QP `manager` posts the binds
/// (as Patronus' manager does); `type2` adds a type-2 window's bind and invalidation.
fn measure_sizes<P: Provider>(
    mn: &MemoryNode<P>,
    manager: &Requester<P>,
    plan: &Plan,
    type2: bool,
    pinned: &dyn Fn(&P::Mr) -> bool,
    label: &str,
) -> Result<Vec<SizeCosts>> {
    let progress = bar(plan.sizes.len() as u64, label);
    let mut costs = Vec::new();
    for &size in &plan.sizes {
        let at = SizePlan {
            size,
            mr_reps: plan.mr_reps(size),
            mw_iters: plan.mw_iters,
            type2,
        };
        costs.push(protection::mr_and_mw(mn, manager, &at, pinned)?);
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(costs)
}

/// MR and MW at every size on an in-process soft-NIC memory node.
fn soft_sizes(plan: &Plan, type2: bool) -> Result<Vec<SizeCosts>> {
    let fabric = SoftFabric::new();
    let mn = memory_node::<SoftProvider>(fabric.open_device(SoftConfig::default()))?;
    let manager = Requester::connect(&mn.ctx, &mn.pd, mn.address(), b"fig1")?;
    let pinned = |mr: &<SoftProvider as Provider>::Mr| {
        mn.ctx
            .protection_table()
            .mr(mr.lkey())
            .is_some_and(|e| e.pinned)
    };
    measure_sizes(&mn, &manager, plan, type2, &pinned, "fig1 MR/MW sizes")
}

/// MR and MW at every size, on an in-process memory-node device whose own loopback QP posts
/// the binds (as Patronus' manager does).
fn sizes(plan: &Plan) -> Result<Vec<SizeCosts>> {
    let costs = soft_sizes(plan, false)?;
    println!(
        "{:>9} | {:>11} {:>11} {:>11} {:>11} {:>6} | {:>8} {:>8}",
        "size", "MR p50 µs", "reg µs", "dereg µs", "cold µs", "pinned", "MW p50", "MW p99"
    );
    for c in &costs {
        println!(
            "{:>9} | {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>6} | {:>8.2} {:>8.2}",
            size_label(c.size),
            c.mr.p50_us(),
            c.reg.p50_us(),
            c.dereg.p50_us(),
            c.mr_cold_us,
            if c.pinned { "yes" } else { "no" },
            c.mw.p50_us(),
            c.mw.p99_us(),
        );
    }
    Ok(costs)
}

fn singles(transport: Link, plan: &Plan) -> Result<Singles> {
    let flag = protection::qp_flag_change(plan.flag_iters)?;
    let progress = bar(plan.recovery_iters, "fig1 QP recovery");
    let recovery = protection::qp_recovery(transport, plan.recovery_iters, || progress.inc(1))?;
    progress.finish_and_clear();
    let pingpong = anchors::tcp_pingpong(plan.anchor_iters)?;
    let read_tcp = anchors::soft_read(Link::Tcp, plan.anchor_iters)?;
    let read_other = match transport {
        Link::Tcp => None,
        other => Some(anchors::soft_read(other, plan.anchor_iters)?),
    };
    let ucx = anchors::ucx(plan.anchor_iters);
    let s = Singles {
        flag,
        recovery,
        pingpong,
        read_tcp,
        read_other,
        ucx,
    };
    println!(
        "{:<24} | {:>9} {:>9} | {:>7}",
        "operation", "p50 µs", "p99 µs", "n"
    );
    for (name, l) in single_rows(&s) {
        println!(
            "{:<24} | {:>9.2} {:>9.2} | {:>7}",
            name,
            l.p50_us(),
            l.p99_us(),
            l.count()
        );
    }
    for u in &s.ucx.results {
        println!(
            "{:<24} | {:>9.2} {:>9} | (UCX typical; average {:.2})",
            ucx_name(u),
            u.typical_us,
            "-",
            u.average_us
        );
    }
    Ok(s)
}

/// The fixed-name latency rows: (mechanism, latency).
fn single_rows(s: &Singles) -> Vec<(&'static str, &Latency)> {
    let mut v = vec![
        ("QP flag change", &s.flag),
        ("QP recovery", &s.recovery),
        ("TCP ping-pong 64 B", &s.pingpong),
        ("soft READ 64 B (tcp)", &s.read_tcp),
    ];
    if let Some(l) = &s.read_other {
        v.push(("soft READ 64 B (inproc)", l));
    }
    v
}

fn ucx_name(u: &anchors::UcxResult) -> String {
    let op = if u.test == "ucp_get" { "get" } else { "put" };
    format!("UCX {op} 64 B ({})", u.tls)
}

fn lat_row(mechanism: &str, l: &Latency) -> Row {
    let mut r = Row::new(mechanism, 0);
    r.p50_us = l.p50_us();
    r.p99_us = l.p99_us();
    r.throughput_ops = if l.mean_us() > 0.0 {
        1e6 / l.mean_us()
    } else {
        0.0
    };
    r.with("samples", l.count()).with("mean_us", l.mean_us())
}

fn rows(costs: &[SizeCosts], s: &Singles, transport: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for c in costs {
        rows.push(
            lat_row("MR reg+dereg", &c.mr)
                .with("size_bytes", c.size as u64)
                .with("pinned", c.pinned)
                .with("reg_p50_us", c.reg.p50_us())
                .with("dereg_p50_us", c.dereg.p50_us())
                .with("cold_us", c.mr_cold_us),
        );
    }
    for c in costs {
        rows.push(lat_row("MW bind", &c.mw).with("size_bytes", c.size as u64));
    }
    for (name, l) in single_rows(s) {
        let mut r = lat_row(name, l);
        if name == "QP recovery" {
            r = r.with("transport", transport);
        }
        rows.push(r);
    }
    for u in &s.ucx.results {
        let mut r = Row::new(ucx_name(u), 0);
        r.p50_us = u.typical_us;
        r.throughput_ops = if u.average_us > 0.0 {
            1e6 / u.average_us
        } else {
            0.0
        };
        rows.push(
            r.with("mean_us", u.average_us)
                .with("ucx_test", u.test)
                .with("ucx_tls", u.tls),
        );
    }
    rows
}

fn figure(costs: &[SizeCosts], s: &Singles) -> Figure {
    let line = |name: &str, f: &dyn Fn(&SizeCosts) -> f64| Series {
        name: name.into(),
        points: costs
            .iter()
            .map(|c| Point::xy(c.size as f64, f(c)))
            .collect(),
    };
    let mut bars = vec![
        Point::bar("QP flag change", s.flag.p50_us()),
        Point::bar("QP recovery", s.recovery.p50_us()),
        Point::bar("TCP ping-pong", s.pingpong.p50_us()),
        Point::bar("soft READ (tcp)", s.read_tcp.p50_us()),
    ];
    if let Some(c) = costs.first() {
        bars.insert(0, Point::bar("MW bind", c.mw.p50_us()));
        bars.insert(3, Point::bar("MR 4 KiB", c.mr.p50_us()));
    }
    Figure {
        title: "Figure 1 analogue: latency of protection operations (soft NIC)".into(),
        panels: vec![
            Panel {
                title: "(a) MR registration vs MW bind".into(),
                x_label: "region size (bytes)".into(),
                y_label: "median latency (µs)".into(),
                x_log: true,
                y_log: true,
                kind: PanelKind::Lines,
                series: vec![
                    line("MR reg+dereg", &|c| c.mr.p50_us()),
                    line("MW bind", &|c| c.mw.p50_us()),
                ],
            },
            Panel {
                title: "(b) one operation each".into(),
                x_label: "operation".into(),
                y_label: "median latency (µs)".into(),
                x_log: false,
                y_log: true,
                kind: PanelKind::Bars,
                series: vec![Series {
                    name: "median".into(),
                    points: bars,
                }],
            },
        ],
    }
}

/// Ratios, checks and the paper's numbers.
fn judge(exp: &mut Experiment, costs: &[SizeCosts], s: &Singles) -> Result<()> {
    let (Some(first), Some(last)) = (costs.first(), costs.last()) else {
        bail!("Figure 1 measured no region size");
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mr_growth = ratio(last.mr.p50_us(), first.mr.p50_us());
    let mw_growth = ratio(last.mw.p50_us(), first.mw.p50_us());
    let (big, small) = (size_label(last.size), size_label(first.size));
    let read_over_pp = ratio(s.read_tcp.p50_us(), s.pingpong.p50_us());
    exp.ratios = vec![
        Ratio {
            name: format!("MR reg+dereg p50, {big} / {small}"),
            value: mr_growth,
        },
        Ratio {
            name: format!("MW bind p50, {big} / {small}"),
            value: mw_growth,
        },
        Ratio {
            name: format!("MR reg+dereg {small} / MW bind {small} (p50)"),
            value: ratio(first.mr.p50_us(), first.mw.p50_us()),
        },
        Ratio {
            name: format!("QP flag change / MW bind {small} (p50)"),
            value: ratio(s.flag.p50_us(), first.mw.p50_us()),
        },
        Ratio {
            name: "soft READ 64 B over tcp / TCP ping-pong 64 B (p50)".into(),
            value: read_over_pp,
        },
    ];

    let mw_cheaper: Vec<String> = costs
        .iter()
        .filter(|c| c.mw.p50_us() >= c.mr.p50_us())
        .map(|c| size_label(c.size))
        .collect();
    exp.checks = vec![
        Check {
            claim: "MW bind is flat in the region size".into(),
            holds: mw_growth <= 2.0,
            detail: format!(
                "MW bind p50 {:.2} µs at {big} vs {:.2} µs at {small}: {mw_growth:.2}× (≤ 2× holds)",
                last.mw.p50_us(),
                first.mw.p50_us()
            ),
        },
        Check {
            claim: "MR registration grows with the region size".into(),
            holds: mr_growth >= 10.0,
            detail: format!(
                "MR reg+dereg p50 {:.1} µs at {big} vs {:.1} µs at {small}: {mr_growth:.0}× (≥ 10× holds){}",
                last.mr.p50_us(),
                first.mr.p50_us(),
                if last.size < 256 * MIB {
                    "; a short run stops below 256 MiB"
                } else {
                    ""
                }
            ),
        },
        Check {
            claim: "MW bind is cheaper than MR registration at every size".into(),
            holds: mw_cheaper.is_empty(),
            detail: if mw_cheaper.is_empty() {
                format!(
                    "MW p50 below MR p50 at all {} sizes (smallest gap {:.0}× at {small})",
                    costs.len(),
                    ratio(first.mr.p50_us(), first.mw.p50_us())
                )
            } else {
                format!("MW p50 ≥ MR p50 at {}", mw_cheaper.join(", "))
            },
        },
        Check {
            claim: format!("MW bind at {small} within {TARGET_MW_BIND_US} µs (in-process)"),
            holds: first.mw.p50_us() <= TARGET_MW_BIND_US,
            detail: format!("MW bind p50 {:.3} µs at {small}", first.mw.p50_us()),
        },
        Check {
            claim: format!(
                "a soft READ over TCP within {TARGET_READ_OVER_PINGPONG}× of a raw TCP ping-pong"
            ),
            holds: read_over_pp <= TARGET_READ_OVER_PINGPONG,
            detail: format!(
                "READ 64 B p50 {:.1} µs vs ping-pong 64 B p50 {:.1} µs: {read_over_pp:.2}×",
                s.read_tcp.p50_us(),
                s.pingpong.p50_us()
            ),
        },
    ];

    let at = |size: usize| costs.iter().find(|c| c.size == size);
    let paper = |metric: &str, ours: Option<f64>, paper: f64, source: &str| PaperRef {
        metric: metric.into(),
        ours,
        paper: Some(paper),
        unit: "µs".into(),
        source: source.into(),
    };
    exp.paper = vec![
        paper(
            "MW bind median latency (4 KiB)",
            Some(first.mw.p50_us()),
            PAPER_MW_BIND_US,
            "§1, §2.2, Figure 1",
        ),
        paper(
            "MR registration, 256 MiB",
            at(256 * MIB).map(|c| c.mr.p50_us()),
            PAPER_MR_256MIB_US,
            "§1, §2.1 (\"~1 ms for 256 MB\")",
        ),
        paper(
            &format!("MR registration per 2 MiB (from {big})"),
            Some(last.mr.p50_us() * (2 * MIB) as f64 / last.size as f64),
            PAPER_MR_PER_2MIB_US,
            "§3.1",
        ),
        paper(
            "QP access-flag change",
            Some(s.flag.p50_us()),
            PAPER_QP_FLAG_US,
            "§2.1",
        ),
        paper(
            "QP recovery (reset + reconnect)",
            Some(s.recovery.p50_us()),
            PAPER_QP_RECOVERY_US,
            "§7.2.5, Table 5 (\"Recover QP\")",
        ),
    ];
    Ok(())
}

fn notes(costs: &[SizeCosts]) -> Vec<String> {
    let mut notes = vec![
        "Protection operations run on in-process soft-NIC devices (they are local NIC \
         operations); QP recovery's handshake and the READ anchors use the selected transport."
            .into(),
        "MR registration on the soft NIC is what a kernel does for ibv_reg_mr: fault the pages \
         in, pin them (mlock) and build the region's translation table, so it grows with the \
         region; an MW bind is a protection-table update posted on the memory node's own \
         loopback QP, flat in the region size."
            .into(),
        "A QP access-flag change on the soft NIC is a software barrier (it waits for requests \
         executing under the old flags, then swaps them); it does not reproduce the ~100 µs of \
         RNIC firmware state transitions the paper measures."
            .into(),
        "QP recovery is reset + connect of an RC QP: a new connection handshake (a function \
         call in-process, a TCP connect plus the CM exchange over TCP)."
            .into(),
        "Anchors: a raw 64 B TCP ping-pong on loopback (TCP_NODELAY, both ends busy-polling) \
         and a one-sided 64 B READ over the soft NIC's TCP transport, measured in this run."
            .into(),
    ];
    let unpinned: Vec<String> = costs
        .iter()
        .filter(|c| !c.pinned)
        .map(|c| size_label(c.size))
        .collect();
    if !unpinned.is_empty() {
        notes.push(format!(
            "Not pinned (mlock refused by the memlock limit; registration continued with \
             faulted-in, translated pages): {}",
            unpinned.join(", ")
        ));
    }
    notes
}

fn size_label(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes / KIB)
    }
}
