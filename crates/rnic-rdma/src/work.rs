//! Work requests of the contract as libibverbs requests (`ibv_send_wr` values).
//!
//! Invariants: one contract request becomes exactly one `ibv_send_wr` with at most one SGE;
//! nothing is split or merged, so a list keeps its order and its doorbell. A bind names its new
//! rkey (same index, new key byte) in the request itself.

use crate::ffi::{RawBind, RawSendWr};
use crate::memory::{RdmaMr, RdmaMw, bind_rkey};
use crate::translate::access_to_ibv;
use rdma_mummy_sys as sys;
use rnic::{MemoryWindow, SendOp, SendWr, Sge, VerbsError, WcOpcode};

/// A translated request: the C-shaped values, the completion opcode it will report, and for a
/// bind the window and the rkey to record once the request is posted.
pub(crate) struct Translated<'a> {
    pub raw: RawSendWr<'a>,
    pub opcode: WcOpcode,
    pub bind: Option<(&'a RdmaMw, u32)>,
}

fn sge(s: &Sge) -> Option<(u64, u32, u32)> {
    Some((s.addr, s.length, s.lkey.0))
}

/// Translates one send request.
pub(crate) fn translate<'a>(wr: &SendWr<'a, RdmaMw, RdmaMr>) -> Result<Translated<'a>, VerbsError> {
    use sys::ibv_wr_opcode as O;
    let mut raw = RawSendWr {
        wr_id: wr.wr_id,
        send_flags: if wr.signaled {
            sys::ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        },
        ..RawSendWr::default()
    };
    let mut bind = None;
    let opcode = match &wr.op {
        SendOp::Read {
            local,
            remote_addr,
            rkey,
        } => {
            raw.opcode = O::IBV_WR_RDMA_READ;
            raw.sge = sge(local);
            raw.remote_addr = *remote_addr;
            raw.rkey = rkey.0;
            WcOpcode::Read
        }
        SendOp::Write {
            local,
            remote_addr,
            rkey,
        } => {
            raw.opcode = O::IBV_WR_RDMA_WRITE;
            raw.sge = sge(local);
            raw.remote_addr = *remote_addr;
            raw.rkey = rkey.0;
            WcOpcode::Write
        }
        SendOp::CompareSwap {
            local,
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            raw.opcode = O::IBV_WR_ATOMIC_CMP_AND_SWP;
            raw.sge = sge(local);
            raw.remote_addr = *remote_addr;
            raw.rkey = rkey.0;
            raw.compare_add = *compare;
            raw.swap = *swap;
            WcOpcode::CompareSwap
        }
        SendOp::FetchAdd {
            local,
            remote_addr,
            rkey,
            add,
        } => {
            raw.opcode = O::IBV_WR_ATOMIC_FETCH_AND_ADD;
            raw.sge = sge(local);
            raw.remote_addr = *remote_addr;
            raw.rkey = rkey.0;
            raw.compare_add = *add;
            WcOpcode::FetchAdd
        }
        SendOp::Send { local } => {
            raw.opcode = O::IBV_WR_SEND;
            raw.sge = local.as_ref().and_then(sge);
            WcOpcode::Send
        }
        SendOp::SendWithInvalidate { local, invalidate } => {
            raw.opcode = O::IBV_WR_SEND_WITH_INV;
            raw.sge = local.as_ref().and_then(sge);
            raw.invalidate_rkey = invalidate.0;
            WcOpcode::Send
        }
        SendOp::LocalInvalidate { rkey } => {
            raw.opcode = O::IBV_WR_LOCAL_INV;
            raw.invalidate_rkey = rkey.0;
            WcOpcode::LocalInvalidate
        }
        SendOp::Wait { .. } | SendOp::Enable { .. } => {
            return Err(VerbsError::Unsupported(
                "cross-channel WAIT and ENABLE on an rdma-core device",
            ));
        }
        SendOp::BindMw { mw, bind: info } => {
            if info.target_qp.is_some() {
                return Err(VerbsError::Unsupported(
                    "binding a type-2 window for another QP (ibv_bind_mw has no QP number)",
                ));
            }
            let mr = match info.mr {
                Some(mr) => Some(mr.raw().ok_or(VerbsError::InvalidArgument(
                    "bind over a deregistered memory region",
                ))?),
                None => None,
            };
            let new_rkey = bind_rkey(mw.rkey().0, info.key);
            raw.opcode = O::IBV_WR_BIND_MW;
            raw.bind = Some(RawBind {
                mw: &mw.raw,
                new_rkey,
                mr,
                addr: info.addr,
                length: info.length,
                access: access_to_ibv(info.access),
            });
            bind = Some((*mw, new_rkey));
            WcOpcode::BindMw
        }
    };
    Ok(Translated { raw, opcode, bind })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic::MemoryKey;

    type Wr<'a> = SendWr<'a, RdmaMw, RdmaMr>;

    const LOCAL: Sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: MemoryKey(0x0102_0304),
    };

    fn signaled(op: SendOp<'static, RdmaMw, RdmaMr>) -> Wr<'static> {
        SendWr {
            wr_id: 42,
            signaled: true,
            op,
        }
    }

    #[test]
    fn one_sided_ops_use_ibv_opcodes_and_fields() {
        use sys::ibv_wr_opcode as O;
        let rkey = MemoryKey(0xaabb_ccdd);
        let read = translate(&signaled(SendOp::Read {
            local: LOCAL,
            remote_addr: 0x7000,
            rkey,
        }))
        .unwrap();
        assert_eq!(read.raw.opcode, O::IBV_WR_RDMA_READ);
        assert_eq!(read.opcode, WcOpcode::Read);
        assert_eq!(read.raw.sge, Some((0x1000, 8, 0x0102_0304)));
        assert_eq!((read.raw.remote_addr, read.raw.rkey), (0x7000, 0xaabb_ccdd));
        assert_eq!(
            read.raw.send_flags,
            sys::ibv_send_flags::IBV_SEND_SIGNALED.0
        );
        assert_eq!(read.raw.wr_id, 42);

        let write = translate(&SendWr {
            wr_id: 1,
            signaled: false,
            op: SendOp::Write {
                local: LOCAL,
                remote_addr: 8,
                rkey,
            },
        })
        .unwrap();
        assert_eq!(write.raw.opcode, O::IBV_WR_RDMA_WRITE);
        assert_eq!(write.raw.send_flags, 0, "unsignaled");

        let cas = translate(&signaled(SendOp::CompareSwap {
            local: LOCAL,
            remote_addr: 16,
            rkey,
            compare: 5,
            swap: 9,
        }))
        .unwrap();
        assert_eq!(cas.raw.opcode, O::IBV_WR_ATOMIC_CMP_AND_SWP);
        assert_eq!((cas.raw.compare_add, cas.raw.swap), (5, 9));
        assert_eq!(cas.opcode, WcOpcode::CompareSwap);

        let faa = translate(&signaled(SendOp::FetchAdd {
            local: LOCAL,
            remote_addr: 16,
            rkey,
            add: 3,
        }))
        .unwrap();
        assert_eq!(faa.raw.opcode, O::IBV_WR_ATOMIC_FETCH_AND_ADD);
        assert_eq!(faa.raw.compare_add, 3);
        assert_eq!(faa.opcode, WcOpcode::FetchAdd);
    }

    #[test]
    fn two_sided_and_invalidation_use_ibv_opcodes() {
        use sys::ibv_wr_opcode as O;
        let send = translate(&signaled(SendOp::Send { local: None })).unwrap();
        assert_eq!(send.raw.opcode, O::IBV_WR_SEND);
        assert_eq!(send.raw.sge, None, "zero-byte send has no SGE");
        assert_eq!(send.opcode, WcOpcode::Send);

        let inv = translate(&signaled(SendOp::SendWithInvalidate {
            local: Some(LOCAL),
            invalidate: MemoryKey(0x500),
        }))
        .unwrap();
        assert_eq!(inv.raw.opcode, O::IBV_WR_SEND_WITH_INV);
        assert_eq!(inv.raw.invalidate_rkey, 0x500);
        assert_eq!(inv.opcode, WcOpcode::Send);

        let local_inv = translate(&signaled(SendOp::LocalInvalidate {
            rkey: MemoryKey(0x601),
        }))
        .unwrap();
        assert_eq!(local_inv.raw.opcode, O::IBV_WR_LOCAL_INV);
        assert_eq!(local_inv.raw.invalidate_rkey, 0x601);
        assert_eq!(local_inv.opcode, WcOpcode::LocalInvalidate);
    }
}
