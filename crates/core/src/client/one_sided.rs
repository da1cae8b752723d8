//! One-sided allocation, the client's side (`docs/onesided.md`): an allocation connection to
//! the memory node, whose pre-posted chains answer each SEND of no bytes with a chunk's
//! address and key, bound for this client's data QP — no CPU of the node on the way.
//!
//! A chunk has no header and no lease: it is the client's until it frees it or its session
//! ends. It is used like any permission's buffer (`read`, `write`, `cas`, `faa`, batches);
//! `extend` does not apply to it.

use super::alloc_link::{AllocLink, GRANTS};
use super::driver::Client;
use super::error::ClientError;
use super::perm::Perm;
use crate::manager::onesided::{ChunkGrant, GRANT_BYTES};
use crate::proto::connect::{Intent, Role};
use crate::proto::messages::{Access, Grant, Mode, PermissionId};
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryBuffer, ProtectionDomain, Provider, QpInit,
    QueuePair, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

impl<P: Provider> Client<P> {
    /// Allocates a chunk one-sided: one SEND on the allocation connection (opened on first
    /// use), answered by the memory node's NIC with no CPU of the node on the way. The chunk is
    /// the node's configured chunk size, zeroed, and usable through this client's data QP only.
    ///
    /// Errors: [`ClientError::NoChunk`] when the node has no chunk queued for this client
    /// (its budget is taken, or the node has not refilled it yet: the connection is closed,
    /// the next call opens another); the connection errors of any session QP.
    pub fn allocate_one_sided(&mut self) -> Result<Perm, ClientError> {
        self.sync_session();
        let session = self.data.number;
        if self
            .one_sided
            .as_ref()
            .is_some_and(|l| l.session != session)
        {
            self.one_sided = None;
        }
        if self.one_sided.is_none() {
            self.one_sided = Some(self.open_alloc_link(session)?);
        }
        let sent_at = self.clocks.lease.now();
        let Some(link) = self.one_sided.as_mut() else {
            return Err(ClientError::Internal("no allocation connection"));
        };
        let request = SendWr {
            wr_id: link.sent,
            signaled: true,
            op: SendOp::Send { local: None },
        };
        link.qp.post_send(&[request]).map_err(|(_, e)| e)?;
        link.sent += 1;
        let deadline = std::time::Duration::from_micros(self.cfg.rpc_timeout.as_micros() as u64);
        let mut grant = None;
        let mut sent_ok = false;
        let mut wcs = [WorkCompletion::default(); 4];
        let mut waited = std::time::Duration::ZERO;
        while grant.is_none() || !sent_ok {
            let n = link.cq.poll(&mut wcs);
            for wc in &wcs[..n] {
                match (wc.opcode, wc.status) {
                    (WcOpcode::Recv, WcStatus::Success) => {
                        let mut b = [0u8; GRANT_BYTES];
                        link.buf.read(wc.wr_id as usize * GRANT_BYTES, &mut b)?;
                        grant = ChunkGrant::decode(&b);
                        link.post_receive(wc.wr_id + u64::from(GRANTS))?;
                    }
                    (_, WcStatus::Success) => sent_ok = true,
                    (_, WcStatus::RnrRetryExceeded) => {
                        self.one_sided = None;
                        return Err(ClientError::NoChunk);
                    }
                    (_, status) => {
                        self.one_sided = None;
                        return Err(ClientError::OutcomeUnknown(status));
                    }
                }
            }
            if n == 0 {
                if waited >= deadline {
                    self.one_sided = None;
                    return Err(ClientError::RpcTimeout);
                }
                let step = std::time::Duration::from_millis(1);
                link.cq.wait(step);
                waited += step;
            }
        }
        let Some(g) = grant else {
            return Err(ClientError::Internal("a grant without its bytes"));
        };
        let grant = Grant {
            id: PermissionId {
                header_addr: 0,
                start_us: 0,
            },
            buffer_addr: g.addr,
            buffer_len: u64::from(g.len),
            buffer_rkey: g.rkey,
            lifetime_rkey: g.rkey,
            // No lease: the chunk is the client's until freed or its session ends.
            lifetime_us: u64::from(u32::MAX) * 1_000_000,
            contiguous: false,
            max_lifetime_us: u32::MAX,
        };
        Ok(Perm::new(
            grant,
            Access::ReadWrite,
            Mode::Exclusive,
            sent_at,
            0,
            session,
        ))
    }

    /// Frees a one-sided chunk: a SEND_WITH_INV of its key on the data QP its window is bound
    /// for. The memory node's NIC invalidates the window (no one else's free can: the window
    /// works for this client's data QP only) and its manager zeroes the chunk in the
    /// background before it is queued again. Like a WRITE, a free whose QP failed reports
    /// `OutcomeUnknown` and is not sent again.
    pub fn free_one_sided(&mut self, perm: Perm) -> Result<(), ClientError> {
        if !perm.is_one_sided() {
            return Err(ClientError::InvalidArgument(
                "not a one-sided chunk: free it with `free`",
            ));
        }
        let mut b = self.batch();
        b.invalidate(&perm);
        match b.execute().pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e),
            None => Err(ClientError::Internal("a free without its result")),
        }
    }

    /// Connects an allocation QP for this client's current data slot, with receives posted
    /// for its grants.
    fn open_alloc_link(&mut self, session: u64) -> Result<AllocLink<P>, ClientError> {
        let view = self
            .data
            .qps
            .current(self.lane)
            .ok_or(ClientError::Internal("no data QP"))?;
        let intent = Intent {
            role: Role::Alloc,
            slot: view.slot,
            ..self.data.qps.intent()
        };
        let ep = &self.node.endpoint;
        let cq = ep.ctx.create_cq(2 * GRANTS)?;
        let qp = ep.pd.create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: GRANTS,
            max_recv_wr: GRANTS,
            access: AccessFlags::empty(),
            timing: self.cfg.qp_timing,
        })?;
        let buf = ep.ctx.alloc_buffer(GRANTS as usize * GRANT_BYTES)?;
        let mr = ep.pd.reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        qp.connect(&ep.address, &intent.encode())
            .map_err(ClientError::from_connect)?;
        let link = AllocLink {
            qp,
            cq,
            buf,
            mr,
            sent: 0,
            session,
        };
        // Before the first request: a grant never finds no receive.
        for i in 0..u64::from(GRANTS) {
            link.post_receive(i)?;
        }
        Ok(link)
    }
}
