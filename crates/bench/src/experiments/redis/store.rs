//! The key-value stores the comparison drives, behind one interface: a connection per client
//! thread that gets and puts values, one at a time or a batch per round trip.

use anyhow::Result;

/// One operation of a batch: a get, or a put of the value.
#[derive(Clone, Copy, Debug)]
pub enum KvRequest<'a> {
    /// Read the key.
    Get(&'a [u8]),
    /// Write the value under the key.
    Put(&'a [u8], &'a [u8]),
}

/// A client's connection to a key-value store.
pub trait KvConnection: Send {
    /// Runs `ops` in order as one batch (pipelined: one round trip where the store allows);
    /// one result per op — the value read (`None`: no such key), or `None` for a put.
    fn batch(&mut self, ops: &[KvRequest<'_>]) -> Result<Vec<Option<Vec<u8>>>>;

    /// Reads `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.batch(&[KvRequest::Get(key)])?.pop().flatten())
    }

    /// Writes `value` under `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch(&[KvRequest::Put(key, value)]).map(|_| ())
    }
}
