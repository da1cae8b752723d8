//! The directory: `2^max_depth` entries, each naming the subtable that claims the keys with
//! that suffix, and the global depth (the deepest subtable so far) as a hint of how many
//! entries a client needs to read.
//!
//! Every entry is valid at all times (a split rewrites every entry of the suffix class it
//! splits, not only the first `2^global_depth`), so no doubling step ever copies entries and
//! resizers of different subtables never write the same entry. A client caches the first
//! `2^d` entries for some `d ≥ global depth`; a cached entry may be stale, which the bucket
//! headers reveal (the subtable read no longer claims the key), and the client reads the
//! directory again, deep enough for the depths it saw.

use super::client::{DirCache, TableClient};
use super::error::RaceError;
use super::layout::{DirEntry, word};
use super::stats::{bytes, ended, exec};
use crate::memory::{MemOp, RemoteMemory};

impl<M: RemoteMemory> TableClient<M> {
    /// One step of reading the directory `want` deep (or deeper, if the global depth says
    /// so): `Ok(true)` once the cache holds it.
    pub(crate) fn refresh_step(&mut self, mem: &mut M, want: &mut u8) -> Result<bool, RaceError> {
        if !self.ensure_directory(mem)? {
            return Ok(false);
        }
        let max = self.root.config.max_depth;
        let depth = (*want).min(max);
        let n = 1u64 << depth;
        let Some(right) = self.dir_right.as_ref() else {
            return Ok(false);
        };
        let ops = [
            MemOp::Read {
                on: right,
                offset: 0,
                len: 8,
            },
            MemOp::Read {
                on: right,
                offset: 8,
                len: (8 * n) as u32,
            },
        ];
        let mut out = exec(&mut self.stats, mem, &ops).into_iter();
        let (gd, entries) = match (bytes(out.next()), bytes(out.next())) {
            (Ok(g), Ok(e)) => (word(&g, 0), e),
            (Err(e), _) | (_, Err(e)) if ended(&e) => {
                self.drop_directory(mem);
                return Ok(false);
            }
            (Err(e), _) | (_, Err(e)) => return Err(e.into()),
        };
        if gd > u64::from(max) {
            return Err(RaceError::Corrupt("the global depth exceeds the maximum"));
        }
        if gd as u8 > depth {
            *want = gd as u8;
            return Ok(false);
        }
        let entries: Vec<DirEntry> = entries
            .chunks_exact(8)
            .map(|c| DirEntry::decode(word(c, 0)))
            .collect();
        if entries.iter().any(|e| e.subtable == 0 || e.depth > max) {
            return Err(RaceError::Corrupt("a directory entry names no subtable"));
        }
        self.stats.refreshes += 1;
        self.dir = DirCache { depth, entries };
        Ok(true)
    }
}
