//! A remote memory simulated in the test's own process, to run the queue through many
//! schedules quickly: objects with permissions that end by release, by free (every permission
//! over the object) or by lease (on a virtual clock, extensible up to a maximum lifetime);
//! an access through an ended permission, or outside it, is refused and changes nothing.
//! Freed memory is handed out again by the very next allocation of its size, so a late
//! client meets a new object at an old address as often as possible.

use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::{MemError, MemOp, MemOut, Region, RemoteMemory};
use rnic::Timestamp;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

#[derive(Debug)]
struct Perm {
    addr: u64,
    len: u64,
    alive: bool,
    start_us: u64,
    expires_us: u64,
}

/// The simulated memory node.
#[derive(Debug, Default)]
pub struct SimNode {
    now_us: u64,
    /// Longest a permission lives, from its grant.
    pub max_lifetime_us: u64,
    objects: HashMap<u64, Vec<u8>>,
    /// Freed objects, (address, size), reused first in, first out.
    free: VecDeque<(u64, u64)>,
    next_addr: u64,
    perms: HashMap<u64, Perm>,
    next_perm: u64,
}

impl SimNode {
    pub fn shared(max_lifetime: Duration) -> Rc<RefCell<SimNode>> {
        Rc::new(RefCell::new(SimNode {
            max_lifetime_us: max_lifetime.as_micros() as u64,
            next_addr: 1 << 20,
            ..SimNode::default()
        }))
    }
    pub fn advance(&mut self, d: Duration) {
        self.now_us += d.as_micros() as u64;
    }
    /// Bytes of live objects.
    pub fn bytes_in_use(&self) -> u64 {
        self.objects.values().map(|o| o.len() as u64).sum()
    }
    fn grant(&mut self, addr: u64, len: u64, lease: Duration) -> SimRegion {
        self.next_perm += 1;
        let lease = (lease.as_micros() as u64).min(self.max_lifetime_us);
        self.perms.insert(
            self.next_perm,
            Perm {
                addr,
                len,
                alive: true,
                start_us: self.now_us,
                expires_us: self.now_us + lease,
            },
        );
        SimRegion {
            id: self.next_perm,
            addr,
            len,
        }
    }
    fn live(&self, r: &SimRegion) -> bool {
        self.perms
            .get(&r.id)
            .is_some_and(|p| p.alive && self.now_us < p.expires_us)
    }
    fn apply(&mut self, op: &MemOp<'_, SimRegion>) -> Result<MemOut, MemError> {
        let (r, offset, len) = match *op {
            MemOp::Read { on, offset, len } => (on, offset, u64::from(len)),
            MemOp::Write { on, offset, data } => (on, offset, data.len() as u64),
            MemOp::Cas { on, offset, .. } | MemOp::Faa { on, offset, .. } => (on, offset, 8),
        };
        if !self.live(r) || offset + len > r.len {
            return Err(MemError::Rejected);
        }
        let p = &self.perms[&r.id];
        let obj = self.objects.get_mut(&p.addr).ok_or(MemError::Rejected)?;
        let at = offset as usize..(offset + len) as usize;
        let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap());
        Ok(match *op {
            MemOp::Read { .. } => MemOut::Read(obj[at].to_vec()),
            MemOp::Write { data, .. } => {
                obj[at].copy_from_slice(data);
                MemOut::Written
            }
            MemOp::Cas { compare, swap, .. } => {
                let old = word(&obj[at.clone()]);
                if old == compare {
                    obj[at].copy_from_slice(&swap.to_le_bytes());
                }
                MemOut::Atomic(old)
            }
            MemOp::Faa { add, .. } => {
                let old = word(&obj[at.clone()]);
                obj[at].copy_from_slice(&old.wrapping_add(add).to_le_bytes());
                MemOut::Atomic(old)
            }
        })
    }
}

/// A permission of the simulated node.
#[derive(Debug)]
pub struct SimRegion {
    id: u64,
    addr: u64,
    len: u64,
}

impl Region for SimRegion {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// One client of the simulated node.
#[derive(Debug)]
pub struct SimMemory {
    pub node: Rc<RefCell<SimNode>>,
}

impl RemoteMemory for SimMemory {
    type Region = SimRegion;

    fn allocate(
        &mut self,
        sizes: &[u64],
        lease: Duration,
        _: Mode,
    ) -> Result<Vec<SimRegion>, MemError> {
        let mut n = self.node.borrow_mut();
        let mut out = Vec::new();
        for &size in sizes {
            let reuse = n.free.iter().position(|&(_, s)| s == size);
            let addr = match reuse.and_then(|i| n.free.remove(i)) {
                Some((addr, _)) => addr,
                None => {
                    let addr = n.next_addr;
                    n.next_addr += size.next_multiple_of(64);
                    addr
                }
            };
            n.objects.insert(addr, vec![0; size as usize]);
            out.push(n.grant(addr, size, lease));
        }
        Ok(out)
    }
    fn acquire(
        &mut self,
        addr: u64,
        len: u64,
        lease: Duration,
        _: Access,
        _: Mode,
    ) -> Result<SimRegion, MemError> {
        let mut n = self.node.borrow_mut();
        match n.objects.get(&addr) {
            Some(o) if len <= o.len() as u64 => Ok(n.grant(addr, len, lease)),
            Some(_) => Err(MemError::Invalid("longer than the object")),
            None => Err(MemError::NotFound),
        }
    }
    fn extend(&mut self, r: &SimRegion, lease: Duration) -> Result<(), MemError> {
        let mut n = self.node.borrow_mut();
        if !n.live(r) {
            return Err(MemError::Rejected);
        }
        let (now, max) = (n.now_us, n.max_lifetime_us);
        let p = n.perms.get_mut(&r.id).ok_or(MemError::Rejected)?;
        let until = now + lease.as_micros() as u64;
        if until > p.start_us + max {
            return Err(MemError::Rejected);
        }
        p.expires_us = p.expires_us.max(until);
        Ok(())
    }
    fn expires_within(&self, r: &SimRegion, margin: Duration) -> bool {
        let n = self.node.borrow();
        n.perms
            .get(&r.id)
            .is_none_or(|p| p.expires_us <= n.now_us + margin.as_micros() as u64)
    }
    fn now(&self) -> Timestamp {
        Timestamp(self.node.borrow().now_us)
    }
    fn release(&mut self, r: SimRegion) -> Result<(), MemError> {
        let mut n = self.node.borrow_mut();
        let p = n.perms.get_mut(&r.id).ok_or(MemError::NotFound)?;
        p.alive = false;
        Ok(())
    }
    fn free(&mut self, r: SimRegion) -> Result<(), MemError> {
        let mut n = self.node.borrow_mut();
        if !n.live(&r) {
            return Err(MemError::Rejected);
        }
        let addr = n.perms[&r.id].addr;
        let obj = n.objects.remove(&addr).ok_or(MemError::NotFound)?;
        n.free.push_back((addr, obj.len() as u64));
        for p in n.perms.values_mut() {
            if p.addr == addr {
                p.alive = false;
            }
        }
        Ok(())
    }
    fn execute(&mut self, ops: &[MemOp<'_, SimRegion>]) -> Vec<Result<MemOut, MemError>> {
        let mut n = self.node.borrow_mut();
        ops.iter().map(|op| n.apply(op)).collect()
    }
}
