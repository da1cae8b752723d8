//! Hashing keys: a seeded 64-bit hash (the MurmurHash64A construction) and what RACE takes
//! from it — the directory suffix, the two bucket choices and the fingerprint.
//!
//! The suffix (low bits of the primary hash) picks the subtable; the first bucket choice comes
//! from the primary hash's high half, the second choice and the fingerprint from an
//! independently seeded secondary hash, so a key's place inside a subtable does not depend on
//! the subtable's depth (a split moves an entry to the same position of the new subtable).

const M: u64 = 0xc6a4_a793_5bd1_e995;
const R: u32 = 47;
/// Seed offset of the secondary hash.
const SECONDARY: u64 = 0x9e37_79b9_7f4a_7c15;

/// The seeded 64-bit hash of `bytes`.
pub fn hash64(bytes: &[u8], seed: u64) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(M);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let mut k = u64::from_le_bytes(w);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h ^= u64::from_le_bytes(w);
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// What a key hashes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash {
    /// Suffix (low bits) and first bucket choice (high half).
    pub primary: u64,
    /// Second bucket choice (low half) and fingerprint (top byte).
    pub secondary: u64,
}

impl KeyHash {
    /// Hashes `key` with the table's seed.
    pub fn of(key: &[u8], seed: u64) -> Self {
        KeyHash {
            primary: hash64(key, seed),
            secondary: hash64(key, seed ^ SECONDARY),
        }
    }

    /// The 8-bit fingerprint stored in the key's slot.
    pub fn fingerprint(&self) -> u8 {
        (self.secondary >> 56) as u8
    }

    /// The key's two main buckets among `mains` (distinct when `mains > 1`).
    pub fn mains(&self, mains: u32) -> [u32; 2] {
        let n = u64::from(mains.max(1));
        let a = ((self.primary >> 32) % n) as u32;
        let mut b = ((self.secondary & 0xffff_ffff) % n) as u32;
        if a == b && mains > 1 {
            b = (a + 1) % mains;
        }
        [a, b]
    }
}

/// A mask of the low `depth` bits.
pub fn mask(depth: u8) -> u64 {
    if depth >= 64 {
        u64::MAX
    } else {
        (1u64 << depth) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_lengths_change_the_hash() {
        assert_ne!(hash64(b"key", 1), hash64(b"key", 2));
        assert_ne!(hash64(b"", 1), hash64(&[0], 1));
        assert_ne!(hash64(&[0; 8], 1), hash64(&[0; 9], 1));
        assert_eq!(hash64(b"same", 7), hash64(b"same", 7));
    }

    #[test]
    fn bucket_choices_differ_and_suffixes_nest() {
        for i in 0..1000u32 {
            let h = KeyHash::of(&i.to_le_bytes(), 3);
            let [a, b] = h.mains(8);
            assert!(a < 8 && b < 8 && a != b);
            assert_eq!(h.primary & mask(3), (h.primary & mask(5)) & 7);
        }
        assert_eq!(KeyHash::of(b"k", 0).mains(1), [0, 0]);
    }
}
