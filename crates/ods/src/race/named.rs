//! Tables found by name ([`NamedRoots`]): create one and publish its root, open one, destroy
//! one and withdraw its name. Names are per tenant, so are the tables found through them.

use super::client::TableClient;
use super::config::{ClientOptions, RaceConfig};
use super::destroy::Destroyed;
use super::error::RaceError;
use super::records::ROOT_BYTES;
use super::table::{create, open};
use crate::memory::{MemError, NamedRoots, RemoteMemory};

/// Creates a table of shape `config` ([`create`]) and publishes its root under `name`;
/// returns the root's address. `RaceError::Memory(MemError::NameTaken)` if the name is
/// published already (nothing is allocated then). If publishing fails, the new table is
/// destroyed again: nothing would name it.
pub fn create_named<M: RemoteMemory + NamedRoots>(
    mem: &mut M,
    name: &str,
    config: RaceConfig,
) -> Result<u64, RaceError> {
    match mem.lookup(name) {
        Ok(_) => return Err(RaceError::Memory(MemError::NameTaken)),
        Err(MemError::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    let root = create(mem, config)?;
    match mem.publish(name, root, ROOT_BYTES) {
        Ok(()) => Ok(root),
        Err(e) => {
            // Another client took the name meanwhile, or the node refused it.
            let opts = ClientOptions {
                lapse: false,
                ..ClientOptions::default()
            };
            if let Ok(t) = open(mem, root, opts) {
                let _ = t.destroy(mem);
            }
            Err(e.into())
        }
    }
}

/// Opens the table published under `name` ([`open`]). [`RaceError::NoSuchTable`] if the
/// name is not published (for this client's tenant).
pub fn open_named<M: RemoteMemory + NamedRoots>(
    mem: &mut M,
    name: &str,
    opts: ClientOptions,
) -> Result<TableClient<M>, RaceError> {
    let (root, len) = match mem.lookup(name) {
        Ok(found) => found,
        Err(MemError::NotFound) => return Err(RaceError::NoSuchTable),
        Err(e) => return Err(e.into()),
    };
    if len != ROOT_BYTES {
        return Err(RaceError::Corrupt("the name does not name a table's root"));
    }
    open(mem, root, opts)
}

/// Destroys the table published under `name` ([`TableClient::destroy`], on the same
/// conditions), then withdraws the name. A name whose table is gone already (its root freed)
/// is withdrawn too. [`RaceError::NoSuchTable`] if the name is not published.
pub fn destroy_named<M: RemoteMemory + NamedRoots>(
    mem: &mut M,
    name: &str,
    opts: ClientOptions,
) -> Result<Destroyed, RaceError> {
    let d = match open_named(mem, name, opts) {
        Ok(t) => t.destroy(mem)?,
        Err(RaceError::Memory(MemError::NotFound)) => Destroyed {
            missing: 1,
            ..Destroyed::default()
        },
        Err(e) => return Err(e),
    };
    match mem.unpublish(name) {
        Ok(()) | Err(MemError::NotFound) => Ok(d),
        Err(e) => Err(e.into()),
    }
}
