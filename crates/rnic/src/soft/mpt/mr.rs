//! Memory-region entries: registered ranges with their per-page translation table.
//!
//! Registration faults in and (by [`Pinning`] mode) mlocks every page, then records one
//! translation entry per page; every access — local or remote — is translated through that
//! table, so registration cost grows with size exactly where hardware's does.

use crate::memory::{MemoryBlock, PAGE_SIZE, Pinning};
use crate::verbs::{AccessFlags, PdId, VerbsResult, VirtAddr};
use std::sync::atomic::{AtomicU32, Ordering};

/// A registered memory region.
#[derive(Debug)]
pub struct MrEntry {
    /// Owning protection domain.
    pub pd: PdId,
    /// First registered virtual address.
    pub addr: VirtAddr,
    /// Registered length.
    pub len: u64,
    /// Rights.
    pub access: AccessFlags,
    /// Whether the pages are mlocked.
    pub pinned: bool,
    block: MemoryBlock,
    block_offset: usize,
    /// Virtual address of the page containing `addr`.
    page_base: VirtAddr,
    /// Byte offset within `block` of each page frame, indexed by page number from `page_base`.
    page_table: Box<[usize]>,
    /// Windows currently bound over this region.
    pub bound_windows: AtomicU32,
}

impl MrEntry {
    /// Registers `[offset, offset + len)` of `block`: pins, faults in and translates each page.
    pub fn register(
        pd: PdId,
        block: &MemoryBlock,
        offset: usize,
        len: usize,
        access: AccessFlags,
        pinning: Pinning,
    ) -> VerbsResult<MrEntry> {
        let pinned = block.pin(offset, len, pinning)?;
        let addr = block.addr() + offset as u64;
        let page_base = addr & !(PAGE_SIZE as u64 - 1);
        let first_frame = offset - offset % PAGE_SIZE;
        let pages = (offset + len.max(1)).div_ceil(PAGE_SIZE) - offset / PAGE_SIZE;
        let page_table = (0..pages)
            .map(|i| first_frame + i * PAGE_SIZE)
            .collect::<Box<[usize]>>();
        Ok(MrEntry {
            pd,
            addr,
            len: len as u64,
            access,
            pinned,
            block: block.clone(),
            block_offset: offset,
            page_base,
            page_table,
            bound_windows: AtomicU32::new(0),
        })
    }

    /// Releases the pins taken at registration.
    pub fn unpin(&self) {
        self.block.unpin(self.block_offset, self.len as usize);
    }

    /// Whether `[va, va + len)` lies inside the region (`mr_check_range`).
    pub fn covers(&self, va: VirtAddr, len: u64) -> bool {
        va >= self.addr
            && va
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }

    /// Whether this region was registered over `block`.
    pub fn is_on(&self, block: &MemoryBlock) -> bool {
        self.block.same_block(block)
    }

    /// Translates `va` (covered) to a block offset through the page table.
    fn translate(&self, va: VirtAddr) -> usize {
        let rel = (va - self.page_base) as usize;
        self.page_table[rel / PAGE_SIZE] + rel % PAGE_SIZE
    }

    /// Visits `[va, va + len)` page by page as (block offset, chunk length, position).
    fn for_each_chunk(&self, va: VirtAddr, len: usize, mut f: impl FnMut(usize, usize, usize)) {
        let mut done = 0;
        while done < len {
            let cur = va + done as u64;
            let in_page = (cur % PAGE_SIZE as u64) as usize;
            let n = (PAGE_SIZE - in_page).min(len - done);
            f(self.translate(cur), n, done);
            done += n;
        }
    }

    /// Copies from the region (range already checked) into `dst`.
    pub fn read(&self, va: VirtAddr, dst: &mut [u8]) {
        let len = dst.len();
        self.for_each_chunk(va, len, |off, n, pos| {
            // Offsets come from the page table of a checked range: in bounds by construction.
            let _ = self.block.read(off, &mut dst[pos..pos + n]);
        });
    }

    /// Copies `src` into the region (range already checked).
    pub fn write(&self, va: VirtAddr, src: &[u8]) {
        self.for_each_chunk(va, src.len(), |off, n, pos| {
            let _ = self.block.write(off, &src[pos..pos + n]);
        });
    }

    /// Compare-and-swap on the aligned word at `va` (range and alignment already checked);
    /// returns the previous value.
    pub fn compare_swap(&self, va: VirtAddr, compare: u64, swap: u64) -> u64 {
        match self.block.word(self.translate(va)) {
            Ok(w) => match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            },
            Err(_) => 0, // unreachable for a checked, aligned range
        }
    }

    /// Fetch-and-add on the aligned word at `va`; returns the previous value.
    pub fn fetch_add(&self, va: VirtAddr, add: u64) -> u64 {
        match self.block.word(self.translate(va)) {
            Ok(w) => w.fetch_add(add, Ordering::SeqCst),
            Err(_) => 0,
        }
    }
}
