//! The memory node's NIC side of a batch: runs the manager core's chains of binds, unbinds
//! and lifetime CASes on the loopback QPs (and, for type-2 windows, on clients' data QPs),
//! and collects one result per op. Binds are local to the NIC and CASes loop back, so a chain
//! waits only for the NIC, never for a client.

use super::super::core::{NicExecutor, NicOp, NicResult};
use super::super::pool::MwId;
use super::super::state::ClientId;
use super::{CAS_SLOTS, Domain, Isolation, loopback_qp};
use crate::proto::connect::{Intent, Role};
use crate::rpc::Stopwatch;
use parking_lot::Mutex;
use rnic::{
    AccessFlags, BindInfo, CompletionQueue, MemoryBuffer, MemoryRegion, MemoryWindow, MwType,
    ProtectionDomain, Provider, QpState, QpTiming, QueuePair, SendOp, SendWr, Sge, WcStatus,
    WorkCompletion,
};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

/// Work-request ids carry the shard in their top byte: type-2 binds of every shard complete
/// on the one CQ of the clients' data QPs.
const SHARD_SHIFT: u32 = 56;
const INDEX_MASK: u64 = (1 << SHARD_SHIFT) - 1;

/// A CQ several shards poll: each takes its own completions (by the shard in the work-request
/// id) and leaves the others' in their mailboxes.
pub(super) struct SharedCq<P: Provider> {
    cq: P::Cq,
    /// Per shard; with one shard there is nothing to sort and no lock is taken.
    mailboxes: Arc<Mutex<Vec<Vec<WorkCompletion>>>>,
    shards: usize,
}

impl<P: Provider> Clone for SharedCq<P> {
    fn clone(&self) -> Self {
        SharedCq {
            cq: self.cq.clone(),
            mailboxes: self.mailboxes.clone(),
            shards: self.shards,
        }
    }
}

impl<P: Provider> SharedCq<P> {
    pub(super) fn new(cq: P::Cq, shards: usize) -> Self {
        SharedCq {
            cq,
            mailboxes: Arc::new(Mutex::new(vec![Vec::new(); shards])),
            shards,
        }
    }

    /// The CQ itself (data QPs are created with it).
    pub(super) fn cq(&self) -> &P::Cq {
        &self.cq
    }

    /// Moves up to `out.len()` of `shard`'s completions into `out`.
    fn poll(&self, shard: usize, out: &mut [WorkCompletion]) -> usize {
        if self.shards == 1 {
            return self.cq.poll(out);
        }
        let mut boxes = self.mailboxes.lock();
        let mut wcs = [WorkCompletion::default(); 32];
        let n = self.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            let owner = (wc.wr_id >> SHARD_SHIFT) as usize;
            // A completion no shard posted (a flushed receive) is dropped.
            if let Some(b) = boxes.get_mut(owner) {
                b.push(*wc);
            }
        }
        let mine = &mut boxes[shard];
        let n = mine.len().min(out.len());
        out[..n].copy_from_slice(&mine[..n]);
        mine.drain(..n);
        n
    }
}

/// The verbs objects a batch's NIC work runs on.
pub(super) struct NodeNic<P: Provider> {
    /// The shard this runs the work of.
    pub(super) shard: usize,
    pub(super) address: P::Address,
    pub(super) loop_secret: u64,
    pub(super) timing: QpTiming,
    pub(super) manager_mr: Arc<P::Mr>,
    /// Every window, indexed by the core's window id (`None`: its client left and the domain
    /// waits for the next client).
    pub(super) mws: Vec<Option<P::Mw>>,
    /// Domain of each window.
    pub(super) mw_domain: Vec<u32>,
    /// Windows allocated (the `Some`s of `mws`), kept as they come and go.
    pub(super) live_windows: usize,
    /// Domain 0 is the shared PD; with a PD per client, one more per connected client
    /// (`None`: free for the next client).
    pub(super) domains: Vec<Option<Domain<P>>>,
    pub(super) manager_pd: P::Pd,
    pub(super) cas_qp: P::Qp,
    pub(super) isolation: Isolation,
    /// Completions of work posted on clients' data QPs (type-2 binds and invalidations).
    pub(super) data_cq: SharedCq<P>,
    /// Clients' data QPs by client and slot, and each client's current slot (type 2).
    pub(super) data_qps: HashMap<ClientId, HashMap<u8, P::Qp>>,
    pub(super) active_slot: HashMap<ClientId, u8>,
    /// The QP each type-2 window is bound to.
    pub(super) mw_qp: HashMap<MwId, P::Qp>,
    pub(super) op_cq: P::Cq,
    pub(super) scratch: P::Buffer,
    pub(super) scratch_mr: P::Mr,
    /// Times the posts of the chains and the wait for their completions when armed (type-2
    /// posts on clients' data QPs are not timed).
    pub(super) nic_calls: Stopwatch,
}

impl<P: Provider> NicExecutor for NodeNic<P> {
    fn execute(&mut self, ops: &[NicOp], results: &mut Vec<NicResult>) {
        NodeNic::execute(self, ops, results)
    }
}

impl<P: Provider> NodeNic<P> {
    /// Posts `ops` as chains (binds on the bind QP, CASes on the loopback QP) and collects
    /// their results in order. Binds are local to the NIC and CASes loop back, so this waits
    /// only for the NIC, never for a client.
    pub(super) fn execute(&mut self, ops: &[NicOp], results: &mut Vec<NicResult>) {
        let first = results.len();
        results.resize(first + ops.len(), NicResult::Failed);
        for chunk_start in (0..ops.len()).step_by(CAS_SLOTS) {
            let end = (chunk_start + CAS_SLOTS).min(ops.len());
            self.execute_chunk(
                &ops[chunk_start..end],
                &mut results[first + chunk_start..first + end],
                chunk_start,
            );
        }
    }

    fn execute_chunk(&mut self, ops: &[NicOp], results: &mut [NicResult], base: usize) {
        self.ensure_connected();
        if self.isolation == Isolation::Type2 {
            self.replace_windows_of_broken_qps(ops);
        }
        // On the stack for a batch's usual handful of ops: no allocation per batch.
        let mut cases: SmallVec<[SendWr<'_, P::Mw, P::Mr>; 16]> = SmallVec::new();
        let mut bind_domains: SmallVec<[usize; 4]> = SmallVec::new();
        let mut expected = 0;
        let mut mw_qp_updates: SmallVec<[(MwId, Option<P::Qp>); 4]> = SmallVec::new();
        for (i, op) in ops.iter().enumerate() {
            let wr_id = self.wr_id(base + i);
            match *op {
                NicOp::Bind {
                    mw,
                    target,
                    client,
                    key,
                } if self.is_type2_window(mw) => {
                    let (outcome, update) = self.post_type2(wr_id, mw, target, client, key);
                    mw_qp_updates.push((mw, update));
                    match outcome {
                        Type2Post::Posted => expected += 1,
                        Type2Post::Done => results[i] = self.bound(mw),
                        Type2Post::Failed => {}
                    }
                }
                NicOp::Bind { mw, .. } => {
                    if let Some((_, d, _)) = self.window_in_domain(mw)
                        && !bind_domains.contains(&d)
                    {
                        bind_domains.push(d);
                    }
                }
                NicOp::LifetimeCas {
                    addr,
                    compare,
                    swap,
                } => cases.push(SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::CompareSwap {
                        local: Sge {
                            addr: self.scratch.addr() + 8 * i as u64,
                            length: 8,
                            lkey: self.scratch_mr.lkey(),
                        },
                        remote_addr: addr,
                        rkey: self.manager_mr.rkey(),
                        compare,
                        swap,
                    },
                }),
            }
        }
        // The NIC's part: posting the chains and waiting for their completions.
        let span = self.nic_calls.start();
        // One chain per domain on its bind QP (one domain in the shared PD).
        for &d in &bind_domains {
            let Some(domain) = self.domains[d].as_ref() else {
                continue;
            };
            let chain: SmallVec<[SendWr<'_, P::Mw, P::Mr>; 16]> = ops
                .iter()
                .enumerate()
                .filter_map(|(i, op)| self.bind_wr(op, d, self.wr_id(base + i)))
                .collect();
            if !chain.is_empty() && domain.bind_qp.post_send(&chain).is_ok() {
                expected += chain.len();
            }
        }
        if !cases.is_empty() && self.cas_qp.post_send(&cases).is_ok() {
            expected += cases.len();
        }
        self.apply_mw_qp(mw_qp_updates);
        let mut wcs = [WorkCompletion::default(); 64];
        let mut got = 0;
        let mut idle = 0u64;
        while got < expected && idle < 2_000_000 {
            let mut n = self.op_cq.poll(&mut wcs);
            if n == 0 {
                n = self.data_cq.poll(self.shard, &mut wcs);
            }
            if n == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    // Over TCP the loopback work needs the device's engine thread, which may
                    // be waiting for this core: sleep on the CQ of the loopback work (type-2
                    // completions on the data CQ are looked for again within 50 µs).
                    self.op_cq.wait(std::time::Duration::from_micros(50));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            idle = 0;
            for wc in &wcs[..n] {
                got += 1;
                let Some(i) = ((wc.wr_id & INDEX_MASK) as usize).checked_sub(base) else {
                    continue;
                };
                if i >= ops.len() || wc.status != WcStatus::Success {
                    continue;
                }
                results[i] = match ops[i] {
                    NicOp::Bind { mw, .. } => self.bound(mw),
                    NicOp::LifetimeCas { .. } => match self.scratch.load_u64(8 * i) {
                        Ok(v) => NicResult::CasOld(v),
                        Err(_) => NicResult::Failed,
                    },
                };
            }
        }
        self.nic_calls.stop(span);
    }

    /// The work-request id of op `index` of a batch (the shard in its top byte).
    fn wr_id(&self, index: usize) -> u64 {
        (self.shard as u64) << SHARD_SHIFT | index as u64
    }

    /// Whether `mw` is a type-2 window of a client's domain (bound through the client's QP).
    fn is_type2_window(&self, mw: MwId) -> bool {
        self.isolation == Isolation::Type2
            && self.mw_domain.get(mw as usize).is_some_and(|&d| d > 0)
    }

    /// The bind (or unbind) `op` asks for, as a work request of domain `d`'s bind QP, if `op`
    /// is a type-1 bind of a window of that domain.
    fn bind_wr(&self, op: &NicOp, d: usize, wr_id: u64) -> Option<SendWr<'_, P::Mw, P::Mr>> {
        let NicOp::Bind {
            mw, target, key, ..
        } = *op
        else {
            return None;
        };
        if self.is_type2_window(mw) {
            return None;
        }
        let (window, wd, domain) = self.window_in_domain(mw)?;
        if wd != d {
            return None;
        }
        Some(SendWr {
            wr_id,
            signaled: true,
            op: SendOp::BindMw {
                mw: window,
                bind: match target {
                    Some(t) => BindInfo {
                        mr: Some(&*domain.mr),
                        addr: t.addr,
                        length: t.len,
                        access: t.access,
                        key,
                        target_qp: None,
                    },
                    None => BindInfo {
                        mr: None,
                        addr: 0,
                        length: 0,
                        access: AccessFlags::empty(),
                        key: None,
                        target_qp: None,
                    },
                },
            },
        })
    }

    /// A window, its domain's index and the domain.
    fn window_in_domain(&self, mw: MwId) -> Option<(&P::Mw, usize, &Domain<P>)> {
        let window = self.mws.get(mw as usize)?.as_ref()?;
        let d = self.mw_domain.get(mw as usize).copied().unwrap_or(0) as usize;
        Some((window, d, self.domains.get(d)?.as_ref()?))
    }

    /// Installs a client's domain with its windows under the core's window ids `ids` (new
    /// ones, or those of a retired domain); returns the domain's index.
    pub(super) fn install_domain(
        &mut self,
        domain: Domain<P>,
        ids: std::ops::Range<MwId>,
        windows: Vec<P::Mw>,
    ) -> u32 {
        let d = match self.domains.iter().position(Option::is_none) {
            Some(free) => {
                self.domains[free] = Some(domain);
                free
            }
            None => {
                self.domains.push(Some(domain));
                self.domains.len() - 1
            }
        } as u32;
        let end = ids.end as usize;
        if self.mws.len() < end {
            self.mws.resize_with(end, || None);
            self.mw_domain.resize(end, 0);
        }
        for (id, window) in ids.zip(windows) {
            self.live_windows += 1;
            self.mws[id as usize] = Some(window);
            self.mw_domain[id as usize] = d;
        }
        d
    }

    /// A departed client's domain retired (every window unbound): its windows are deallocated
    /// and, with the last of them, its bind QP and this shard's hold on its PD.
    pub(super) fn retire_domain(&mut self, ids: std::ops::Range<MwId>) {
        let Some(&d) = self.mw_domain.get(ids.start as usize) else {
            return;
        };
        for id in ids {
            self.mw_qp.remove(&id);
            if let Some(w) = self.mws.get_mut(id as usize)
                && w.take().is_some()
            {
                self.live_windows -= 1;
            }
        }
        if d > 0
            && let Some(slot) = self.domains.get_mut(d as usize)
        {
            *slot = None;
        }
    }

    /// A client's session ended: its data QPs are broken off (type-2 windows bound to them
    /// are unbound by the departure batch, by resetting them) and forgotten.
    pub(super) fn drop_client(&mut self, client: ClientId) {
        for qp in self
            .data_qps
            .remove(&client)
            .into_iter()
            .flat_map(|q| q.into_values())
        {
            qp.set_error();
        }
        self.active_slot.remove(&client);
    }

    /// Live verbs objects this shard holds for clients: (data QPs, client domains, windows).
    pub(super) fn held(&self) -> (usize, usize, usize) {
        let qps = self.data_qps.values().map(HashMap::len).sum();
        let domains = self.domains.iter().skip(1).flatten().count();
        (qps, domains, self.live_windows)
    }

    fn apply_mw_qp(&mut self, updates: impl IntoIterator<Item = (MwId, Option<P::Qp>)>) {
        for (mw, qp) in updates {
            match qp {
                Some(qp) => self.mw_qp.insert(mw, qp),
                None => self.mw_qp.remove(&mw),
            };
        }
    }

    fn bound(&self, mw: MwId) -> NicResult {
        match self.mws.get(mw as usize).and_then(Option::as_ref) {
            Some(w) => NicResult::Bound(w.rkey()),
            None => NicResult::Failed,
        }
    }

    /// Type 2: the windows `ops` unbind from a QP that broke are replaced by fresh ones of
    /// their domain first (dropping a window deallocates it, which invalidates it on every
    /// device). A reset of the QP frees its windows on the software RNIC, but Soft-RoCE keeps
    /// a type-2 window bound to its QP through a reset, so the window could not be bound
    /// again, and destroying the QP would stall ~50 s (`docs/rdma.md`,
    /// `destroy-qp-bound-type2-stall`). A window that cannot be replaced stays as it is and
    /// its unbind resets the QP as before.
    fn replace_windows_of_broken_qps(&mut self, ops: &[NicOp]) {
        for op in ops {
            let NicOp::Bind {
                mw, target: None, ..
            } = *op
            else {
                continue;
            };
            if self
                .mw_qp
                .get(&mw)
                .is_none_or(|qp| qp.state() == QpState::ReadyToSend)
            {
                continue;
            }
            let d = self.mw_domain.get(mw as usize).copied().unwrap_or(0) as usize;
            let Some(domain) = self.domains.get(d).and_then(Option::as_ref) else {
                continue;
            };
            match domain.pd.alloc_mw(MwType::Type2) {
                Ok(fresh) => {
                    if let Some(Some(window)) = self.mws.get_mut(mw as usize) {
                        *window = fresh;
                    }
                }
                Err(e) => tracing::warn!(mw, error = %e, "a window of a broken QP kept"),
            }
        }
    }

    /// Type 2: a bind goes on the client's current data QP; an unbind is a LOCAL_INV on the QP
    /// the window is bound to — or, if that QP broke, a reset of it, which frees its windows
    /// (replaced first: [`NodeNic::replace_windows_of_broken_qps`]).
    /// Returns what happened and the window's QP afterwards (`None`: not bound to any).
    fn post_type2(
        &self,
        wr_id: u64,
        mw: MwId,
        target: Option<super::super::core::BindTarget>,
        client: ClientId,
        key: Option<u8>,
    ) -> (Type2Post, Option<P::Qp>) {
        let current = self.mw_qp.get(&mw).cloned();
        let Some((window, _, domain)) = self.window_in_domain(mw) else {
            return (Type2Post::Failed, current);
        };
        match target {
            None => {
                let Some(qp) = current else {
                    return (Type2Post::Done, None); // never bound, or freed with its QP
                };
                if qp.state() != QpState::ReadyToSend {
                    return match qp.reset() {
                        Ok(()) => (Type2Post::Done, None),
                        Err(_) => (Type2Post::Failed, Some(qp)),
                    };
                }
                let wr = SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::LocalInvalidate {
                        rkey: window.rkey(),
                    },
                };
                match qp.post_send(std::slice::from_ref(&wr)) {
                    Ok(()) => (Type2Post::Posted, None),
                    Err(_) => (Type2Post::Failed, Some(qp)),
                }
            }
            Some(t) => {
                let slot = self.active_slot.get(&client).copied().unwrap_or(0);
                let qp = self
                    .data_qps
                    .get(&client)
                    .and_then(|q| q.get(&slot))
                    .cloned();
                let Some(qp) = qp else {
                    return (Type2Post::Failed, current);
                };
                let wr = SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::BindMw {
                        mw: window,
                        bind: BindInfo {
                            mr: Some(&*domain.mr),
                            addr: t.addr,
                            length: t.len,
                            access: t.access,
                            key,
                            target_qp: None,
                        },
                    },
                };
                match qp.post_send(std::slice::from_ref(&wr)) {
                    Ok(()) => (Type2Post::Posted, Some(qp)),
                    Err(_) => (Type2Post::Failed, current),
                }
            }
        }
    }

    /// Reconnects loopback QPs that broke (a new handshake), so later chains can run.
    fn ensure_connected(&mut self) {
        let intent = Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: self.loop_secret,
            slot: self.shard as u8,
        }
        .encode();
        for domain in self.domains.iter_mut().flatten() {
            if domain.bind_qp.state() == QpState::ReadyToSend {
                continue;
            }
            let Ok(fresh) = loopback_qp::<P>(&domain.pd, &self.op_cq, self.timing) else {
                continue;
            };
            if fresh.connect(&self.address, &intent).is_ok() {
                domain.bind_qp = fresh;
            }
        }
        if self.cas_qp.state() != QpState::ReadyToSend
            && let Ok(fresh) = loopback_qp::<P>(&self.manager_pd, &self.op_cq, self.timing)
            && fresh.connect(&self.address, &intent).is_ok()
        {
            self.cas_qp = fresh;
        }
    }
}

/// What posting a type-2 bind or unbind did.
enum Type2Post {
    /// A work request was posted; its completion carries the result.
    Posted,
    /// Done without a work request (the window was already free).
    Done,
    /// Could not be done now.
    Failed,
}
