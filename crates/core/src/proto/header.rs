//! The 32-byte permission header (paper §5.2, Figure 3; encoding §5.6).
//!
//! ```text
//! offset  size  field
//!      0     8  tagged buffer address: bits 0..48 address, bits 48..64 length / scale
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

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Address of the buffer the permission covers.
    pub buffer_addr: u64,
    /// Buffer length in bytes (a multiple of the scale factor).
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
    /// The length is not a multiple of the scale or does not fit 16 bits after scaling.
    #[error("buffer length {len} cannot be encoded with scale {scale}")]
    Length {
        /// The length.
        len: u64,
        /// The scale factor.
        scale: u64,
    },
}

impl Header {
    /// Encodes into four words (native endianness, as they sit in memory).
    pub fn encode(&self, scale: u64) -> Result<[u64; 4], HeaderError> {
        if self.buffer_addr & !ADDR_MASK != 0 {
            return Err(HeaderError::AddressTooWide);
        }
        let units = self.buffer_len / scale;
        if self.buffer_len % scale != 0 || units > u16::MAX as u64 {
            return Err(HeaderError::Length {
                len: self.buffer_len,
                scale,
            });
        }
        Ok([
            (units << ADDR_BITS) | self.buffer_addr,
            ((self.header_mw as u64) << 32) | self.buffer_mw as u64,
            self.start_us,
            self.lifetime_us,
        ])
    }

    /// Decodes four words.
    pub fn decode(words: [u64; 4], scale: u64) -> Header {
        Header {
            buffer_addr: words[0] & ADDR_MASK,
            buffer_len: (words[0] >> ADDR_BITS) * scale,
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
        let w = h.encode(64).unwrap();
        assert_eq!(Header::decode(w, 64), h);
        assert!(matches!(
            Header {
                buffer_len: 65,
                ..h
            }
            .encode(64),
            Err(HeaderError::Length { .. })
        ));
        assert_eq!(
            Header {
                buffer_addr: 1 << 50,
                ..h
            }
            .encode(64),
            Err(HeaderError::AddressTooWide)
        );
        assert_eq!(HEADER_SIZE, 32);
        assert_eq!(LIFETIME_OFFSET % 8, 0);
    }
}
