//! The key-value workload of §7.3 (Figure 9) and of the Redis comparison: a fixed key space,
//! keys drawn from a Zipfian distribution (skew 0.99 in the paper), a read ratio, and values of
//! one size. Values are derived from the key and a version, so a reader can check that what it
//! got is a value that was written for that key.
//!
//! Invariants: key `i` is always encoded the same way ([`KvWorkload::key`], 16 bytes); a value
//! ([`value`]) carries its key index and version in its first 16 bytes and is otherwise a
//! pattern of both, so [`check_value`] detects another key's bytes or a torn value.

use rand::Rng;
use rand_distr::{Distribution, Zipf};

/// One operation of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Read key `i`.
    Get(u64),
    /// Write a new value of key `i`.
    Put(u64),
}

/// Key space, popularity, mix and value size.
#[derive(Clone, Debug)]
pub struct KvWorkload {
    /// Keys in the key space (all loaded before measuring).
    pub keys: u64,
    /// Zipfian skew (0: uniform).
    pub skew: f64,
    /// Fraction of operations that are reads.
    pub read_ratio: f64,
    /// Bytes of every value.
    pub value_size: usize,
    zipf: Option<Zipf<f64>>,
}

/// Bytes of every key.
pub const KEY_LEN: usize = 16;
/// Bytes at the start of every value that say whose it is.
const VALUE_HEAD: usize = 16;

impl KvWorkload {
    /// `keys` keys (at least one) with `skew`, `read_ratio` and values of `value_size` bytes
    /// (at least 16).
    pub fn new(keys: u64, skew: f64, read_ratio: f64, value_size: usize) -> Self {
        let keys = keys.max(1);
        let zipf = (skew > 0.0)
            .then(|| Zipf::new(keys as f64, skew).ok())
            .flatten();
        KvWorkload {
            keys,
            skew,
            read_ratio: read_ratio.clamp(0.0, 1.0),
            value_size: value_size.max(VALUE_HEAD),
            zipf,
        }
    }

    /// The next operation.
    pub fn next_op(&self, rng: &mut impl Rng) -> KvOp {
        let key = match &self.zipf {
            // Zipf samples ranks 1..=keys; rank 1 is the hottest key.
            Some(z) => (z.sample(rng) as u64).clamp(1, self.keys) - 1,
            None => rng.random_range(0..self.keys),
        };
        if rng.random_bool(self.read_ratio) {
            KvOp::Get(key)
        } else {
            KvOp::Put(key)
        }
    }

    /// The encoding of key `i`.
    pub fn key(i: u64) -> [u8; KEY_LEN] {
        let mut k = *b"key:000000000000";
        let mut n = i;
        for b in k[4..].iter_mut().rev() {
            *b = b'0' + (n % 10) as u8;
            n /= 10;
        }
        k
    }

    /// Value `version` of key `i`.
    pub fn value(&self, i: u64, version: u64) -> Vec<u8> {
        value(i, version, self.value_size)
    }
}

/// Value `version` of key `i`, `len` bytes (at least 16).
pub fn value(i: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(VALUE_HEAD));
    v.extend_from_slice(&i.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let seed = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version;
    v.extend((VALUE_HEAD..len.max(VALUE_HEAD)).map(|j| (seed >> (j % 8 * 8)) as u8 ^ j as u8));
    v
}

/// Whether `bytes` is a whole value of key `i` (any version); the version if so.
pub fn check_value(i: u64, bytes: &[u8]) -> Option<u64> {
    let key = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let version = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    (key == i && value(i, version, bytes.len()) == bytes).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn keys_are_fixed_width_and_distinct() {
        assert_eq!(&KvWorkload::key(42), b"key:000000000042");
        assert_ne!(KvWorkload::key(1), KvWorkload::key(10));
    }

    #[test]
    fn values_say_whose_they_are_and_catch_torn_or_foreign_bytes() {
        let w = KvWorkload::new(100, 0.99, 0.5, 64);
        let v = w.value(7, 3);
        assert_eq!(v.len(), 64);
        assert_eq!(check_value(7, &v), Some(3));
        assert_eq!(check_value(8, &v), None, "another key's value");
        let mut torn = v.clone();
        torn[40..].copy_from_slice(&w.value(7, 4)[40..]);
        assert_eq!(check_value(7, &torn), None, "two versions mixed");
    }

    #[test]
    fn zipfian_keys_favour_the_first_and_stay_in_range() {
        let w = KvWorkload::new(1000, 0.99, 0.9, 64);
        let mut rng = StdRng::seed_from_u64(1);
        let (mut hot, mut reads, n) = (0, 0, 20_000);
        for _ in 0..n {
            let op = w.next_op(&mut rng);
            let (KvOp::Get(k) | KvOp::Put(k)) = op;
            assert!(k < 1000);
            hot += (k == 0) as u32;
            reads += matches!(op, KvOp::Get(_)) as u32;
        }
        // Rank 1 of Zipf(1000, 0.99) has probability about 1/H(1000, 0.99) ≈ 0.13.
        assert!((1_800..3_400).contains(&hot), "{hot}");
        assert!((17_500..18_500).contains(&reads), "{reads}");
    }
}
