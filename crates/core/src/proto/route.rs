//! Which shard a request goes to: the rule both the client and the memory node apply to the
//! [`ShardMap`] the `Welcome` reply carries. It reads every kind of request, so it sits above
//! both the messages and the shard layout.

use super::messages::Request;
use super::shards::{Route, ShardMap};

impl ShardMap {
    /// Where `req` goes.
    pub fn route(&self, req: &Request) -> Route {
        match *req {
            Request::Allocate { .. } => Route::Any,
            Request::Hello { .. } => Route::Shard(0),
            Request::UseQp { .. } => Route::All,
            Request::Acquire { addr, .. } | Request::Share { addr, .. } => {
                Route::Shard(self.shard_of(addr))
            }
            Request::Extend { id, .. }
            | Request::Renew { id, .. }
            | Request::Rebind { id }
            | Request::Revoke { id, .. } => Route::Shard(self.shard_of(id.header_addr)),
            // A name is kept by one shard, picked by its hash.
            Request::Publish { name, .. }
            | Request::Lookup { name }
            | Request::Unpublish { name } => {
                Route::Shard((name.hash() % u64::from(self.shards.max(1))) as usize)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::messages::PermissionId;

    #[test]
    fn a_permission_routes_to_its_header_shard() {
        let (hb, hc, bb, bl) = (0x1000, 103, 0x10_0000, 4 * 65536 + 5000);
        let map = ShardMap::split(4, hb, hc, bb, bl, 4096).unwrap();
        let id = PermissionId {
            header_addr: map.slice(2, hc, bl).header_base,
            start_us: 1,
        };
        assert_eq!(map.route(&Request::Rebind { id }), Route::Shard(2));
    }
}
