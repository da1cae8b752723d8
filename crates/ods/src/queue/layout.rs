//! The bytes of the queue's remote objects: the root (metadata block), the segments, their
//! entries, the state word of an entry and the segment pointer. Plain functions over integers
//! and byte slices; nothing here touches memory. All integers are little-endian `u64`s at
//! 8-byte aligned offsets (the atomics need that).
//!
//! ```text
//! root (64 B):    magic | shape | head ptr | tail ptr | clients | reserved (24 B)
//! segment:        header (64 B) | entry 0 | entry 1 | ... | entry N-1
//! header:         tail (FAA) | head (CAS) | next ptr (CAS) | seq | queue (root address) | reserved
//! entry:          state word (CAS) | item (item_size bytes)
//! ```

use super::QueueError;

/// Bytes of the root object.
pub(crate) const ROOT_LEN: u64 = 64;
/// "PQUEUE01": what a queue's root starts with.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"PQUEUE01");

/// Offsets in the root.
pub(crate) mod root {
    /// [`super::MAGIC`].
    pub const MAGIC: u64 = 0;
    /// [`super::Shape::encode`].
    pub const SHAPE: u64 = 8;
    /// The head segment (packed [`super::SegPtr`]): never a freed segment.
    pub const HEAD: u64 = 16;
    /// A segment at or before the last one (packed [`super::SegPtr`]), possibly stale.
    pub const TAIL: u64 = 24;
    /// Clients that opened the queue (FAA): each one's number.
    pub const CLIENTS: u64 = 32;
}

/// Bytes of a segment's header.
pub(crate) const HEADER_LEN: u64 = 64;

/// Offsets in a segment's header.
pub(crate) mod header {
    /// Slots claimed so far (FAA by producers; may pass the entry count).
    pub const TAIL: u64 = 0;
    /// The first slot not known to be taken or skipped (CAS, by one at a time).
    pub const HEAD: u64 = 8;
    /// The next segment (packed [`super::SegPtr`]; 0 until linked, then never changed).
    pub const NEXT: u64 = 16;
    /// The segment's sequence number (24 bits used), written before it is linked.
    pub const SEQ: u64 = 24;
    /// The address of the queue's root, written before it is linked.
    pub const QUEUE: u64 = 32;
    /// Bytes a reader of the header reads.
    pub const READ_LEN: u32 = 40;
}

/// The fixed shape of a queue: entries per segment and bytes per item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Entries (slots) per segment.
    pub entries: u32,
    /// Bytes of one item (a multiple of 8).
    pub item_size: u32,
}

/// Entries per segment a queue may have.
pub const ENTRIES: std::ops::RangeInclusive<u32> = 2..=65_536;
/// Bytes per item a queue may have (a multiple of 8).
pub const ITEM_SIZES: std::ops::RangeInclusive<u32> = 8..=1024;

impl Shape {
    /// Refuses a shape outside [`ENTRIES`] and [`ITEM_SIZES`].
    pub fn check(&self) -> Result<(), QueueError> {
        if !ENTRIES.contains(&self.entries) {
            return Err(QueueError::Config(
                "entries per segment must be within 2..=65536",
            ));
        }
        if !ITEM_SIZES.contains(&self.item_size) || self.item_size % 8 != 0 {
            return Err(QueueError::Config(
                "the item size must be a multiple of 8 within 8..=1024",
            ));
        }
        Ok(())
    }
    /// Bytes of one entry: the state word and the item.
    pub fn entry_len(&self) -> u64 {
        8 + u64::from(self.item_size)
    }
    /// Offset of entry `i`'s state word in its segment.
    pub fn state(&self, i: u32) -> u64 {
        HEADER_LEN + u64::from(i) * self.entry_len()
    }
    /// Offset of entry `i`'s item in its segment.
    pub fn item(&self, i: u32) -> u64 {
        self.state(i) + 8
    }
    /// Bytes of a segment.
    pub fn segment_len(&self) -> u64 {
        self.state(self.entries)
    }
    /// The shape as the root stores it.
    pub fn encode(&self) -> u64 {
        u64::from(self.entries) | u64::from(self.item_size) << 32
    }
    /// The shape a root stores (unchecked).
    pub fn decode(word: u64) -> Shape {
        Shape {
            entries: word as u32,
            item_size: (word >> 32) as u32,
        }
    }
}

/// Bits of a segment pointer that hold the sequence number.
const SEQ_BITS: u32 = 24;
/// Bits that hold the segment's distance from the root, in 8-byte words (signed).
const OFFSET_BITS: u32 = 64 - SEQ_BITS;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Sequence numbers wrap at this.
pub(crate) const SEQ_MODULUS: u32 = 1 << SEQ_BITS;

/// A segment: its position in the list (`seq`, wrapping at 2^24) and its address. Packed into
/// one word as `seq << 40 | (addr - root) / 8` (a signed 40-bit distance: segments lie within
/// 4 TiB of the root), so that the root's head and tail change by one CAS and a pointer
/// to a freed segment never equals the pointer to a later segment at the same address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegPtr {
    /// Position in the list (the first segment is 1), modulo 2^24.
    pub seq: u32,
    /// First byte of the segment.
    pub addr: u64,
}

impl SegPtr {
    /// The word that stores the pointer, relative to the queue's `root`.
    pub fn pack(self, root: u64) -> Result<u64, QueueError> {
        let distance = self.addr.wrapping_sub(root) as i64;
        let words = distance / 8;
        let limit = 1i64 << (OFFSET_BITS - 1);
        if distance % 8 != 0 || words >= limit || words < -limit {
            return Err(QueueError::OutOfRange {
                addr: self.addr,
                root,
            });
        }
        Ok(u64::from(self.seq % SEQ_MODULUS) << OFFSET_BITS | (words as u64 & OFFSET_MASK))
    }

    /// The pointer a word stores (`None` for 0, the unlinked `next`).
    pub fn unpack(word: u64, root: u64) -> Option<SegPtr> {
        if word == 0 {
            return None;
        }
        // Sign-extend the 40-bit distance.
        let words = ((word << SEQ_BITS) as i64) >> SEQ_BITS;
        Some(SegPtr {
            seq: (word >> OFFSET_BITS) as u32,
            addr: root.wrapping_add((words as u64).wrapping_mul(8)),
        })
    }

    /// The sequence number of the segment after this one.
    pub fn next_seq(self) -> u32 {
        (self.seq + 1) % SEQ_MODULUS
    }

    /// Whether `self` comes after `other` in the list (sequence numbers compared modulo 2^24:
    /// the two are less than 2^23 segments apart).
    pub fn after(self, other: SegPtr) -> bool {
        let d = self.seq.wrapping_sub(other.seq) % SEQ_MODULUS;
        d != 0 && d < SEQ_MODULUS / 2
    }
}

/// Who claimed or filled a slot: the client's number (30 bits) and the operation's (32 bits).
/// Unique among the operations that may still touch a slot, so that a client can recognise
/// its own CAS when it reads a slot back after an unknown outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(pub u64);

impl Token {
    /// The token of operation `op` of client `client`.
    pub fn new(client: u32, op: u32) -> Token {
        Token(u64::from(client & 0x3fff_ffff) << 32 | u64::from(op))
    }
}

/// An entry's state word: a 2-bit tag and the token of whoever set it. Memory comes zeroed,
/// so a fresh entry is [`Slot::Empty`]. The only transitions are `Empty → Filled` (its
/// producer), `Filled → Taken` (a consumer) and `Empty → Skipped` (a consumer, after the
/// producer's deadline): each by CAS, so exactly one of a producer's publish and a consumer's
/// skip wins, and exactly one consumer takes an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Nothing published yet (claimed or not).
    Empty,
    /// The item is complete and untaken.
    Filled(Token),
    /// A consumer took the item.
    Taken(Token),
    /// A consumer gave up on the producer; the slot holds nothing.
    Skipped(Token),
}

impl Slot {
    /// The stored word.
    pub fn word(self) -> u64 {
        match self {
            Slot::Empty => 0,
            Slot::Filled(t) => t.0 << 2 | 1,
            Slot::Taken(t) => t.0 << 2 | 2,
            Slot::Skipped(t) => t.0 << 2 | 3,
        }
    }

    /// The state a word stores; `None` for a word no client writes (tag 0 with a token).
    pub fn from_word(word: u64) -> Option<Slot> {
        let t = Token(word >> 2);
        match word & 3 {
            _ if word == 0 => Some(Slot::Empty),
            1 => Some(Slot::Filled(t)),
            2 => Some(Slot::Taken(t)),
            3 => Some(Slot::Skipped(t)),
            _ => None,
        }
    }

    /// Whether the slot will never change again.
    pub fn is_final(self) -> bool {
        matches!(self, Slot::Taken(_) | Slot::Skipped(_))
    }
}

/// A segment header as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Slots claimed (may pass the entry count).
    pub tail: u64,
    /// The first slot not known to be final.
    pub head: u64,
    /// The next segment's packed pointer (0: none yet).
    pub next: u64,
    /// The segment's sequence number.
    pub seq: u64,
    /// The queue's root address.
    pub queue: u64,
}

/// The `u64` at `offset` of `bytes` (0 past the end).
pub(crate) fn word_at(bytes: &[u8], offset: usize) -> u64 {
    bytes
        .get(offset..offset + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

impl Header {
    /// Parses the first 40 bytes of a segment (`header::READ_LEN`: tail, head, next,
    /// sequence number, queue), as read at its offset 0.
    pub fn parse(bytes: &[u8]) -> Header {
        Header {
            tail: word_at(bytes, header::TAIL as usize),
            head: word_at(bytes, header::HEAD as usize),
            next: word_at(bytes, header::NEXT as usize),
            seq: word_at(bytes, header::SEQ as usize),
            queue: word_at(bytes, header::QUEUE as usize),
        }
    }
}

/// The bytes a new segment starts with when its creator links it: a header with `seq`, the
/// queue and one claimed slot, and entry 0 holding `item`, filled by `token`.
pub(crate) fn first_bytes(
    shape: &Shape,
    seq: u32,
    root: u64,
    token: Token,
    item: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; shape.item(0) as usize];
    b[header::TAIL as usize..][..8].copy_from_slice(&1u64.to_le_bytes());
    b[header::SEQ as usize..][..8].copy_from_slice(&u64::from(seq).to_le_bytes());
    b[header::QUEUE as usize..][..8].copy_from_slice(&root.to_le_bytes());
    b[shape.state(0) as usize..][..8].copy_from_slice(&Slot::Filled(token).word().to_le_bytes());
    b.extend_from_slice(item);
    b
}

/// The bytes of an empty segment's header (the queue's first segment).
pub(crate) fn empty_header(seq: u32, root: u64) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN as usize];
    b[header::SEQ as usize..][..8].copy_from_slice(&u64::from(seq).to_le_bytes());
    b[header::QUEUE as usize..][..8].copy_from_slice(&root.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_round_trip_on_both_sides_of_the_root() {
        let root = 0x7f00_0000_1000;
        for addr in [root + 64, root - 4096, root + (1 << 40), root - (1 << 42)] {
            for seq in [1, 2, SEQ_MODULUS - 1] {
                let p = SegPtr { seq, addr };
                let w = p.pack(root).unwrap();
                assert_ne!(w, 0);
                assert_eq!(SegPtr::unpack(w, root), Some(p));
            }
        }
        assert_eq!(SegPtr::unpack(0, root), None);
        let far = SegPtr {
            seq: 1,
            addr: root + (1 << 42),
        };
        assert!(matches!(far.pack(root), Err(QueueError::OutOfRange { .. })));
        let odd = SegPtr {
            seq: 1,
            addr: root + 4,
        };
        assert!(odd.pack(root).is_err());
    }

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        let at = |seq| SegPtr { seq, addr: 0 };
        assert!(at(2).after(at(1)));
        assert!(!at(1).after(at(2)));
        assert!(!at(5).after(at(5)));
        assert!(at(0).after(at(SEQ_MODULUS - 1)));
        assert_eq!(at(SEQ_MODULUS - 1).next_seq(), 0);
    }

    #[test]
    fn slot_words_round_trip_and_empty_is_zero() {
        let t = Token::new(7, 9);
        for s in [
            Slot::Empty,
            Slot::Filled(t),
            Slot::Taken(t),
            Slot::Skipped(t),
        ] {
            assert_eq!(Slot::from_word(s.word()), Some(s));
        }
        assert_eq!(Slot::Empty.word(), 0);
        assert_eq!(Slot::from_word(4), None);
        assert_ne!(Slot::Filled(Token::new(0, 0)).word(), 0);
        assert!(Slot::Taken(t).is_final() && !Slot::Filled(t).is_final());
    }

    #[test]
    fn shapes_are_checked_and_laid_out() {
        let s = Shape {
            entries: 1024,
            item_size: 8,
        };
        s.check().unwrap();
        assert_eq!(s.segment_len(), 64 + 1024 * 16);
        assert_eq!(s.item(1), 64 + 16 + 8);
        assert_eq!(Shape::decode(s.encode()), s);
        for bad in [(1, 8), (1024, 12), (1024, 0), (70_000, 8)] {
            let s = Shape {
                entries: bad.0,
                item_size: bad.1,
            };
            assert!(s.check().is_err(), "{s:?}");
        }
        let b = first_bytes(&s, 3, 0x1000, Token::new(1, 2), &[9; 8]);
        assert_eq!(b.len() as u64, s.item(0) + 8);
        let h = Header::parse(&b);
        assert_eq!(
            (h.tail, h.head, h.next, h.seq, h.queue),
            (1, 0, 0, 3, 0x1000)
        );
    }
}
