//! The client's allocation connection (`one_sided.rs`): its QP and the receives its grants
//! land in.

use super::error::ClientError;
use crate::manager::onesided::GRANT_BYTES;
use rnic::{MemoryBuffer, MemoryRegion, Provider, QueuePair, RecvWr, Sge};

/// Grants a link keeps receives posted for (more than any node's queue holds for a client).
pub(super) const GRANTS: u32 = 64;

/// The client's allocation connection.
pub(super) struct AllocLink<P: Provider> {
    pub(super) qp: P::Qp,
    pub(super) cq: P::Cq,
    pub(super) buf: P::Buffer,
    pub(super) mr: P::Mr,
    /// Requests sent.
    pub(super) sent: u64,
    /// The session it was opened in (a new session needs a new link).
    pub(super) session: u64,
}

impl<P: Provider> std::fmt::Debug for AllocLink<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocLink")
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> AllocLink<P> {
    pub(super) fn post_receive(&self, i: u64) -> Result<(), ClientError> {
        let slot = i % u64::from(GRANTS);
        self.qp.post_recv(&[RecvWr {
            wr_id: slot,
            sge: Some(Sge {
                addr: self.buf.addr() + slot * GRANT_BYTES as u64,
                length: GRANT_BYTES as u32,
                lkey: self.mr.lkey(),
            }),
        }])?;
        Ok(())
    }
}
