//! Remote layout of the table: slots, bucket headers, subtables and directory entries
//! (`block` has the KV blocks, `records` the root and the split record).
//!
//! ```text
//! slot (8 B, changed only by CAS):  fingerprint:8 | frozen:1 | units:7 | pointer:48
//! bucket:       header (8 B: depth:8 | 0:24 | suffix:32), then `slots` slots
//! bucket group: main 0 | overflow | main 1          (3 buckets)
//! combined bucket of main m: main m and the group's overflow bucket, adjacent (one READ)
//! subtable:     64-B header (the lock object's address) | groups × bucket group
//! directory:    global depth (8 B) | 2^max_depth entries (8 B: depth:8 | 0:8 | subtable:48)
//! ```
//!
//! Invariants:
//! - A slot is empty (all zero), holds an entry (pointer ≠ 0, 1..=127 units of 64 B), or is
//!   frozen by a split (the frozen bit set, over an entry or over nothing): a frozen slot's
//!   CAS by a writer fails, which is what fences writers during a split.
//! - Every bucket header of a subtable holds the subtable's depth and suffix; the subtable
//!   claims a key iff the key's low `depth` bits equal the suffix.
//! - Every directory entry is valid at all times: entry `i` names the subtable claiming the
//!   keys whose suffix is `i`. The global depth is a hint of how many entries to read.
//! - A key's entry lives in the combined bucket of one of its two main buckets, at the same
//!   position in whichever subtable claims it (a split copies slots in place).

use super::hash::mask;

/// Bytes of the subtable header (the lock object's address, then reserved).
pub const SUBTABLE_HEADER: u64 = 64;
/// The length unit of a slot.
pub const UNIT: u64 = 64;
/// Bytes of a KV block's header.
pub const BLOCK_HEADER: u64 = 32;
/// The most units a slot can name.
pub const MAX_BLOCK_UNITS: u64 = 127;
const FROZEN: u64 = 1 << 55;
const PTR_MASK: u64 = (1 << 48) - 1;

/// One 8-byte slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Slot(pub u64);

impl Slot {
    /// A free slot.
    pub const EMPTY: Slot = Slot(0);
    /// A free slot frozen by a split.
    pub const FROZEN_EMPTY: Slot = Slot(FROZEN);

    /// An entry for a block of `units` × 64 B at `ptr`.
    pub fn entry(fingerprint: u8, units: u8, ptr: u64) -> Slot {
        Slot((u64::from(fingerprint) << 56) | (u64::from(units) & 0x7f) << 48 | (ptr & PTR_MASK))
    }
    /// The fingerprint.
    pub fn fingerprint(self) -> u8 {
        (self.0 >> 56) as u8
    }
    /// 64-B units of the block.
    pub fn units(self) -> u8 {
        ((self.0 >> 48) & 0x7f) as u8
    }
    /// Bytes of the block that hold its header, key and value.
    pub fn len(self) -> u64 {
        u64::from(self.units()) * UNIT
    }
    /// The block's address.
    pub fn ptr(self) -> u64 {
        self.0 & PTR_MASK
    }
    /// Whether it holds no entry (frozen or not).
    pub fn is_empty(self) -> bool {
        self.ptr() == 0
    }
    /// Whether a split froze it.
    pub fn is_frozen(self) -> bool {
        self.0 & FROZEN != 0
    }
    /// The same slot, frozen.
    pub fn frozen(self) -> Slot {
        Slot(self.0 | FROZEN)
    }
    /// The same slot, not frozen.
    pub fn thawed(self) -> Slot {
        Slot(self.0 & !FROZEN)
    }
}

/// A bucket header: the depth and suffix of the subtable the bucket belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketHeader {
    /// Local depth.
    pub depth: u8,
    /// The suffix every key of the subtable has at that depth.
    pub suffix: u32,
}

impl BucketHeader {
    /// The header word.
    pub fn encode(self) -> u64 {
        (u64::from(self.depth) << 56) | u64::from(self.suffix)
    }
    /// From a header word.
    pub fn decode(w: u64) -> Self {
        BucketHeader {
            depth: (w >> 56) as u8,
            suffix: w as u32,
        }
    }
    /// Whether the subtable holds the key with this primary hash.
    pub fn claims(self, primary: u64) -> bool {
        (primary & mask(self.depth)) == u64::from(self.suffix)
    }
}

/// A directory entry: a subtable and its depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DirEntry {
    /// The subtable's address.
    pub subtable: u64,
    /// Its depth.
    pub depth: u8,
}

impl DirEntry {
    /// The entry word.
    pub fn encode(self) -> u64 {
        (u64::from(self.depth) << 56) | (self.subtable & PTR_MASK)
    }
    /// From an entry word.
    pub fn decode(w: u64) -> Self {
        DirEntry {
            subtable: w & PTR_MASK,
            depth: (w >> 56) as u8,
        }
    }
}

/// Where a slot is, and what it held when read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotAt {
    /// Canonical position in the subtable (bucket-major): of two entries of one key, the one
    /// at the lower position is the key's.
    pub pos: u32,
    /// Byte offset in the subtable.
    pub offset: u64,
    /// Whether it is in a main bucket (inserts fill those first).
    pub main: bool,
    /// The value read.
    pub slot: Slot,
}

/// The geometry of a subtable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bucket groups.
    pub groups: u32,
    /// Slots per bucket.
    pub slots: u8,
}

impl Geometry {
    /// Bytes of a bucket.
    pub fn bucket_bytes(&self) -> u64 {
        8 * (1 + u64::from(self.slots))
    }
    /// Buckets of a subtable.
    pub fn buckets(&self) -> u32 {
        3 * self.groups
    }
    /// Main buckets of a subtable.
    pub fn mains(&self) -> u32 {
        2 * self.groups
    }
    /// Bytes of a subtable object.
    pub fn subtable_bytes(&self) -> u64 {
        SUBTABLE_HEADER + u64::from(self.buckets()) * self.bucket_bytes()
    }
    /// Offset of bucket `p`'s header.
    pub fn bucket_offset(&self, p: u32) -> u64 {
        SUBTABLE_HEADER + u64::from(p) * self.bucket_bytes()
    }
    /// Offset of the slot at position `pos`.
    pub fn slot_offset(&self, pos: u32) -> u64 {
        let per = u32::from(self.slots.max(1));
        self.bucket_offset(pos / per) + 8 * (1 + u64::from(pos % per))
    }
    /// Offset and length of main bucket `m`'s combined bucket, and its first bucket.
    pub fn combined(&self, m: u32) -> (u64, u32, u32) {
        let first = (m / 2) * 3 + (m % 2);
        (
            self.bucket_offset(first),
            (2 * self.bucket_bytes()) as u32,
            first,
        )
    }
    /// The slots of buckets `first..` in `bytes` (whole buckets, as read).
    pub fn parse(&self, first: u32, bytes: &[u8]) -> Vec<SlotAt> {
        let bb = self.bucket_bytes() as usize;
        let mut out = Vec::new();
        for (b, bucket) in bytes.chunks_exact(bb).enumerate() {
            let p = first + b as u32;
            for j in 0..self.slots {
                let at = 8 * (1 + usize::from(j));
                out.push(SlotAt {
                    pos: p * u32::from(self.slots) + u32::from(j),
                    offset: self.bucket_offset(p) + at as u64,
                    main: p % 3 != 1,
                    slot: Slot(word(bucket, at)),
                });
            }
        }
        out
    }
}

/// The little-endian word at `at` of `bytes` (0 past the end).
pub fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = bytes.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_freeze() {
        let s = Slot::entry(0xab, 3, 0x7fff_1234_5678);
        assert_eq!(
            (s.fingerprint(), s.units(), s.ptr(), s.len()),
            (0xab, 3, 0x7fff_1234_5678, 192)
        );
        assert!(!s.is_frozen() && !s.is_empty());
        assert!(s.frozen().is_frozen());
        assert_eq!(s.frozen().thawed(), s);
        assert_eq!(s.frozen().units(), 3);
        assert!(Slot::FROZEN_EMPTY.is_empty() && Slot::FROZEN_EMPTY.is_frozen());
        assert_eq!(Slot::EMPTY.frozen(), Slot::FROZEN_EMPTY);
    }

    #[test]
    fn headers_and_entries_round_trip() {
        let h = BucketHeader {
            depth: 3,
            suffix: 5,
        };
        assert_eq!(BucketHeader::decode(h.encode()), h);
        assert!(h.claims(0b1101) && !h.claims(0b1001));
        let e = DirEntry {
            subtable: 0x7f00_0000_1000,
            depth: 9,
        };
        assert_eq!(DirEntry::decode(e.encode()), e);
    }

    #[test]
    fn combined_buckets_share_the_overflow_bucket() {
        let g = Geometry {
            groups: 2,
            slots: 7,
        };
        assert_eq!(g.bucket_bytes(), 64);
        assert_eq!(g.subtable_bytes(), 64 + 6 * 64);
        assert_eq!(g.combined(0), (64, 128, 0));
        assert_eq!(g.combined(1), (128, 128, 1));
        assert_eq!(g.combined(2), (256, 128, 3));
        let slots = g.parse(1, &[0u8; 128]);
        assert_eq!(slots.len(), 14);
        assert!(!slots[0].main && slots[7].main);
        assert_eq!(slots[0].pos, 7);
        assert_eq!(slots[0].offset, 128 + 8);
    }
}
