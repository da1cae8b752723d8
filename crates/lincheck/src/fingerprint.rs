//! 128-bit fingerprints of search states, and the memo set that stores them.
//!
//! The memo of the search holds one fingerprint per visited (linearized set, model state) pair
//! instead of the pair itself, so a state costs 16 bytes however long the history is. The
//! linearized set's part is a Zobrist hash (the XOR of one random 128-bit value per linearized
//! operation, updated in O(1) as operations are linearized and undone); the model state's part
//! is maintained incrementally by each model.
//!
//! A collision between two different pairs (probability about s²/2¹²⁹ for s states, below
//! 10⁻²⁵ for 10⁸ states) could only make the search skip a branch and so report a violation of a
//! linearizable history; it can never make a non-linearizable history pass. Every reported
//! witness is checked again while it is shrunk.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// The SplitMix64 finalizer: a bijective, well-mixing map of 64-bit values.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A pseudo-random 128-bit value determined by `(domain, a, b)`.
pub(crate) fn mix128(domain: u64, a: u64, b: u64) -> u128 {
    let lo = splitmix64(splitmix64(domain ^ a) ^ b);
    let hi = splitmix64(splitmix64(!domain ^ a.rotate_left(29)) ^ b.rotate_left(43));
    (u128::from(hi) << 64) | u128::from(lo)
}

/// Domains keep the fingerprints of different things independent.
pub(crate) const DOMAIN_OP: u64 = 0x6c69_6e63_6865_636b;
/// Register values.
pub(crate) const DOMAIN_KV: u64 = 0x6b76_5f72_6567_6973;
/// Queue slots.
pub(crate) const DOMAIN_QUEUE: u64 = 0x7175_6575_655f_736c;

/// Hashes a fingerprint (already uniformly random) by folding it to 64 bits.
#[derive(Default)]
pub(crate) struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64);
    }
}

/// The memo: fingerprints of visited states.
pub(crate) type FpSet = HashSet<u128, BuildHasherDefault<FoldHasher>>;

/// Interns strings as dense `u32` ids (values, items), so model states are small integers.
#[derive(Debug, Default)]
pub(crate) struct Interner<'a> {
    ids: std::collections::HashMap<&'a str, u32>,
    next: u32,
}

impl<'a> Interner<'a> {
    /// The id of `s`, assigning the next one on first sight.
    pub(crate) fn id(&mut self, s: &'a str) -> u32 {
        let next = &mut self.next;
        *self.ids.entry(s).or_insert_with(|| {
            *next += 1;
            *next - 1
        })
    }

    /// A new id that no string has.
    pub(crate) fn fresh(&mut self) -> u32 {
        self.next += 1;
        self.next - 1
    }
}
