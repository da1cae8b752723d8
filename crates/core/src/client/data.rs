//! The data path: one-sided READ/WRITE/CAS/FAA through a permission's window, posted with one
//! doorbell per batch. An op the NIC rejects reports its own error; the ops flushed behind it
//! never executed (the responder stops at the violation), so they are retried on the promoted
//! spare QP and the application sees only the faulting ops fail (a retried list with another
//! refused op in it is retried again without it).
//!
//! Exactly once: when the QP breaks for a reason that does not say what ran (retry exceeded,
//! a lost link, a local error), a flushed or failed WRITE, CAS or FAA may already have executed
//! at the memory node. Those are never run again: they report
//! [`ClientError::OutcomeUnknown`]. READs are idempotent and retried; ops that were never
//! posted are retried. The decision is the client core's (`core/data_path.rs`).

use super::driver::Client;
use super::error::ClientError;
use super::op::{Kind, Op, OpResult};
use super::perm::Perm;
use super::qps::SwitchKind;
use crate::proto::messages::Access;
use crate::proto::refusal::SessionEnd;
use rnic::{MemoryBuffer, Provider, QueuePair};
use std::sync::atomic::Ordering;

/// Ops collected for one doorbell; see [`Client::batch`].
#[derive(Debug)]
pub struct Batch<'c, P: Provider> {
    pub(super) client: &'c mut Client<P>,
    pub(super) ops: Vec<Result<Op, ClientError>>,
}

impl<P: Provider> Client<P> {
    /// Starts a batch of data-path ops posted with one doorbell.
    pub fn batch(&mut self) -> Batch<'_, P> {
        Batch {
            client: self,
            ops: Vec::new(),
        }
    }

    /// Reads `dst.len()` bytes at `offset` of the permission's buffer.
    pub fn read(&mut self, perm: &Perm, offset: u64, dst: &mut [u8]) -> Result<(), ClientError> {
        let mut b = self.batch();
        b.read(perm, offset, dst.len() as u32);
        match b.execute().pop() {
            Some(Ok(OpResult::Read(data))) => {
                dst.copy_from_slice(&data);
                Ok(())
            }
            Some(Err(e)) => Err(e),
            _ => Err(ClientError::Internal("a read without its bytes")),
        }
    }

    /// Writes `src` at `offset` of the permission's buffer.
    pub fn write(&mut self, perm: &Perm, offset: u64, src: &[u8]) -> Result<(), ClientError> {
        let mut b = self.batch();
        b.write(perm, offset, src);
        single(b.execute()).map(|_| ())
    }

    /// Compare-and-swap on the aligned word at `offset`; returns the previous value.
    pub fn cas(
        &mut self,
        perm: &Perm,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, ClientError> {
        let mut b = self.batch();
        b.cas(perm, offset, compare, swap);
        atomic(single(b.execute()))
    }

    /// Fetch-and-add on the aligned word at `offset`; returns the previous value.
    pub fn faa(&mut self, perm: &Perm, offset: u64, add: u64) -> Result<u64, ClientError> {
        let mut b = self.batch();
        b.faa(perm, offset, add);
        atomic(single(b.execute()))
    }

    /// The lease an extension of `perm` by `lease` asks for (with the policy's slack), once
    /// `perm` is of the current session and has not expired locally (an expired one is
    /// counted as wasted and refused: `LeaseExpired`).
    pub(super) fn extension_lease(
        &mut self,
        perm: &Perm,
        lease: std::time::Duration,
    ) -> Result<u64, ClientError> {
        if perm.is_one_sided() {
            return Err(ClientError::OneSidedChunk("it has no lease to extend"));
        }
        self.current(perm)?;
        let mut g = self.node.lock();
        let lease_us = g.core.wire_lease_us(super::lease::micros(lease));
        if self.clocks.lease.now() >= perm.expiry() {
            g.core.stats_mut().local_expiries += 1;
            perm.mark_wasted(g.core.stats_mut());
            return Err(ClientError::LeaseExpired);
        }
        Ok(lease_us)
    }

    /// CN-collaborated extension (§5.3): CAS the header's lifetime field from its current
    /// value to `current + lease` through the lifetime window (plus the lease policy's slack,
    /// as for every lease the client asks for: the holder's next turn may be a round trip
    /// away). Fails with `ExtensionRefused` once the manager zeroed the field.
    pub fn extend(&mut self, perm: &Perm, lease: std::time::Duration) -> Result<(), ClientError> {
        let lease_us = self.extension_lease(perm, lease)?;
        let r = self.extend_cas(perm, lease_us);
        match r {
            Ok(()) => {
                // Kept alive: the grant served its holder even without a data access.
                perm.mark_used();
                self.node.lock().core.stats_mut().cas_extensions += 1;
            }
            Err(ClientError::ExtensionRefused) => {
                self.node.lock().core.stats_mut().extension_refusals += 1;
            }
            Err(_) => {}
        }
        r
    }

    fn extend_cas(&mut self, perm: &Perm, lease_us: u64) -> Result<(), ClientError> {
        for _ in 0..2 {
            let current = perm.lifetime_us();
            if current >= perm.max_lifetime_us() {
                return Err(ClientError::ExtensionRefused); // the manager would force it anyway
            }
            let new = current.saturating_add(lease_us);
            let op = Op {
                addr: perm.grant.lifetime_addr(),
                rkeys: perm.rkeys.clone(),
                lifetime: true,
                len: 8,
                kind: Kind::Cas {
                    compare: current,
                    swap: new,
                },
                payload: Vec::new(),
                staging: 0,
            };
            let mut b = self.batch();
            b.ops.push(Ok(op));
            let old = atomic(single(b.execute()))?;
            if old == current {
                perm.lifetime_us.store(new, Ordering::SeqCst);
                return Ok(());
            }
            if old == 0 {
                return Err(ClientError::ExtensionRefused);
            }
            // Changed by an RPC extension meanwhile: adopt the value and try once more.
            perm.lifetime_us.store(old, Ordering::SeqCst);
        }
        Err(ClientError::ExtensionRefused)
    }
}

fn single(mut results: Vec<Result<OpResult, ClientError>>) -> Result<OpResult, ClientError> {
    results.pop().unwrap_or(Err(ClientError::Internal(
        "a batch of one op without a result",
    )))
}

fn atomic(r: Result<OpResult, ClientError>) -> Result<u64, ClientError> {
    match r? {
        OpResult::Atomic(v) => Ok(v),
        _ => Err(ClientError::Internal("an atomic op without a value")),
    }
}

impl<P: Provider> Batch<'_, P> {
    fn checked(&mut self, perm: &Perm, offset: u64, len: u64) -> Result<u64, ClientError> {
        // One integer compare: a permission of an ended session is refused, not sent to fault
        // a fresh data QP.
        self.client.current(perm)?;
        if self.client.cfg.check_local_expiry && self.client.clocks.lease.now() >= perm.expiry() {
            let mut g = self.client.node.lock();
            g.core.stats_mut().local_expiries += 1;
            perm.mark_wasted(g.core.stats_mut());
            return Err(ClientError::LeaseExpired);
        }
        match offset.checked_add(len) {
            Some(end) if end <= perm.len() => {
                perm.mark_used();
                Ok(perm.addr() + offset)
            }
            _ => Err(ClientError::InvalidArgument(
                "access outside the permission",
            )),
        }
    }

    /// Adds a READ of `len` bytes at `offset`.
    pub fn read(&mut self, perm: &Perm, offset: u64, len: u32) -> &mut Self {
        let op = self.checked(perm, offset, len as u64).map(|addr| Op {
            addr,
            rkeys: perm.rkeys.clone(),
            lifetime: false,
            len,
            kind: Kind::Read,
            payload: Vec::new(),
            staging: 0,
        });
        self.ops.push(op);
        self
    }

    /// Adds a WRITE of `src` at `offset` (issued even on a read-only permission: the NIC is
    /// the one that refuses it).
    pub fn write(&mut self, perm: &Perm, offset: u64, src: &[u8]) -> &mut Self {
        let op = self.checked(perm, offset, src.len() as u64).map(|addr| Op {
            addr,
            rkeys: perm.rkeys.clone(),
            lifetime: false,
            len: src.len() as u32,
            kind: Kind::Write,
            payload: src.to_vec(),
            staging: 0,
        });
        self.ops.push(op);
        self
    }

    /// Adds a SEND_WITH_INV of a one-sided chunk's key (its free: the memory node's NIC
    /// invalidates the window, which works only for the data QP it is bound for).
    pub(super) fn invalidate(&mut self, perm: &Perm) -> &mut Self {
        self.ops.push(Ok(Op {
            addr: perm.addr(),
            rkeys: perm.rkeys.clone(),
            lifetime: false,
            len: 0,
            kind: Kind::Invalidate,
            payload: Vec::new(),
            staging: 0,
        }));
        self
    }

    fn atomic(&mut self, perm: &Perm, offset: u64, kind: Kind) -> &mut Self {
        let op = if offset % 8 != 0 {
            Err(ClientError::InvalidArgument(
                "atomics need an 8-byte-aligned offset",
            ))
        } else {
            self.checked(perm, offset, 8).map(|addr| Op {
                addr,
                rkeys: perm.rkeys.clone(),
                lifetime: false,
                len: 8,
                kind,
                payload: Vec::new(),
                staging: 0,
            })
        };
        let _ = Access::Read; // read-only permissions carry no atomic right; the NIC refuses
        self.ops.push(op);
        self
    }

    /// Adds a compare-and-swap at `offset`.
    pub fn cas(&mut self, perm: &Perm, offset: u64, compare: u64, swap: u64) -> &mut Self {
        self.atomic(perm, offset, Kind::Cas { compare, swap })
    }

    /// Adds a fetch-and-add at `offset`.
    pub fn faa(&mut self, perm: &Perm, offset: u64, add: u64) -> &mut Self {
        self.atomic(perm, offset, Kind::Faa { add })
    }
}

impl<P: Provider> Client<P> {
    /// The incarnation of this client's lane if its QP is broken (it must be replaced
    /// before anything is posted).
    pub(super) fn broken_lane(&self) -> Option<u64> {
        let lane = self.data.qps.current(self.lane)?;
        (lane.qp.state() != rnic::QpState::ReadyToSend).then_some(lane.incarnation)
    }

    /// Replaces this client's lane's QP, which failed as incarnation `seen` (promoting a
    /// spare, unless another user of the lane did already) and, under type-2 isolation, has
    /// the permissions' windows bound to the lane's QP now.
    /// A session that ended is not repaired here: its data QPs are closed by the memory node,
    /// and its permissions are dead; the next control operation opens a new session. Ended
    /// means: the node refused a reconnection because it ended the session (`SessionEnded`
    /// with its reason, remembered for the next ops of this session), or a control QP failed
    /// (`SessionEnded`: the node ends a session whose control connection fails), or the client
    /// gave up on its control channel (`SessionLost`).
    pub(super) fn switch_qp(&mut self, seen: u64) -> Result<SwitchKind, ClientError> {
        self.sync_session();
        let number = self.data.number;
        {
            let g = self.node.lock();
            if g.session.number != number {
                // The batch ran in a session another client replaced: its permissions ended.
                return Err(ClientError::SessionLost);
            }
            if g.session_lost() {
                return Err(match g.ended {
                    Some(why) => ClientError::SessionEnded(why),
                    None if g.session.is_broken() => {
                        ClientError::SessionEnded(SessionEnd::ControlLost)
                    }
                    None => ClientError::SessionLost,
                });
            }
        }
        let started = self.clocks.timer.now();
        let kind = match self.data.qps.fail_over(self.lane, seen) {
            Ok(kind) => {
                let took = self.clocks.timer.now().0.saturating_sub(started.0);
                self.last_switch = std::time::Duration::from_micros(took);
                kind
            }
            Err(e) => {
                let e = ClientError::from_connect(e);
                if let ClientError::SessionEnded(why) = e {
                    let mut g = self.node.lock();
                    if g.session.number == number {
                        g.core.lose_session(rnic::WcStatus::WrFlushError);
                        g.ended = Some(why);
                    }
                }
                return Err(e);
            }
        };
        self.bound_lane()?;
        Ok(kind)
    }

    pub(super) fn output(&self, op: &Op) -> OpResult {
        match op.kind {
            Kind::Read => {
                let mut data = vec![0u8; op.len as usize];
                let _ = self.staging.read(op.staging, &mut data);
                OpResult::Read(data)
            }
            Kind::Write | Kind::Invalidate => OpResult::Written,
            Kind::Cas { .. } | Kind::Faa { .. } => {
                OpResult::Atomic(self.staging.load_u64(op.staging).unwrap_or(0))
            }
        }
    }
}
