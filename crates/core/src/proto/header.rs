//! The 32-byte permission header (paper §5.2, Figure 3; encoding §5.6).
//!
//! ```text
//! offset  size  field
//!      0     8  tagged buffer address: bits 0..48 address, bits 48..64 length as
//!               mantissa × 2^exponent (11-bit mantissa, 5-bit exponent: every power of two
//!               up to 2^41 and every multiple of 2^k below 2^(k+11) is exact)
//!      8     4  buffer MW index
//!     12     4  header MW index (the window over the lifetime field)
//!     16     8  start time, µs (strictly increasing per header: the ABA filter's key)
//!     24     8  lifetime, µs from the start time — the only field exposed to the client,
//!               at the tail and 8-byte aligned so it can be the target of an RDMA CAS
//! ```
//!
//! Headers live in memory-node memory that clients may CAS concurrently, so the codec works on
//! words. Lifetime 0 means "no further extension" (the manager zeroed it).

/// Size of a header in bytes.
pub const HEADER_SIZE: usize = 32;
/// Offset of the lifetime word.
pub const LIFETIME_OFFSET: usize = 24;
/// Offset of the start-time word.
pub const START_OFFSET: usize = 16;
const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
const MANTISSA_BITS: u32 = 11;
const MANTISSA_MASK: u64 = (1 << MANTISSA_BITS) - 1;

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Address of the buffer the permission covers.
    pub buffer_addr: u64,
    /// Buffer length in bytes (see [`encodable_len`]).
    pub buffer_len: u64,
    /// Index of the window over the buffer (`u32::MAX`: none).
    pub buffer_mw: u32,
    /// Index of the window over the lifetime field (`u32::MAX`: none / shared with buffer).
    pub header_mw: u32,
    /// Start time, µs.
    pub start_us: u64,
    /// Lifetime, µs from the start.
    pub lifetime_us: u64,
}

/// Why a header cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The address needs more than 48 bits.
    #[error("buffer address needs more than 48 bits")]
    AddressTooWide,
    /// The length is not a mantissa of 11 bits times a power of two below 2^32.
    #[error("buffer length {0} has no exact 16-bit encoding")]
    Length(u64),
}

/// The 16-bit length code of `len`, if it has an exact one.
fn length_code(len: u64) -> Option<u64> {
    let exp = len.trailing_zeros().min(31) as u64;
    let exp = if len == 0 { 0 } else { exp };
    let mantissa = len >> exp;
    (mantissa <= MANTISSA_MASK).then_some((exp << MANTISSA_BITS) | mantissa)
}

/// Whether a buffer of `len` bytes can be described by a header (every power of two up to
/// 2^41 can; the manager refuses anything else before granting).
pub fn encodable_len(len: u64) -> bool {
    length_code(len).is_some()
}

impl Header {
    /// Encodes into four words (native endianness, as they sit in memory).
    pub fn encode(&self) -> Result<[u64; 4], HeaderError> {
        if self.buffer_addr & !ADDR_MASK != 0 {
            return Err(HeaderError::AddressTooWide);
        }
        let code = length_code(self.buffer_len).ok_or(HeaderError::Length(self.buffer_len))?;
        Ok([
            (code << ADDR_BITS) | self.buffer_addr,
            ((self.header_mw as u64) << 32) | self.buffer_mw as u64,
            self.start_us,
            self.lifetime_us,
        ])
    }

    /// Decodes four words.
    pub fn decode(words: [u64; 4]) -> Header {
        let code = words[0] >> ADDR_BITS;
        Header {
            buffer_addr: words[0] & ADDR_MASK,
            buffer_len: (code & MANTISSA_MASK) << (code >> MANTISSA_BITS),
            buffer_mw: words[1] as u32,
            header_mw: (words[1] >> 32) as u32,
            start_us: words[2],
            lifetime_us: words[3],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let h = Header {
            buffer_addr: 0x7f12_3456_7000,
            buffer_len: 64 * 1000,
            buffer_mw: 7,
            header_mw: 9,
            start_us: 123,
            lifetime_us: 456,
        };
        let w = h.encode().unwrap();
        assert_eq!(Header::decode(w), h);
        assert_eq!(
            Header {
                buffer_addr: 1 << 50,
                ..h
            }
            .encode(),
            Err(HeaderError::AddressTooWide)
        );
        assert_eq!(HEADER_SIZE, 32);
        assert_eq!(LIFETIME_OFFSET % 8, 0);
    }

    #[test]
    fn every_power_of_two_class_has_an_exact_length() {
        for shift in 0..=41 {
            let h = Header {
                buffer_addr: 0x1000,
                buffer_len: 1 << shift,
                buffer_mw: 1,
                header_mw: u32::MAX,
                start_us: 1,
                lifetime_us: 2,
            };
            assert_eq!(Header::decode(h.encode().unwrap()), h, "2^{shift}");
        }
        for len in [0, 1, 2047, 2048 * 3, 4096 + 32, 2 << 20] {
            assert!(encodable_len(len), "{len}");
        }
        assert!(!encodable_len(2049));
        assert!(!encodable_len(u64::MAX));
        let bad = Header {
            buffer_addr: 0,
            buffer_len: 2049,
            buffer_mw: 0,
            header_mw: 0,
            start_us: 0,
            lifetime_us: 0,
        };
        assert_eq!(bad.encode(), Err(HeaderError::Length(2049)));
    }
}
