//! The send queue of a cross-channel QP: requests are held in posting order and start only
//! when nothing holds them — a WAIT ahead whose count is not reached, or a managed queue's
//! enable limit — taking their patchable fields from the WQE ring when they start.
//!
//! Invariants:
//! - `held` is in posting order with consecutive indices; the head is the only one that may
//!   start, so requests start in posting order (as on hardware) and complete in order behind
//!   the requester's outstanding ones.
//! - Requests start under the QP's `tx` lock (as posted ones do), with no chain lock held;
//!   a CQ or another QP never starts them directly: it schedules the QP on the device's chain
//!   engine ([`crate::soft::cross_channel`]).
//! - Ordinary QPs have no chain: their posting path is unchanged.

use super::ring::{WqeFields, WqeRingMem};
use super::*;
use crate::soft::cross_channel::{ChainStep, CountedCq, NamedQp};
use crate::verbs::{BindInfo, CrossChannel, MemoryRegion, WorkQueue, wqe};

/// The cross-channel parts of a QP.
pub(crate) struct ChainQueues {
    pub(super) cross: CrossChannel,
    pub(super) ring: WqeRingMem,
    pub(super) send: Mutex<HeldQueue>,
}

/// Posted send requests that have not started.
pub(super) struct HeldQueue {
    held: VecDeque<HeldWr>,
    /// Index of the next request posted.
    posted: u64,
    /// Requests below this index may start (`u64::MAX` for an unmanaged send queue).
    enabled: u64,
}

impl HeldQueue {
    fn new(managed: bool) -> Self {
        HeldQueue {
            held: VecDeque::new(),
            posted: 0,
            enabled: if managed { 0 } else { u64::MAX },
        }
    }
}

struct HeldWr {
    index: u64,
    wr_id: u64,
    signaled: bool,
    kind: HeldKind,
}

/// What a held request is, beyond its patchable fields (which are in the ring).
enum HeldKind {
    Read,
    Write,
    CompareSwap,
    FetchAdd,
    Send,
    SendWithInvalidate,
    BindMw,
    LocalInvalidate,
    Wait {
        cq: Arc<dyn CountedCq>,
        count: u64,
    },
    Enable {
        qp: Weak<dyn NamedQp>,
        queue: WorkQueue,
        index: u64,
    },
}

impl HeldKind {
    fn opcode(&self) -> WcOpcode {
        match self {
            HeldKind::Read => WcOpcode::Read,
            HeldKind::Write => WcOpcode::Write,
            HeldKind::CompareSwap => WcOpcode::CompareSwap,
            HeldKind::FetchAdd => WcOpcode::FetchAdd,
            HeldKind::Send | HeldKind::SendWithInvalidate => WcOpcode::Send,
            HeldKind::BindMw => WcOpcode::BindMw,
            HeldKind::LocalInvalidate => WcOpcode::LocalInvalidate,
            HeldKind::Wait { .. } => WcOpcode::Wait,
            HeldKind::Enable { .. } => WcOpcode::Enable,
        }
    }
}

impl ChainQueues {
    pub(super) fn new(pd: &SoftPd, slots: u32, cross: CrossChannel) -> VerbsResult<Self> {
        Ok(ChainQueues {
            cross,
            ring: WqeRingMem::new(pd, slots)?,
            send: Mutex::new(HeldQueue::new(cross.managed_send)),
        })
    }

    /// Requests posted and not started.
    pub(super) fn held(&self) -> usize {
        self.send.lock().held.len()
    }

    /// Back to a new QP's numbering (reset): held requests are dropped.
    pub(super) fn reset(&self) {
        *self.send.lock() = HeldQueue::new(self.cross.managed_send);
    }
}

fn sge_fields(local: Option<&Sge>) -> WqeFields {
    match local {
        Some(s) => WqeFields {
            lkey: s.lkey.0,
            local_addr: s.addr,
            length: u64::from(s.length),
            flags: wqe::FLAG_LOCAL_SGE,
            ..WqeFields::default()
        },
        None => WqeFields::default(),
    }
}

impl QpInner {
    /// Posts `wr` to the held queue of this cross-channel QP, its fields to the ring. Errors
    /// are those found at post time (a WAIT or ENABLE naming nothing, a window or region of
    /// another device); the request is then not posted.
    pub(super) fn hold(
        &self,
        chain: &ChainQueues,
        wr: &SendWr<'_, SoftMw, SoftMr>,
    ) -> VerbsResult<()> {
        let remote = |op, local: &Sge, remote_addr: u64, rkey: MemoryKey| WqeFields {
            remote_addr,
            rkey: rkey.0,
            opcode: op as u8,
            ..sge_fields(Some(local))
        };
        let (kind, fields) = match &wr.op {
            SendOp::Read {
                local,
                remote_addr,
                rkey,
            } => (
                HeldKind::Read,
                remote(wqe::Opcode::Read, local, *remote_addr, *rkey),
            ),
            SendOp::Write {
                local,
                remote_addr,
                rkey,
            } => (
                HeldKind::Write,
                remote(wqe::Opcode::Write, local, *remote_addr, *rkey),
            ),
            SendOp::CompareSwap {
                local,
                remote_addr,
                rkey,
                compare,
                swap,
            } => (
                HeldKind::CompareSwap,
                WqeFields {
                    compare_add: *compare,
                    swap: *swap,
                    ..remote(wqe::Opcode::CompareSwap, local, *remote_addr, *rkey)
                },
            ),
            SendOp::FetchAdd {
                local,
                remote_addr,
                rkey,
                add,
            } => (
                HeldKind::FetchAdd,
                WqeFields {
                    compare_add: *add,
                    ..remote(wqe::Opcode::FetchAdd, local, *remote_addr, *rkey)
                },
            ),
            SendOp::Send { local } => (
                HeldKind::Send,
                WqeFields {
                    opcode: wqe::Opcode::Send as u8,
                    ..sge_fields(local.as_ref())
                },
            ),
            SendOp::SendWithInvalidate { local, invalidate } => (
                HeldKind::SendWithInvalidate,
                WqeFields {
                    rkey: invalidate.0,
                    opcode: wqe::Opcode::SendWithInvalidate as u8,
                    ..sge_fields(local.as_ref())
                },
            ),
            SendOp::BindMw { mw, bind } => (HeldKind::BindMw, self.bind_fields(mw, bind)?),
            SendOp::LocalInvalidate { rkey } => (
                HeldKind::LocalInvalidate,
                WqeFields {
                    rkey: rkey.0,
                    opcode: wqe::Opcode::LocalInvalidate as u8,
                    ..WqeFields::default()
                },
            ),
            SendOp::Wait { cq, count } => {
                let cq = self.dev.cross.cq(*cq).ok_or(VerbsError::InvalidArgument(
                    "WAIT names no CQ of this device",
                ))?;
                (
                    HeldKind::Wait { cq, count: *count },
                    WqeFields {
                        opcode: wqe::Opcode::Wait as u8,
                        ..WqeFields::default()
                    },
                )
            }
            SendOp::Enable { qp, queue, index } => {
                let target = self.dev.cross.qp(*qp).ok_or(VerbsError::InvalidArgument(
                    "ENABLE names no QP of this device",
                ))?;
                if !target.is_managed(*queue) {
                    return Err(VerbsError::InvalidArgument(
                        "ENABLE names a queue that is not managed",
                    ));
                }
                (
                    HeldKind::Enable {
                        qp: Arc::downgrade(&target),
                        queue: *queue,
                        index: *index,
                    },
                    WqeFields {
                        opcode: wqe::Opcode::Enable as u8,
                        ..WqeFields::default()
                    },
                )
            }
        };
        let mut q = chain.send.lock();
        let index = q.posted;
        q.posted += 1;
        chain.ring.write(index, &fields);
        q.held.push_back(HeldWr {
            index,
            wr_id: wr.wr_id,
            signaled: wr.signaled,
            kind,
        });
        Ok(())
    }

    /// A BIND's entry. Its new rkey is decided now (the consumer's key byte, or the device's
    /// next one) and shown by the window handle at once, as for any posted bind.
    fn bind_fields(&self, mw: &SoftMw, bind: &BindInfo<'_, SoftMr>) -> VerbsResult<WqeFields> {
        let foreign = !Arc::ptr_eq(&mw.pd().inner.dev, &self.dev)
            || bind
                .mr
                .is_some_and(|mr| !Arc::ptr_eq(&mr.pd().inner.dev, &self.dev));
        if foreign {
            return Err(VerbsError::InvalidArgument(
                "bind of a window or region of another device",
            ));
        }
        let old = mw.rkey();
        let byte = bind
            .key
            .unwrap_or_else(|| self.dev.mpt.next_key_byte(old.key_byte()));
        let new = MemoryKey::new(old.index(), byte);
        mw.set_rkey(new);
        let mr = bind.mr.map(|mr| (mr.lkey(), mr.addr()));
        Ok(WqeFields {
            remote_addr: bind.addr,
            rkey: new.0,
            lkey: mr.map_or(0, |(lkey, _)| lkey.0),
            length: bind.length,
            access: bind.access.bits(),
            target_qp: bind.target_qp.map_or(0, |q| q.0),
            opcode: wqe::Opcode::BindMw as u8,
            flags: if mr.is_some() { wqe::FLAG_LOCAL_SGE } else { 0 },
            ..WqeFields::default()
        })
    }

    /// Starts the requests at the head of the held queue that nothing holds, in order; then
    /// releases completions and flushes if the QP failed. Takes `tx`: never call it with a
    /// lock of this QP held.
    pub(super) fn run_chain(&self) {
        let Some(chain) = self.chain.as_deref() else {
            return;
        };
        {
            let _tx = self.tx.lock();
            while self.state() == QpState::ReadyToSend {
                let next = {
                    let mut q = chain.send.lock();
                    let enabled = q.enabled;
                    let ready = match q.held.front() {
                        None => false,
                        Some(head) if head.index >= enabled => false,
                        Some(HeldWr {
                            kind: HeldKind::Wait { cq, count },
                            ..
                        }) => {
                            let me: Weak<dyn ChainStep> = self.this.clone();
                            cq.reached_or_notify(*count, me)
                        }
                        Some(_) => true,
                    };
                    if ready { q.held.pop_front() } else { None }
                };
                let Some(wr) = next else { break };
                self.start_held(chain, wr);
            }
        }
        self.release_and_rearm();
        if self.state() == QpState::Error {
            self.flush_all();
        }
    }

    /// Completes every held request as flushed, behind the outstanding ones.
    pub(super) fn flush_held(&self, r: &mut Requester) {
        let Some(chain) = self.chain.as_deref() else {
            return;
        };
        let held: Vec<HeldWr> = chain.send.lock().held.drain(..).collect();
        for wr in held {
            r.push_local(
                PendingSpec {
                    wr_id: wr.wr_id,
                    signaled: wr.signaled,
                    opcode: wr.kind.opcode(),
                    local: None,
                    byte_len: 0,
                },
                WcStatus::WrFlushError,
            );
        }
    }

    /// Starts one request with the fields its ring entry holds now.
    fn start_held(&self, chain: &ChainQueues, wr: HeldWr) {
        let f = chain.ring.read(wr.index);
        let spec = PendingSpec {
            wr_id: wr.wr_id,
            signaled: wr.signaled,
            opcode: wr.kind.opcode(),
            local: None,
            byte_len: 0,
        };
        let local = match u32::try_from(f.length) {
            Ok(length) => Sge {
                addr: f.local_addr,
                length,
                lkey: MemoryKey(f.lkey),
            },
            Err(_) if matches!(wr.kind, HeldKind::BindMw) => Sge {
                addr: 0,
                length: 0,
                lkey: MemoryKey(0),
            },
            Err(_) => return self.local_error(spec, WcStatus::LocalLengthError),
        };
        let has_local = f.flags & wqe::FLAG_LOCAL_SGE != 0;
        let op: SendOp<'_, SoftMw, SoftMr> = match wr.kind {
            HeldKind::Read => SendOp::Read {
                local,
                remote_addr: f.remote_addr,
                rkey: MemoryKey(f.rkey),
            },
            HeldKind::Write => SendOp::Write {
                local,
                remote_addr: f.remote_addr,
                rkey: MemoryKey(f.rkey),
            },
            HeldKind::CompareSwap => SendOp::CompareSwap {
                local,
                remote_addr: f.remote_addr,
                rkey: MemoryKey(f.rkey),
                compare: f.compare_add,
                swap: f.swap,
            },
            HeldKind::FetchAdd => SendOp::FetchAdd {
                local,
                remote_addr: f.remote_addr,
                rkey: MemoryKey(f.rkey),
                add: f.compare_add,
            },
            HeldKind::Send => SendOp::Send {
                local: has_local.then_some(local),
            },
            HeldKind::SendWithInvalidate => SendOp::SendWithInvalidate {
                local: has_local.then_some(local),
                invalidate: MemoryKey(f.rkey),
            },
            HeldKind::LocalInvalidate => SendOp::LocalInvalidate {
                rkey: MemoryKey(f.rkey),
            },
            HeldKind::BindMw => {
                let status = self.bind_from_ring(&f, has_local);
                let _ = self.finish_local(spec, status);
                return;
            }
            HeldKind::Wait { .. } => {
                let _ = self.finish_local(spec, WcStatus::Success);
                return;
            }
            HeldKind::Enable { qp, queue, index } => {
                let status = match qp.upgrade() {
                    Some(target) => {
                        target.enable(queue, index);
                        WcStatus::Success
                    }
                    None => WcStatus::LocalQpOperationError,
                };
                let _ = self.finish_local(spec, status);
                return;
            }
        };
        // `post_one` only fails for WAIT and ENABLE, handled above.
        let _ = self.post_one(&SendWr {
            wr_id: wr.wr_id,
            signaled: wr.signaled,
            op,
        });
    }

    /// A BIND with the window, region, range, rights and target its entry names now.
    fn bind_from_ring(&self, f: &WqeFields, has_region: bool) -> WcStatus {
        let rkey = MemoryKey(f.rkey);
        let mr = if has_region {
            match self.dev.mpt.mr(MemoryKey(f.lkey)) {
                Some(mr) => Some(mr),
                None => return WcStatus::MwBindError,
            }
        } else {
            None
        };
        let target = (f.target_qp != 0).then_some(QpNumber(f.target_qp));
        let Some(access) = AccessFlags::from_bits(f.access) else {
            return WcStatus::MwBindError;
        };
        match self.bind_resolved(
            rkey,
            mr,
            f.remote_addr,
            f.length,
            access,
            Some(rkey.key_byte()),
            target,
        ) {
            Ok(_) => WcStatus::Success,
            Err(status) => status,
        }
    }

    /// The ring, for the verbs contract.
    pub(super) fn ring(&self) -> Option<crate::verbs::WqeRing> {
        self.chain.as_deref().map(|c| c.ring.ring())
    }
}

impl ChainStep for QpInner {
    fn step(&self) {
        self.run_chain();
    }
}

impl NamedQp for QpInner {
    fn pd(&self) -> PdId {
        self.pd_id()
    }

    fn qp_state(&self) -> QpState {
        self.state()
    }

    fn resets(&self) -> u64 {
        self.resets.load(Ordering::SeqCst)
    }

    fn is_managed(&self, queue: WorkQueue) -> bool {
        self.chain.as_deref().is_some_and(|c| match queue {
            WorkQueue::Send => c.cross.managed_send,
            WorkQueue::Recv => c.cross.managed_recv,
        })
    }

    fn enable(&self, queue: WorkQueue, index: u64) {
        let Some(chain) = self.chain.as_deref() else {
            return;
        };
        match queue {
            WorkQueue::Send => {
                let mut q = chain.send.lock();
                q.enabled = q.enabled.max(index);
                drop(q);
                let me: Weak<dyn ChainStep> = self.this.clone();
                self.dev.cross.schedule(me);
            }
            WorkQueue::Recv => {
                let mut rx = self.rx.lock();
                rx.recv_enabled = rx.recv_enabled.map(|e| e.max(index));
                drop(rx);
                self.receive_available();
            }
        }
    }
}
