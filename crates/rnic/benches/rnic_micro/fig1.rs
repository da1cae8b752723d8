//! Section 1, the paper's Figure 1 analogue: MR registration (reg_mr + dereg) versus a
//! type-1 memory-window bind, over region sizes 4 KiB .. 256 MiB.

use anyhow::{Result, anyhow, bail};
use rnic::soft::{SoftConfig, SoftFabric};
use rnic::{
    AccessFlags, BindInfo, Context, MemoryBuffer, MemoryRegion, MwType, ProtectionDomain, SendOp,
    SendWr,
};
use serde_json::{Value, json};

use crate::Opts;
use crate::endpoints::{Client, MemoryNode, post, wait_completions};
use crate::measure::{KIB, Lat, MIB, fmt_ns, fmt_size, median, new_hist, now, ns, verdict};

/// "Done when": MR registration of 256 MiB costs at least this many times 4 KiB.
pub(crate) const TARGET_MR_GROWTH: f64 = 10.0;
/// "Done when": an MW bind over 256 MiB costs at most this many times one over 4 KiB.
pub(crate) const TARGET_MW_FLAT: f64 = 2.0;

#[derive(Debug)]
pub(crate) struct Fig1Row {
    pub(crate) size: usize,
    pub(crate) mr_iters: usize,
    /// The first registration of a freshly mapped buffer (pages faulted in from scratch).
    pub(crate) mr_cold_ns: u64,
    /// Median of the warm iterations: reg_mr + dereg together, and each part.
    pub(crate) mr_median_ns: u64,
    pub(crate) reg_median_ns: u64,
    pub(crate) dereg_median_ns: u64,
    pub(crate) pinned: bool,
    pub(crate) mw: Lat,
}

pub(crate) fn fig1_sizes(opts: &Opts) -> Vec<usize> {
    let all = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB];
    all.into_iter()
        .filter(|&s| s <= opts.pick(256 * MIB, 16 * MIB, 64 * KIB))
        .collect()
}

/// Warm registrations per size: fewer for the large ones (each touches every page).
pub(crate) fn mr_iters(size: usize, opts: &Opts) -> usize {
    let n = match size {
        s if s <= 64 * KIB => 400,
        s if s <= MIB => 100,
        s if s <= 16 * MIB => 15,
        s if s <= 64 * MIB => 7,
        _ => 5,
    };
    opts.pick(n, (n / 4).max(3), 3)
}

pub(crate) fn fig1(opts: &Opts) -> Result<(Vec<Fig1Row>, Value)> {
    println!("== 1. Figure 1 analogue: MR registration vs type-1 MW bind (in-process device) ==");
    let fabric = SoftFabric::new();
    let config = SoftConfig::default();
    println!(
        "pinning mode: {:?}; memlock limit: {}; euid: {}",
        config.pinning,
        memlock_limit(),
        euid().map_or_else(|| "?".to_owned(), |u| u.to_string())
    );
    // The memory node binds through its own loopback QP (the manager's QP), as Patronus does.
    let mn = MemoryNode::new(fabric.open_device(config), 4096)?;
    let manager = Client::connect(&mn.ctx, &mn.pd, mn.address())?;
    let mw_iters = opts.pick(20_000, 2_000, 200);
    let mut rows = Vec::new();
    for size in fig1_sizes(opts) {
        let buf = mn.ctx.alloc_buffer(size)?;
        let flags = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;

        // MR: reg_mr + dereg, first iteration cold (fresh mapping), the rest warm.
        let iters = mr_iters(size, opts);
        let (mut total, mut reg, mut dereg) = (Vec::new(), Vec::new(), Vec::new());
        let mut cold = 0;
        let mut pinned = true;
        for i in 0..=iters {
            let t0 = now();
            let mr = mn.pd.reg_mr(&buf, 0, size, flags)?;
            let t1 = now();
            pinned &= mn
                .ctx
                .protection_table()
                .mr(mr.lkey())
                .is_some_and(|e| e.pinned);
            let t2 = now();
            mr.deregister().map_err(|(_, e)| anyhow!("dereg: {e}"))?;
            let t3 = now();
            let (r, d) = (ns(t1 - t0), ns(t3 - t2));
            if i == 0 {
                cold = r + d;
            } else {
                total.push(r + d);
                reg.push(r);
                dereg.push(d);
            }
        }

        // MW: one type-1 window rebound over the whole region, alternating its rights so every
        // bind changes the binding; each sample is post(BIND_MW) + poll of its completion.
        let mr = mn.pd.reg_mr(&buf, 0, size, flags)?;
        let mw = mn.pd.alloc_mw(MwType::Type1)?;
        let rights = [
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            AccessFlags::REMOTE_READ,
        ];
        let mut hist = new_hist()?;
        let warmup = mw_iters / 10;
        for i in 0..warmup + mw_iters {
            let wr = SendWr {
                wr_id: i as u64,
                signaled: true,
                op: SendOp::BindMw {
                    mw: &mw,
                    bind: BindInfo {
                        mr: Some(&mr),
                        addr: buf.addr(),
                        length: size as u64,
                        access: rights[i % 2],
                        key: None,
                    },
                },
            };
            let t0 = now();
            post(&manager.qp, &[wr])?;
            wait_completions(&manager.cq, 1)?;
            let dt = ns(now() - t0);
            if i >= warmup {
                hist.saturating_record(dt);
            }
        }
        drop(mw); // unbinds before the region goes
        drop(mr);
        drop(buf);
        let row = Fig1Row {
            size,
            mr_iters: iters,
            mr_cold_ns: cold,
            mr_median_ns: median(&mut total),
            reg_median_ns: median(&mut reg),
            dereg_median_ns: median(&mut dereg),
            pinned,
            mw: Lat::of(&hist),
        };
        println!(
            "  {:>8}: MR reg+dereg median {:>10} (reg {:>10}, dereg {:>10}, cold {:>10}, n={}, pinned={})  MW bind p50 {:>7} p99 {:>7}",
            fmt_size(size),
            fmt_ns(row.mr_median_ns),
            fmt_ns(row.reg_median_ns),
            fmt_ns(row.dereg_median_ns),
            fmt_ns(row.mr_cold_ns),
            row.mr_iters,
            row.pinned,
            fmt_ns(row.mw.p50),
            fmt_ns(row.mw.p99),
        );
        rows.push(row);
    }
    drop(manager);

    println!();
    println!(
        "{:>9} | {:>12} {:>12} {:>12} {:>12} {:>6} | {:>9} {:>9} | {:>9}",
        "size", "MR median", "reg", "dereg", "MR cold", "pinned", "MW p50", "MW p99", "MR/MW"
    );
    for r in &rows {
        println!(
            "{:>9} | {:>12} {:>12} {:>12} {:>12} {:>6} | {:>9} {:>9} | {:>8.0}x",
            fmt_size(r.size),
            fmt_ns(r.mr_median_ns),
            fmt_ns(r.reg_median_ns),
            fmt_ns(r.dereg_median_ns),
            fmt_ns(r.mr_cold_ns),
            if r.pinned { "yes" } else { "no" },
            fmt_ns(r.mw.p50),
            fmt_ns(r.mw.p99),
            r.mr_median_ns as f64 / r.mw.p50.max(1) as f64,
        );
    }

    let (first, last) = match (rows.first(), rows.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => bail!("no Figure 1 sizes"),
    };
    let mr_ratio = last.mr_median_ns as f64 / first.mr_median_ns.max(1) as f64;
    let mw_ratio = last.mw.p50 as f64 / first.mw.p50.max(1) as f64;
    let full = last.size == 256 * MIB;
    let mr_ok = mr_ratio >= TARGET_MR_GROWTH;
    let mw_ok = (1.0 / TARGET_MW_FLAT..=TARGET_MW_FLAT).contains(&mw_ratio);
    println!();
    println!(
        "ratio MR({})/MR(4 KiB) = {:.1}x   (done-when: >= {TARGET_MR_GROWTH}x at 256 MiB) -> {}{}",
        fmt_size(last.size),
        mr_ratio,
        verdict(mr_ok),
        if full {
            ""
        } else {
            " [short run: 256 MiB not measured]"
        }
    );
    println!(
        "ratio MW({})/MW(4 KiB) = {:.2}x  (done-when: within {TARGET_MW_FLAT}x) -> {}",
        fmt_size(last.size),
        mw_ratio,
        verdict(mw_ok)
    );
    let unpinned: Vec<String> = rows
        .iter()
        .filter(|r| !r.pinned)
        .map(|r| fmt_size(r.size))
        .collect();
    if unpinned.is_empty() {
        println!("all registrations were mlocked (pinned)");
    } else {
        println!(
            "not pinned (mlock refused, Pinning::Try continued with faulted-in, translated pages): {}",
            unpinned.join(", ")
        );
    }
    println!();

    let json_rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "size_bytes": r.size,
                "mr_iters": r.mr_iters,
                "mr_reg_dereg_median_ns": r.mr_median_ns,
                "mr_reg_median_ns": r.reg_median_ns,
                "mr_dereg_median_ns": r.dereg_median_ns,
                "mr_cold_reg_dereg_ns": r.mr_cold_ns,
                "pinned": r.pinned,
                "mw_bind": r.mw.json(),
            })
        })
        .collect();
    let value = json!({
        "pinning": "Try",
        "memlock_limit": memlock_limit(),
        "euid": euid(),
        "rows": json_rows,
        "largest_size_bytes": last.size,
        "mr_ratio_largest_over_4k": mr_ratio,
        "mw_ratio_largest_over_4k": mw_ratio,
        "mr_ratio_target_min": TARGET_MR_GROWTH,
        "mw_ratio_target_max": TARGET_MW_FLAT,
        "mr_ratio_met": mr_ok,
        "mw_ratio_met": mw_ok,
        "full_range": full,
    });
    Ok((rows, value))
}

/// The soft limit on locked memory, as `/proc/self/limits` shows it.
pub(crate) fn memlock_limit() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max locked memory"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
        })
        .map_or_else(
            || "unknown".to_owned(),
            |v| {
                v.parse::<u64>()
                    .map_or(v.clone(), |b| format!("{} KiB", b / 1024))
            },
        )
}

pub(crate) fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
