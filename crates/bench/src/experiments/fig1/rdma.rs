//! Figure 1's protection operations on an rdma-core device (`fig1 --provider rdma`): MR
//! registration and type-1 and type-2 window binds at every size, the QP access-flag change
//! and QP recovery, measured by the same generic code as on the soft NIC, whose numbers are
//! taken in the same run for comparison. The report leads with ratios (each size against
//! 4 KiB, MR against MW), since on an emulated machine only those carry over.
//!
//! The device is `--device NAME`, else `$PATRONUS_RDMA_DEVICE`, else the first one; the GID
//! index is `$PATRONUS_RDMA_GID` when set (as the conformance suite opens it).

use super::endpoints::{Requester, memory_node};
use super::protection::{self, SizeCosts};
use super::{
    MIB, PAPER_MR_256MIB_US, PAPER_MR_PER_2MIB_US, PAPER_MW_BIND_US, PAPER_QP_FLAG_US,
    PAPER_QP_RECOVERY_US, Plan, lat_row, measure_sizes, size_label, soft_sizes,
};
use crate::harness::{
    BenchOpts, Check, Experiment, Figure, Latency, Panel, PanelKind, PaperRef, Point, Ratio, Row,
    Series, bar,
};
use anyhow::{Context as _, Result, anyhow, bail};
use patronus_core::cluster::Link;
use rnic::VerbsError;
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};
use std::time::Instant;

/// Names the device when `--device` does not.
const DEVICE_VAR: &str = "PATRONUS_RDMA_DEVICE";
/// The GID index to use, when set.
const GID_VAR: &str = "PATRONUS_RDMA_GID";

/// Opens `device` (else `$PATRONUS_RDMA_DEVICE`, else the first device) with the GID index of
/// `$PATRONUS_RDMA_GID`; the error says which device and why, in one line.
pub(super) fn open(device: Option<&str>) -> Result<RdmaContext> {
    let device = device
        .map(str::to_string)
        .or_else(|| std::env::var(DEVICE_VAR).ok().filter(|d| !d.is_empty()));
    let gid_index = match std::env::var(GID_VAR) {
        Ok(g) if !g.trim().is_empty() => Some(
            g.trim()
                .parse::<u32>()
                .with_context(|| format!("{GID_VAR}={g:?} is not a GID index"))?,
        ),
        _ => None,
    };
    let name = device
        .clone()
        .unwrap_or_else(|| "(the first device)".into());
    RdmaContext::open(RdmaConfig {
        device,
        gid_index,
        ..RdmaConfig::default()
    })
    .map_err(|e| {
        // The I/O error alone: its `VerbsError` wrapper would print it twice in a chain.
        let why = match e {
            VerbsError::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        anyhow!(
            "--provider rdma: opening RDMA device {name}: {why} (`patronus devices` lists devices)"
        )
    })
}

/// What one provider measured.
struct Side {
    sizes: Vec<SizeCosts>,
    flag: Option<Latency>,
    recovery: Option<Latency>,
}

impl Side {
    fn first(&self) -> Result<&SizeCosts> {
        match self.sizes.first() {
            Some(c) => Ok(c),
            None => bail!("Figure 1 measured no region size"),
        }
    }
}

/// Runs Figure 1's protection operations on the rdma-core device and on the soft NIC.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub(super) fn run(opts: &BenchOpts, plan: &Plan, device: Option<String>) -> Result<Experiment> {
    let started = Instant::now();
    let ctx = open(device.as_deref())?;
    let dev = ctx.device_name().to_string();
    let rxe = ctx.is_rxe();
    println!(
        "Figure 1 on RDMA device {dev} (GID index {}): protection operations through rdma-core, \
         the soft NIC's in the same run",
        ctx.gid_index()
    );
    let mut notes = Vec::new();

    let sizes = {
        let mn = memory_node::<RdmaProvider>(ctx.clone())?;
        let manager = Requester::connect(&mn.ctx, &mn.pd, mn.address(), b"fig1")
            .context("connecting the memory node's loopback QP")?;
        // A successful ibv_reg_mr has pinned its pages (a device without on-demand paging).
        measure_sizes(
            &mn,
            &manager,
            plan,
            true,
            &|_| true,
            "fig1 MR/MW sizes (rdma)",
        )?
    };
    let second = || open(device.as_deref());
    let flag = attempt(&mut notes, &dev, "QP flag change", || {
        protection::qp_flag_change_on::<RdmaProvider>(ctx.clone(), &second()?, plan.flag_iters)
    });
    let recovery = attempt(&mut notes, &dev, "QP recovery", || {
        let progress = bar(plan.recovery_iters, "fig1 QP recovery (rdma)");
        let l = protection::qp_recovery_on::<RdmaProvider>(
            ctx.clone(),
            &second()?,
            plan.recovery_iters,
            || progress.inc(1),
        );
        progress.finish_and_clear();
        l
    });
    let rdma = Side {
        sizes,
        flag,
        recovery,
    };
    let soft = Side {
        sizes: soft_sizes(plan, true)?,
        flag: Some(protection::qp_flag_change(plan.flag_iters)?),
        recovery: Some(protection::qp_recovery(
            Link::InProc,
            plan.recovery_iters,
            || (),
        )?),
    };

    print_latencies(&dev, &rdma);
    print_latencies("soft NIC (in-process)", &soft);
    print_ratios(&dev, &rdma, &soft);

    let mut exp = Experiment::new("fig1", &format!("rdma ({dev})"), opts.quick);
    exp.rows = rows(&rdma, &soft);
    exp.figure = figure(&dev, &rdma, &soft);
    judge(&mut exp, &dev, &rdma, &soft)?;
    exp.notes = notes;
    exp.notes.extend(explain(&dev, rxe));
    exp.wall_s = started.elapsed().as_secs_f64();
    Ok(exp)
}

/// Runs `f`; a failure becomes a note instead of ending the run (the sizes are the point).
fn attempt(
    notes: &mut Vec<String>,
    dev: &str,
    what: &str,
    f: impl FnOnce() -> Result<Latency>,
) -> Option<Latency> {
    match f() {
        Ok(l) => Some(l),
        Err(e) => {
            let note = format!("{what} on {dev} failed, not reported: {e:#}");
            println!("{note}");
            notes.push(note);
            None
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Per size of `side`: (MR vs the smallest size, MW vs the smallest size, MR over MW).
fn size_ratios(side: &Side) -> Vec<(f64, f64, f64)> {
    let Some(first) = side.sizes.first() else {
        return Vec::new();
    };
    side.sizes
        .iter()
        .map(|c| {
            (
                ratio(c.mr.p50_us(), first.mr.p50_us()),
                ratio(c.mw.p50_us(), first.mw.p50_us()),
                ratio(c.mr.p50_us(), c.mw.p50_us()),
            )
        })
        .collect()
}

fn type2_p50(c: &SizeCosts) -> (f64, f64) {
    c.type2.as_ref().map_or((f64::NAN, f64::NAN), |t| {
        (t.bind.p50_us(), t.invalidate.p50_us())
    })
}

fn print_latencies(who: &str, side: &Side) {
    println!(
        "{who}: latency per size (µs; MR is reg + dereg, MW a bind posted and completed, \
         MW2 a type-2 window)"
    );
    println!(
        "{:>9} | {:>11} {:>10} {:>10} {:>11} {:>6} | {:>9} {:>9} | {:>9} {:>9}",
        "size",
        "MR p50",
        "reg p50",
        "dereg p50",
        "MR cold",
        "pinned",
        "MW1 p50",
        "MW1 p99",
        "MW2 bind",
        "MW2 inv"
    );
    for c in &side.sizes {
        let (b2, i2) = type2_p50(c);
        println!(
            "{:>9} | {:>11.1} {:>10.1} {:>10.1} {:>11.1} {:>6} | {:>9.2} {:>9.2} | {:>9.2} {:>9.2}",
            size_label(c.size),
            c.mr.p50_us(),
            c.reg.p50_us(),
            c.dereg.p50_us(),
            c.mr_cold_us,
            if c.pinned { "yes" } else { "no" },
            c.mw.p50_us(),
            c.mw.p99_us(),
            b2,
            i2,
        );
    }
    for (name, l) in [
        ("QP flag change", &side.flag),
        ("QP recovery", &side.recovery),
    ] {
        if let Some(l) = l {
            println!(
                "{who} {name}: p50 {:.2} µs, p99 {:.2} µs ({} samples)",
                l.p50_us(),
                l.p99_us(),
                l.count()
            );
        }
    }
}

/// The paper's MR/MW at `size`, where it states both numbers (256 MiB only).
fn paper_mr_over_mw(size: usize) -> Option<f64> {
    (size == 256 * MIB).then(|| PAPER_MR_256MIB_US / PAPER_MW_BIND_US)
}

fn print_ratios(dev: &str, rdma: &Side, soft: &Side) {
    let (r, s) = (size_ratios(rdma), size_ratios(soft));
    let small = rdma
        .sizes
        .first()
        .map_or_else(String::new, |c| size_label(c.size));
    println!(
        "Ratios of p50s: {dev} beside the soft NIC (same run) and the paper (ConnectX-5) where \
         it states both numbers"
    );
    println!(
        "{:>9} | {:>16} {:>8} | {:>16} {:>8} | {:>11} {:>8} {:>7}",
        "size",
        format!("MR/MR({small}) rdma"),
        "soft",
        format!("MW/MW({small}) rdma"),
        "soft",
        "MR/MW rdma",
        "soft",
        "paper"
    );
    let opt = |v: Option<f64>, w: usize, p: usize| {
        v.map_or_else(|| format!("{:>w$}", "-"), |v| format!("{v:>w$.p$}"))
    };
    for (i, c) in rdma.sizes.iter().enumerate() {
        let (mr, mw, mrmw) = r[i];
        let sr = s.get(i).copied();
        println!(
            "{:>9} | {:>16.1} {} | {:>16.2} {} | {:>11.1} {} {}",
            size_label(c.size),
            mr,
            opt(sr.map(|x| x.0), 8, 1),
            mw,
            opt(sr.map(|x| x.1), 8, 2),
            mrmw,
            opt(sr.map(|x| x.2), 8, 1),
            opt(paper_mr_over_mw(c.size), 7, 0),
        );
    }
    let mw0 = |side: &Side| side.sizes.first().map(|c| c.mw.p50_us());
    for (name, pick, paper) in [
        (
            "QP flag change / MW bind",
            (|side: &Side| side.flag.as_ref().map(Latency::p50_us)) as fn(&Side) -> Option<f64>,
            PAPER_QP_FLAG_US / PAPER_MW_BIND_US,
        ),
        (
            "QP recovery / MW bind",
            |side: &Side| side.recovery.as_ref().map(Latency::p50_us),
            PAPER_QP_RECOVERY_US / PAPER_MW_BIND_US,
        ),
    ] {
        let of = |side: &Side| Some(ratio(pick(side)?, mw0(side)?));
        println!(
            "{name} ({small}): rdma {}, soft {}, paper {paper:.0}",
            opt(of(rdma), 1, 1),
            opt(of(soft), 1, 1),
        );
    }
    println!(
        "paper (ConnectX-5): MW bind {PAPER_MW_BIND_US} µs, MR registration ~{PAPER_MR_256MIB_US} µs \
         for 256 MB and ~{PAPER_MR_PER_2MIB_US} µs per 2 MiB, QP flag change ~{PAPER_QP_FLAG_US} µs, \
         QP recovery {PAPER_QP_RECOVERY_US} µs"
    );
}

fn rows(rdma: &Side, soft: &Side) -> Vec<Row> {
    let mut rows = Vec::new();
    for (who, side) in [("rdma", rdma), ("soft", soft)] {
        let ratios = size_ratios(side);
        for (c, (mr_x, _, mr_mw)) in side.sizes.iter().zip(&ratios) {
            rows.push(
                lat_row(&format!("{who} MR reg+dereg"), &c.mr)
                    .with("size_bytes", c.size as u64)
                    .with("reg_p50_us", c.reg.p50_us())
                    .with("dereg_p50_us", c.dereg.p50_us())
                    .with("cold_us", c.mr_cold_us)
                    .with("pinned", c.pinned)
                    .with("x_smallest", *mr_x)
                    .with("mr_over_mw", *mr_mw),
            );
        }
        for (c, (_, mw_x, _)) in side.sizes.iter().zip(&ratios) {
            rows.push(
                lat_row(&format!("{who} MW bind"), &c.mw)
                    .with("size_bytes", c.size as u64)
                    .with("x_smallest", *mw_x),
            );
        }
        let first2 = side.sizes.first().and_then(|c| c.type2.as_ref());
        for c in &side.sizes {
            if let (Some(t), Some(f)) = (&c.type2, first2) {
                rows.push(
                    lat_row(&format!("{who} MW bind (type 2)"), &t.bind)
                        .with("size_bytes", c.size as u64)
                        .with("x_smallest", ratio(t.bind.p50_us(), f.bind.p50_us())),
                );
                rows.push(
                    lat_row(&format!("{who} MW invalidate (type 2)"), &t.invalidate)
                        .with("size_bytes", c.size as u64),
                );
            }
        }
        if let Some(l) = &side.flag {
            rows.push(lat_row(&format!("{who} QP flag change"), l));
        }
        if let Some(l) = &side.recovery {
            rows.push(lat_row(&format!("{who} QP recovery"), l));
        }
    }
    rows
}

fn figure(dev: &str, rdma: &Side, soft: &Side) -> Figure {
    let line = |name: String, side: &Side, f: &dyn Fn(&SizeCosts) -> f64| Series {
        name,
        points: side
            .sizes
            .iter()
            .map(|c| Point::xy(c.size as f64, f(c)))
            .filter(|p| p.y.is_finite() && p.y > 0.0)
            .collect(),
    };
    let mr = |c: &SizeCosts| c.mr.p50_us();
    let mw = |c: &SizeCosts| c.mw.p50_us();
    let mw2 = |c: &SizeCosts| type2_p50(c).0;
    let mut absolute = vec![
        line(format!("{dev} MR reg+dereg"), rdma, &mr),
        line(format!("{dev} MW bind (type 1)"), rdma, &mw),
        line(format!("{dev} MW bind (type 2)"), rdma, &mw2),
        line("soft MR reg+dereg".into(), soft, &mr),
        line("soft MW bind (type 1)".into(), soft, &mw),
    ];
    absolute.retain(|s| !s.points.is_empty());
    let rel = |name: String, side: &Side, f: &dyn Fn(&SizeCosts) -> f64| {
        let base = side.sizes.first().map_or(f64::NAN, f);
        line(name, side, &|c| ratio(f(c), base))
    };
    let relative = vec![
        rel(format!("{dev} MR reg+dereg"), rdma, &mr),
        rel(format!("{dev} MW bind (type 1)"), rdma, &mw),
        rel("soft MR reg+dereg".into(), soft, &mr),
        rel("soft MW bind (type 1)".into(), soft, &mw),
    ];
    let panel = |title: &str, y_label: &str, series: Vec<Series>| Panel {
        title: title.into(),
        x_label: "region size (bytes)".into(),
        y_label: y_label.into(),
        x_log: true,
        y_log: true,
        kind: PanelKind::Lines,
        series,
    };
    Figure {
        title: format!("Figure 1 on {dev}: MR registration vs MW bind (soft NIC beside)"),
        panels: vec![
            panel("(a) median latency", "median latency (µs)", absolute),
            panel(
                "(b) relative to the smallest size",
                "p50 / p50 at the smallest size",
                relative
                    .into_iter()
                    .filter(|s| !s.points.is_empty())
                    .collect(),
            ),
        ],
    }
}

/// Ratios, checks and the paper's numbers.
fn judge(exp: &mut Experiment, dev: &str, rdma: &Side, soft: &Side) -> Result<()> {
    let first = rdma.first()?;
    let last = rdma.sizes.last().unwrap_or(first);
    let (big, small) = (size_label(last.size), size_label(first.size));
    let mr_growth = ratio(last.mr.p50_us(), first.mr.p50_us());
    let mw_growth = ratio(last.mw.p50_us(), first.mw.p50_us());
    for (who, side) in [("rdma", rdma), ("soft", soft)] {
        let (f, l) = (side.first()?, side.sizes.last().unwrap_or(side.first()?));
        exp.ratios.extend([
            Ratio {
                name: format!("{who} MR reg+dereg p50, {big} / {small}"),
                value: ratio(l.mr.p50_us(), f.mr.p50_us()),
            },
            Ratio {
                name: format!("{who} MW bind p50, {big} / {small}"),
                value: ratio(l.mw.p50_us(), f.mw.p50_us()),
            },
            Ratio {
                name: format!("{who} MR reg+dereg / MW bind p50, {big}"),
                value: ratio(l.mr.p50_us(), l.mw.p50_us()),
            },
            Ratio {
                name: format!("{who} MR reg+dereg / MW bind p50, {small}"),
                value: ratio(f.mr.p50_us(), f.mw.p50_us()),
            },
        ]);
        if let Some(flag) = &side.flag {
            exp.ratios.push(Ratio {
                name: format!("{who} QP flag change / MW bind {small} (p50)"),
                value: ratio(flag.p50_us(), f.mw.p50_us()),
            });
        }
    }

    let mw_not_cheaper: Vec<String> = rdma
        .sizes
        .iter()
        .filter(|c| c.mw.p50_us() >= c.mr.p50_us())
        .map(|c| size_label(c.size))
        .collect();
    exp.checks = vec![
        Check {
            claim: format!("MW bind is flat in the region size on {dev}"),
            holds: mw_growth <= 2.0,
            detail: format!(
                "MW bind p50 {:.2} µs at {big} vs {:.2} µs at {small}: {mw_growth:.2}× (≤ 2× holds)",
                last.mw.p50_us(),
                first.mw.p50_us()
            ),
        },
        Check {
            claim: format!("MR registration grows with the region size on {dev}"),
            holds: mr_growth >= 10.0,
            detail: format!(
                "MR reg+dereg p50 {:.1} µs at {big} vs {:.1} µs at {small}: {mr_growth:.0}× (≥ 10× holds)",
                last.mr.p50_us(),
                first.mr.p50_us()
            ),
        },
        Check {
            claim: format!("MW bind is cheaper than MR registration at every size on {dev}"),
            holds: mw_not_cheaper.is_empty(),
            detail: if mw_not_cheaper.is_empty() {
                format!(
                    "MW p50 below MR p50 at all {} sizes (smallest gap {:.1}× at {small})",
                    rdma.sizes.len(),
                    ratio(first.mr.p50_us(), first.mw.p50_us())
                )
            } else {
                format!("MW p50 ≥ MR p50 at {}", mw_not_cheaper.join(", "))
            },
        },
    ];
    if let (Some(f2), Some(l2)) = (&first.type2, &last.type2) {
        let g = ratio(l2.bind.p50_us(), f2.bind.p50_us());
        exp.checks.push(Check {
            claim: format!("a type-2 MW bind is flat in the region size on {dev}"),
            holds: g <= 2.0,
            detail: format!(
                "type-2 bind p50 {:.2} µs at {big} vs {:.2} µs at {small}: {g:.2}× (≤ 2× holds)",
                l2.bind.p50_us(),
                f2.bind.p50_us()
            ),
        });
    }

    let at = |size: usize| rdma.sizes.iter().find(|c| c.size == size);
    let mw0 = first.mw.p50_us();
    let paper =
        |metric: String, ours: Option<f64>, paper: f64, unit: &str, source: &str| PaperRef {
            metric,
            ours,
            paper: Some(paper),
            unit: unit.into(),
            source: source.into(),
        };
    exp.paper = vec![
        paper(
            format!("MR reg+dereg 256 MiB / MW bind {small} ({dev})"),
            at(256 * MIB).map(|c| ratio(c.mr.p50_us(), mw0)),
            PAPER_MR_256MIB_US / PAPER_MW_BIND_US,
            "×",
            "§1, §2.1, §2.2 (~1 ms / 1.1 µs)",
        ),
        paper(
            format!("QP access-flag change / MW bind {small} ({dev})"),
            rdma.flag.as_ref().map(|l| ratio(l.p50_us(), mw0)),
            PAPER_QP_FLAG_US / PAPER_MW_BIND_US,
            "×",
            "§2.1, §2.2 (~100 µs / 1.1 µs)",
        ),
        paper(
            format!("QP recovery / MW bind {small} ({dev})"),
            rdma.recovery.as_ref().map(|l| ratio(l.p50_us(), mw0)),
            PAPER_QP_RECOVERY_US / PAPER_MW_BIND_US,
            "×",
            "§7.2.5 Table 5, §2.2 (1004 µs / 1.1 µs)",
        ),
        paper(
            format!("MW bind median latency ({small}, {dev})"),
            Some(mw0),
            PAPER_MW_BIND_US,
            "µs",
            "§1, §2.2, Figure 1",
        ),
        paper(
            format!("MR registration, 256 MiB ({dev})"),
            at(256 * MIB).map(|c| c.mr.p50_us()),
            PAPER_MR_256MIB_US,
            "µs",
            "§1, §2.1 (\"~1 ms for 256 MB\")",
        ),
        paper(
            format!("MR registration per 2 MiB (from {big}, {dev})"),
            Some(last.mr.p50_us() * (2 * MIB) as f64 / last.size as f64),
            PAPER_MR_PER_2MIB_US,
            "µs",
            "§3.1",
        ),
        paper(
            format!("QP access-flag change ({dev})"),
            rdma.flag.as_ref().map(Latency::p50_us),
            PAPER_QP_FLAG_US,
            "µs",
            "§2.1",
        ),
    ];
    Ok(())
}

fn explain(dev: &str, rxe: bool) -> Vec<String> {
    let mut notes = vec![
        format!(
            "The protection operations ran on {dev} through rdma-core; the soft rows are the \
             in-process soft NIC, measured in the same run by the same code. A bind is posted \
             on the memory node's own RC QP (connected to itself through the device) and a \
             sample is the post plus the poll of its completion; a type-2 sample binds a free \
             window and its invalidation is timed apart."
        ),
        "On an emulated or virtual machine absolute times are the machine's, not a NIC's: \
         compare the ratios (each size against the smallest, MR against MW, an operation \
         against a bind) with the soft NIC's and the paper's."
            .into(),
        "MR cold is the first registration of a freshly allocated buffer (its pages faulted in \
         by the registration itself); MR p50 is over warm registrations of the same buffer."
            .into(),
        "The soft QP recovery is in-process (a function-call handshake); the rdma one is \
         reset + connect with the out-of-band TCP handshake on loopback."
            .into(),
    ];
    if rxe {
        notes.push(
            "rxe (Soft-RoCE) is the kernel's software RNIC: ibv_reg_mr pins the range with \
             ib_umem_get() and records every page in the region (rxe_mr_init_user(), rxe_mr.c), \
             so registration grows with the pages; a bind is a send-queue work request the \
             kernel executes (rxe_bind_mw(), rxe_mw.c), which checks and sets the window's \
             fields with no per-page work."
                .into(),
        );
    }
    notes
}
