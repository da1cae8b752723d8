//! The protection operations of Figure 1, timed one at a time, on any provider: MR
//! registration + deregistration, a type-1 MW rebind (and, where asked, a type-2 bind and its
//! invalidation), a QP access-flag change, and a QP recovery (reset + reconnect, i.e. a new
//! handshake). The soft NIC's wrappers pick its devices; `--provider rdma` passes contexts of
//! an rdma-core device to the same functions.

use super::endpoints::{MemoryNode, Requester, execute, last_accepted, memory_node, requester};
use crate::harness::Latency;
use anyhow::{Result, anyhow, bail};
use patronus_core::cluster::Link;
use rnic::soft::{SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use rnic::{
    AccessFlags, BindInfo, Context, MemoryRegion, MemoryWindow, MwType, ProtectionDomain, Provider,
    QpState, QueuePair, SendOp, SendWr,
};
use std::net::SocketAddr;
use std::time::Instant;

/// MR and MW costs at one region size.
pub(super) struct SizeCosts {
    pub(super) size: usize,
    /// reg_mr + dereg of a buffer already faulted in by earlier registrations.
    pub(super) mr: Latency,
    pub(super) reg: Latency,
    pub(super) dereg: Latency,
    /// The first reg_mr + dereg of a freshly mapped buffer (its pages faulted in from scratch).
    pub(super) mr_cold_us: f64,
    /// Whether every registration was pinned (on the soft NIC the memlock limit may refuse
    /// large ones).
    pub(super) pinned: bool,
    /// Rebinding a type-1 window over the whole region.
    pub(super) mw: Latency,
    /// A type-2 window, when measured.
    pub(super) type2: Option<Type2Costs>,
}

/// A type-2 window over the whole region: bound on the manager's QP, then invalidated, so
/// that the next bind finds it free (a bound type-2 window cannot be bound again).
pub(super) struct Type2Costs {
    /// post(BIND_MW) + poll of its completion, the window free before.
    pub(super) bind: Latency,
    /// post(LOCAL_INV) + poll of its completion.
    pub(super) invalidate: Latency,
}

/// How much to measure at one size.
pub(super) struct SizePlan {
    pub(super) size: usize,
    pub(super) mr_reps: usize,
    pub(super) mw_iters: u64,
    /// Also bind and invalidate a type-2 window `mw_iters` times.
    pub(super) type2: bool,
}

/// Measures `plan.mr_reps` warm registrations and `plan.mw_iters` window binds over a
/// `plan.size`-byte buffer of `mn`; `manager` is the memory node's own loopback QP (on the
/// memory node's PD), which posts the binds (as Patronus' manager does). `pinned` tells
/// whether a registration pinned its pages.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub(super) fn mr_and_mw<P: Provider>(
    mn: &MemoryNode<P>,
    manager: &Requester<P>,
    plan: &SizePlan,
    pinned: &dyn Fn(&P::Mr) -> bool,
) -> Result<SizeCosts> {
    let size = plan.size;
    let buf = mn.ctx.alloc_buffer(size)?;
    let flags = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL | AccessFlags::MW_BIND;
    let (mut mr_lat, mut reg_lat, mut dereg_lat) = (Latency::new(), Latency::new(), Latency::new());
    let (mut cold, mut all_pinned) = (0.0, true);
    for rep in 0..=plan.mr_reps {
        let t0 = Instant::now();
        let mr = mn.pd.reg_mr(&buf, 0, size, flags)?;
        let reg = t0.elapsed();
        all_pinned &= pinned(&mr);
        let t1 = Instant::now();
        mr.deregister().map_err(|(_, e)| anyhow!("dereg_mr: {e}"))?;
        let dereg = t1.elapsed();
        if rep == 0 {
            cold = (reg + dereg).as_secs_f64() * 1e6;
        } else {
            mr_lat.record(reg + dereg);
            reg_lat.record(reg);
            dereg_lat.record(dereg);
        }
    }

    // One type-1 window rebound over the whole region, alternating its rights so that every
    // bind changes the binding; a sample is post(BIND_MW) + poll of its completion.
    let mr = mn.pd.reg_mr(&buf, 0, size, flags)?;
    let mw = mn.pd.alloc_mw(MwType::Type1)?;
    let mut mw_lat = Latency::new();
    let warmup = plan.mw_iters / 10;
    for i in 0..warmup + plan.mw_iters {
        let wr = bind_wr::<P>(i, &mw, &mr);
        let t0 = Instant::now();
        execute(manager, wr)?;
        if i >= warmup {
            mw_lat.record(t0.elapsed());
        }
    }
    drop(mw); // unbinds before its region goes
    let type2 = if plan.type2 {
        Some(type2_binds(
            manager,
            mn,
            &mr,
            warmup + plan.mw_iters,
            warmup,
        )?)
    } else {
        None
    };
    drop(mr);
    Ok(SizeCosts {
        size,
        mr: mr_lat,
        reg: reg_lat,
        dereg: dereg_lat,
        mr_cold_us: cold,
        pinned: all_pinned,
        mw: mw_lat,
        type2,
    })
}

/// Rights a bind grants, alternating so that every bind changes the binding.
const RIGHTS: [AccessFlags; 2] = [
    AccessFlags::REMOTE_READ
        .union(AccessFlags::REMOTE_WRITE)
        .union(AccessFlags::REMOTE_ATOMIC),
    AccessFlags::REMOTE_READ,
];

/// A signaled bind of `mw` over the whole of `mr`, with the device's choice of key byte.
fn bind_wr<'a, P: Provider>(i: u64, mw: &'a P::Mw, mr: &'a P::Mr) -> SendWr<'a, P::Mw, P::Mr> {
    SendWr {
        wr_id: i,
        signaled: true,
        op: SendOp::BindMw {
            mw,
            bind: BindInfo {
                mr: Some(mr),
                addr: mr.addr(),
                length: mr.len() as u64,
                access: RIGHTS[(i % 2) as usize],
                key: None,
                target_qp: None,
            },
        },
    }
}

/// `iters` binds of one type-2 window over `mr`, each followed by its invalidation (both
/// timed, the first `warmup` of each dropped). The window ends free, so neither its
/// deallocation nor the manager's QP waits for it.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
fn type2_binds<P: Provider>(
    manager: &Requester<P>,
    mn: &MemoryNode<P>,
    mr: &P::Mr,
    iters: u64,
    warmup: u64,
) -> Result<Type2Costs> {
    let mw = mn.pd.alloc_mw(MwType::Type2)?;
    let (mut bind, mut invalidate) = (Latency::new(), Latency::new());
    for i in 0..iters {
        let t0 = Instant::now();
        execute(manager, bind_wr::<P>(i, &mw, mr))?;
        let bound = t0.elapsed();
        let wr = SendWr {
            wr_id: i,
            signaled: true,
            op: SendOp::LocalInvalidate { rkey: mw.rkey() },
        };
        let t1 = Instant::now();
        execute(manager, wr)?;
        if i >= warmup {
            bind.record(bound);
            invalidate.record(t1.elapsed());
        }
    }
    Ok(Type2Costs { bind, invalidate })
}

/// `modify_access` on the responder QP of a connected RC pair (in-process device), alternating
/// between full remote rights and read-only, as the QP-based protection flips a client's QP.
pub(super) fn qp_flag_change(iters: u64) -> Result<Latency> {
    let fabric = SoftFabric::new();
    qp_flag_change_on::<SoftProvider>(
        fabric.open_device(SoftConfig::default()),
        &fabric.open_device(SoftConfig::default()),
        iters,
    )
}

/// `modify_access` on the responder QP of a connection from `cn_ctx` to a memory node on
/// `mn_ctx`, alternating between full remote rights and read-only.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub(super) fn qp_flag_change_on<P: Provider>(
    mn_ctx: P::Context,
    cn_ctx: &P::Context,
    iters: u64,
) -> Result<Latency> {
    let mn = memory_node::<P>(mn_ctx)?;
    let client = requester::<P>(cn_ctx, mn.address())?;
    let responder = last_accepted(&mn)?;
    let flags = [AccessFlags::REMOTE_READ, AccessFlags::REMOTE_ALL];
    let mut lat = Latency::new();
    let warmup = iters / 10;
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        responder.modify_access(flags[(i % 2) as usize])?;
        if i >= warmup {
            lat.record(t0.elapsed());
        }
    }
    drop(client);
    Ok(lat)
}

/// Two devices on `transport`: (memory node, client).
pub(super) fn device_pair(
    transport: Link,
) -> Result<(SoftContext, SoftContext, Option<SoftFabric>)> {
    match transport {
        Link::InProc => {
            let f = SoftFabric::new();
            let mn = f.open_device(SoftConfig::default());
            let cn = f.open_device(SoftConfig::default());
            Ok((mn, cn, Some(f)))
        }
        Link::Tcp => {
            let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
            let mn = TcpNode::open(SoftConfig::default(), loopback)?;
            let cn = TcpNode::open(SoftConfig::default(), loopback)?;
            Ok((mn, cn, None))
        }
    }
}

/// Reset + reconnect of a client's RC QP (a new connection handshake with the memory node),
/// `iters` times, on `transport`; `tick` runs after each sample (a progress bar).
pub(super) fn qp_recovery(transport: Link, iters: u64, tick: impl FnMut()) -> Result<Latency> {
    let (mn_ctx, cn_ctx, _fabric) = device_pair(transport)?;
    qp_recovery_on::<SoftProvider>(mn_ctx, &cn_ctx, iters, tick)
}

/// Reset + reconnect of a client's RC QP on `cn_ctx` to a memory node on `mn_ctx`, `iters`
/// times; `tick` runs after each sample.
#[allow(clippy::disallowed_methods)] // an experiment driver measures wall time
pub(super) fn qp_recovery_on<P: Provider>(
    mn_ctx: P::Context,
    cn_ctx: &P::Context,
    iters: u64,
    mut tick: impl FnMut(),
) -> Result<Latency> {
    let mn = memory_node::<P>(mn_ctx)?;
    let client = requester::<P>(cn_ctx, mn.address())?;
    let mut lat = Latency::new();
    let warmup = (iters / 10).min(20);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        client.qp.reset()?;
        client.qp.connect(mn.address(), b"fig1")?;
        let dt = t0.elapsed();
        if client.qp.state() != QpState::ReadyToSend {
            bail!("reconnected QP is in {}", client.qp.state().name());
        }
        if i >= warmup {
            lat.record(dt);
            tick();
        }
    }
    Ok(lat)
}
