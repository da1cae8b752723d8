//! Objects and Mr's regions: `Alloc`, `Free`, `RegisterMr`, `DeregisterMr`.
//!
//! Invariants:
//! - An object's memory is zeroed before it is handed out.
//! - `Alloc` is all or nothing: under Mr, a registration that fails gives the object back.
//! - Every region an Mr client registers over a live object — with `Alloc`, with `RegisterMr`,
//!   whether or not it asked for the object check — is recorded in [`Overlaps`] under each
//!   object it overlaps; freeing an object deregisters all of them, whoever registered them,
//!   so a stale rkey is refused by the NIC. A region registered over memory no object held
//!   (a microbenchmark's range) is not recorded: an object allocated there later does not
//!   revoke it.
//! - A region leaves [`Overlaps`] whenever it is deregistered: on request, with its object, or
//!   with its client's broken connection.

use super::*;

/// A region, by the connection that registered it and its rkey.
pub(super) type Owner = (QpNumber, MemoryKey);

/// Which regions lie over which objects (by pool offset).
#[derive(Debug, Default)]
pub(super) struct Overlaps {
    by_object: HashMap<u64, Vec<Owner>>,
    by_region: HashMap<Owner, Vec<u64>>,
}

impl Overlaps {
    /// Records `region` over `objects`.
    fn track(&mut self, region: Owner, objects: Vec<u64>) {
        if objects.is_empty() {
            return;
        }
        for &o in &objects {
            self.by_object.entry(o).or_default().push(region);
        }
        self.by_region.insert(region, objects);
    }

    /// Forgets `region` (deregistered).
    pub(super) fn forget(&mut self, region: Owner) {
        for o in self.by_region.remove(&region).unwrap_or_default() {
            if let Some(list) = self.by_object.get_mut(&o) {
                list.retain(|r| *r != region);
                if list.is_empty() {
                    self.by_object.remove(&o);
                }
            }
        }
    }

    /// The regions over `object`, forgotten.
    fn take(&mut self, object: u64) -> Vec<Owner> {
        let regions = self.by_object.remove(&object).unwrap_or_default();
        for &r in &regions {
            self.forget(r);
        }
        regions
    }
}

impl<P: Provider> Server<P> {
    /// Allocates a zeroed object; under Mr also registers a read-write region over it.
    pub(super) fn alloc(
        &mut self,
        qpn: QpNumber,
        scheme: Scheme,
        size: u64,
    ) -> Result<BaselineReply, FailCode> {
        let off = self.heap.alloc(size)?;
        let zeroed = usize::try_from(size)
            .map_err(|_| FailCode::Exhausted)
            .and_then(|n| {
                self.pool
                    .fill_zero(off as usize, n)
                    .map_err(|_| FailCode::Verbs)
            });
        let rkey = zeroed.and_then(|()| match scheme {
            Scheme::Mr => self.register(qpn, off as usize, size, false).map(Some),
            Scheme::Unprot | Scheme::Qp => Ok(self.pool_mr.as_ref().map(|m| m.rkey())),
            Scheme::Rpc => Ok(None),
        });
        match rkey {
            Ok(rkey) => {
                self.stats.objects_allocated += 1;
                Ok(BaselineReply::Allocated {
                    addr: self.pool.addr() + off,
                    rkey,
                })
            }
            Err(code) => {
                let _ = self.heap.free(off);
                Err(code)
            }
        }
    }

    /// Frees the object at `addr`, deregistering every region over it.
    pub(super) fn free(&mut self, addr: u64) -> Result<(), FailCode> {
        let off = addr
            .checked_sub(self.pool.addr())
            .ok_or(FailCode::UnknownObject)?;
        self.heap.free(off)?;
        for (qpn, rkey) in self.overlaps.take(off) {
            if let Some(mr) = self.conns.get_mut(&qpn).and_then(|c| c.mrs.remove(&rkey)) {
                // A plain region has no windows, so this cannot be refused; if it were, the
                // handle's drop would deregister it anyway.
                let _ = mr.deregister();
                self.stats.mrs_deregistered += 1;
            }
        }
        self.stats.objects_freed += 1;
        Ok(())
    }

    /// Registers `len` bytes at pool offset `off` for connection `qpn`.
    pub(super) fn register(
        &mut self,
        qpn: QpNumber,
        off: usize,
        len: u64,
        read_only: bool,
    ) -> Result<MemoryKey, FailCode> {
        let conn = self.conns.get(&qpn).ok_or(FailCode::WrongScheme)?;
        if conn.mrs.len() >= MRS_PER_CLIENT {
            return Err(FailCode::Exhausted);
        }
        let rights = if read_only {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
        } else {
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL
        };
        let len_bytes = usize::try_from(len).map_err(|_| FailCode::OutOfRange)?;
        let mr = self
            .pd
            .reg_mr(&self.pool, off, len_bytes, rights)
            .map_err(|e| match e {
                VerbsError::Exhausted(_) | VerbsError::Memory(_) => FailCode::Exhausted,
                _ => FailCode::Verbs,
            })?;
        let rkey = mr.rkey();
        self.stats.mrs_registered += 1;
        let objects = self.heap.overlapping(off as u64, len);
        self.overlaps.track((qpn, rkey), objects);
        if let Some(conn) = self.conns.get_mut(&qpn) {
            conn.mrs.insert(rkey, mr);
        }
        Ok(rkey)
    }

    /// Deregisters a region connection `qpn` registered.
    pub(super) fn deregister(&mut self, qpn: QpNumber, rkey: MemoryKey) -> Result<(), FailCode> {
        let conn = self.conns.get_mut(&qpn).ok_or(FailCode::WrongScheme)?;
        let mr = conn.mrs.remove(&rkey).ok_or(FailCode::UnknownRkey)?;
        // A plain region has no windows, so this cannot be refused; if it were, the handle's
        // drop would deregister it anyway.
        let _ = mr.deregister();
        self.overlaps.forget((qpn, rkey));
        self.stats.mrs_deregistered += 1;
        Ok(())
    }
}
