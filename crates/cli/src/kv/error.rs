//! What can go wrong in `patronus kv`, as one message and one exit code each.

use patronus_core::client::ClientError;
use patronus_core::proto::refusal::SessionEnd;
use patronus_ods::MemError;
use patronus_ods::race::RaceError;
use std::fmt;
use std::net::SocketAddr;

/// Success.
pub const EXIT_OK: i32 = 0;
/// Any other error: the node unreachable or refusing the tenant, remote memory, a full or
/// busy table, local I/O.
pub const EXIT_ERROR: i32 = 1;
/// Bad arguments: clap's usage errors (malformed address, unknown option...) and an invalid
/// table shape.
pub const EXIT_USAGE: i32 = 2;
/// `get` or `del` of a key the table does not hold.
pub const EXIT_NO_KEY: i32 = 3;
/// No table is published under the name (for this tenant).
pub const EXIT_NO_TABLE: i32 = 4;
/// `create` of a name that is published already.
pub const EXIT_TABLE_EXISTS: i32 = 5;
/// Key and value do not fit in one of the table's KV blocks.
pub const EXIT_TOO_LARGE: i32 = 6;

/// The exit codes, as `--help` and the README list them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  error: node unreachable, tenant refused, remote memory, table full or busy, I/O
  2  usage: bad arguments (clap), malformed address, invalid table shape
  3  key not found (get, del)
  4  no table under --table for this tenant
  5  create: a table under --table exists already
  6  value too large for the table's KV blocks";

/// A failed `patronus kv` command.
#[derive(Debug)]
pub enum KvError {
    /// The key is not in the table.
    NoKey(String),
    /// Nothing published under the table name.
    NoTable(String),
    /// The table name is taken.
    TableExists(String),
    /// Key and value need `need` bytes of a KV block; one holds `max`.
    TooLarge {
        /// Bytes the block would need, header included (at least: when `table` is `None`).
        need: u64,
        /// Bytes of a KV block of the table (`None`: the largest any table has).
        max: u64,
        /// The table's name (`None`: the value was refused before connecting).
        table: Option<String>,
    },
    /// Bad arguments found after parsing.
    Usage(String),
    /// The memory node refused the tenant's credentials.
    Refused {
        /// The node.
        addr: SocketAddr,
        /// The tenant given (`None`: no --tenant, tenant 0).
        tenant: Option<u32>,
    },
    /// The memory node ended the command's session while it connected (its connections to
    /// the other shards or its data connection were refused for it).
    SessionEnded {
        /// The node.
        addr: SocketAddr,
        /// Why, as the node said.
        why: SessionEnd,
    },
    /// The memory node could not be reached.
    Unreachable {
        /// The node.
        addr: SocketAddr,
        /// Why.
        why: ClientError,
    },
    /// A table operation failed.
    Table {
        /// The table's name.
        table: String,
        /// What failed.
        why: RaceError,
    },
    /// Anything else (local I/O).
    Other(String),
}

impl KvError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            KvError::NoKey(_) => EXIT_NO_KEY,
            KvError::NoTable(_) => EXIT_NO_TABLE,
            KvError::TableExists(_) => EXIT_TABLE_EXISTS,
            KvError::TooLarge { .. } => EXIT_TOO_LARGE,
            KvError::Usage(_) => EXIT_USAGE,
            KvError::Refused { .. }
            | KvError::SessionEnded { .. }
            | KvError::Unreachable { .. }
            | KvError::Table { .. }
            | KvError::Other(_) => EXIT_ERROR,
        }
    }

    /// `why`, from an operation on `table`, as the error the user should see.
    pub fn from_race(table: &str, why: RaceError) -> Self {
        let table = table.to_string();
        match why {
            RaceError::NoSuchTable => KvError::NoTable(table),
            RaceError::Memory(MemError::NameTaken) => KvError::TableExists(table),
            RaceError::TooLarge { need, max } => KvError::TooLarge {
                need,
                max,
                table: Some(table),
            },
            RaceError::InvalidConfig(what) => {
                KvError::Usage(format!("invalid table shape: {what}"))
            }
            why => KvError::Table { table, why },
        }
    }
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::NoKey(key) => write!(f, "key {key} not found"),
            KvError::NoTable(t) => write!(
                f,
                "no table \"{t}\" for this tenant (make one with `patronus kv --table {t} create`)"
            ),
            KvError::TableExists(t) => write!(f, "a table \"{t}\" exists already"),
            KvError::TooLarge { need, max, table } => match table {
                Some(t) => write!(
                    f,
                    "value too large: key and value take {need} bytes with the 32-byte \
                         block header; a KV block of table \"{t}\" holds {max} (see `create \
                         --block-size`)"
                ),
                None => write!(
                    f,
                    "value too large: key and value take more than {max} bytes with the \
                         32-byte block header, the most a KV block of any table holds"
                ),
            },
            KvError::Usage(what) => f.write_str(what),
            KvError::Refused {
                addr,
                tenant: Some(t),
            } => write!(
                f,
                "the memory node at {addr} refused tenant {t}: not authenticated (wrong \
                 tenant id or secret, or a client certificate that names another tenant)"
            ),
            KvError::Refused { addr, tenant: None } => write!(
                f,
                "the memory node at {addr} serves tenants: not authenticated without \
                 --tenant ID:SECRET (or a client certificate the node maps to a tenant)"
            ),
            KvError::SessionEnded { addr, why } => write!(
                f,
                "the memory node at {addr} ended this command's session ({why}); run the \
                 command again"
            ),
            KvError::Unreachable { addr, why } => {
                write!(f, "cannot reach the memory node at {addr}: {why}")
            }
            KvError::Table { table, why } => match why {
                RaceError::Busy => write!(
                    f,
                    "table \"{table}\" is busy: {why}; try again (a stopped resizer's lease \
                     lock frees itself; a lock word never does)"
                ),
                RaceError::TableFull { .. } => write!(
                    f,
                    "table \"{table}\" is full: {why} (create one with a larger --max-depth, \
                     --groups or --slots)"
                ),
                RaceError::Corrupt(_) => {
                    write!(f, "table \"{table}\" is not a usable RACE table: {why}")
                }
                _ => write!(f, "table \"{table}\": {why}"),
            },
            KvError::Other(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for KvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KvError::Unreachable { why, .. } => Some(why),
            KvError::Table { why, .. } => Some(why),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_session_is_an_error_of_its_own_and_exits_1() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 7471));
        let e = KvError::SessionEnded {
            addr,
            why: SessionEnd::Idle,
        };
        assert_eq!(e.exit_code(), EXIT_ERROR);
        assert_eq!(
            crate::errors::one_line(&e),
            "the memory node at 127.0.0.1:7471 ended this command's session (it was silent \
             past the node's idle timeout); run the command again"
        );
        // A wrong tenant secret is still refused as one.
        let refused = KvError::Refused {
            addr,
            tenant: Some(1),
        };
        assert_eq!(refused.exit_code(), EXIT_ERROR);
        assert!(refused.to_string().contains("wrong tenant id or secret"));
    }
}
