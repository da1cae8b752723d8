//! The memory node's allocator: size classes with free lists over the pool.
//!
//! Invariants:
//! - An object of `size` bytes takes a block of the smallest class that holds it: classes are
//!   the powers of two from [`MIN_BLOCK`] up to the pool's length. Blocks are carved from the
//!   pool's unused tail (every block starts at a multiple of [`MIN_BLOCK`] from the pool's
//!   start), and a freed block goes back to its class's free list, reused last-in first-out
//!   by the next object of that class. No splitting, no coalescing: a baseline, not a general
//!   allocator (at most half of a block is unused, and memory freed in one class is not
//!   reused by another).
//! - Live objects are disjoint; each is known by its first byte. Freeing anything else (an
//!   address inside an object, an object freed already) is [`FailCode::UnknownObject`], and
//!   changes nothing.
//! - A full pool is [`FailCode::Exhausted`]; a zero size is [`FailCode::Invalid`].
//! - Offsets are the allocator's currency (from the pool's start); zeroing the memory is the
//!   node's job, before an object is handed out.

use super::super::proto::FailCode;
use std::collections::BTreeMap;

/// The smallest block: a cache line.
pub const MIN_BLOCK: u64 = 64;

/// A live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Object {
    /// Bytes asked for.
    pub size: u64,
    /// Its block's class (block bytes: `MIN_BLOCK << class`).
    class: u32,
}

/// Size classes with free lists over a pool of `len` bytes.
#[derive(Debug)]
pub(crate) struct Allocator {
    len: u64,
    /// First byte never handed out.
    tail: u64,
    /// Free blocks' offsets, per class.
    free: Vec<Vec<u64>>,
    /// Live objects by offset.
    objects: BTreeMap<u64, Object>,
}

impl Allocator {
    pub(crate) fn new(len: u64) -> Self {
        Allocator {
            len,
            tail: 0,
            free: Vec::new(),
            objects: BTreeMap::new(),
        }
    }

    /// The class of a `size`-byte object, if a block of it fits the pool.
    fn class_of(&self, size: u64) -> Option<u32> {
        let block = size.max(MIN_BLOCK).checked_next_power_of_two()?;
        (block <= self.len).then(|| (block / MIN_BLOCK).trailing_zeros())
    }

    /// A block for a `size`-byte object; its offset.
    pub(crate) fn alloc(&mut self, size: u64) -> Result<u64, FailCode> {
        if size == 0 {
            return Err(FailCode::Invalid);
        }
        let class = self.class_of(size).ok_or(FailCode::Exhausted)?;
        let block = MIN_BLOCK << class;
        let off = match self.free.get_mut(class as usize).and_then(Vec::pop) {
            Some(off) => off,
            None if self.len - self.tail >= block => {
                self.tail += block;
                self.tail - block
            }
            None => return Err(FailCode::Exhausted),
        };
        self.objects.insert(off, Object { size, class });
        Ok(off)
    }

    /// Frees the object at `off`; what it was.
    pub(crate) fn free(&mut self, off: u64) -> Result<Object, FailCode> {
        let object = self.objects.remove(&off).ok_or(FailCode::UnknownObject)?;
        let class = object.class as usize;
        if self.free.len() <= class {
            self.free.resize_with(class + 1, Vec::new);
        }
        self.free[class].push(off);
        Ok(object)
    }

    /// The live object starting at `off`.
    #[cfg(test)]
    pub(crate) fn object(&self, off: u64) -> Option<Object> {
        self.objects.get(&off).copied()
    }

    /// The live object that holds all of `[off, off + len)`: its offset.
    pub(crate) fn containing(&self, off: u64, len: u64) -> Option<u64> {
        let end = off.checked_add(len)?;
        let (&start, o) = self.objects.range(..=off).next_back()?;
        (end <= start + o.size).then_some(start)
    }

    /// The live objects `[off, off + len)` overlaps: their offsets.
    pub(crate) fn overlapping(&self, off: u64, len: u64) -> Vec<u64> {
        let end = off.saturating_add(len);
        self.objects
            .range(..end)
            .rev()
            .take_while(|&(&start, o)| start + o.size > off)
            .map(|(&start, _)| start)
            .collect()
    }

    /// Objects allocated and not freed.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_free_lists_and_exhaustion() {
        let mut a = Allocator::new(4096);
        assert_eq!(a.alloc(0), Err(FailCode::Invalid));
        assert_eq!(
            a.alloc(4097),
            Err(FailCode::Exhausted),
            "larger than the pool"
        );
        assert_eq!(a.alloc(u64::MAX), Err(FailCode::Exhausted));
        let x = a.alloc(1).unwrap(); // a 64-byte block
        let y = a.alloc(100).unwrap(); // a 128-byte block
        assert_eq!((x, y), (0, 64));
        assert_eq!(a.object(y).map(|o| o.size), Some(100));
        let z = a.alloc(2048).unwrap();
        assert_eq!(z, 192);
        assert_eq!(
            a.alloc(2048),
            Err(FailCode::Exhausted),
            "the tail is too short"
        );
        // A freed block is reused by its class only, last in first out.
        a.free(y).unwrap();
        assert_eq!(a.alloc(65).unwrap(), y);
        assert_eq!(
            a.free(y + 8),
            Err(FailCode::UnknownObject),
            "not its first byte"
        );
        a.free(y).unwrap();
        assert_eq!(a.free(y), Err(FailCode::UnknownObject), "double free");
        assert_eq!(a.live(), 2);
        // The rest of the tail still serves small objects.
        let mut n = 0;
        while a.alloc(64).is_ok() {
            n += 1;
        }
        assert_eq!(n, (4096 - 192 - 2048) / 64);
    }

    #[test]
    fn objects_are_found_by_containment_and_overlap() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(100).unwrap(); // [0, 100) in a 128-byte block
        let y = a.alloc(64).unwrap(); // [128, 192)
        assert_eq!(a.containing(x, 100), Some(x));
        assert_eq!(a.containing(x + 10, 90), Some(x));
        assert_eq!(a.containing(x + 10, 91), None, "leaves the object");
        assert_eq!(a.containing(y + 63, 1), Some(y));
        assert_eq!(a.containing(100, 8), None, "between objects");
        assert_eq!(a.containing(u64::MAX, 2), None);
        assert_eq!(a.overlapping(0, 1 << 20), vec![y, x]);
        assert_eq!(a.overlapping(99, 29), vec![x]);
        assert_eq!(a.overlapping(99, 30), vec![y, x]);
        assert_eq!(a.overlapping(100, 28), Vec::<u64>::new());
        assert_eq!(a.overlapping(190, u64::MAX), vec![y]);
    }
}
