//! An op of a batch checked against its region before anything is sent: inside the region,
//! atomics 8-byte aligned (a failed check is the op's [`MemError::Invalid`], the others run).

use super::BaselineRegion;
use patronus_ods::{MemError, MemOp};
use rnic::MemoryKey;

/// An op checked against its region: what it does at which address.
#[derive(Clone, Copy, Debug)]
pub(super) struct Planned<'a> {
    pub(super) addr: u64,
    pub(super) rkey: Option<MemoryKey>,
    pub(super) kind: Kind<'a>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind<'a> {
    Read(u32),
    Write(&'a [u8]),
    Cas { compare: u64, swap: u64 },
    Faa { add: u64 },
}

impl<'a> Planned<'a> {
    pub(super) fn of(op: &MemOp<'a, BaselineRegion>) -> Result<Self, MemError> {
        let (on, offset, len, kind) = match *op {
            MemOp::Read { on, offset, len } => (on, offset, len as u64, Kind::Read(len)),
            MemOp::Write { on, offset, data } => (on, offset, data.len() as u64, Kind::Write(data)),
            MemOp::Cas {
                on,
                offset,
                compare,
                swap,
            } => (on, offset, 8, Kind::Cas { compare, swap }),
            MemOp::Faa { on, offset, add } => (on, offset, 8, Kind::Faa { add }),
        };
        match offset.checked_add(len) {
            Some(end) if end <= on.len => {}
            _ => return Err(MemError::Invalid("access outside the region")),
        }
        let addr = on.addr + offset;
        if matches!(kind, Kind::Cas { .. } | Kind::Faa { .. }) && addr % 8 != 0 {
            return Err(MemError::Invalid("atomics need an 8-byte-aligned address"));
        }
        Ok(Planned {
            addr,
            rkey: on.rkey,
            kind,
        })
    }

    pub(super) fn is_read(&self) -> bool {
        matches!(self.kind, Kind::Read(_))
    }
}
