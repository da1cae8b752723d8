//! The root object and the lock object's split record.
//!
//! ```text
//! root (64 B):  magic | directory address | max_depth:8 slots:8 lock:8 0:8 groups:32
//!               | block_size:32 0:32 | seed | reserved
//! lock object of a subtable (64 B):
//!               lock word (LockMode::Word) | phase:8 depth:8 0:16 suffix:32
//!               | new subtable | new subtable's lock object | reserved
//! ```

use super::config::{LockMode, RaceConfig};
use super::error::RaceError;
use super::layout::word;

/// Bytes of the root object.
pub const ROOT_BYTES: u64 = 64;
/// Bytes of a subtable's lock object.
pub const LOCK_BYTES: u64 = 64;
/// Offset of the lock word in the lock object.
pub const LOCK_WORD: u64 = 0;
/// Offset of the split record in the lock object.
pub const RECORD: u64 = 8;
/// Bytes of the split record.
pub const RECORD_BYTES: u32 = 24;
const MAGIC: u64 = u64::from_le_bytes(*b"RACEtbl1");

/// What the root says about a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// The directory object.
    pub directory: u64,
    /// The table's shape (its `initial_depth` is not kept: 0 here).
    pub config: RaceConfig,
}

impl Root {
    /// Bytes of the directory object: the global depth, then `2^max_depth` entries.
    pub fn directory_bytes(&self) -> u64 {
        8 + 8 * (1u64 << self.config.max_depth)
    }

    /// The root object's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let c = &self.config;
        let mut b = vec![0u8; ROOT_BYTES as usize];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.directory.to_le_bytes());
        b[16] = c.max_depth;
        b[17] = c.slots;
        b[18] = c.lock.code();
        b[20..24].copy_from_slice(&c.groups.to_le_bytes());
        b[24..28].copy_from_slice(&c.block_size.to_le_bytes());
        b[32..40].copy_from_slice(&c.seed.to_le_bytes());
        b
    }

    /// From the root object's bytes.
    pub fn decode(b: &[u8]) -> Result<Root, RaceError> {
        if b.len() < ROOT_BYTES as usize || word(b, 0) != MAGIC {
            return Err(RaceError::Corrupt("no RACE table at this root"));
        }
        let lock = LockMode::from_code(b[18]).ok_or(RaceError::Corrupt("unknown lock mode"))?;
        let config = RaceConfig {
            initial_depth: 0,
            max_depth: b[16],
            slots: b[17],
            lock,
            groups: word(b, 20) as u32,
            block_size: word(b, 24) as u32,
            seed: word(b, 32),
        };
        config
            .validate()
            .map_err(|_| RaceError::Corrupt("the root's table shape is invalid"))?;
        Ok(Root {
            directory: word(b, 8),
            config,
        })
    }
}

/// How far a subtable's split has gone (see `split` for what each phase means).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// No split in progress.
    Idle,
    /// The subtable's slots are being frozen.
    Freezing,
    /// The new subtable is allocated; its content is being written.
    Copying,
    /// The new subtable is complete; the directory and the old subtable's headers are being
    /// changed.
    Publishing,
    /// Both subtables are published; their slots are being thawed.
    Thawing,
    /// The record of a new subtable T' while the split of its parent (in `new`) fills and
    /// publishes it: whoever takes T''s lock must finish the parent's split first.
    NewHalf,
}

/// The split record of a subtable's lock object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitRecord {
    /// The phase.
    pub phase: Phase,
    /// The subtable's depth before the split.
    pub depth: u8,
    /// Its suffix.
    pub suffix: u32,
    /// The new subtable (from `Copying` on); for `NewHalf`, the parent being split.
    pub new: u64,
    /// The new subtable's lock object.
    pub new_lock: u64,
}

impl SplitRecord {
    /// No split.
    pub const IDLE: SplitRecord = SplitRecord {
        phase: Phase::Idle,
        depth: 0,
        suffix: 0,
        new: 0,
        new_lock: 0,
    };

    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let phase: u64 = match self.phase {
            Phase::Idle => 0,
            Phase::Freezing => 1,
            Phase::Copying => 2,
            Phase::Publishing => 3,
            Phase::Thawing => 4,
            Phase::NewHalf => 5,
        };
        let w0 = phase | u64::from(self.depth) << 8 | u64::from(self.suffix) << 32;
        [w0, self.new, self.new_lock]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// From the record's bytes.
    pub fn decode(b: &[u8]) -> Result<SplitRecord, RaceError> {
        let w0 = word(b, 0);
        let phase = match w0 & 0xff {
            0 => Phase::Idle,
            1 => Phase::Freezing,
            2 => Phase::Copying,
            3 => Phase::Publishing,
            4 => Phase::Thawing,
            5 => Phase::NewHalf,
            _ => return Err(RaceError::Corrupt("unknown split phase")),
        };
        Ok(SplitRecord {
            phase,
            depth: (w0 >> 8) as u8,
            suffix: (w0 >> 32) as u32,
            new: word(b, 8),
            new_lock: word(b, 16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_record_round_trip() {
        let config = RaceConfig {
            initial_depth: 0,
            lock: LockMode::Word,
            ..RaceConfig::default()
        };
        let r = Root {
            directory: 0x1000,
            config,
        };
        assert_eq!(Root::decode(&r.encode()).unwrap(), r);
        assert!(Root::decode(&[0u8; 64]).is_err());
        let s = SplitRecord {
            phase: Phase::Publishing,
            depth: 3,
            suffix: 5,
            new: 0x2000,
            new_lock: 0x3000,
        };
        assert_eq!(SplitRecord::decode(&s.encode()).unwrap(), s);
        assert_eq!(SplitRecord::decode(&[0u8; 24]).unwrap(), SplitRecord::IDLE);
    }
}
