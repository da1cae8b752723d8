//! Registered message slots, the memory both ends of the control channel work in: receive
//! slots that incoming messages land in, then as many send slots that outgoing ones leave from.

use super::Stopwatch;
use rnic::{
    AccessFlags, Context, MemoryBuffer, MemoryRegion, ProtectionDomain, Provider, QueuePair,
    RecvWr, SendOp, SendWr, Sge, VerbsError,
};

/// `count` receive slots followed by `count` send slots of `size` bytes, registered for local
/// access only (nothing here is reachable remotely).
pub(super) struct Slots<P: Provider> {
    buf: P::Buffer,
    mr: P::Mr,
    count: u32,
    size: usize,
}

impl<P: Provider> Slots<P> {
    pub(super) fn new(
        ctx: &P::Context,
        pd: &P::Pd,
        count: u32,
        size: usize,
    ) -> Result<Self, VerbsError> {
        let buf = ctx.alloc_buffer(2 * count as usize * size)?;
        let mr = pd.reg_mr(&buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        Ok(Slots {
            buf,
            mr,
            count,
            size,
        })
    }

    fn sge(&self, slot: u32, length: usize) -> Sge {
        Sge {
            addr: self.buf.addr() + slot as u64 * self.size as u64,
            length: length.min(self.size) as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// A receive into receive slot `slot`, identified by `wr_id`.
    pub(super) fn recv_wr(&self, slot: u32, wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            sge: Some(self.sge(slot, self.size)),
        }
    }

    /// Copies receive slot `slot` into `out` (at most a slot's bytes).
    pub(super) fn read(&self, slot: u32, out: &mut [u8]) -> Result<(), VerbsError> {
        self.buf.read(slot as usize * self.size, out)
    }

    /// Writes `bytes` (at most a slot: the message's wire bytes) into send slot `slot` and
    /// posts a SEND of exactly those bytes, unsignaled, on `qp`.
    pub(super) fn send(
        &self,
        qp: &P::Qp,
        slot: u32,
        wr_id: u64,
        bytes: &[u8],
    ) -> Result<(), VerbsError> {
        self.send_timed(qp, slot, wr_id, bytes, &mut Stopwatch::default())
    }

    /// [`Slots::send`], with the post (the NIC's part) timed by `watch`.
    pub(super) fn send_timed(
        &self,
        qp: &P::Qp,
        slot: u32,
        wr_id: u64,
        bytes: &[u8],
        watch: &mut Stopwatch,
    ) -> Result<(), VerbsError> {
        let bytes = bytes.get(..self.size).unwrap_or(bytes);
        let slot = self.count + slot % self.count;
        self.buf.write(slot as usize * self.size, bytes)?;
        let wr = SendWr {
            wr_id,
            signaled: false,
            op: SendOp::Send {
                local: (!bytes.is_empty()).then(|| self.sge(slot, bytes.len())),
            },
        };
        watch
            .time(|| qp.post_send(std::slice::from_ref(&wr)))
            .map_err(|(_, e)| e)
    }
}
