//! The data path through the memory node's CPU: `Read`/`Write` of up to
//! [`MAX_PAYLOAD`] bytes copied between the pool and the message, and the Rpc scheme's
//! `Cas`/`Faa`.
//!
//! Invariants: every range is checked against the pool (never against objects: the Rpc
//! scheme, like Unprot, does not refuse an access to memory that was freed). The atomics are
//! atomic with respect to one another (one server thread carries them all out), not with
//! respect to one-sided atomics of other schemes' clients of the same node, which Rpc clients
//! never share memory with.

use super::super::proto::MAX_PAYLOAD;
use super::*;

impl<P: Provider> Server<P> {
    /// Copies `len` pool bytes at `addr` into a reply.
    pub(super) fn rpc_read(&mut self, addr: u64, len: u32) -> Result<BaselineReply, FailCode> {
        if len as usize > MAX_PAYLOAD {
            return Err(FailCode::TooLong);
        }
        let off = self.pool_offset(addr, len as u64)?;
        let mut bytes = vec![0u8; len as usize];
        self.pool
            .read(off, &mut bytes)
            .map_err(|_| FailCode::OutOfRange)?;
        self.stats.rpc_bytes_copied += len as u64;
        Ok(BaselineReply::Data(bytes))
    }

    /// Copies `bytes` into the pool at `addr`.
    pub(super) fn rpc_write(&mut self, addr: u64, bytes: &[u8]) -> Result<BaselineReply, FailCode> {
        if bytes.len() > MAX_PAYLOAD {
            return Err(FailCode::TooLong);
        }
        let off = self.pool_offset(addr, bytes.len() as u64)?;
        self.pool
            .write(off, bytes)
            .map_err(|_| FailCode::OutOfRange)?;
        self.stats.rpc_bytes_copied += bytes.len() as u64;
        Ok(BaselineReply::Done)
    }

    /// Replaces the aligned word at `addr` by `new(old)`; answers the old value.
    pub(super) fn rpc_atomic(
        &mut self,
        addr: u64,
        new: impl FnOnce(u64) -> u64,
    ) -> Result<BaselineReply, FailCode> {
        if addr % 8 != 0 {
            return Err(FailCode::Misaligned);
        }
        let off = self.pool_offset(addr, 8)?;
        let old = self.pool.load_u64(off).map_err(|_| FailCode::OutOfRange)?;
        let value = new(old);
        if value != old {
            self.pool
                .store_u64(off, value)
                .map_err(|_| FailCode::OutOfRange)?;
        }
        self.stats.rpc_atomics += 1;
        Ok(BaselineReply::Atomic(old))
    }
}
