//! [`KeyClass`]: the keys one subtable claims — those whose hash ends in the subtable's
//! suffix — so a caller can tell which keys a split (or a resizer stopped mid-split) holds up.

use super::client::TableClient;
use super::hash::{KeyHash, mask};
use crate::memory::RemoteMemory;

/// The keys whose primary hash has `suffix` as its low `depth` bits: what a subtable of that
/// depth and suffix claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyClass {
    /// Bits of the hash the class fixes.
    pub depth: u8,
    /// Their value.
    pub suffix: u32,
}

impl KeyClass {
    /// Whether `key` (hashed with the seed of `t`'s table) is in the class.
    pub fn contains<M: RemoteMemory>(&self, t: &TableClient<M>, key: &[u8]) -> bool {
        let h = KeyHash::of(key, t.root.config.seed);
        h.primary & mask(self.depth) == u64::from(self.suffix)
    }
}
