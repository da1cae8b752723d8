//! Raw memory that remote peers touch: page-aligned anonymous mappings, viewed only as
//! `[AtomicU64]`. Provider-neutral: [`MemoryBlock`] is the registrable memory of the software
//! RNIC (`soft::SoftBuffer`) and of the rdma-core provider (`rnic_rdma::RdmaBuffer`), where
//! the NIC's DMA races with the CPU.
//!
//! This is the one module of the crate with `unsafe` code. The safe API it offers upholds:
//! - The mapping lives exactly as long as the last [`MemoryBlock`] handle (it is unmapped in
//!   `Drop`), so every `&[AtomicU64]` handed out is valid for the borrow of the handle.
//! - Every byte is accessed through `AtomicU64` operations of one size (8 bytes, aligned), so
//!   concurrent reads, writes and atomics by local and remote users are data-race free. Partial
//!   words at the edges of a copy are merged with a compare-exchange loop; a copy is therefore
//!   byte-wise atomic (P1478 semantics): each 8-byte word is read or written indivisibly, and a
//!   racing copy may interleave with it at word granularity, as racing RDMA accesses do.
//! - Pinning (`mlock`) is counted per page, so overlapping registrations pin once and unpin when
//!   the last one goes.
#![allow(unsafe_code)]

use crate::verbs::{MemoryBuffer, Resource, VerbsError, VerbsResult, VirtAddr};
use parking_lot::Mutex;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Page size of the mappings, and the translation granule of the soft NIC's page tables.
pub const PAGE_SIZE: usize = 4096;
const WORD: usize = 8;

/// How memory registration pins pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pinning {
    /// `mlock` every registered page; registration fails if the kernel refuses.
    Require,
    /// `mlock` where permitted (memlock limit), silently continue otherwise.
    #[default]
    Try,
    /// Never `mlock`; pages are still faulted in and translated.
    Never,
}

/// A page-aligned, zero-initialized memory block. Cloning shares the block.
#[derive(Clone)]
pub struct MemoryBlock {
    inner: Arc<BlockInner>,
}

struct BlockInner {
    base: NonNull<u8>,
    /// Mapped length, a multiple of `PAGE_SIZE`.
    mapped: usize,
    /// Length the user asked for.
    len: usize,
    /// Per-page pin counts; a page is mlocked while its count is non-zero and `locked` is set.
    pins: Mutex<PinState>,
    /// The kernel took the advice to back the mapping with huge pages.
    huge: AtomicBool,
}

struct PinState {
    counts: Vec<u32>,
    locked: Vec<bool>,
}

// SAFETY: the mapping is plain memory owned by the block; it is only accessed through
// `AtomicU64` views (Sync) and the pin state is behind a mutex.
unsafe impl Send for BlockInner {}
// SAFETY: as above — all shared access is atomic or locked.
unsafe impl Sync for BlockInner {}

impl Drop for BlockInner {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` are exactly what mmap returned; no handle (and so no borrowed
        // word slice) outlives this drop. munmap also releases any mlock.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.mapped);
        }
    }
}

impl fmt::Debug for MemoryBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBlock")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl MemoryBlock {
    /// [`MemoryBlock::new`], and the mapping advised for transparent huge pages
    /// (`MADV_HUGEPAGE`) where the kernel has them; [`MemoryBlock::huge_pages`] says whether
    /// it took the advice. The kernel backs the mapping with huge pages as it faults them in
    /// (in its `madvise` or `always` modes), with normal pages where it cannot.
    pub fn new_huge(len: usize) -> VerbsResult<Self> {
        let block = Self::new(len)?;
        // SAFETY: the range is exactly the mapping `new` made and owns; the advice changes no
        // contents and no permissions (it is a hint on how the kernel backs the pages).
        let rc = unsafe {
            libc::madvise(
                block.inner.base.as_ptr().cast(),
                block.inner.mapped,
                libc::MADV_HUGEPAGE,
            )
        };
        block.inner.huge.store(rc == 0, Ordering::Relaxed);
        Ok(block)
    }

    /// Whether the kernel took the advice to back this block with huge pages (see
    /// [`MemoryBlock::new_huge`]).
    pub fn huge_pages(&self) -> bool {
        self.inner.huge.load(Ordering::Relaxed)
    }

    /// Maps `len` bytes (rounded up to whole pages, at least one), zero-initialized.
    pub fn new(len: usize) -> VerbsResult<Self> {
        let mapped = len
            .max(1)
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(VerbsError::InvalidArgument("buffer length overflows"))?;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions; the
        // result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(VerbsError::Memory(format!(
                "mmap of {mapped} bytes failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| VerbsError::Memory("mmap returned null".into()))?;
        let pages = mapped / PAGE_SIZE;
        Ok(MemoryBlock {
            inner: Arc::new(BlockInner {
                base,
                mapped,
                len,
                pins: Mutex::new(PinState {
                    counts: vec![0; pages],
                    locked: vec![false; pages],
                }),
                huge: AtomicBool::new(false),
            }),
        })
    }

    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.inner.base.as_ptr() as u64
    }

    /// Usable length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the block has no usable bytes.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Whether two handles name the same block.
    pub fn same_block(&self, other: &MemoryBlock) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The whole mapping as atomic words.
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is page aligned (so 8-byte aligned), the mapping holds `mapped` bytes
        // that stay valid while `self` is borrowed (unmapped only when the last handle drops),
        // zeroed memory is a valid `AtomicU64`, and `AtomicU64` has the size of `u64`. All
        // access to the mapping goes through these atomics, so sharing it is sound.
        unsafe {
            std::slice::from_raw_parts(
                self.inner.base.as_ptr().cast::<AtomicU64>(),
                self.inner.mapped / WORD,
            )
        }
    }

    fn check(&self, offset: usize, len: usize) -> VerbsResult<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(VerbsError::InvalidArgument("access outside the buffer")),
        }
    }

    /// Copies bytes at `offset` into `dst` (word-wise atomic loads).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> VerbsResult<()> {
        self.check(offset, dst.len())?;
        read_words(self.words(), offset, dst);
        Ok(())
    }

    /// Copies `src` to `offset` (word-wise atomic stores; edges merged with CAS).
    pub fn write(&self, offset: usize, src: &[u8]) -> VerbsResult<()> {
        self.check(offset, src.len())?;
        write_words(self.words(), offset, src);
        Ok(())
    }

    /// Zeroes `len` bytes at `offset`: whole words with atomic stores, the edges with `write`.
    pub fn zero(&self, offset: usize, len: usize) -> VerbsResult<()> {
        self.check(offset, len)?;
        let end = offset + len;
        let first_word = offset.next_multiple_of(WORD).min(end);
        let last_word = (end / WORD * WORD).max(first_word);
        write_words(self.words(), offset, &[0u8; WORD][..first_word - offset]);
        for w in &self.words()[first_word / WORD..last_word / WORD] {
            w.store(0, Ordering::Relaxed);
        }
        write_words(self.words(), last_word, &[0u8; WORD][..end - last_word]);
        // Stores above are ordered before whatever the caller publishes next.
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    /// The aligned word at `offset`.
    pub fn word(&self, offset: usize) -> VerbsResult<&AtomicU64> {
        self.check(offset, WORD)?;
        if offset % WORD != 0 {
            return Err(VerbsError::InvalidArgument(
                "word access must be 8-byte aligned",
            ));
        }
        Ok(&self.words()[offset / WORD])
    }

    /// Pins and faults in the pages covering `[offset, offset + len)`; returns whether they are
    /// mlocked. Every page is touched (a write fault), whatever the pinning mode.
    pub fn pin(&self, offset: usize, len: usize, mode: Pinning) -> VerbsResult<bool> {
        self.check(offset, len)?;
        let (first, count) = page_span(offset, len);
        let words = self.words();
        for page in first..first + count {
            // A read-modify-write that changes nothing: faults the page in for writing.
            words[page * PAGE_SIZE / WORD].fetch_add(0, Ordering::Relaxed);
        }
        let mut pins = self.inner.pins.lock();
        let mut all_locked = true;
        if mode != Pinning::Never {
            let mut page = first;
            while page < first + count {
                if pins.locked[page] {
                    page += 1;
                    continue;
                }
                let run_start = page;
                while page < first + count && !pins.locked[page] {
                    page += 1;
                }
                match self.mlock_pages(run_start, page - run_start) {
                    Ok(()) => pins.locked[run_start..page].fill(true),
                    Err(e) if mode == Pinning::Require => {
                        return Err(VerbsError::Memory(format!(
                            "mlock of {} pages failed ({e}); raise RLIMIT_MEMLOCK or use Pinning::Try",
                            page - run_start
                        )));
                    }
                    Err(_) => all_locked = false,
                }
            }
        } else {
            all_locked = false;
        }
        for c in &mut pins.counts[first..first + count] {
            *c += 1;
        }
        Ok(all_locked)
    }

    /// Drops one pin from the pages covering `[offset, offset + len)`; pages whose count drops
    /// to zero are unlocked.
    pub fn unpin(&self, offset: usize, len: usize) {
        if self.check(offset, len).is_err() {
            return;
        }
        let (first, count) = page_span(offset, len);
        let mut pins = self.inner.pins.lock();
        let mut run: Option<usize> = None;
        for page in first..=first + count {
            let release = page < first + count && {
                pins.counts[page] = pins.counts[page].saturating_sub(1);
                pins.counts[page] == 0 && pins.locked[page]
            };
            if release {
                pins.locked[page] = false;
                run.get_or_insert(page);
            } else if let Some(start) = run.take() {
                self.munlock_pages(start, page - start);
            }
        }
    }

    fn mlock_pages(&self, first: usize, count: usize) -> std::io::Result<()> {
        // SAFETY: the range lies inside our live mapping (callers derive it from `check`).
        let rc = unsafe {
            libc::mlock(
                self.inner.base.as_ptr().add(first * PAGE_SIZE).cast(),
                count * PAGE_SIZE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    fn munlock_pages(&self, first: usize, count: usize) {
        // SAFETY: the range lies inside our live mapping; munlock has no memory effects.
        unsafe {
            libc::munlock(
                self.inner.base.as_ptr().add(first * PAGE_SIZE).cast(),
                count * PAGE_SIZE,
            );
        }
    }
}

/// First page and page count covering `[offset, offset + len)` (at least one page).
pub fn page_span(offset: usize, len: usize) -> (usize, usize) {
    let first = offset / PAGE_SIZE;
    let last = (offset + len.max(1) - 1) / PAGE_SIZE;
    (first, last - first + 1)
}

/// Exhaustion helper for callers sizing tables.
pub fn exhausted(r: Resource) -> VerbsError {
    VerbsError::Exhausted(r)
}

fn read_words(words: &[AtomicU64], offset: usize, dst: &mut [u8]) {
    let mut done = 0;
    let mut pos = offset;
    while done < dst.len() {
        let word = words[pos / WORD].load(Ordering::Relaxed).to_ne_bytes();
        let in_word = pos % WORD;
        let n = (WORD - in_word).min(dst.len() - done);
        dst[done..done + n].copy_from_slice(&word[in_word..in_word + n]);
        done += n;
        pos += n;
    }
}

fn write_words(words: &[AtomicU64], offset: usize, src: &[u8]) {
    let mut done = 0;
    let mut pos = offset;
    while done < src.len() {
        let in_word = pos % WORD;
        let n = (WORD - in_word).min(src.len() - done);
        let w = &words[pos / WORD];
        if n == WORD {
            let mut bytes = [0u8; WORD];
            bytes.copy_from_slice(&src[done..done + WORD]);
            w.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        } else {
            let mut cur = w.load(Ordering::Relaxed);
            loop {
                let mut bytes = cur.to_ne_bytes();
                bytes[in_word..in_word + n].copy_from_slice(&src[done..done + n]);
                match w.compare_exchange_weak(
                    cur,
                    u64::from_ne_bytes(bytes),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(actual) => cur = actual,
                }
            }
        }
        done += n;
        pos += n;
    }
}

/// The one implementation of registrable memory, for every provider whose memory is an
/// anonymous mapping (the software RNIC's and the rdma-core provider's): byte copies and words
/// are atomic, so remote and local users may race on them.
impl MemoryBuffer for MemoryBlock {
    fn addr(&self) -> VirtAddr {
        MemoryBlock::addr(self)
    }
    fn len(&self) -> usize {
        MemoryBlock::len(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> VerbsResult<()> {
        MemoryBlock::read(self, offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> VerbsResult<()> {
        MemoryBlock::write(self, offset, src)
    }
    fn load_u64(&self, offset: usize) -> VerbsResult<u64> {
        Ok(self.word(offset)?.load(Ordering::SeqCst))
    }
    fn store_u64(&self, offset: usize, value: u64) -> VerbsResult<()> {
        self.word(offset)?.store(value, Ordering::SeqCst);
        Ok(())
    }
    fn fill_zero(&self, offset: usize, len: usize) -> VerbsResult<()> {
        self.zero(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_copies_round_trip() {
        let b = MemoryBlock::new(100).unwrap();
        assert!(!b.huge_pages(), "normal pages unless asked");
        let src: Vec<u8> = (0..37).collect();
        for off in 0..20 {
            b.write(off, &src).unwrap();
            let mut dst = vec![0u8; 37];
            b.read(off, &mut dst).unwrap();
            assert_eq!(dst, src, "offset {off}");
        }
    }

    #[test]
    fn zero_clears_exactly_its_range() {
        for (off, len) in [(0, 64), (3, 2), (3, 17), (8, 8), (5, 40), (0, 0), (61, 3)] {
            let b = MemoryBlock::new(64).unwrap();
            b.write(0, &[0xff; 64]).unwrap();
            b.zero(off, len).unwrap();
            let mut dst = [0u8; 64];
            b.read(0, &mut dst).unwrap();
            for (i, &x) in dst.iter().enumerate() {
                let inside = i >= off && i < off + len;
                assert_eq!(x, if inside { 0 } else { 0xff }, "({off}, {len}) byte {i}");
            }
        }
        assert!(MemoryBlock::new(64).unwrap().zero(60, 8).is_err());
    }

    #[test]
    fn edge_writes_keep_neighbours() {
        let b = MemoryBlock::new(64).unwrap();
        b.write(0, &[0xaa; 24]).unwrap();
        b.write(3, &[1, 2, 3]).unwrap();
        let mut dst = [0u8; 8];
        b.read(0, &mut dst).unwrap();
        assert_eq!(dst, [0xaa, 0xaa, 0xaa, 1, 2, 3, 0xaa, 0xaa]);
    }

    #[test]
    fn bounds_are_checked() {
        let b = MemoryBlock::new(16).unwrap();
        assert!(b.read(10, &mut [0u8; 7]).is_err());
        assert!(b.write(usize::MAX, &[1]).is_err());
        assert!(b.word(4).is_err());
        assert!(b.word(16).is_err());
        assert!(b.word(8).is_ok());
    }

    #[test]
    fn pins_are_counted_per_page() {
        let b = MemoryBlock::new(4 * PAGE_SIZE).unwrap();
        b.pin(0, 2 * PAGE_SIZE, Pinning::Try).unwrap();
        b.pin(PAGE_SIZE, 2 * PAGE_SIZE, Pinning::Try).unwrap();
        assert_eq!(b.inner.pins.lock().counts, vec![1, 2, 1, 0]);
        b.unpin(0, 2 * PAGE_SIZE);
        assert_eq!(b.inner.pins.lock().counts, vec![0, 1, 1, 0]);
        b.unpin(PAGE_SIZE, 2 * PAGE_SIZE);
        assert_eq!(b.inner.pins.lock().counts, vec![0, 0, 0, 0]);
        assert!(b.inner.pins.lock().locked.iter().all(|l| !l));
    }

    #[test]
    fn a_huge_page_block_is_advised_where_the_kernel_has_them() {
        let b = MemoryBlock::new_huge(4 << 20).unwrap();
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
        assert_eq!(
            b.huge_pages(),
            thp,
            "advised exactly where the kernel has huge pages"
        );
        b.write(3 << 20, b"still memory").unwrap();
        let mut back = [0u8; 12];
        b.read(3 << 20, &mut back).unwrap();
        assert_eq!(&back, b"still memory");
    }
}
