//! Creating a table and opening one: `create` lays out the root, the directory and the first
//! subtables; `open` reads the root (one small object whose address names the table) and the
//! directory.

use super::client::TableClient;
use super::config::{ClientOptions, RaceConfig};
use super::error::RaceError;
use super::layout::{BucketHeader, DirEntry, Geometry, SUBTABLE_HEADER};
use super::records::{LOCK_BYTES, ROOT_BYTES, Root};
use crate::memory::{MemOp, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;

/// Lease of the rights `create` holds while it writes the new table: long enough for a
/// dozen round trips on a slow transport (over TCP on a loaded machine, 10 ms was not); the
/// rights are released as soon as the table is written.
const CREATE_LEASE: Duration = Duration::from_secs(1);
/// Bytes per WRITE when laying out large objects.
const CHUNK: usize = 64 << 10;

/// Creates a table of shape `config`; returns its root's address (all a client needs to
/// [`open`] it). The objects are allocated in shared mode, so every client of the tenant can
/// acquire them; `create` gives up its own rights before it returns.
pub fn create<M: RemoteMemory>(mem: &mut M, config: RaceConfig) -> Result<u64, RaceError> {
    config.validate()?;
    let geo = Geometry {
        groups: config.groups,
        slots: config.slots,
    };
    let root_shape = Root {
        directory: 0,
        config,
    };
    let first = 1usize << config.initial_depth;
    let mut sizes = vec![ROOT_BYTES, root_shape.directory_bytes()];
    for _ in 0..first {
        sizes.extend([geo.subtable_bytes(), LOCK_BYTES]);
    }
    let regions = mem.allocate(&sizes, CREATE_LEASE, Mode::Shared)?;
    let result = lay_out(mem, &regions, config, geo);
    for r in regions {
        let _ = mem.release(r);
    }
    result
}

fn lay_out<M: RemoteMemory>(
    mem: &mut M,
    regions: &[M::Region],
    config: RaceConfig,
    geo: Geometry,
) -> Result<u64, RaceError> {
    let (root, dir) = match regions {
        [root, dir, ..] => (root, dir),
        _ => return Err(RaceError::Corrupt("allocation returned too few objects")),
    };
    let d0 = config.initial_depth;
    let subtables: Vec<(&M::Region, &M::Region)> = regions[2..]
        .chunks_exact(2)
        .map(|p| (&p[0], &p[1]))
        .collect();
    // Subtables: the lock object's address, then every bucket header.
    for (suffix, (st, lock)) in subtables.iter().enumerate() {
        let mut img = vec![0u8; geo.subtable_bytes() as usize];
        img[..8].copy_from_slice(&lock.addr().to_le_bytes());
        let h = BucketHeader {
            depth: d0,
            suffix: suffix as u32,
        }
        .encode();
        for p in 0..geo.buckets() {
            let at = geo.bucket_offset(p) as usize;
            img[at..at + 8].copy_from_slice(&h.to_le_bytes());
        }
        debug_assert!(SUBTABLE_HEADER as usize <= img.len());
        write_all(mem, st, &img)?;
    }
    // Directory: every entry, of every depth up to the maximum, names its subtable.
    let n = 1usize << config.max_depth;
    let mut img = Vec::with_capacity(8 + 8 * n);
    img.extend_from_slice(&u64::from(d0).to_le_bytes());
    for i in 0..n {
        let st = subtables[i % subtables.len()].0;
        let e = DirEntry {
            subtable: st.addr(),
            depth: d0,
        };
        img.extend_from_slice(&e.encode().to_le_bytes());
    }
    write_all(mem, dir, &img)?;
    let shape = Root {
        directory: dir.addr(),
        config,
    };
    mem.write(root, 0, &shape.encode())?;
    Ok(root.addr())
}

/// Writes `img` at the start of `on`, in chunks.
fn write_all<M: RemoteMemory>(mem: &mut M, on: &M::Region, img: &[u8]) -> Result<(), RaceError> {
    for (i, chunk) in img.chunks(CHUNK).enumerate() {
        let ops = [MemOp::Write {
            on,
            offset: (i * CHUNK) as u64,
            data: chunk,
        }];
        for r in mem.execute(&ops) {
            r?;
        }
    }
    Ok(())
}

/// Opens the table whose root is at `root`: reads the root and the directory.
pub fn open<M: RemoteMemory>(
    mem: &mut M,
    root: u64,
    opts: ClientOptions,
) -> Result<TableClient<M>, RaceError> {
    let right = mem.acquire(root, ROOT_BYTES, opts.lease, Access::Read, Mode::Shared)?;
    let bytes = mem.read(&right, 0, ROOT_BYTES as u32);
    let _ = mem.relinquish(right);
    let shape = Root::decode(&bytes?)?;
    let mut t = TableClient::new(root, shape, opts);
    t.stats.acquires += 1;
    let mut want = 0;
    for _ in 0..64 {
        if t.refresh_step(mem, &mut want)? {
            return Ok(t);
        }
    }
    Err(RaceError::Corrupt("the directory could not be read"))
}
