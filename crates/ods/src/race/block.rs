//! KV blocks: written once, before they are linked into a slot, and never changed after
//! (copy-on-write: an update links a new block and frees the old one).
//!
//! ```text
//! 0   checksum  u64   hash of bytes 8.. (up to the value's end)
//! 8   key_len   u32
//! 12  value_len u32
//! 16  key hash  u64   the key's primary hash (a resizer reads it instead of the key)
//! 24  nonce     u64   unique per write: tells this write from a later one at the address
//! 32  key, value
//! ```
//!
//! A reader accepts a block only if its checksum holds and its key is the one looked up, so a
//! read racing with a free (memory scrubbed or reused) is never taken for data.

use super::error::RaceError;
use super::hash::hash64;
use super::layout::{BLOCK_HEADER, MAX_BLOCK_UNITS, UNIT, word};

const CHECK_SEED: u64 = 0xb10c_c4ec_5eed;

/// A decoded, checked block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvBlock {
    /// The key's primary hash.
    pub hash: u64,
    /// The write's nonce.
    pub nonce: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// Bytes a block of this key and value uses, rounded up to whole 64-B units; an error if more
/// than `block_size` or than a slot can name.
pub fn units_for(key: usize, value: usize, block_size: u32) -> Result<u8, RaceError> {
    let need = BLOCK_HEADER + key as u64 + value as u64;
    let max = u64::from(block_size).min(MAX_BLOCK_UNITS * UNIT);
    if need > max {
        return Err(RaceError::TooLarge { need, max });
    }
    Ok(need.div_ceil(UNIT) as u8)
}

/// The image of a block (whole units).
pub fn encode(key: &[u8], value: &[u8], hash: u64, nonce: u64, units: u8) -> Vec<u8> {
    let mut b = vec![0u8; usize::from(units) * UNIT as usize];
    let end = BLOCK_HEADER as usize + key.len() + value.len();
    b[8..12].copy_from_slice(&(key.len() as u32).to_le_bytes());
    b[12..16].copy_from_slice(&(value.len() as u32).to_le_bytes());
    b[16..24].copy_from_slice(&hash.to_le_bytes());
    b[24..32].copy_from_slice(&nonce.to_le_bytes());
    b[32..32 + key.len()].copy_from_slice(key);
    b[32 + key.len()..end].copy_from_slice(value);
    let sum = hash64(&b[8..end], CHECK_SEED);
    b[0..8].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The block in `bytes`, if it is whole and its checksum holds.
pub fn decode(bytes: &[u8]) -> Option<KvBlock> {
    let header = bytes.get(..BLOCK_HEADER as usize)?;
    let key_len = word(header, 8) as u32 as usize;
    let value_len = (word(header, 8) >> 32) as usize;
    let end = (BLOCK_HEADER as usize)
        .checked_add(key_len)?
        .checked_add(value_len)?;
    let body = bytes.get(8..end)?;
    if hash64(body, CHECK_SEED) != word(header, 0) {
        return None;
    }
    let key_at = BLOCK_HEADER as usize;
    Some(KvBlock {
        hash: word(header, 16),
        nonce: word(header, 24),
        key: bytes[key_at..key_at + key_len].to_vec(),
        value: bytes[key_at + key_len..end].to_vec(),
    })
}

/// The nonce in a block's first 32 bytes (checked by the caller against what it expects).
pub fn nonce_of(header: &[u8]) -> u64 {
    word(header, 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_reject_damage() {
        let u = units_for(3, 40, 256).unwrap();
        assert_eq!(u, 2);
        let img = encode(b"key", &[7; 40], 99, 5, u);
        assert_eq!(img.len(), 128);
        let b = decode(&img).unwrap();
        assert_eq!(
            (b.hash, b.nonce, &b.key[..], &b.value[..]),
            (99, 5, &b"key"[..], &[7u8; 40][..])
        );
        for i in [0, 9, 20, 40] {
            let mut bad = img.clone();
            bad[i] ^= 1;
            assert!(decode(&bad).is_none(), "byte {i}");
        }
        assert!(decode(&[0u8; 128]).is_none(), "zeroed memory is no block");
        assert!(decode(&img[..60]).is_none(), "a short read is no block");
        assert!(matches!(
            units_for(100, 200, 256),
            Err(RaceError::TooLarge {
                need: 332,
                max: 256
            })
        ));
    }
}
