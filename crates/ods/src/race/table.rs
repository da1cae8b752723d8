//! Creating a table and opening one: `create` lays out the root, the directory and the first
//! subtables; `open` reads the root (one small object whose address names the table) and the
//! directory.

use super::client::TableClient;
use super::config::{ClientOptions, RaceConfig};
use super::error::RaceError;
use super::layout::{BucketHeader, DirEntry, Geometry, SUBTABLE_HEADER};
use super::records::{LOCK_BYTES, ROOT_BYTES, Root};
use super::stats::ended;
use crate::memory::{MemOp, Region, RemoteMemory};
use patronus_core::proto::messages::{Access, Mode};
use std::time::Duration;

/// Lease of the rights `create` holds while it writes the new table: long enough for a
/// dozen round trips on a slow transport (over TCP on a loaded machine, 10 ms was not); the
/// rights are released as soon as the table is written.
const CREATE_LEASE: Duration = Duration::from_secs(1);
/// Bytes per WRITE when laying out large objects.
const CHUNK: usize = 64 << 10;
/// How many times `create` and `open` acquire a right again whose lease ran out before an
/// access went through (the node caps leases — 10 ms by default — and a loaded machine can
/// take longer between the grant and the access). Such an access was never carried out
/// (refused before it was posted, or by the NIC), so trying it again is safe.
const RENEWALS: usize = 4;

/// Creates a table of shape `config`; returns its root's address (all a client needs to
/// [`open`] it). The objects are allocated in shared mode, so every client of the tenant can
/// acquire them; `create` gives up its own rights before it returns. If it fails after
/// allocating, it frees what it allocated.
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
    let mut regions = mem.allocate(&sizes, CREATE_LEASE, Mode::Shared)?;
    let result = lay_out(mem, &mut regions, config, geo);
    for r in regions {
        if result.is_ok() {
            let _ = mem.release(r);
        } else {
            free_object(mem, r); // a table half laid out is nobody's: free it
        }
    }
    result
}

/// Frees the object `r` covers, through a new right if `r`'s ended (best effort).
fn free_object<M: RemoteMemory>(mem: &mut M, r: M::Region) {
    let (addr, len) = (r.addr(), r.len());
    match mem.free(r) {
        Err(e) if ended(&e) => {
            if let Ok(again) = mem.acquire(addr, len, CREATE_LEASE, Access::ReadWrite, Mode::Shared)
            {
                let _ = mem.free(again);
            }
        }
        _ => {}
    }
}

fn lay_out<M: RemoteMemory>(
    mem: &mut M,
    regions: &mut [M::Region],
    config: RaceConfig,
    geo: Geometry,
) -> Result<u64, RaceError> {
    if regions.len() < 4 || regions.len() % 2 != 0 {
        return Err(RaceError::Corrupt("allocation returned too few objects"));
    }
    let (root, dir) = (0, 1);
    let d0 = config.initial_depth;
    // Subtable i and its lock object are regions 2 + 2i and 3 + 2i.
    let subtables = (regions.len() - 2) / 2;
    let subtable_addrs: Vec<u64> = (0..subtables).map(|i| regions[2 + 2 * i].addr()).collect();
    // Subtables: the lock object's address, then every bucket header.
    for suffix in 0..subtables {
        let lock = regions[3 + 2 * suffix].addr();
        let mut img = vec![0u8; geo.subtable_bytes() as usize];
        img[..8].copy_from_slice(&lock.to_le_bytes());
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
        write_all(mem, &mut regions[2 + 2 * suffix], &img)?;
    }
    // Directory: every entry, of every depth up to the maximum, names its subtable.
    let n = 1usize << config.max_depth;
    let mut img = Vec::with_capacity(8 + 8 * n);
    img.extend_from_slice(&u64::from(d0).to_le_bytes());
    for i in 0..n {
        let e = DirEntry {
            subtable: subtable_addrs[i % subtables],
            depth: d0,
        };
        img.extend_from_slice(&e.encode().to_le_bytes());
    }
    write_all(mem, &mut regions[dir], &img)?;
    let shape = Root {
        directory: regions[dir].addr(),
        config,
    };
    write_all(mem, &mut regions[root], &shape.encode())?;
    Ok(regions[root].addr())
}

/// Writes `img` at the start of `on`, in chunks; a right whose lease ran out before a chunk
/// went through is acquired again (read-write) and replaces `on`.
fn write_all<M: RemoteMemory>(
    mem: &mut M,
    on: &mut M::Region,
    img: &[u8],
) -> Result<(), RaceError> {
    for (i, chunk) in img.chunks(CHUNK).enumerate() {
        let mut renewals = 0;
        loop {
            let ops = [MemOp::Write {
                on,
                offset: (i * CHUNK) as u64,
                data: chunk,
            }];
            match mem.execute(&ops).pop() {
                Some(Ok(_)) => break,
                Some(Err(e)) if ended(&e) && renewals < RENEWALS => {
                    renewals += 1;
                    let again = mem.acquire(
                        on.addr(),
                        on.len(),
                        CREATE_LEASE,
                        Access::ReadWrite,
                        Mode::Shared,
                    )?;
                    let old = std::mem::replace(on, again);
                    let _ = mem.relinquish(old);
                }
                Some(Err(e)) => return Err(e.into()),
                None => return Err(RaceError::Corrupt("a write returned no result")),
            }
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
    let mut renewals = 0;
    let bytes = loop {
        let right = mem.acquire(root, ROOT_BYTES, opts.lease, Access::Read, Mode::Shared)?;
        let bytes = mem.read(&right, 0, ROOT_BYTES as u32);
        let _ = mem.relinquish(right);
        match bytes {
            Err(e) if ended(&e) && renewals < RENEWALS => renewals += 1,
            other => break other,
        }
    };
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
