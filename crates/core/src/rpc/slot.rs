//! Checked views over one message slot, in the style of `rnic`'s wire codec: every
//! protocol keeps its field offsets in one `field` module, decoding reads through a
//! [`SlotReader`] whose every access is bounds-checked, and encoding writes the same offsets
//! through a [`SlotWriter`] over a zeroed slot. Integers are little-endian. A protocol with
//! variable-length messages reads what arrived with [`SlotReader::variable`] and its payloads
//! with [`SlotReader::slice`].
//!
//! Panic contract: a [`SlotReader`] never panics on peer input; a malformed slot is a
//! [`SlotError`]. A [`SlotWriter`] is given local values at the protocol's own constant
//! offsets; a write outside the slot is a bug in that protocol, caught by a debug assertion
//! (and by every protocol's round-trip tests), and otherwise dropped.

/// Why a slot could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotError {
    /// Fewer bytes than a slot (or than a field the message must contain).
    #[error("message truncated ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes a slot (or the field) needs.
        want: usize,
    },
    /// The kind byte names no message of the protocol.
    #[error("unknown message kind {0:#04x}")]
    UnknownKind(u8),
    /// A field holds a value outside its domain.
    #[error("bad field: {0}")]
    BadField(&'static str),
}

/// A received slot, read through bounds-checked accessors.
#[derive(Clone, Copy, Debug)]
pub struct SlotReader<'a> {
    buf: &'a [u8],
}

impl<'a> SlotReader<'a> {
    /// A view of the first `size` bytes of `input` (longer input is truncated to the slot).
    pub fn new(input: &'a [u8], size: usize) -> Result<Self, SlotError> {
        let buf = input.get(..size).ok_or(SlotError::Truncated {
            got: input.len(),
            want: size,
        })?;
        Ok(SlotReader { buf })
    }

    /// A view of a variable-length message: all of `input`, which must hold at least `min`
    /// bytes; longer input is truncated to `max` (the slot).
    pub fn variable(input: &'a [u8], min: usize, max: usize) -> Result<Self, SlotError> {
        if input.len() < min {
            return Err(SlotError::Truncated {
                got: input.len(),
                want: min,
            });
        }
        Self::new(input, input.len().min(max))
    }

    /// Bytes in view.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no byte is in view.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// `len` bytes starting at `at` (a variable-length payload).
    pub fn slice(&self, at: usize, len: usize) -> Result<&'a [u8], SlotError> {
        at.checked_add(len)
            .and_then(|end| self.buf.get(at..end))
            .ok_or(SlotError::Truncated {
                got: self.buf.len(),
                want: at.saturating_add(len),
            })
    }

    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], SlotError> {
        at.checked_add(N)
            .and_then(|end| self.buf.get(at..end))
            .and_then(|b| b.try_into().ok())
            .ok_or(SlotError::Truncated {
                got: self.buf.len(),
                want: at.saturating_add(N),
            })
    }

    /// The byte at `at`.
    pub fn u8(&self, at: usize) -> Result<u8, SlotError> {
        Ok(self.bytes::<1>(at)?[0])
    }

    /// The little-endian `u32` at `at`.
    pub fn u32(&self, at: usize) -> Result<u32, SlotError> {
        self.bytes(at).map(u32::from_le_bytes)
    }

    /// The little-endian `u64` at `at`.
    pub fn u64(&self, at: usize) -> Result<u64, SlotError> {
        self.bytes(at).map(u64::from_le_bytes)
    }

    /// A boolean byte at `at`: 0 or 1, anything else is a [`SlotError::BadField`] `name`.
    pub fn flag(&self, at: usize, name: &'static str) -> Result<bool, SlotError> {
        match self.u8(at)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(SlotError::BadField(name)),
        }
    }

    /// `N` bytes starting at `at`.
    pub fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], SlotError> {
        self.bytes(at)
    }
}

/// A slot being encoded: fields written at the protocol's offsets into a zeroed buffer.
#[derive(Debug)]
pub struct SlotWriter<'a> {
    buf: &'a mut [u8],
}

impl<'a> SlotWriter<'a> {
    /// Zeroes `buf` (reserved bytes are always zero on the wire) and writes into it.
    pub fn new(buf: &'a mut [u8]) -> Self {
        buf.fill(0);
        SlotWriter { buf }
    }

    /// Writes `src` at `at`.
    pub fn put(&mut self, at: usize, src: &[u8]) {
        let dst = at
            .checked_add(src.len())
            .and_then(|end| self.buf.get_mut(at..end));
        debug_assert!(dst.is_some(), "field at {at} leaves the slot");
        if let Some(dst) = dst {
            dst.copy_from_slice(src);
        }
    }

    /// Writes a byte.
    pub fn u8(&mut self, at: usize, v: u8) {
        self.put(at, &[v]);
    }

    /// Writes a little-endian `u32`.
    pub fn u32(&mut self, at: usize, v: u32) {
        self.put(at, &v.to_le_bytes());
    }

    /// Writes a little-endian `u64`.
    pub fn u64(&mut self, at: usize, v: u64) {
        self.put(at, &v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_reads_are_checked() {
        let mut slot = [0xffu8; 16];
        let mut w = SlotWriter::new(&mut slot);
        w.u8(0, 7);
        w.u32(4, 0xdead_beef);
        w.u64(8, u64::MAX - 1);
        let r = SlotReader::new(&slot, 16).unwrap();
        assert_eq!(r.u8(0), Ok(7));
        assert_eq!(r.u8(1), Ok(0), "the writer zeroes reserved bytes");
        assert_eq!(r.u32(4), Ok(0xdead_beef));
        assert_eq!(r.u64(8), Ok(u64::MAX - 1));
        assert_eq!(r.u64(12), Err(SlotError::Truncated { got: 16, want: 20 }));
        assert_eq!(
            r.u64(usize::MAX),
            Err(SlotError::Truncated {
                got: 16,
                want: usize::MAX
            })
        );
        assert_eq!(r.flag(1, "f"), Ok(false));
        assert_eq!(r.flag(0, "f"), Err(SlotError::BadField("f")));
        assert_eq!(
            SlotReader::new(&slot[..3], 16).err(),
            Some(SlotError::Truncated { got: 3, want: 16 })
        );
    }

    #[test]
    fn variable_views_are_checked() {
        let slot: Vec<u8> = (0..32).collect();
        let r = SlotReader::variable(&slot[..12], 8, 16).unwrap();
        assert_eq!(r.len(), 12);
        assert_eq!(r.slice(8, 4), Ok(&slot[8..12]));
        assert_eq!(
            r.slice(8, 5),
            Err(SlotError::Truncated { got: 12, want: 13 })
        );
        assert_eq!(
            r.slice(usize::MAX, 2),
            Err(SlotError::Truncated {
                got: 12,
                want: usize::MAX
            })
        );
        assert_eq!(SlotReader::variable(&slot, 8, 16).unwrap().len(), 16);
        assert_eq!(
            SlotReader::variable(&slot[..7], 8, 16).err(),
            Some(SlotError::Truncated { got: 7, want: 8 })
        );
    }
}
