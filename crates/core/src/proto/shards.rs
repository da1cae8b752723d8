//! How a memory node's manager is split into shards, and where a request may go ([`Route`]; the
//! rule, [`ShardMap::route`], reads the request, so it lives in `route.rs`, above the messages
//! that carry the map).
//!
//! Each shard is one manager thread owning a contiguous slice of the header pool, a contiguous
//! slice of the buffer pool, its own windows and its own deadlines; conflicts are per object,
//! so shards never coordinate. A client opens one control connection per shard and routes each
//! request by the address it names (an object's buffer, a permission's header); `allocate`
//! names none, so the client spreads allocations over the shards itself. The map travels in
//! the `Welcome` reply, so client and node apply the same rule.

use super::header::HEADER_SIZE;

/// Where a request must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// To this shard.
    Shard(usize),
    /// To any shard (an allocation: the client chooses).
    Any,
    /// To every shard (state each shard keeps per client, e.g. the active data QP).
    All,
}

/// The shard layout of a memory node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardMap {
    /// Number of shards (at least 1).
    pub shards: u32,
    /// Address of the first header.
    pub header_base: u64,
    /// Headers per shard (the last shard also takes the remainder).
    pub headers_per_shard: u32,
    /// Address of the first buffer byte.
    pub buffer_base: u64,
    /// Buffer bytes per shard (the last shard also takes the remainder).
    pub buffer_span: u64,
}

/// One shard's slice of the pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardSlice {
    /// First header.
    pub header_base: u64,
    /// Headers.
    pub header_count: usize,
    /// First buffer byte.
    pub buffer_base: u64,
    /// Buffer bytes.
    pub buffer_len: u64,
}

/// Why pools cannot be split into the shards asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Zero shards, or more than 255 (a connection intent names its shard in one byte).
    #[error("between 1 and 255 shards are supported, not {0}")]
    Count(usize),
    /// A shard would get no header or less than `min_bytes` of buffer.
    #[error("the pools are too small for {0} shards")]
    TooSmall(usize),
}

/// Buffer slices are aligned to this.
const SLICE_ALIGN: u64 = 4096;

impl ShardMap {
    /// A single shard over everything.
    pub fn single(
        header_base: u64,
        header_count: usize,
        buffer_base: u64,
        buffer_len: u64,
    ) -> Self {
        ShardMap {
            shards: 1,
            header_base,
            headers_per_shard: u32::try_from(header_count).unwrap_or(u32::MAX),
            buffer_base,
            buffer_span: buffer_len,
        }
    }

    /// Splits `header_count` headers at `header_base` and `buffer_len` bytes at `buffer_base`
    /// into `shards` slices, each with at least one header and `min_bytes` of buffer.
    pub fn split(
        shards: usize,
        header_base: u64,
        header_count: usize,
        buffer_base: u64,
        buffer_len: u64,
        min_bytes: u64,
    ) -> Result<Self, ShardError> {
        if shards == 0 || shards > u8::MAX as usize {
            return Err(ShardError::Count(shards));
        }
        let headers_per_shard = header_count / shards;
        let buffer_span = if shards == 1 {
            buffer_len
        } else {
            buffer_len / shards as u64 / SLICE_ALIGN * SLICE_ALIGN
        };
        if headers_per_shard == 0 || buffer_span < min_bytes.max(1) {
            return Err(ShardError::TooSmall(shards));
        }
        Ok(ShardMap {
            shards: shards as u32,
            header_base,
            headers_per_shard: u32::try_from(headers_per_shard)
                .map_err(|_| ShardError::TooSmall(shards))?,
            buffer_base,
            buffer_span,
        })
    }

    /// Shard `k`'s slice of pools of `header_count` headers and `buffer_len` bytes.
    pub fn slice(&self, k: usize, header_count: usize, buffer_len: u64) -> ShardSlice {
        let n = self.shards as usize;
        let hps = self.headers_per_shard as usize;
        let last = k + 1 == n;
        ShardSlice {
            header_base: self.header_base + (k * hps * HEADER_SIZE) as u64,
            header_count: if last { header_count - k * hps } else { hps },
            buffer_base: self.buffer_base + k as u64 * self.buffer_span,
            buffer_len: if last {
                buffer_len - k as u64 * self.buffer_span
            } else {
                self.buffer_span
            },
        }
    }

    /// The shard owning `addr` (a header, or a buffer byte; an embedded header lies in the
    /// buffer pool, before its buffer). Addresses outside both pools go to shard 0, which
    /// refuses them as any shard would.
    pub fn shard_of(&self, addr: u64) -> usize {
        let last = self.shards.saturating_sub(1) as u64;
        let shard = if addr >= self.buffer_base {
            (addr - self.buffer_base) / self.buffer_span.max(1)
        } else if addr >= self.header_base {
            (addr - self.header_base)
                / HEADER_SIZE as u64
                / u64::from(self.headers_per_shard.max(1))
        } else {
            0
        };
        shard.min(last) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_tile_the_pools_and_addresses_route_to_their_slice() {
        let (hb, hc, bb, bl) = (0x1000, 103, 0x10_0000, 4 * 65536 + 5000);
        let map = ShardMap::split(4, hb, hc, bb, bl, 4096).unwrap();
        let mut headers = 0;
        let mut bytes = 0;
        for k in 0..4 {
            let s = map.slice(k, hc, bl);
            assert_eq!(s.header_base, hb + headers as u64 * 32);
            assert_eq!(s.buffer_base, bb + bytes);
            headers += s.header_count;
            bytes += s.buffer_len;
            for addr in [
                s.header_base,
                s.header_base + s.header_count as u64 * 32 - 1,
                s.buffer_base,
                s.buffer_base + s.buffer_len - 1,
            ] {
                assert_eq!(map.shard_of(addr), k, "{addr:#x}");
            }
        }
        assert_eq!((headers, bytes), (hc, bl));
        assert_eq!(map.shard_of(0), 0);
        assert_eq!(map.shard_of(u64::MAX), 3);
    }

    #[test]
    fn refuses_impossible_splits() {
        assert_eq!(
            ShardMap::split(0, 0, 8, 0, 1 << 20, 1),
            Err(ShardError::Count(0))
        );
        assert_eq!(
            ShardMap::split(256, 0, 8, 0, 1 << 20, 1),
            Err(ShardError::Count(256))
        );
        assert_eq!(
            ShardMap::split(4, 0, 3, 0, 1 << 20, 1),
            Err(ShardError::TooSmall(4))
        );
        assert_eq!(
            ShardMap::split(4, 0, 64, 0, 1 << 20, 1 << 20),
            Err(ShardError::TooSmall(4))
        );
        let one = ShardMap::split(1, 0, 3, 0, 100, 1).unwrap();
        assert_eq!(one, ShardMap::single(0, 3, 0, 100));
    }
}
