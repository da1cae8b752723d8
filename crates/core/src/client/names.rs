//! Named roots: publish an object under a name, look it up from another client of the same
//! tenant (see `manager/names.rs`). A name gives an address, not a right: the object is then
//! acquired as usual.

use super::*;
use crate::proto::messages::RootName;

fn root_name(name: &str) -> Result<RootName, ClientError> {
    RootName::new(name).ok_or(ClientError::InvalidArgument(
        "a root name is 1 to 32 bytes of UTF-8 without NUL",
    ))
}

impl<P: Provider> Client<P> {
    /// Publishes `[addr, addr + len)` (an object's buffer, e.g. a permission's
    /// [`Perm::addr`] and [`Perm::len`]) under `name` for this client's tenant.
    /// `NameTaken` if the tenant has published that name already.
    pub fn publish(&mut self, name: &str, addr: u64, len: u64) -> Result<(), ClientError> {
        let name = root_name(name)?;
        match self.rpc(Request::Publish { name, addr, len })? {
            Reply::Named => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The object this client's tenant published under `name`: (address, length).
    /// `NotFound` if there is none.
    pub fn lookup(&mut self, name: &str) -> Result<(u64, u64), ClientError> {
        let name = root_name(name)?;
        match self.rpc(Request::Lookup { name })? {
            Reply::Found { addr, len } => Ok((addr, len)),
            other => Err(unexpected(other)),
        }
    }

    /// Withdraws `name` (the object stays allocated). `NotFound` if there is none.
    pub fn unpublish(&mut self, name: &str) -> Result<(), ClientError> {
        let name = root_name(name)?;
        match self.rpc(Request::Unpublish { name })? {
            Reply::Named => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
