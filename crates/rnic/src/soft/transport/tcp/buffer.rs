//! A connection's receive buffer: bytes read from the socket and not yet parsed into frames.
//!
//! Invariant: `start <= end <= buf.len()`; `buf[start..end]` is unparsed input. The buffer grows
//! only up to the declared length of the frame being received, after that length was checked
//! against the limit the caller passes (a small frame's, until the frame's QP admitted it from
//! its header: see `conn`), and only as bytes arrive — a peer cannot make us allocate for a
//! frame it has not sent, nor for one that cannot be legal on its connection.

use crate::soft::wire::frame_len;

/// Initial (and resting) size of a connection's read buffer.
pub(super) const READ_BUF: usize = 32 * 1024;
/// A read or write buffer grown past this is released once empty.
pub(super) const KEEP_BUF: usize = 1 << 20;

/// Received, unparsed bytes of one connection.
pub(super) struct RecvBuffer {
    /// `buf[start..end]` holds received, unparsed bytes; `buf.len()` is the room.
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl RecvBuffer {
    /// A buffer holding `leftover` (bytes that arrived with the handshake) as unparsed input.
    pub(super) fn with_leftover(leftover: Vec<u8>) -> Self {
        let end = leftover.len();
        let mut buf = leftover;
        buf.resize(end.max(READ_BUF), 0);
        RecvBuffer { buf, start: 0, end }
    }

    /// The unparsed bytes.
    pub(super) fn unparsed(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Room after the unparsed bytes, to read into.
    pub(super) fn room(&mut self) -> Option<&mut [u8]> {
        self.buf.get_mut(self.end..)
    }

    /// Makes room after `end`; grows the buffer only up to the declared length of the frame
    /// being received (checked against the maximum beforehand), and only as bytes arrive.
    pub(super) fn make_room(&mut self, max_frame: usize) -> bool {
        if self.end < self.buf.len() {
            return true;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end < self.buf.len() {
                return true;
            }
        }
        // Full of one incomplete frame: its prefix is known and within `max_frame`.
        let declared = match self.buf.get(..self.end).map(|b| frame_len(b, max_frame)) {
            Some(Ok(Some(len))) => len,
            _ => return false,
        };
        if declared <= self.buf.len() {
            return false; // cannot happen: a complete frame would have been parsed
        }
        let grown = self.buf.len().saturating_mul(2).clamp(READ_BUF, declared);
        self.buf.resize(grown, 0);
        true
    }

    /// Starts over at the front once everything was parsed, shrinking a grown buffer.
    pub(super) fn reset_if_empty(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP_BUF {
                self.buf = vec![0; READ_BUF];
            }
        }
    }

    /// Drops everything, releasing the memory.
    pub(super) fn release(&mut self) {
        *self = RecvBuffer {
            buf: Vec::new(),
            start: 0,
            end: 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(bytes: &[u8], room: usize) -> RecvBuffer {
        let mut buf = bytes.to_vec();
        buf.resize(room, 0);
        RecvBuffer {
            buf,
            start: 0,
            end: bytes.len(),
        }
    }

    #[test]
    fn make_room_compacts_before_growing() {
        let mut r = buffer(&[9; 100], 100);
        r.start = 60;
        assert!(r.make_room(1 << 20));
        assert_eq!((r.start, r.end, r.buf.len()), (0, 40, 100));
        assert_eq!(&r.buf[..40], &[9; 40]);
    }

    #[test]
    fn make_room_grows_only_up_to_the_declared_frame() {
        // A full buffer holding the start of a frame declaring 100 KiB.
        let declared: u32 = 100 * 1024;
        let mut head = declared.to_be_bytes().to_vec();
        head.resize(READ_BUF, 0);
        let mut r = buffer(&head, READ_BUF);
        assert!(r.make_room(1 << 20));
        assert_eq!(r.buf.len(), 2 * READ_BUF);
        r.end = r.buf.len();
        assert!(r.make_room(1 << 20));
        assert_eq!(r.buf.len(), declared as usize, "capped at the frame length");
        // Over the maximum: no growth (the caller treats it as a protocol error).
        let mut r = buffer(&head, READ_BUF);
        assert!(!r.make_room(64 * 1024));
        assert_eq!(r.buf.len(), READ_BUF);
    }

    #[test]
    fn an_empty_buffer_shrinks_back() {
        let mut r = buffer(&[], 4 * KEEP_BUF);
        r.reset_if_empty();
        assert_eq!(r.buf.len(), READ_BUF);
    }

    #[test]
    fn leftover_is_unparsed_input() {
        let r = RecvBuffer::with_leftover(vec![1, 2, 3]);
        assert_eq!(r.unparsed(), &[1, 2, 3]);
        assert_eq!(r.buf.len(), READ_BUF);
    }
}
